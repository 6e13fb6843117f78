#!/usr/bin/env bash
# Container chaos test: runs docker-compose.yml (set 0: 3 StoreSvrs + 2 AllocSvrs) from the image
# of scripts/docker-image.sh, records client calls from the host with `seqcheck load`, and
# while they run:
#   1. docker kill of the store leader, then of an AllocSvr (both started again);
#   2. an AllocSvr cut off the store network (clients still reach it), then reconnected;
#   3. docker pause of an AllocSvr until its sections moved (past its lease), then unpause;
#   4. a rolling restart of every container, one at a time, each waited on until healthy;
#   5. a StoreSvr replaced by one with a fresh, empty volume through the membership procedure.
# The same load also issues ids of every scheme the compose cluster file serves (snowflake,
# uuidv7) on both AllocSvrs. Then checks the histories (no value repeats or goes back; no id is
# issued twice, no worker id's ids go back) and writes the per-step summary to
# docs/reliability/containers.md. Prints "skipped: no Docker engine" (exit 0) without one.
#
# Every container, network and volume it made is removed at the end, also on failure
# (`compose down -v` of its own project name).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "compose-test: skipped: no Docker engine"
  exit 0
fi
if docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose_cmd=(docker-compose)
else
  echo "compose-test: skipped: Docker engine found but neither 'docker compose' nor docker-compose"
  exit 0
fi

PROJECT=seqsvr-compose-test
IMAGE=seqsvr:compose-test
OUT=${COMPOSE_TEST_OUT:-$SEQSVR_ROOT/data/compose-test}
DOC=$SEQSVR_ROOT/docs/reliability/containers.md
export SEQSVR_IMAGE=$IMAGE
compose() { "${compose_cmd[@]}" -p "$PROJECT" -f docker-compose.yml "$@"; }
CONFIG=config/compose.toml
STORE_NET=${PROJECT}_store

if docker ps --format '{{.Ports}}' | grep -q '127.0.0.1:730[12]->'; then
  echo "error: ports 7301/7302 are taken by running containers (a 'docker compose up' of this" >&2
  echo "       repository?): stop them first (docker compose down)" >&2
  exit 2
fi

SEQSVR_IMAGE=$IMAGE scripts/docker-image.sh
cargo build --release -p seqsvr-check -p seqctl >/dev/null
# Every plane is mutual TLS: the containers' PKI (made once), the admin's identity for seqctl.
scripts/compose-certs.sh
CERTS=config/compose-certs
seqctl() {
  "$SEQSVR_BIN/seqctl" --config "$CONFIG" --tls-cert "$CERTS/admin.pem" \
    --tls-key "$CERTS/admin.key" --timeout-ms 2000 "$@"
}

rm -rf "$OUT"
mkdir -p "$OUT"
load_pid=
cleanup() {
  local rc=$?
  if [ -n "$load_pid" ] && kill -0 "$load_pid" 2>/dev/null; then
    kill "$load_pid" 2>/dev/null || true
    wait "$load_pid" 2>/dev/null || true
  fi
  exec 3>&- 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo ">> failed (exit $rc): container logs in $OUT/logs/"
    mkdir -p "$OUT/logs"
    for c in $(compose ps -q 2>/dev/null); do
      docker logs "$c" >"$OUT/logs/$(docker inspect -f '{{.Name}}' "$c" | tr -d /).log" 2>&1 || true
    done
  fi
  compose down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  docker image rm "$IMAGE" >/dev/null 2>&1 || true
  rm -f "$OUT/steps.fifo"
  exit $rc
}
trap cleanup EXIT

# wait_until DESC SECONDS CMD...: polls CMD every 0.2 s until it succeeds; fails after SECONDS.
wait_until() {
  local desc=$1 secs=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "error: timed out after ${secs}s waiting for: $desc" >&2
      return 1
    fi
    sleep 0.2
  done
}

container() { compose ps -q "$1"; }
healthy() { [ "$(docker inspect -f '{{.State.Health.Status}}' "$(container "$1")")" = healthy ]; }
SERVICES="store-0-1 store-0-2 store-0-3 alloc-0-1 alloc-0-2"
all_healthy() {
  local s
  for s in $SERVICES; do healthy "$s" || return 1; done
}
not_serving() { ! "$SEQSVR_BIN/seqctl" --timeout-ms 1000 health "$1"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }
# The store leader of set 0 as "store-0-N".
leader() {
  seqctl --json store status |
    json 'print(next("store-0-%d" % m["id"] for m in d if m["set"] == 0 and m["role"] == "leader"))'
}
# How many sections AllocSvr address $1 holds in set 0, as the store leader sees it (nothing
# printed when the leader cannot be asked).
sections_of() {
  seqctl --json leases | json "
print(sum(a['n_sections'] for s in d if s['set'] == 0 and not s.get('error') for a in s['allocs'] if a['addr'] == '$1'))"
}
lost_sections() { [ "$(sections_of "$1")" = 0 ]; }
set_serves() { seqctl next 42 1073741824 2147499999; }

step() {
  echo ">> step: $1"
  echo "step $1" >&3
}

echo ">> docker compose up -d (project $PROJECT)"
t_up=$SECONDS
compose up -d
wait_until "every container healthy" 120 all_healthy
wait_until "set 0 to serve from the host" 60 set_serves
up_secs=$((SECONDS - t_up))
echo ">> up and serving in $up_secs s"
seqctl status

mkfifo "$OUT/steps.fifo"
"$SEQSVR_BIN/seqcheck" load --config "$CONFIG" --sets 0 --out "$OUT" --clients 8 \
  --tls-cert "$CERTS/client.pem" --tls-key "$CERTS/client.key" <"$OUT/steps.fifo" >"$OUT/load.out" 2>"$OUT/load.err" &
load_pid=$!
exec 3>"$OUT/steps.fifo"
wait_until "the load to start" 60 grep -q "clients running" "$OUT/load.err"

step kill-store-leader
victim=$(leader)
echo "   docker kill $victim"
docker kill "$(container "$victim")" >/dev/null
wait_until "a new store leader and set 0 serving" 60 set_serves
docker start "$(container "$victim")" >/dev/null
wait_until "$victim healthy again" 60 healthy "$victim"

step kill-alloc
echo "   docker kill alloc-0-1"
docker kill "$(container alloc-0-1)" >/dev/null
wait_until "alloc-0-2 to serve every section" 60 set_serves
docker start "$(container alloc-0-1)" >/dev/null
wait_until "alloc-0-1 healthy again" 60 healthy alloc-0-1

step disconnect-alloc
echo "   docker network disconnect $STORE_NET alloc-0-1 (clients still reach it)"
docker network disconnect "$STORE_NET" "$(container alloc-0-1)"
wait_until "alloc-0-1 to stop serving (its lease lapsed)" 60 not_serving 127.0.0.1:7301
wait_until "alloc-0-1 to lose its sections" 60 lost_sections 127.0.0.1:7301
docker network connect --ip 10.77.0.21 "$STORE_NET" "$(container alloc-0-1)"
wait_until "alloc-0-1 healthy again" 60 healthy alloc-0-1

step pause-alloc
echo "   docker pause alloc-0-2 until its sections moved"
docker pause "$(container alloc-0-2)" >/dev/null
wait_until "alloc-0-2's sections to move (its lease ran out)" 60 lost_sections 127.0.0.1:7302
wait_until "set 0 to serve without alloc-0-2" 60 set_serves
docker unpause "$(container alloc-0-2)" >/dev/null
wait_until "alloc-0-2 healthy again" 60 healthy alloc-0-2

step rolling-restart
for s in $SERVICES; do
  echo "   docker restart $s"
  docker restart -t 20 "$(container "$s")" >/dev/null
  wait_until "$s healthy after its restart" 90 healthy "$s"
done

step replace-store
victim=store-0-3
if [ "$(leader)" = store-0-3 ]; then victim=store-0-2; fi
id=${victim##*-}
echo "   replacing $victim (member $id) with an empty volume"
compose stop -t 20 "$victim" >/dev/null
compose rm -f "$victim" >/dev/null
docker volume rm "${PROJECT}_${victim}-data" >/dev/null
seqctl store remove --set 0 "$id"
compose up -d --no-deps "$victim"
addr=$(python3 -c "import tomllib; c=tomllib.load(open('$CONFIG','rb')); print(next(m['addr'] for m in c['sets'][0]['stores'] if m['id']==$id))")
vote_blocked() {
  seqctl --json store status | json "sys.exit(0 if any(m['set']==0 and m['id']==$id and m.get('vote_blocked') for m in d) else 1)"
}
wait_until "$victim to start empty and vote-blocked (the created marker)" 60 vote_blocked
wait_until "$victim added as a learner" 60 seqctl store add-learner --set 0 "$id" "$addr"
wait_until "$victim promoted once caught up" 90 seqctl store promote --set 0 "$id"
votes_again() {
  seqctl --json store status | json "sys.exit(0 if any(m['set']==0 and m['id']==$id and not m.get('vote_blocked') and m['role'] in ('follower','leader') for m in d) else 1)"
}
wait_until "$victim to vote again" 60 votes_again
wait_until "$victim healthy" 60 healthy "$victim"

step end
echo stop >&3
exec 3>&-
rc=0
wait "$load_pid" || rc=$?
load_pid=
cat "$OUT/load.out"
if [ $rc -ne 0 ]; then
  echo "error: seqcheck load exited $rc (1 = violations); see $OUT" >&2
  exit 1
fi

{
  cat <<'EOF'
# Container chaos test (`scripts/compose-test.sh`)

`docker-compose.yml` (set 0: 3 StoreSvrs + 2 AllocSvrs, image from `scripts/docker-image.sh`),
8 recording clients on the host (`seqcheck load`: 4 SDK clients, and 2 plain gRPC and 2
HTTP/JSON clients of one AllocSvr each, whose calls are forwarded), five steps of container
faults. Each row is a step from its start to the next step's start; "longest stretch" is the
longest time in the step during which no client call to the set succeeded (what an application
felt). The history was
checked: every value distinct and increasing in real-time order per uid. The same load issued
ids (`NextIds` of every scheme the compose file serves, on both AllocSvrs), checked for ids issued
twice and for ids of one worker id going back in real-time order.

EOF
  echo "Run: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, Compose $("${compose_cmd[@]}" version --short 2>/dev/null || echo '?'), Docker $(docker version -f '{{.Server.Version}}')."
  echo "From \`compose up -d\` to every container healthy and \`seqctl next\` answered from the host: ${up_secs} s."
  echo
  cat "$OUT/summary.md"
} >"$DOC"
echo ">> compose-test passed; summary in $DOC"
