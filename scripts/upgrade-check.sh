#!/usr/bin/env bash
# A rolling upgrade from an older release, checked: the local cluster (2 sets × 3 StoreSvrs +
# 2 AllocSvrs, the dev cluster's ports: stop it first) starts on the binaries of REV, then every
# StoreSvr is replaced by this build's, one at a time, the first of each set taking leadership
# while the other two still run REV (so a leader of this build serves members of the older one,
# and an AllocSvr of REV leases worker ids from it), then every AllocSvr. Throughout,
# `seqcheck load` records sequence and id calls and checks them (no value back or repeated, no
# id issued twice). It fails if any process stops on its own (an older member handed a command
# it cannot apply stops with a storage fault), if the sets do not raise their commands version
# once every member runs this build, or if the history has a violation.
#
#   scripts/upgrade-check.sh [REV]    REV: a commit of this repository (default below)
#
# REV's StoreSvr and AllocSvr are built from a git worktree into the same target dir (only our
# own crates compile: ~1-2 min), kept in $CARGO_TARGET_DIR/upgrade/REV/. Data, logs and the load's
# history: data/upgrade-check/. Not part of scripts/test.sh (it builds another release); run it
# before a release that adds a store command (docs/reliability/README.md).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"
ensure_build_deps

# The last build before the commands version gate (it reports no version: 0). When a release
# adds a command, make the previous release the default.
REV=${1:-da73c3e}
DIR=$SEQSVR_ROOT/data/upgrade-check
OLD=$CARGO_TARGET_DIR/upgrade/$REV
export SEQSVR_DEV_DIR=$DIR
cluster() { scripts/dev-cluster.sh "$@"; }
seqctl() {
  "$SEQSVR_BIN/seqctl" --config "$DIR/cluster.toml" --tls-cert "$DIR/certs/admin.pem" \
    --tls-key "$DIR/certs/admin.key" "$@"
}

if [ ! -x "$OLD/storesvr" ] || [ ! -x "$OLD/allocsvr" ]; then
  rev=$(git rev-parse --verify "$REV^{commit}")
  src=$CARGO_TARGET_DIR/upgrade/src-$REV
  [ -d "$src" ] || git worktree add --detach "$src" "$rev" >/dev/null
  echo ">> building storesvr and allocsvr of $REV ($rev) in $src"
  (cd "$src" && cargo build --release -p seqsvr-storesvr -p seqsvr-allocsvr --bins)
  mkdir -p "$OLD"
  cp "$SEQSVR_BIN/storesvr" "$SEQSVR_BIN/allocsvr" "$OLD/"
  # That build replaced this build's binaries in the shared target dir: have cargo put them back.
  rm -f "$SEQSVR_BIN/storesvr" "$SEQSVR_BIN/allocsvr"
  git worktree remove --force "$src"
fi
build_release_bins
for b in storesvr allocsvr; do
  if cmp -s "$OLD/$b" "$SEQSVR_BIN/$b"; then
    echo "error: $REV's $b is byte for byte this build's: nothing to upgrade from" >&2
    exit 2
  fi
done

load_pid=
cleanup() {
  if [ -n "$load_pid" ] && kill -0 "$load_pid" 2>/dev/null; then
    kill "$load_pid" 2>/dev/null || true
    wait "$load_pid" 2>/dev/null || true
  fi
  cluster down >/dev/null 2>&1 || true
  rm -f "$DIR/steps.fifo"
}
trap cleanup EXIT

cluster wipe >/dev/null
NAMES="store-0-1 store-0-2 store-0-3 store-1-1 store-1-2 store-1-3 alloc-0-1 alloc-0-2 alloc-1-1 alloc-1-2"
for name in $NAMES; do
  mkdir -p "$DIR/bin/$name"
  b=storesvr
  [[ $name == alloc-* ]] && b=allocsvr
  ln -s "$OLD/$b" "$DIR/bin/$name/$b"
  # REV's build refuses the peers' `node` key: it gets the file without it; an upgraded process
  # (its bin/NAME removed) the file with it (README "Upgrading").
  touch "$DIR/bin/$name/cluster-without-node"
done
echo ">> starting the cluster on $REV's binaries"
cluster up >"$DIR/up.log" 2>&1 || { tail -n 30 "$DIR/up.log" >&2; exit 2; }

# Every process it started is still running (none stopped on a command it could not apply).
all_running() {
  local name pid
  for name in $NAMES; do
    pid=$(cat "$DIR/pids/$name.pid" 2>/dev/null || true)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
      echo "error: $name stopped; last lines of its log:" >&2
      tail -n 20 "$DIR/logs/$name.log" >&2
      exit 1
    fi
  done
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }
# wait_for WHAT SECONDS PYTHON-CONDITION-ON-d (d: `seqctl store status --json` rows)
wait_for() {
  local what=$1 limit=$2 cond=$3
  for _ in $(seq 1 $((limit * 5))); do
    if seqctl --timeout-ms 2000 store status --json 2>/dev/null | json "sys.exit(0 if ($cond) else 1)"; then
      return 0
    fi
    all_running
    sleep 0.2
  done
  echo "error: $what: not within $limit s; store status:" >&2
  seqctl store status >&2 || true
  exit 1
}

mkfifo "$DIR/steps.fifo"
"$SEQSVR_BIN/seqcheck" load --config "$DIR/cluster.toml" --out "$DIR/load" --clients 8 \
  --tls-cert "$DIR/certs/client.pem" --tls-key "$DIR/certs/client.key" \
  <"$DIR/steps.fifo" >"$DIR/load.out" 2>"$DIR/load.err" &
load_pid=$!
exec 3>"$DIR/steps.fifo"
for _ in $(seq 1 300); do
  grep -q "clients running" "$DIR/load.err" && break
  kill -0 "$load_pid" 2>/dev/null || { cat "$DIR/load.err" >&2; exit 2; }
  sleep 0.2
done
step() {
  echo ">> step: $1"
  echo "step $1" >&3
}

for set in 0 1; do
  for m in 1 2 3; do
    step "upgrade-store-$set-$m"
    rm -r "$DIR/bin/store-$set-$m"
    cluster restart "store-$set-$m" >>"$DIR/steps.log" 2>&1
    all_running
    if [ "$m" = 1 ]; then
      # A leader of this build with followers of REV; an AllocSvr of REV leases worker ids anew.
      seqctl store transfer-leader --set "$set" --to 1 >>"$DIR/steps.log"
      wait_for "set $set: member 1 (this build) leads" 30 \
        "any(r['set'] == $set and r['id'] == 1 and r['role'] == 'leader' for r in d)"
      step "restart-alloc-$set-1-under-a-new-leader"
      cluster restart "alloc-$set-1" >>"$DIR/steps.log" 2>&1
      all_running
    fi
  done
  wait_for "set $set raises its commands version" 60 \
    "all(r['commands_version'] == r['build_commands_version'] > 0 for r in d if r['set'] == $set)"
  echo ">> set $set runs commands version $(seqctl store status --json | json "print(max(r['commands_version'] for r in d if r['set'] == $set))")"
done
for name in alloc-0-1 alloc-0-2 alloc-1-1 alloc-1-2; do
  step "upgrade-$name"
  rm -r "$DIR/bin/$name"
  cluster restart "$name" >>"$DIR/steps.log" 2>&1
  all_running
done
step end
echo stop >&3
exec 3>&-
rc=0
wait "$load_pid" || rc=$?
load_pid=
cat "$DIR/load.out"
all_running
if grep -l "cannot be applied\|storage fault" "$DIR"/logs/store-*.log; then
  echo "error: a StoreSvr logged a storage fault (above)" >&2
  exit 1
fi
if [ $rc -ne 0 ]; then
  echo "error: seqcheck load exited $rc (1 = violations); see $DIR/load" >&2
  exit 1
fi
echo ">> rolling upgrade from $REV: no process stopped, both sets raised their commands version, history clean ($DIR/load/summary.md)"
