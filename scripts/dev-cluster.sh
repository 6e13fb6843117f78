#!/usr/bin/env bash
# The local cluster on 127.0.0.1, in the background:
#   scripts/dev-cluster.sh up      build, start, wait until it serves, print how to talk to it
#   scripts/dev-cluster.sh down    stop exactly the processes `up` started (by PID)
#   scripts/dev-cluster.sh status  seqctl status
#   scripts/dev-cluster.sh restart NAME   rolling restart of one process (e.g. alloc-0-1,
#                                  store-1-2): SIGTERM (it hands its sections or leadership
#                                  over), start it again, wait until its health is SERVING
#   scripts/dev-cluster.sh wipe    down, then delete data/local
# Data, logs, PID files, the cluster config it used and its development PKI (mutual TLS on every
# plane, made once by `seqctl certs init`) live under data/local/.
# SEQSVR_DEV_DIR puts all of that elsewhere (default data/local; same ports, so one at a time).
# SEQSVR_DEV_PORT_OFFSET=N adds N to every port (stores 7101-7113, allocs 7201-7212, probes
# 27201-27212): a second cluster beside the first, in another SEQSVR_DEV_DIR (the cluster file
# is written with the shifted ports when the directory is first used; scripts/conformance.sh
# runs its cluster at offset 1000).
# A binary at <dir>/bin/NAME/storesvr (or allocsvr) runs for process NAME instead of the build's:
# a rolling upgrade by hand, or scripts/upgrade-check.sh, which mixes an older release in. With
# a file <dir>/bin/NAME/cluster-without-node, process NAME gets the cluster file without the
# peers' `node = N` (<dir>/cluster-without-node.toml, made at each start, next to the cluster
# file for its relative paths): builds before peers named their node refuse the key (README
# "Upgrading").
# SEQSVR_DEV_INSECURE=1 runs the same cluster plaintext instead (--insecure, the cluster file
# data/local/cluster-insecure.toml without [tls]): only to measure what TLS costs
# (scripts/bench-tls.sh); switch modes with `down` first.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"

LOCAL=${SEQSVR_DEV_DIR:-$SEQSVR_ROOT/data/local}
SHOWN=${LOCAL#"$SEQSVR_ROOT"/} # for messages: data/local unless SEQSVR_DEV_DIR says otherwise
CERTS=$LOCAL/certs
INSECURE=${SEQSVR_DEV_INSECURE:-0}
OFFSET=${SEQSVR_DEV_PORT_OFFSET:-0}
case $OFFSET in '' | *[!0-9]*) echo "error: SEQSVR_DEV_PORT_OFFSET=$OFFSET: give a number" >&2; exit 2 ;; esac
if [ "$OFFSET" -gt 20000 ]; then echo "error: SEQSVR_DEV_PORT_OFFSET above 20000" >&2; exit 2; fi
port() { echo $(($1 + OFFSET)); } # a dev cluster port (7101...) at this offset
if [ "$INSECURE" = 1 ]; then
  CONFIG=$LOCAL/cluster-insecure.toml
  tls_flags() { echo --insecure; }
else
  CONFIG=$LOCAL/cluster.toml
  tls_flags() { echo "--tls-cert $CERTS/$1.pem --tls-key $CERTS/$1.key"; }
fi
# name → command line, for every process of config/cluster.toml (2 sets × 3 stores + 2 allocs).
declare -A PROCS
for set in 0 1; do
  for id in 1 2 3; do
    PROCS[store-$set-$id]="storesvr --config $CONFIG --set-id $set --node-id $id --data-dir $LOCAL/store-$set-$id $(tls_flags store-$set-$id)"
  done
  for i in 1 2; do
    # --probe-addr: /healthz and /readyz without a client certificate, plaintext, at port + 20000.
    PROCS[alloc-$set-$i]="allocsvr --config $CONFIG --set-id $set --addr 127.0.0.1:$(port 72$set$i) --probe-addr 127.0.0.1:$(port 272$set$i) $(tls_flags alloc-$set-$i)"
  done
done
NAMES=$(printf '%s\n' "${!PROCS[@]}" | sort)

pid_file() { echo "$LOCAL/pids/$1.pid"; }

# True if the PID in $1 is alive and is one of our storesvr processes.
ours_running() {
  local f=$1 pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -qE 'storesvr|allocsvr' "/proc/$pid/cmdline" 2>/dev/null
}

# The operator's seqctl: the admin identity of the local PKI.
seqctl() {
  if [ "$INSECURE" = 1 ]; then
    "$SEQSVR_BIN/seqctl" --config "$CONFIG" "$@"
  else
    "$SEQSVR_BIN/seqctl" --config "$CONFIG" --tls-cert "$CERTS/admin.pem" --tls-key "$CERTS/admin.key" "$@"
  fi
}

# The local PKI (once) and the cluster file's [tls] section (once): every process serves and
# dials over mutual TLS, as in production (servers refuse to start without it).
# The section's paths are relative to data/local/ (the cluster file's directory).
ensure_pki() {
  if [ "$INSECURE" = 1 ]; then
    [ -f "$CONFIG" ] || cluster_file_at_offset >"$CONFIG"
    echo ">> INSECURE: plaintext, no role checks (SEQSVR_DEV_INSECURE=1)"
    return
  fi
  if [ ! -f "$CERTS/admin.key" ] || [ ! -f "$LOCAL/tls-block.toml" ]; then
    (cd "$LOCAL" && "$SEQSVR_BIN/seqctl" certs init --dir certs --sets 2 --members 3 --allocs 2 \
      --force >tls-block.toml.new 2>/dev/null && mv tls-block.toml.new tls-block.toml)
    echo ">> made a development PKI in $SHOWN/certs (seqctl certs init)"
  fi
  if ! grep -q '^\[tls\]' "$CONFIG"; then
    { echo; cat "$LOCAL/tls-block.toml"; } >>"$CONFIG"
    echo ">> added the [tls] section to $SHOWN/cluster.toml"
  fi
}

# config/cluster.toml with every 127.0.0.1:7xxx address moved by the port offset.
cluster_file_at_offset() {
  if [ "$OFFSET" -eq 0 ]; then cat config/cluster.toml; return; fi
  local line rest out
  while IFS= read -r line || [ -n "$line" ]; do
    out=
    while [[ $line =~ 127\.0\.0\.1:(7[0-9]{3})(.*)$ ]]; do
      rest=${BASH_REMATCH[2]}
      out+=${line%"${BASH_REMATCH[0]}"}127.0.0.1:$(port "${BASH_REMATCH[1]}")
      line=$rest
    done
    printf '%s\n' "$out$line"
  done <config/cluster.toml
}

up() {
  ensure_build_deps
  build_release_bins
  mkdir -p "$LOCAL/pids" "$LOCAL/logs"
  [ -f "$LOCAL/cluster.toml" ] || cluster_file_at_offset >"$LOCAL/cluster.toml"
  ensure_pki
  # Explicit bootstrap: the sets are created once (state `new`, marked by data/local/created);
  # every later start says `existing`, so a store whose data dir went missing comes back as an
  # empty, non-voting member that must be re-added (README: "Replace a dead member").
  local state=existing
  if [ ! -e "$LOCAL/created" ]; then
    state=new
  fi
  for name in $NAMES; do
    if ours_running "$(pid_file "$name")"; then
      echo ">> $name already running (pid $(cat "$(pid_file "$name")"))"
      continue
    fi
    start_one "$name" "$state"
  done
  echo ">> waiting until both sets serve (a new store leader first waits one lease)"
  for _ in $(seq 1 600); do
    if seqctl --timeout-ms 1000 get 42 2147500042 >/dev/null 2>&1; then
      touch "$LOCAL/created"
      seqctl status || true
      cat <<MSG

The local cluster serves: 2 sets, each 3 StoreSvrs + 2 AllocSvrs on 127.0.0.1 (data in $SHOWN/).
  set 0: uids [0, 2147500000)          stores :$(port 7101)-$(port 7103), allocs :$(port 7201)-$(port 7202)
  set 1: uids [2147500000, 4294900000) stores :$(port 7111)-$(port 7113), allocs :$(port 7211)-$(port 7212)
Every plane is mutual TLS (certificates in $SHOWN/certs/). Talk to it as the admin:
  export SEQSVR_TLS_CERT=$SHOWN/certs/admin.pem SEQSVR_TLS_KEY=$SHOWN/certs/admin.key
  $SEQSVR_BIN/seqctl --config $SHOWN/cluster.toml next 42 42 2147500042
  $SEQSVR_BIN/seqctl --config $SHOWN/cluster.toml get 42
  $SEQSVR_BIN/seqctl --config $SHOWN/cluster.toml status
  $SEQSVR_BIN/seqctl --config $SHOWN/cluster.toml route
  $SEQSVR_BIN/seqctl --config $SHOWN/cluster.toml leases
As an application (grpcurl; the AllocSvrs' certificates chain to the cluster CA):
  grpcurl -cacert $SHOWN/certs/cluster-ca.pem -cert $SHOWN/certs/client.pem
    -key $SHOWN/certs/client.key -authority alloc.seqsvr -d '{"uid": 42}'
    127.0.0.1:$(port 7201) seqsvr.v1.SeqService/Next
Stop it with: scripts/dev-cluster.sh down
MSG
      return 0
    fi
    for name in $NAMES; do
      if ! ours_running "$(pid_file "$name")"; then
        echo "error: $name exited; last lines of its log:" >&2
        tail -n 20 "$LOCAL/logs/$name.log" >&2
        exit 1
      fi
    done
    sleep 0.1
  done
  echo "error: the cluster did not serve within 60 s; see $SHOWN/logs/" >&2
  exit 1
}

# start_one NAME STATE: starts one process of PROCS in the background (STATE: the stores'
# --initial-cluster-state).
start_one() {
  local name=$1 state=$2 extra=() bin=$SEQSVR_BIN cmd=${PROCS[$1]}
  [[ $name == store-* ]] && extra=(--initial-cluster-state "$state")
  # A binary of another build for this one process (see the top of this file).
  [ -x "$LOCAL/bin/$name/${cmd%% *}" ] && bin=$LOCAL/bin/$name
  if [ -e "$LOCAL/bin/$name/cluster-without-node" ]; then
    # Replaced whole (mv): a process started just before may be reading it.
    sed -E 's/, node = [0-9]+//' "$CONFIG" >"$LOCAL/cluster-without-node.toml.new"
    mv "$LOCAL/cluster-without-node.toml.new" "$LOCAL/cluster-without-node.toml"
    cmd=${cmd/"--config $CONFIG "/"--config $LOCAL/cluster-without-node.toml "}
  fi
  # shellcheck disable=SC2086
  nohup "$bin"/$cmd "${extra[@]}" >>"$LOCAL/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$(pid_file "$name")"
  echo ">> started $name (pid $!, $bin/${cmd%% *}), log: $LOCAL/logs/$name.log"
}

# stop_one PIDFILE: SIGTERM (a graceful hand-over), up to 10 s, then SIGKILL.
stop_one() {
  local f=$1 pid
  pid=$(cat "$f")
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  echo ">> stopped $(basename "$f" .pid) (pid $pid)"
  rm -f "$f"
}

down() {
  local any=0
  for f in "$LOCAL"/pids/*.pid; do
    [ -e "$f" ] || continue
    if ours_running "$f"; then
      stop_one "$f"
      any=1
    fi
    rm -f "$f"
  done
  [ $any -eq 1 ] || echo ">> nothing running"
}

# The gRPC address of a process name: store-S-I → 127.0.0.1:71SI, alloc-S-I → 127.0.0.1:72SI.
addr_of() {
  local kind set i
  IFS=- read -r kind set i <<<"$1"
  case $kind in
    store) echo "127.0.0.1:$(port 71$set$i)" ;;
    alloc) echo "127.0.0.1:$(port 72$set$i)" ;;
  esac
}

restart() {
  local name=${1:-}
  if [ -z "$name" ] || [ -z "${PROCS[$name]:-}" ]; then
    echo "usage: $0 restart NAME (one of: $(echo $NAMES))" >&2
    exit 2
  fi
  local f
  f=$(pid_file "$name")
  if ours_running "$f"; then stop_one "$f"; else echo ">> $name was not running"; fi
  start_one "$name" existing
  local addr
  addr=$(addr_of "$name")
  for _ in $(seq 1 300); do
    if seqctl --timeout-ms 1000 health "$addr" >/dev/null 2>&1; then
      echo ">> $name serves again ($addr)"
      return 0
    fi
    if ! ours_running "$f"; then
      echo "error: $name exited; last lines of its log:" >&2
      tail -n 20 "$LOCAL/logs/$name.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "error: $name is not SERVING 30 s after its start; see $SHOWN/logs/$name.log" >&2
  exit 1
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) seqctl status ;;
  restart) restart "${2:-}" ;;
  wipe) down; rm -rf "$LOCAL"; echo ">> removed $LOCAL" ;;
  *) echo "usage: $0 up|down|status|restart NAME|wipe" >&2; exit 2 ;;
esac
