#!/usr/bin/env bash
# The local cluster on 127.0.0.1, in the background:
#   scripts/dev-cluster.sh up      build, start, wait until it serves, print how to talk to it
#   scripts/dev-cluster.sh down    stop exactly the processes `up` started (by PID)
#   scripts/dev-cluster.sh status  seqctl store status
#   scripts/dev-cluster.sh wipe    down, then delete data/local
# Data, logs, PID files and the cluster config it used live under data/local/.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"

LOCAL=$SEQSVR_ROOT/data/local
CONFIG=$LOCAL/cluster.toml
SET_ID=0
MEMBERS=(1 2 3)

pid_file() { echo "$LOCAL/pids/store-$SET_ID-$1.pid"; }

# True if the PID in $1 is alive and is one of our storesvr processes.
ours_running() {
  local f=$1 pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q storesvr "/proc/$pid/cmdline" 2>/dev/null
}

seqctl() { "$SEQSVR_BIN/seqctl" --config "$CONFIG" "$@"; }

up() {
  ensure_build_deps
  build_release_bins
  mkdir -p "$LOCAL/pids" "$LOCAL/logs"
  [ -f "$CONFIG" ] || cp config/cluster.toml "$CONFIG"
  for id in "${MEMBERS[@]}"; do
    if ours_running "$(pid_file "$id")"; then
      echo ">> store $SET_ID/$id already running (pid $(cat "$(pid_file "$id")"))"
      continue
    fi
    nohup "$SEQSVR_BIN/storesvr" --config "$CONFIG" --set-id "$SET_ID" --node-id "$id" \
      --data-dir "$LOCAL/store-$SET_ID-$id" >>"$LOCAL/logs/store-$SET_ID-$id.log" 2>&1 </dev/null &
    echo $! >"$(pid_file "$id")"
    echo ">> started store $SET_ID/$id (pid $!), log: data/local/logs/store-$SET_ID-$id.log"
  done
  echo ">> waiting for a leader"
  for _ in $(seq 1 600); do
    if seqctl store status --json 2>/dev/null | grep -q '"role": "leader"'; then
      seqctl store status || true
      cat <<MSG

The local cluster serves (one set of 3 StoreSvrs on 127.0.0.1:7101-7103; data in data/local/).
Talk to it:
  $SEQSVR_BIN/seqctl --config data/local/cluster.toml store status
  $SEQSVR_BIN/seqctl --config data/local/cluster.toml store advance 42=10000
  $SEQSVR_BIN/seqctl --config data/local/cluster.toml store get 42
  grpcurl -plaintext 127.0.0.1:7101 list
Stop it with: scripts/dev-cluster.sh down
MSG
      return 0
    fi
    for id in "${MEMBERS[@]}"; do
      if ! ours_running "$(pid_file "$id")"; then
        echo "error: store $SET_ID/$id exited; last lines of its log:" >&2
        tail -n 20 "$LOCAL/logs/store-$SET_ID-$id.log" >&2
        exit 1
      fi
    done
    sleep 0.1
  done
  echo "error: no leader after 60 s; see data/local/logs/" >&2
  exit 1
}

down() {
  local any=0
  for f in "$LOCAL"/pids/*.pid; do
    [ -e "$f" ] || continue
    if ours_running "$f"; then
      local pid
      pid=$(cat "$f")
      kill -TERM "$pid"
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
      echo ">> stopped $(basename "$f" .pid) (pid $pid)"
      any=1
    fi
    rm -f "$f"
  done
  [ $any -eq 1 ] || echo ">> nothing running"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) seqctl store status ;;
  wipe) down; rm -rf "$LOCAL"; echo ">> removed data/local" ;;
  *) echo "usage: $0 up|down|status|wipe" >&2; exit 2 ;;
esac
