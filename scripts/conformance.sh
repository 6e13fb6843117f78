#!/usr/bin/env bash
# The SDK conformance suite (issue 32; tests/conformance/README.md): every SDK's runner executes
# tests/conformance/cases.json against a live local cluster of its own, and the fault load runs
# through a kill -9 of the AllocSvr that owns uid 42 and a `seqctl section move` of its section.
#   scripts/conformance.sh                  install what is missing, build the servers and all
#                                           four SDKs (each SDK's build.sh runs its unit tests),
#                                           then the suite for rust, go, java and python
#   scripts/conformance.sh --sdks rust,go   only these SDKs
#   scripts/conformance.sh --no-build-sdks  use the SDKs' last builds (their unit tests skipped)
# The cluster is scripts/dev-cluster.sh's, in a directory of its own
# (SEQSVR_CONFORMANCE_DIR, default $CARGO_TARGET_DIR/conformance), wiped at the start and
# stopped at the end (by PID, also on failure), with its ports moved by 1000
# (SEQSVR_CONFORMANCE_PORT_OFFSET; stores 8101-8113, allocs 8201-8212): a dev cluster
# (scripts/dev-cluster.sh up) may run beside it.
# Output: $SEQSVR_CONFORMANCE_DIR/out/<sdk>/{static,load}/ (results.jsonl, histories, logs).
# Exit 0 only if every case of every SDK passed and every history passed `seqcheck check`.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"

SDKS=rust,go,java,python
BUILD_SDKS=1
while [ $# -gt 0 ]; do
  case $1 in
    --sdks) SDKS=$2; shift 2 ;;
    --no-build-sdks) BUILD_SDKS=0; shift ;;
    *) echo "usage: $0 [--sdks rust,go,java,python] [--no-build-sdks]" >&2; exit 2 ;;
  esac
done

BASE=${SEQSVR_CONFORMANCE_DIR:-$CARGO_TARGET_DIR/conformance}
DEV=$BASE/dev
OUT=$BASE/out
CASES=$SEQSVR_ROOT/tests/conformance/cases.json
export SEQSVR_DEV_DIR=$DEV
export SEQSVR_DEV_PORT_OFFSET=${SEQSVR_CONFORMANCE_PORT_OFFSET:-1000}
OFFSET=$SEQSVR_DEV_PORT_OFFSET
CLUSTER=$DEV/cluster.toml
CERTS=$DEV/certs

for port in 7101 7102 7103 7111 7112 7113 7201 7202 7211 7212; do
  port=$((port + OFFSET))
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "error: 127.0.0.1:$port is in use: the suite's cluster needs the ports 7101-7212 +" \
      "$OFFSET (choose others with SEQSVR_CONFORMANCE_PORT_OFFSET)" >&2
    exit 2
  fi
done

ensure_build_deps
build_release_bins
SEQCHECK=$SEQSVR_BIN/seqcheck
seqctl() { "$SEQSVR_BIN/seqctl" --config "$CLUSTER" --tls-cert "$CERTS/admin.pem" --tls-key "$CERTS/admin.key" "$@"; }

# ---- the SDKs: build (unit tests included) and the command that runs each one's runner ----
IFS=, read -r -a sdk_list <<<"$SDKS"
runner() { # sdk → the runner's command (the protocol's arguments follow)
  case $1 in
    rust) echo "$SEQCHECK conformance" ;;
    go | java | python) echo "$SEQSVR_ROOT/sdk/$1/conformance-runner" ;;
    *) echo "error: unknown SDK $1 (rust, go, java, python)" >&2; return 2 ;;
  esac
}
for sdk in "${sdk_list[@]}"; do runner "$sdk" >/dev/null; done

# ---- the cluster ----
cleanup() {
  local rc=$?
  "$SEQSVR_ROOT/scripts/dev-cluster.sh" down >/dev/null 2>&1 || true
  [ -n "${load_pid:-}" ] && kill "$load_pid" 2>/dev/null || true
  if [ $rc -ne 0 ]; then echo "conformance: FAILED (output in $OUT, cluster logs in $DEV/logs)" >&2; fi
}
trap cleanup EXIT
rm -rf "$DEV" "$OUT"
mkdir -p "$OUT"
"$SEQSVR_ROOT/scripts/dev-cluster.sh" up >"$BASE/up.log" 2>&1 || { cat "$BASE/up.log" >&2; exit 1; }
echo ">> cluster up ($DEV)"
# A client certificate of a CA the cluster does not know.
(cd "$BASE" && rm -rf foreign && "$SEQSVR_BIN/seqctl" certs init --dir foreign --sets 1 --members 1 \
  --allocs 1 --force >/dev/null 2>&1)

# Each SDK's own tests: sdk/<sdk>/build.sh --live builds it, runs its unit tests, then its live
# tests against this cluster (the README example as printed, from a data/local that is this
# cluster's directory; Go's kill -9 of an AllocSvr, restarted by dev-cluster.sh).
for sdk in "${sdk_list[@]}"; do
  if [ "$sdk" != rust ] && [ $BUILD_SDKS -eq 1 ]; then
    echo ">> $sdk SDK: build, unit and live tests (sdk/$sdk/build.sh --live, log $OUT/$sdk-build.log)"
    if ! "$SEQSVR_ROOT/sdk/$sdk/build.sh" --live >"$OUT/$sdk-build.log" 2>&1; then
      tail -n 30 "$OUT/$sdk-build.log" >&2
      echo "error: sdk/$sdk/build.sh --live failed (log $OUT/$sdk-build.log)" >&2
      exit 1
    fi
  fi
done

# Ok calls in a history (and, with a uid, those of calls that included it).
count_ok() {
  python3 - "$1" "${2:-}" <<'PY'
import json, sys
path, uid = sys.argv[1], sys.argv[2]
n = 0
try:
    with open(path) as f:
        for line in f:
            try:
                op = json.loads(line)
            except ValueError:
                continue  # a line being written
            if op["outcome"]["type"] == "ok" and (not uid or int(uid) in op["uids"]):
                n += 1
except FileNotFoundError:
    pass
print(n)
PY
}
# wait_resumed FILE UID BEFORE WHAT: until more than BEFORE + 20 ok calls include UID (60 s).
wait_resumed() {
  local n
  for _ in $(seq 1 600); do
    n=$(count_ok "$1" "$2")
    if [ "$n" -gt $(($3 + 20)) ]; then echo ">>   calls of uid $2 resumed after $4 ($3 -> $n ok)"; return 0; fi
    kill -0 "$load_pid" 2>/dev/null || { echo "error: the load runner exited during $4" >&2; return 1; }
    sleep 0.1
  done
  echo "error: calls of uid $2 did not resume within 60 s after $4 ($n ok, $3 before)" >&2
  return 1
}
# The AllocSvr that owns uid 42's section (set 0, section 0): "ALLOC_ID ADDR".
owner_of_42() {
  seqctl --json route | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    for e in s.get("entries", []):
        if s["set"] == 0 and e["section_begin"] <= 0 < e["section_end"]:
            print(e["alloc_id"], e["addr"]); sys.exit(0)
sys.exit("no owner of section 0 of set 0 in the route table")'
}
# wait_owner ALLOC_ID: until the route table names it the owner of uid 42's section (60 s).
wait_owner() {
  local id addr
  for _ in $(seq 1 600); do
    read -r id addr < <(owner_of_42) || true
    if [ "${id:-}" = "$1" ]; then echo ">>   alloc id $1 ($addr) owns uid 42's section"; return 0; fi
    sleep 0.1
  done
  echo "error: alloc id $1 did not become the owner of uid 42's section within 60 s" >&2
  return 1
}
# 127.0.0.1:(72SI + offset) → alloc-S-I (scripts/dev-cluster.sh's names).
name_of() { local port=$((${1##*:} - OFFSET)); echo "alloc-${port:2:1}-${port:3:1}"; }

check_history() { # FILE WHAT
  if ! "$SEQCHECK" check "$1" >"$1.check" 2>&1; then
    echo "error: $2: seqcheck check found violations or could not read $1:" >&2
    tail -n 20 "$1.check" >&2
    return 1
  fi
}

failed=()
summary=()
for sdk in "${sdk_list[@]}"; do
  cmd=$(runner "$sdk")
  echo ">> $sdk: static cases"
  dir=$OUT/$sdk/static
  mkdir -p "$dir"
  rc=0
  # shellcheck disable=SC2086
  $cmd static --cases "$CASES" --cluster "$CLUSTER" --cert "$CERTS/client.pem" --key "$CERTS/client.key" \
    --foreign-cert "$BASE/foreign/client.pem" --foreign-key "$BASE/foreign/client.key" --out "$dir" \
    >"$dir/runner.log" 2>&1 || rc=$?
  # Every case must have a result line that passed.
  verdict=$(python3 - "$CASES" "$dir/results.jsonl" <<'PY'
import json, sys
cases = [c["name"] for c in json.load(open(sys.argv[1]))["cases"] if c.get("phase") != "load"]
got = {}
try:
    for line in open(sys.argv[2]):
        r = json.loads(line)
        got[r["case"]] = r
except FileNotFoundError:
    pass
bad = []
for name in cases:
    r = got.get(name)
    if r is None:
        bad.append(f"{name}: no result")
    elif r["ok"] is not True:
        bad.append(f"{name}: {r.get('detail')}")
print(f"{len(cases) - len(bad)}/{len(cases)} cases passed")
for b in bad:
    print("  FAIL " + b)
PY
)
  echo "$verdict" | sed 's/^/>>   /'
  ok=1
  if [ $rc -ne 0 ] || echo "$verdict" | grep -q FAIL; then
    ok=0
    echo "error: $sdk: static cases failed (runner exit $rc; log $dir/runner.log):" >&2
    tail -n 15 "$dir/runner.log" >&2
  fi
  for h in "$dir"/*.history.jsonl; do
    [ -e "$h" ] || { ok=0; echo "error: $sdk wrote no history in $dir" >&2; continue; }
    check_history "$h" "$sdk static" || ok=0
  done

  echo ">> $sdk: fault load (kill -9 of uid 42's owner, its restart, a section move)"
  dir=$OUT/$sdk/load
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  $cmd load --cases "$CASES" --cluster "$CLUSTER" --cert "$CERTS/client.pem" --key "$CERTS/client.key" \
    --out "$dir" >"$dir/runner.log" 2>&1 &
  load_pid=$!
  hist=$dir/kill-and-move-under-load.history.jsonl
  if wait_resumed "$hist" 42 0 "the load's start" &&
    read -r owner_id owner_addr < <(owner_of_42) &&
    victim=$(name_of "$owner_addr") &&
    echo ">>   kill -9 $victim (alloc id $owner_id, $owner_addr), the owner of uid 42" &&
    kill -KILL "$(cat "$DEV/pids/$victim.pid")" &&
    before=$(count_ok "$hist" 42) &&
    wait_resumed "$hist" 42 "$before" "the kill -9 of $victim" &&
    "$SEQSVR_ROOT/scripts/dev-cluster.sh" up >"$dir/restart.log" 2>&1 &&
    echo ">>   $victim started again" &&
    read -r owner_id owner_addr < <(owner_of_42) &&
    to=$(seqctl --json leases | python3 -c '
import json, sys
owner = int(sys.argv[1])
for s in json.load(sys.stdin):
    if s["set"] == 0:
        others = [a["alloc_id"] for a in s["allocs"] if a["alloc_id"] != owner and a["state"] == "live"]
        if others:
            print(others[0]); sys.exit(0)
sys.exit("no other live AllocSvr in set 0")' "$owner_id") &&
    echo ">>   seqctl section move 0 --to $to (from alloc id $owner_id)" &&
    seqctl section move 0 --to "$to" >"$dir/move.log" 2>&1 &&
    wait_owner "$to" &&
    before=$(count_ok "$hist" 42) &&
    wait_resumed "$hist" 42 "$before" "the move of section 0 to alloc id $to"; then
    :
  else
    ok=0
    echo "error: $sdk: the fault load failed (runner log $dir/runner.log)" >&2
    tail -n 15 "$dir/runner.log" >&2
  fi
  touch "$dir/stop"
  rc=0
  wait "$load_pid" || rc=$?
  load_pid=
  if [ $rc -ne 0 ]; then
    ok=0
    echo "error: $sdk: the load runner exited $rc" >&2
    tail -n 15 "$dir/runner.log" >&2
  fi
  check_history "$hist" "$sdk load" || ok=0
  calls=$(count_ok "$hist")
  echo ">>   $sdk load: $calls ok calls; $(tail -n 3 "$hist.check" 2>/dev/null | tr '\n' ' ')"
  summary+=("$sdk: $(echo "$verdict" | head -n 1), load $calls ok calls through kill -9 and move")
  [ $ok -eq 1 ] || failed+=("$sdk")
done

echo
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "conformance: FAILED for ${failed[*]} (output in $OUT)" >&2
  exit 1
fi
echo "conformance: every case passed for ${sdk_list[*]}"
