#!/usr/bin/env bash
# Benchmarks seqsvr side by side with what users would pick instead, each peer driven at its
# best, in one run on this machine:
#   scripts/bench.sh [--runs 3] [--seconds 10] [--concurrency 64] [--dists "uniform zipf"]
#                    [--touch-uids N] [--skip-ids | --ids-only | --any-client-only]
#                    [--before-bin DIR]
# Starts Redis (AOF everysec and always), PostgreSQL and a 3-member etcd from Debian's packages
# on loopback ports with their own data dirs, the local seqsvr cluster, and the floor server
# (`seqbench floor-serve`: seqsvr's SeqService over the cluster's mutual TLS, as an AllocSvr
# serves it, bumping in-memory counters); runs every target --runs times per uid distribution,
# alternating within each round:
#   floor (one RPC per call), floor coalesced (the SDK), floor batch 1000 (the SDK);
#   seqsvr (the SDK as shipped), seqsvr with no coalescing, seqsvr batch 1000;
#   Redis everysec and always with one shared pipelined connection, everysec with a connection
#   per caller; PostgreSQL through a pool; etcd (CAS per uid, one channel per member).
# Every run counts CPU per call of the client and of the target's server processes (the
# cluster's 10, the floor's, Redis', etcd's 3, PostgreSQL's postmaster with all its backends).
# Then: p99.9 at half of each one's peak, paced; paced p99.9 with the client pinned to CPU 0
# and the cluster and the floor server to CPU 1, seqsvr and the floor (coalesced) at the same
# rate (half of the lower of their unpinned peaks); p99.9 with step 100 vs 100,000 (Zipf,
# paced, the cluster restarted with each step); AllocSvr RSS per uid with 10 M uids touched;
# and a crash check (kill -9 each peer, restart, count uids whose next value went backwards).
# Writes docs/benchmarks/results.md (issue 13's targets first, from `seqbench targets`),
# latency-*.png (with matplotlib) and raw/. Machines here are shared and noisy: read the
# ratios and medians, not one number.
# Issue 31 (any client; `--any-client-only` runs only it, ~6 min, and replaces its section of
# results.md and raw/any-client/): side by side, alternating, --runs rounds against the local
# cluster, 64 callers, one uid per call, uniform: the floor (one RPC per call); the SDK; a
# plain gRPC client with ONE address (set 0's first AllocSvr: `seqsvr-plain`, no
# `seqsvr-no-forward`); HTTP/JSON to that address (`seqsvr-http`: HTTP/1.1 with a keep-alive
# connection per caller, and HTTP/2 on one shared connection): first with the uids spread over
# set 0 (`--uid-stride`, half owned by each of its two AllocSvrs, so the one address forwards
# about half the calls), then in one section the address owns (the main table's uids, the SDK
# again). `--before-bin DIR` (storesvr, allocsvr and seqbench built from before issue 31, e.g.
# commit 1c79b5f; DIR/COMMIT, if present, names it) adds the SDK's row against that build in
# each round, on a cluster of its own ($dev-before): the SDK unchanged, same run. The 1-min load
# average is logged before and after every run, and each run records the CPU the machine's
# other processes used meanwhile. The table and the targets come from
# `seqbench any-client-report`.
# SEQSVR_DEV_DIR: the dev cluster's directory (as for scripts/dev-cluster.sh; default data/local).
# Last (unless --skip-ids), the id benchmark (issue 10; `--ids-only` runs only it, ~15 min):
# per served scheme, NextIds ×1, ×1000 and ×10000 and the SDK's cached path from one client
# process, against in-process ceilings (a bare Generator loop per layout, the uuid crate's
# now_v7); then uid-generator again under a bench-only [ids] (max_ahead_ms 59 min). Writes
# docs/benchmarks/ids.md and ids.json.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"
runs=3 seconds=10 concurrency=64 dists="uniform zipf" uids=100000 touch_uids=10000000
any_client_only=0 before_bin=
ids_only=0 skip_ids=0 id_seconds=10 id_ahead_seconds=5 id_schemes="snowflake uid-generator weibo uuidv7 rongcloud"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --dists) dists=$2; shift 2 ;;
    --touch-uids) touch_uids=$2; shift 2 ;;
    --ids-only) ids_only=1; shift ;;
    --any-client-only) any_client_only=1; shift ;;
    --before-bin) before_bin=$(cd "$2" && pwd); shift 2 ;;
    --skip-ids) skip_ids=1; shift ;;
    --id-seconds) id_seconds=$2; shift 2 ;;
    --id-ahead-seconds) id_ahead_seconds=$2; shift 2 ;;
    --id-schemes) id_schemes=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--seconds S] [--concurrency C] [--dists \"uniform zipf\"] [--touch-uids N] [--skip-ids | --ids-only | --any-client-only] [--before-bin DIR] [--id-seconds S] [--id-ahead-seconds S] [--id-schemes \"snowflake ...\"]" >&2; exit 2 ;;
  esac
done
if [ $((ids_only + skip_ids + any_client_only)) -gt 1 ]; then
  echo "--ids-only, --skip-ids and --any-client-only: pick one" >&2; exit 2
fi
if [ -n "$before_bin" ]; then
  for b in storesvr allocsvr seqbench; do
    [ -x "$before_bin/$b" ] || { echo "--before-bin: no $b in $before_bin" >&2; exit 2; }
  done
fi
# The dev cluster's directory (scripts/dev-cluster.sh reads the same variable).
dev=${SEQSVR_DEV_DIR:-$SEQSVR_ROOT/data/local}
before_dev=$dev-before

ensure_build_deps
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v etcd >/dev/null || need+=(etcd-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -gt 0 ] && [ "$ids_only" -eq 0 ] && [ "$any_client_only" -eq 0 ]; then
  echo ">> installing ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi
build_release_bins
bench="$SEQSVR_BIN/seqbench"
work=$(mktemp -d -t seqsvr-bench-XXXXXX)
chmod 755 "$work"
results="$work/results"
mkdir -p "$results"
pids=()  # every background process this script started (Redis, etcd, the floor server)
cluster_was_up=0 cluster_pinned=0
ls "$dev"/pids/*.pid >/dev/null 2>&1 && cluster_was_up=1
cleanup() {
  local status=$?
  set +e
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  # The id benchmark's bench-only [ids] variant: put the cluster file back.
  [ -n "${ids_cfg_backup:-}" ] && [ -f "$ids_cfg_backup" ] && cp "$ids_cfg_backup" "$dev"/cluster.toml
  # Leave the local cluster as we found it (up, and not pinned to one CPU, or down).
  if [ "$cluster_was_up" -eq 0 ]; then
    scripts/dev-cluster.sh down >/dev/null 2>&1
  elif [ "$cluster_pinned" -eq 1 ]; then
    scripts/dev-cluster.sh down >/dev/null 2>&1
    scripts/dev-cluster.sh up >/dev/null 2>&1
  fi
  [ -n "$before_bin" ] && SEQSVR_DEV_DIR=$before_dev scripts/dev-cluster.sh down >/dev/null 2>&1
  [ -n "${pg_bin:-}" ] && as_postgres "$pg_bin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1
  [ "$status" -eq 0 ] || echo "!! bench.sh failed (exit $status); everything it started is stopped. Work dir: $work" >&2
  return "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # through the EXIT trap

# --- Ids (issue 10): side by side in one run, one client process, the local cluster (mutual
# TLS, as an application). Per served scheme: NextIds ×1 and ×1000 (64 callers) and the SDK's
# cached path (one IdClient::cached, 64 takers; capacity 8192 = the SDK's default, 200,000 and
# 400,000 = refills of 100,000 / 200,000 as 4 concurrent NextIds (the SDK's default
# parallel_fetches), and 200,000 with one NextIds per refill, what the SDK did before); the
# local ceilings in this process, one thread: a bare
# Generator loop of the same layout (one worker id, the wall clock, the same max_ahead_ms), the
# same loop unbounded (the layout code's CPU cost), and uuid::Uuid::now_v7(). CPU per id counts
# this client and every StoreSvr and AllocSvr (from /proc).
ids_benchmark() {
  local cfg="$dev"/cluster.toml out="$work/ids" r scheme caps cap server_pids
  export SEQSVR_TLS_CERT=$dev/certs/client.pem
  export SEQSVR_TLS_KEY=$dev/certs/client.key
  mkdir -p "$out"
  ids_restart_cluster() { scripts/dev-cluster.sh down >/dev/null; scripts/dev-cluster.sh up >/dev/null; }
  ids_run() { # out-file args...: a failed run is reported, not fatal (the others still tell)
    local f=$1; shift
    "$bench" ids --config "$cfg" --server-pids "$server_pids" --out "$f" "$@" \
      || { echo "!! seqbench ids $* failed" >&2; rm -f "$f"; }
  }
  cached_args() { # capacity[xPARALLEL]
    case $1 in
      *x*) echo "--capacity ${1%x*} --parallel-fetches ${1#*x}" ;;
      *) echo "--capacity $1" ;;
    esac
  }
  ids_round() { # seconds schemes
    local s=$1 schemes=$2
    for scheme in $schemes; do
      caps="8192 200000 200000x1 400000"  # capacity[xNextIds per refill]
      # uid-generator's 13 sequence bits: one worker id issues 8,192 ids per second plus what
      # it may borrow (max_ahead_ms), so under the standard config a refill of 100,000 from one
      # AllocSvr cannot be issued within the fetch deadline: only the default capacity runs.
      [ "$scheme" = uid-generator ] && caps=8192
      # rongcloud ids belong to a session (each caller asks its own): no client-side cache.
      [ "$scheme" = rongcloud ] && caps=""
      ids_run "$out/$scheme-next1-$r.json" --mode next --count 1 --scheme "$scheme" --seconds "$s"
      ids_run "$out/$scheme-next1000-$r.json" --mode next --count 1000 --scheme "$scheme" --seconds "$s"
      for cap in $caps; do
        ids_run "$out/$scheme-cached$cap-$r.json" --mode cached $(cached_args "$cap") --scheme "$scheme" --seconds "$s"
      done
      # Batches of 10,000 (the 64 callers then keep 640,000 ids in flight): the per-call cost of
      # the RPC stack, not the layout, bounds ×1000 on 2 cores. Last, since it runs the issued
      # times up to the borrowing bound, which the next path would start from. uid-generator's
      # 8,192 per second per worker id cannot issue one such batch within a call's deadline.
      if [ "$scheme" != uid-generator ]; then
        ids_run "$out/$scheme-next10000-$r.json" --mode next --count 10000 --scheme "$scheme" --seconds "$s"
      fi
      ids_run "$out/$scheme-generator-$r.json" --mode generator --scheme "$scheme" --seconds "$s"
      ids_run "$out/$scheme-generator-unbounded-$r.json" --mode generator-unbounded --scheme "$scheme" --seconds "$s"
    done
  }
  ids_restart_cluster
  server_pids=$(cat "$dev"/pids/*.pid | paste -sd, -)
  for r in $(seq 1 "$runs"); do
    echo ">> ids: round $r of $runs"
    ids_round "$id_seconds" "$id_schemes"
    ids_run "$out/uuid-crate-$r.json" --mode uuid-crate --seconds "$id_seconds"
  done
  # Bench-only [ids]: uid-generator reaches millions of ids per second only by borrowing
  # future seconds, so the same layout again under max_ahead_ms 59 min (reserve_ms at its
  # ceiling, 1 h), as schemes of their own names: one per run and path, so that each starts
  # with no lead (a worker id's high-water mark only grows: the lead one run leaves would cap
  # the next), and so that the real uid-generator's marks never run an hour ahead (it would
  # wait for the clock after the benchmark). Reported together as `uid-generator-ahead`. Their
  # ids may repeat uid-generator's numbers: bench only, the variant is removed again below.
  if [[ " $id_schemes " == *" uid-generator "* ]]; then
    local paths="next1 next1000 cached8192 cached200000 cached400000" m args
    ids_cfg_backup="$work/cluster.toml.before-ids"
    cp "$cfg" "$ids_cfg_backup"
    python3 - "$cfg" "$runs" $paths <<'PY'
import re, sys, tomllib
path, runs, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
text = open(path).read()
ids = tomllib.loads(text)["ids"]
for key, value in (("reserve_ms", 3600000), ("max_ahead_ms", 3540000)):
    if re.search(r"(?m)^%s\s*=" % key, text):
        text = re.sub(r"(?m)^%s\s*=\s*\d+" % key, "%s = %d" % (key, value), text)
    else:
        text = text.replace("[ids]\n", "[ids]\n%s = %d\n" % (key, value), 1)
spec = "".join("%s = %s\n" % (k, '"%s"' % v if isinstance(v, str) else v)
               for k, v in ids["schemes"]["uid-generator"].items())
names = ["uid-generator-ahead"] + ["uid-generator-ahead-%d-%s" % (r, p)
                                   for r in range(1, runs + 1) for p in paths]
for name in names:
    text += "\n[ids.schemes.%s]  # bench only (scripts/bench.sh)\n%s" % (name, spec)
open(path, "w").write(text)
PY
    ids_restart_cluster
    server_pids=$(cat "$dev"/pids/*.pid | paste -sd, -)
    for r in $(seq 1 "$runs"); do
      echo ">> ids, uid-generator with max_ahead_ms 3540000: round $r of $runs"
      for m in $paths; do
        case $m in
          next*) args=(--mode next --count "${m#next}") ;;
          cached*) read -ra args <<<"--mode cached $(cached_args "${m#cached}")" ;;
        esac
        ids_run "$out/uid-generator-ahead-$m-$r.json" "${args[@]}" --scheme "uid-generator-ahead-$r-$m" \
          --report-as uid-generator-ahead --seconds "$id_ahead_seconds"
      done
      ids_run "$out/uid-generator-ahead-generator-$r.json" --mode generator --scheme uid-generator-ahead \
        --seconds "$id_ahead_seconds"
      ids_run "$out/uid-generator-ahead-generator-unbounded-$r.json" --mode generator-unbounded \
        --scheme uid-generator-ahead --seconds "$id_ahead_seconds"
    done
    cp "$ids_cfg_backup" "$cfg"
    rm -f "$ids_cfg_backup"
    ids_restart_cluster
  fi
  mkdir -p docs/benchmarks
  {
    echo "# Ids: served vs local ceilings"
    echo
    echo "Produced by \`scripts/bench.sh --ids-only --runs $runs --id-seconds $id_seconds --id-ahead-seconds $id_ahead_seconds\`"
    echo "(the last step of \`scripts/bench.sh\`) on $(nproc) cores, $(date -u +%Y-%m-%d): the local cluster (2 sets × 3"
    echo "StoreSvrs + 2 AllocSvrs, mutual TLS, \`config/cluster.toml\`) and ONE client process (seqbench; 64"
    echo "concurrent callers, or 64 takers sharing one cache) on the same cores. Medians over $runs runs of"
    echo "${id_seconds} s each (the bench-only \`uid-generator-ahead\` rows: ${id_ahead_seconds} s). Shared, noisy machine: read ratios, not digits."
    echo
    echo "- **Paths.** \`NextIds ×N\`: \`IdClient::next_ids\` with N ids per call, round-robin over the 4"
    echo "  AllocSvrs, each call timed. \`cached, capacity C\`: one \`IdClient::cached\` (refills of C/2 by"
    echo "  4 concurrent \`NextIds\` of C/8 each, the SDK's default \`parallel_fetches\`, or by 1 where the"
    echo "  row says so, in the background) shared by 64 taker tasks; latency is one take (one"
    echo "  in 16 timed). *ids/s* counts ids handed to the caller; *CPU ns/id* is user + system time from"
    echo "  /proc of the client process, and of all 10 server processes, divided by those ids."
    echo "- **Ceilings.** In the client process, one thread, no RPC: *Generator loop* = the AllocSvr's own"
    echo "  generator (\`seqsvr_core::idscheme::Generator\`) for the same layout with one worker id, the wall"
    echo "  clock read per id, borrowing at most the same \`ids.max_ahead_ms\`; *unbounded* = the same with no"
    echo "  borrowing bound (the CPU cost of the layout code alone); *uuid crate now_v7* = \`uuid::Uuid::now_v7()\`."
    echo "  *÷ ceiling* divides a served path by its scheme's Generator loop (one worker id: served paths"
    echo "  use one worker id per AllocSvr, so a layout-bound scheme can exceed 1×)."
    echo "- **rongcloud**: caller i asks for its own session (\`IdClient::next_session_ids\`, served by the"
    echo "  owner of the session's section, one generator per section); its *worker ids* column counts the"
    echo "  sessions. Its ids belong to a session, so it has no cached path."
    echo "- **Lead**: the time in the last id of each task minus the wall clock at the end of the run (ms;"
    echo "  negative = behind: cached ids were issued before they were handed out), and the most seen in"
    echo "  samples during the run. The bound is \`ids.max_ahead_ms\` (2000 in \`config/cluster.toml\`)."
    echo "  *ids per s of issued time* divides the ids by the time their timestamps span: the run plus how"
    echo "  much further ahead of the clock the issued times were at the end than at the first id (never"
    echo "  less than the run). A run that borrows future time units hands out more than the layout's"
    echo "  limit for a while; this figure is what the limit bounds, and what the snowflake target is"
    echo "  judged by."
    echo "- **Layout limits.** snowflake, weibo and uuidv7 count 4,096 ids per ms per worker id (12-bit"
    echo "  sequence / counter), i.e. 4.1 M/s per worker id. uid-generator (13 sequence bits, 1-s units)"
    echo "  counts **8,192 per second per worker id**: beyond that it only borrows future seconds, up to"
    echo "  \`ids.max_ahead_ms\` ahead of the clock, then waits. With 4 worker ids in use and the standard 2 s"
    echo "  bound that is ~33 k ids/s sustained, whatever the machine. Its capacity-200,000 cache is not run"
    echo "  under the standard config: one refill (100,000 ids from one worker id) cannot be issued within"
    echo "  the 3 s fetch deadline. The rows \`uid-generator-ahead\` are the SAME layout under a **bench-only**"
    echo "  \`[ids]\`: \`max_ahead_ms = 3540000\` (59 min), \`reserve_ms = 3600000\` (its ceiling), served under"
    echo "  scheme names of their own, a fresh one per run and path (a worker id's mark only grows, so"
    echo "  one run's lead would cap the next); their lead column shows how far ahead of the wall clock"
    echo "  ${id_ahead_seconds} s at that rate leave the issued times."
    echo
    "$bench" ids-report "$out"/*.json --json docs/benchmarks/ids.json
  } | tee docs/benchmarks/ids.md
}
# --- seqsvr: the local cluster.
cfg="$dev"/cluster.toml
# The local cluster runs mutual TLS: seqbench dials it as an application (`client` identity).
export SEQSVR_TLS_CERT=$dev/certs/client.pem
export SEQSVR_TLS_KEY=$dev/certs/client.key

# Median of a field over result JSONs.
median_of() { # field files...
  python3 -c 'import json,statistics,sys; print(statistics.median(json.load(open(f))[sys.argv[1]] for f in sys.argv[2:]))' "$@"
}
restart_cluster() { # [taskset -c N] [env VAR=value...]: how to start it
  scripts/dev-cluster.sh down >/dev/null
  "$@" scripts/dev-cluster.sh up >/dev/null
}
cluster_pids() { cat "$dev"/pids/*.pid | paste -sd, -; }

# --- The floor server: SeqService over the cluster's mutual TLS with an AllocSvr's identity.
floor_addr=127.0.0.1:7390 floor_pid=
start_floor() { # [taskset -c N]: how to start it
  [ -z "$floor_pid" ] || { kill "$floor_pid" 2>/dev/null || true; wait "$floor_pid" 2>/dev/null || true; }
  "$@" "$bench" floor-serve --addr "$floor_addr" --uids "$uids" --config "$cfg" \
    --tls-cert "$dev"/certs/alloc-0-1.pem --tls-key "$dev"/certs/alloc-0-1.key \
    >>"$work/floor.log" 2>&1 &
  floor_pid=$!
  pids+=("$floor_pid")
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/${floor_addr%:*}/${floor_addr#*:}") 2>/dev/null && return 0
    kill -0 "$floor_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "the floor server did not start (see $work/floor.log)" >&2; exit 1
}

# --- Issue 31: any client (see the top of this file). Results in $results/any-client.
any_client_benchmark() {
  local out="$results/any-client" r stride owner spread one
  mkdir -p "$out"
  : >"$out/load.tsv"
  echo "before: $(uptime)" >"$out/uptime.txt"
  # Uids k × stride for k < $uids: spread evenly over set 0, whose two AllocSvrs own one
  # contiguous half of its sections each.
  stride=$(python3 -c 'import sys, tomllib; s = tomllib.load(open(sys.argv[1], "rb"))["sets"][0]; print((s["uid_end"] - s["uid_begin"]) // int(sys.argv[2]))' "$cfg" "$uids")
  local common=(--concurrency "$concurrency" --seconds "$seconds" --uids "$uids" --dist uniform)
  spread=(--uid-stride "$stride" "${common[@]}")
  one=("${common[@]}")
  any_run() { # binary label file args...: one run, the 1-min load average before and after
    local bin=$1 label=$2 file=$3 before after
    shift 3
    before=$(cut -d' ' -f1 /proc/loadavg)
    "$bin" run --label "$label" --out "$out/$file" "$@"
    after=$(cut -d' ' -f1 /proc/loadavg)
    printf '%s\t%s\t%s\t%s\n' "$label" "$file" "$before" "$after" >>"$out/load.tsv"
  }
  warm_up() { # binary config [--uid-stride S]: every section used loaded before anything is timed
    local bin=$1 config=$2
    shift 2
    "$bin" run --target seqsvr-batch --config "$config" --batch 1000 --concurrency 8 --seconds 3 \
      --uids "$uids" "$@" >/dev/null
  }
  owner_of_0() { # the AllocSvr that owns uid 0 (section 0), from `seqctl route --json`
    "$SEQSVR_BIN/seqctl" --config "$cfg" --tls-cert "$dev/certs/admin.pem" \
      --tls-key "$dev/certs/admin.key" --json route | python3 -c '
import json, sys
def tables(x):
    if isinstance(x, dict):
        if "entries" in x and "section_size" in x:
            yield x
        for v in x.values():
            yield from tables(v)
    elif isinstance(x, list):
        for v in x:
            yield from tables(v)
for t in tables(json.load(sys.stdin)):
    if int(t.get("uid_begin", 0)) == 0:
        for e in t["entries"]:
            if int(e.get("section_begin", 0)) == 0:
                print(e["addr"]); sys.exit(0)
sys.exit("no owner of section 0 in seqctl route --json")'
  }
  [ -n "$floor_pid" ] || start_floor
  [ -n "$before_bin" ] || restart_cluster  # (with it, each round restarts the cluster)
  for r in $(seq 1 "$runs"); do
    if [ -n "$before_bin" ]; then
      echo ">> any client: round $r of $runs, the build from before issue 31 ($before_bin)"
      scripts/dev-cluster.sh down >/dev/null
      mkdir -p "$before_dev"
      local name
      for name in store-0-1 store-0-2 store-0-3 store-1-1 store-1-2 store-1-3; do
        mkdir -p "$before_dev/bin/$name" && ln -sf "$before_bin/storesvr" "$before_dev/bin/$name/storesvr"
      done
      for name in alloc-0-1 alloc-0-2 alloc-1-1 alloc-1-2; do
        mkdir -p "$before_dev/bin/$name" && ln -sf "$before_bin/allocsvr" "$before_dev/bin/$name/allocsvr"
      done
      SEQSVR_DEV_DIR=$before_dev scripts/dev-cluster.sh up >/dev/null
      # Its own PKI: the application identity of that cluster.
      SEQSVR_TLS_CERT=$before_dev/certs/client.pem SEQSVR_TLS_KEY=$before_dev/certs/client.key \
        warm_up "$before_bin/seqbench" "$before_dev/cluster.toml"
      SEQSVR_TLS_CERT=$before_dev/certs/client.pem SEQSVR_TLS_KEY=$before_dev/certs/client.key \
        any_run "$before_bin/seqbench" "SDK before issue 31, one section" "sdk-before-$r.json" \
        --target seqsvr --config "$before_dev/cluster.toml" \
        --server-pids "$(cat "$before_dev"/pids/*.pid | paste -sd, -)" "${one[@]}"
      SEQSVR_DEV_DIR=$before_dev scripts/dev-cluster.sh down >/dev/null
      restart_cluster
    fi
    echo ">> any client: round $r of $runs"
    warm_up "$bench" "$cfg" --uid-stride "$stride"
    owner=$(owner_of_0)
    local seq_args=(--config "$cfg" --server-pids "$(cluster_pids)")
    any_run "$bench" "floor, one RPC per call" "floor-$r.json" --target floor --url "$floor_addr" \
      --config "$cfg" --server-pids "$floor_pid" "${one[@]}"
    any_run "$bench" "SDK, uids over set 0" "sdk-$r.json" --target seqsvr "${seq_args[@]}" "${spread[@]}"
    any_run "$bench" "plain gRPC, one address, uids over set 0" "plain-$r.json" --target seqsvr-plain \
      "${seq_args[@]}" "${spread[@]}"
    any_run "$bench" "HTTP/1.1, conn per caller, uids over set 0" "http1-$r.json" --target seqsvr-http \
      --http h1 "${seq_args[@]}" "${spread[@]}"
    any_run "$bench" "HTTP/2, one shared conn, uids over set 0" "http2-$r.json" --target seqsvr-http \
      --http h2 --http-conns 1 "${seq_args[@]}" "${spread[@]}"
    any_run "$bench" "SDK, one section" "sdk-one-$r.json" --target seqsvr "${seq_args[@]}" "${one[@]}"
    any_run "$bench" "plain gRPC, one address, one section it owns" "plain-owned-$r.json" \
      --target seqsvr-plain --url "$owner" "${seq_args[@]}" "${one[@]}"
    any_run "$bench" "HTTP/1.1, conn per caller, one section it owns" "http1-owned-$r.json" \
      --target seqsvr-http --http h1 --url "$owner" "${seq_args[@]}" "${one[@]}"
    any_run "$bench" "HTTP/2, one shared conn, one section it owns" "http2-owned-$r.json" \
      --target seqsvr-http --http h2 --http-conns 1 --url "$owner" "${seq_args[@]}" "${one[@]}"
  done
  echo "after: $(uptime)" >>"$out/uptime.txt"
}

# The "Issue 31: any client" section of results.md, from $results/any-client.
any_client_section() {
  local out="$results/any-client"
  echo "## Issue 31: any client"
  echo
  echo "Produced by \`scripts/bench.sh --any-client-only --runs $runs --seconds $seconds${before_bin:+ --before-bin DIR}\`"
  echo "(also part of the full run) on $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -n 1)), $(date -u +%Y-%m-%d):"
  echo "the local cluster (2 sets × 3 StoreSvrs + 2 AllocSvrs, mutual TLS, the application identity) and ONE"
  echo "client process on the same cores, $concurrency callers, one uid per call, uniform, medians over $runs"
  echo "alternating rounds of ${seconds} s per target. *uids over set 0*: uids k × $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["uid_stride"])' "$out/plain-1.json") for k < $uids, evenly"
  echo "over set 0, whose two AllocSvrs own one half each; the plain and HTTP clients call set 0's first"
  echo "AllocSvr only, which forwards what it does not own (the *forwarded* column, counted per call from"
  echo "its route table). *one section*: uids [0, $uids), the main table's workload, all in the section of"
  echo "one AllocSvr, which the plain and HTTP runs then call (nothing forwarded)."
  echo "*floor*: one \`Next\` RPC per call to the floor server (seqsvr's SeqService over the same TLS,"
  echo "bumping counters). *SDK*: \`SeqClient\` as shipped (coalescing, \`seqsvr-no-forward\`). *plain gRPC*:"
  echo "one \`Next\` RPC per call on one shared tonic channel, as stubs generated from \`proto/\` call it."
  echo "*HTTP*: \`POST /v1/seq/next\` \`{\"uids\": [\"<uid>\"]}\` with keep-alive, every answer parsed and"
  echo "checked: HTTP/1.1 on a connection per caller, HTTP/2 on one connection shared by all callers."
  if [ -n "$before_bin" ]; then
    echo "*SDK before issue 31*: the SDK and the servers built from before forwarding (commit"
    echo "$(cd "$before_bin" && cat COMMIT 2>/dev/null || echo "of --before-bin")), on a cluster of its own, in the same rounds."
  fi
  echo "CPU µs/call: user + system time of the client process and of all 10 server processes (the floor"
  echo "server's for the floor) over the run, divided by the calls served. Meituan Leaf's row is its"
  echo "README's figure (\"在4C8G VM基础上，通过公司RPC方式调用，QPS压测结果近5w/s，TP999 1ms\"), not a run here."
  echo "docs/benchmarks/README.md (\"Issue 31: any client\") says why a missed target is missed, from profiles."
  echo
  python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(out + "/load.tsv") if l.strip()]
before = [float(r[2]) for r in rows]
after = [float(r[3]) for r in rows]
ups = [l.strip() for l in open(out + "/uptime.txt")]
others = [json.load(open(f)).get("others_cpu_cores") for f in sorted(glob.glob(out + "/*.json"))]
others = [o for o in others if o is not None] or [0.0]  # runs of an older seqbench do not say
print("**Load.** `uptime` %s. The 1-min load average before and after each of the %d runs"
      " (raw/any-client/load.tsv): before %.2f–%.2f, after %.2f–%.2f; the runs follow each other, so it"
      " counts this benchmark's own previous runs (a client and a cluster keeping 2 cores busy)." % (
      "; ".join("`%s`" % u for u in ups), len(rows), min(before), max(before), min(after), max(after)))
first = float(ups[0].split("load average:")[1].split(",")[0])
noisy = first > 1.0 or max(others) > 0.25
print("What else ran is the last column: the CPU the other processes of the machine used during each"
      " run, in cores (all CPUs' busy time from /proc/stat minus the client's and the counted servers';"
      " for the floor, the idle cluster's too), median over all runs %.2f, at most %.2f.%s" % (
      statistics.median(others), max(others),
      " **Noisy: the load average was %.2f before the benchmark started and other processes used up to"
      " %.2f cores during the runs; other work shared the 2 cores.**" % (first, max(others))
      if noisy else " Quiet: the load average was %.2f before the start." % first))
PY
  echo
  "$bench" any-client-report "$out"/*.json
}

if [ "$ids_only" -eq 1 ]; then
  ids_benchmark
  exit 0
fi
if [ "$any_client_only" -eq 1 ]; then
  any_client_benchmark
  any_client_section >"$work/any-client.md"
  cat "$work/any-client.md"
  # Replace the section in results.md (up to the next "## " heading), or add it at the end.
  mkdir -p docs/benchmarks
  python3 - docs/benchmarks/results.md "$work/any-client.md" <<'PY'
import os, sys
path, section = sys.argv[1], open(sys.argv[2]).read().rstrip("\n") + "\n"
lines = open(path).read().split("\n") if os.path.exists(path) else []
head = "## Issue 31: any client"
if head in lines:
    i = lines.index(head)
    j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
    rest = "\n".join(lines[j:])
    text = "\n".join(lines[:i]) + "\n" + section + ("\n" + rest if rest.strip() else "")
else:
    text = "\n".join(lines).rstrip("\n") + "\n\n" + section
open(path, "w").write(text.rstrip("\n") + "\n")
PY
  rm -rf docs/benchmarks/raw/any-client
  mkdir -p docs/benchmarks/raw
  cp -r "$results/any-client" docs/benchmarks/raw/any-client
  echo ">> docs/benchmarks/results.md: section \"Issue 31: any client\"; raw/any-client/"
  exit 0
fi

# --- Redis: one instance per fsync policy.
start_redis() { # name port fsync
  mkdir -p "$work/$1"
  redis-server --port "$2" --bind 127.0.0.1 --dir "$work/$1" --appendonly yes \
    --appendfsync "$3" --save "" --daemonize no >"$work/$1.log" 2>&1 &
  echo $! >"$work/$1.pid"
  pids+=("$!")
  for _ in $(seq 1 100); do redis-cli -p "$2" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis $1 did not start (see $work/$1.log)" >&2; exit 1
}
start_redis redis-everysec 6390 everysec
start_redis redis-always 6391 always

# --- etcd: a 3-member cluster (a Raft KV, like seqsvr's store).
etcd_peers="e1=http://127.0.0.1:2481,e2=http://127.0.0.1:2482,e3=http://127.0.0.1:2483"
start_etcd() { # n
  etcd --name "e$1" --data-dir "$work/etcd-$1" \
    --listen-client-urls "http://127.0.0.1:247$1" --advertise-client-urls "http://127.0.0.1:247$1" \
    --listen-peer-urls "http://127.0.0.1:248$1" --initial-advertise-peer-urls "http://127.0.0.1:248$1" \
    --initial-cluster "$etcd_peers" --initial-cluster-state new --initial-cluster-token seqbench \
    >"$work/etcd-$1.log" 2>&1 &
  echo $! >"$work/etcd-$1.pid"
  pids+=("$!")
}
for n in 1 2 3; do start_etcd $n; done
etcd_url="127.0.0.1:2471,127.0.0.1:2472,127.0.0.1:2473"
wait_etcd() { # until its first member reports healthy (it has a leader), at most 20 s
  for _ in $(seq 1 100); do
    curl -fs http://127.0.0.1:2471/health 2>/dev/null | grep -q true && return 0
    sleep 0.2
  done
  echo "etcd did not become healthy (see $work/etcd-*.log)" >&2; exit 1
}
wait_etcd
etcd_pids() { cat "$work"/etcd-[123].pid | paste -sd, -; }

# --- PostgreSQL: refuses to run as root, so as its own user.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_postgres() { if [ "$(id -u)" -eq 0 ]; then su postgres -s /bin/sh -c "$(printf '%q ' "$@")"; else "$@"; fi; }
mkdir -p "$work/pg" && chown postgres "$work/pg" 2>/dev/null || true
as_postgres "$pg_bin/initdb" -D "$work/pg" --auth=trust -U postgres >/dev/null
start_pg() {
  as_postgres "$pg_bin/pg_ctl" -D "$work/pg" -l "$work/pg/server.log" -w \
    -o "-p 5440 -k /tmp -c listen_addresses=127.0.0.1 -c synchronous_commit=on -c max_connections=300" start >/dev/null
}
start_pg
pg_url="host=127.0.0.1 port=5440 user=postgres dbname=postgres"
# The pool size `seqbench run --target postgres` defaults to (the best measured on 2 cores).
pg_pool=64
pg_postmaster() { head -n 1 "$work/pg/postmaster.pid"; }
"$bench" pg-setup --url "$pg_url" --uids "$uids"

restart_cluster  # the binaries just built, the config's step
start_floor

for dist in $dists; do
  out="$results/$dist"
  mkdir -p "$out"
  common=(--concurrency "$concurrency" --seconds "$seconds" --uids "$uids" --dist "$dist")
  seq_args=(--config "$cfg" --server-pids "$(cluster_pids)" "${common[@]}")
  floor_args=(--url "$floor_addr" --config "$cfg" --server-pids "$floor_pid" "${common[@]}")
  for r in $(seq 1 "$runs"); do
    echo ">> $dist: round $r of $runs"
    "$bench" run --target floor --label "floor, one RPC per call" "${floor_args[@]}" --out "$out/floor-$r.json"
    "$bench" run --target floor-coalesced --label "floor, coalesced" "${floor_args[@]}" \
      --out "$out/floor-coalesced-$r.json"
    "$bench" run --target floor-batch --label "floor batch 1000" --batch 1000 "${floor_args[@]}" \
      --out "$out/floor-batch-$r.json"
    "$bench" run --target seqsvr --label seqsvr "${seq_args[@]}" --out "$out/seqsvr-$r.json"
    "$bench" run --target seqsvr --label "seqsvr, RPC per batch" --no-stream "${seq_args[@]}" \
      --out "$out/seqsvr-rpc-per-batch-$r.json"
    "$bench" run --target seqsvr --label "seqsvr, no coalescing" --no-coalesce "${seq_args[@]}" \
      --out "$out/seqsvr-single-$r.json"
    "$bench" run --target seqsvr-batch --label "seqsvr batch 1000" --batch 1000 "${seq_args[@]}" \
      --out "$out/seqsvr-batch-$r.json"
    "$bench" run --target redis --label "redis everysec, shared conn" --redis-conn shared \
      --url redis://127.0.0.1:6390/ --server-pids "$(cat "$work/redis-everysec.pid")" "${common[@]}" \
      --out "$out/redis-everysec-$r.json"
    "$bench" run --target redis --label "redis always, shared conn" --redis-conn shared \
      --url redis://127.0.0.1:6391/ --server-pids "$(cat "$work/redis-always.pid")" "${common[@]}" \
      --out "$out/redis-always-$r.json"
    "$bench" run --target redis --label "redis everysec, conn per caller" --redis-conn per-caller \
      --url redis://127.0.0.1:6390/ --server-pids "$(cat "$work/redis-everysec.pid")" "${common[@]}" \
      --out "$out/redis-everysec-per-caller-$r.json"
    "$bench" run --target postgres --label "postgres, pool of $pg_pool" --pg-pool "$pg_pool" \
      --url "$pg_url" --server-trees "$(pg_postmaster)" "${common[@]}" --out "$out/postgres-$r.json"
    "$bench" run --target etcd --url "$etcd_url" --server-pids "$(etcd_pids)" "${common[@]}" \
      --out "$out/etcd-$r.json"
  done
done

any_client_benchmark

# --- p99.9 at half of peak (paced; latency counted from when each call was due).
first=${dists%% *}
peak_of() { python3 -c "print(round($(median_of calls_per_s "$@")))"; }
peak_seqsvr=$(peak_of "$results/$first"/seqsvr-[0-9]*.json)
peak_floor_coalesced=$(peak_of "$results/$first"/floor-coalesced-[0-9]*.json)
half_seqsvr=$((peak_seqsvr / 2))
half_redis=$(( $(peak_of "$results/$first"/redis-everysec-[0-9]*.json) / 2 ))
half_floor=$(( $(peak_of "$results/$first"/floor-[0-9]*.json) / 2 ))
mkdir -p "$results/half"
common=(--concurrency "$concurrency" --seconds "$seconds" --uids "$uids" --dist "$first")
for r in $(seq 1 "$runs"); do
  echo ">> half of peak: round $r of $runs"
  "$bench" run --target seqsvr --label "seqsvr at $half_seqsvr/s" --config "$cfg" --rate "$half_seqsvr" \
    --server-pids "$(cluster_pids)" "${common[@]}" --out "$results/half/seqsvr-$r.json"
  "$bench" run --target redis --label "redis everysec, shared conn, at $half_redis/s" \
    --url redis://127.0.0.1:6390/ --server-pids "$(cat "$work/redis-everysec.pid")" \
    --rate "$half_redis" "${common[@]}" --out "$results/half/redis-everysec-$r.json"
  # Controls: the bare RPC stack (one RPC per call), and seqsvr one RPC per call, at half of
  # the floor's peak.
  "$bench" run --target floor --label "floor, one RPC per call, at $half_floor/s" --url "$floor_addr" \
    --config "$cfg" --server-pids "$floor_pid" --rate "$half_floor" "${common[@]}" \
    --out "$results/half/floor-$r.json"
  "$bench" run --target seqsvr --label "seqsvr, no coalescing, at $half_floor/s" --no-coalesce \
    --config "$cfg" --server-pids "$(cluster_pids)" --rate "$half_floor" "${common[@]}" \
    --out "$results/half/seqsvr-single-$r.json"
done

# --- Paced p99.9 measured fairly: the client on CPU 0, the cluster and the floor server on
# CPU 1 (children inherit the affinity), seqsvr and the floor behind the same coalescing SDK
# at the SAME rate: half of the lower of their two unpinned peaks (first distribution).
pinned_rate=$(( (peak_seqsvr < peak_floor_coalesced ? peak_seqsvr : peak_floor_coalesced) / 2 ))
cores=$(nproc)
mkdir -p "$results/pinned"
if [ "$cores" -ge 2 ]; then
  cluster_pinned=1
  restart_cluster taskset -c 1
  start_floor taskset -c 1
  for r in $(seq 1 "$runs"); do
    echo ">> pinned, both at $pinned_rate/s: round $r of $runs"
    taskset -c 0 "$bench" run --target seqsvr --label "seqsvr, pinned, at $pinned_rate/s" --config "$cfg" \
      --rate "$pinned_rate" --server-pids "$(cluster_pids)" "${common[@]}" --out "$results/pinned/seqsvr-$r.json"
    taskset -c 0 "$bench" run --target floor-coalesced --label "floor, coalesced, pinned, at $pinned_rate/s" \
      --url "$floor_addr" --config "$cfg" --rate "$pinned_rate" --server-pids "$floor_pid" "${common[@]}" \
      --out "$results/pinned/floor-coalesced-$r.json"
  done
  restart_cluster
  cluster_pinned=0
  start_floor
else
  echo "!! $cores CPU: no pinned runs (they need 2)" >&2
fi

# --- Step boundaries: the same paced Zipf load (hot uids cross step boundaries often) with
# step 100 and step 100,000; the cluster restarts with each.
mkdir -p "$results/step"
common=(--concurrency "$concurrency" --seconds "$seconds" --uids "$uids" --dist zipf --rate "$half_seqsvr")
for r in $(seq 1 "$runs"); do
  for step in 100 100000; do
    echo ">> step $step: round $r of $runs"
    restart_cluster env SEQSVR_STEP=$step
    "$bench" run --target seqsvr --label "seqsvr step $step" --config "$cfg" --server-pids "$(cluster_pids)" \
      "${common[@]}" --out "$results/step/step-$step-$r.json"
  done
done
restart_cluster

# --- AllocSvr memory: RSS growth of set 0's AllocSvrs while 10 M fresh uids get a value each.
alloc_pids=$(cat "$dev"/pids/alloc-0-*.pid | paste -sd, -)
echo ">> touching $touch_uids uids"
"$bench" touch --target seqsvr-batch --config "$cfg" --batch 1000 --concurrency 8 \
  --uids "$touch_uids" --from 100000000 --pids "$alloc_pids" | tee "$results/touch.json"
memory=$(cat "$results/touch.json")

# --- Crash check: kill -9 each peer right after its last run, restart, count regressions.
crash_file="$results/crash.jsonl"
: >"$crash_file"
echo ">> crash check"
for name in redis-everysec redis-always; do
  port=$([ $name = redis-everysec ] && echo 6390 || echo 6391)
  fsync=$([ $name = redis-everysec ] && echo everysec || echo always)
  "$bench" run --target redis --label "$name" --url "redis://127.0.0.1:$port/" --concurrency "$concurrency" \
    --seconds 3 --uids 1000 --last-values "$work/last-$name.json" >/dev/null
  kill -9 "$(cat "$work/$name.pid")"
  sleep 0.5
  start_redis "$name" "$port" "$fsync"
  "$bench" crash-check --target redis --label "$name" --url "redis://127.0.0.1:$port/" \
    --last-values "$work/last-$name.json" >>"$crash_file"
done
"$bench" run --target postgres --url "$pg_url" --concurrency "$concurrency" --seconds 3 --uids 1000 \
  --last-values "$work/last-postgres.json" >/dev/null
# Like a machine crash: the postmaster and every backend at once.
pm=$(pg_postmaster)
kill -9 "$pm" $(pgrep -P "$pm") 2>/dev/null || true
for _ in $(seq 1 50); do kill -0 "$pm" 2>/dev/null || break; sleep 0.1; done
sleep 1
start_pg
"$bench" crash-check --target postgres --url "$pg_url" --last-values "$work/last-postgres.json" >>"$crash_file"
"$bench" run --target etcd --url "$etcd_url" --concurrency "$concurrency" --seconds 3 --uids 1000 \
  --last-values "$work/last-etcd.json" >/dev/null
for n in 1 2 3; do kill -9 "$(cat "$work/etcd-$n.pid")"; done
sleep 0.5
for n in 1 2 3; do start_etcd $n; done  # existing data dirs: the initial-cluster flags are ignored
wait_etcd
"$bench" crash-check --target etcd --url "$etcd_url" --last-values "$work/last-etcd.json" >>"$crash_file"
"$bench" run --target seqsvr --config "$cfg" --concurrency "$concurrency" --seconds 3 --uids 1000 \
  --last-values "$work/last-seqsvr.json" >/dev/null
for f in "$dev"/pids/*.pid; do kill -9 "$(cat "$f")" 2>/dev/null || true; done
scripts/dev-cluster.sh up >/dev/null
"$bench" crash-check --target seqsvr --config "$cfg" --last-values "$work/last-seqsvr.json" >>"$crash_file"
cat "$crash_file"

mkdir -p docs/benchmarks
rm -rf docs/benchmarks/raw docs/benchmarks/latency*.png
redis_best="redis everysec, shared conn"
dist_flags=()
for dist in $dists; do dist_flags+=(--dist "$dist=$results/$dist"); done
{
  echo "# Benchmarks"
  echo
  echo "Produced by \`scripts/bench.sh --runs $runs --seconds $seconds --concurrency $concurrency --dists \"$dists\"\`"
  echo "on $(nproc) cores, $(date -u +%Y-%m-%d). $concurrency concurrent callers, $uids uids; one uid per call"
  echo "unless the label says batch. Medians over $runs alternating runs. Shared, noisy machine: compare"
  echo "the ratios, not the numbers. Every peer is driven at its best, and every ratio to a peer is to"
  echo "the peer at its best: **$redis_best** (AOF everysec, one redis-rs MultiplexedConnection"
  echo "shared by all $concurrency callers, which pipelines their commands). \"seqsvr\" is the client SDK as"
  echo "shipped (it coalesces concurrent calls to one AllocSvr into batches, sent as messages on one"
  echo "\`NextStream\` stream); \"RPC per batch\" sends each batch as a \`NextBatch\` RPC (the SDK before"
  echo "streams); \"no coalescing\" sends one RPC per call. The floor server is seqsvr's SeqService over"
  echo "the same mutual TLS, limits and role check as an AllocSvr, bumping in-memory counters: \"floor,"
  echo "coalesced\" and \"floor batch 1000\" drive it through the same SDK as seqsvr (streams included),"
  echo "\"floor, one RPC per call\" with a bare SeqServiceClient."
  echo "CPU µs/call: user + system time from /proc of the client process and of the target's server"
  echo "processes (the cluster's 10; the floor server; the Redis; etcd's 3; PostgreSQL's postmaster and"
  echo "all its backends) over the run, divided by the calls served (a batch call is 1,000 values)."
  echo "docs/benchmarks/README.md says what each target is, and (\"Latest run\") why a missed target is"
  echo "missed; docs/benchmarks/profile.md shows where a call's CPU goes (flame graphs)."
  echo
  echo "## Targets (issue 13)"
  echo
  "$bench" targets "${dist_flags[@]}" --pinned "$results/pinned" --step "$results/step" \
    --touch "$results/touch.json" --crash "$crash_file"
  for dist in $dists; do
    echo
    echo "## $dist over $uids uids"
    echo
    "$bench" report "$results/$dist"/*.json --against "$redis_best"
  done
  echo
  any_client_section
  echo
  echo "## p99.9 at half of peak (paced, latency from when each call was due)"
  echo
  echo "Each at half of its own unpinned peak ($first): absolute p99.9, everything sharing the $(nproc) cores."
  echo
  "$bench" report --latency "$results/half"/*.json --against "$redis_best, at $half_redis/s"
  echo
  echo "## Paced p99.9, client on CPU 0, servers on CPU 1, at the same rate"
  echo
  if compgen -G "$results/pinned/*.json" >/dev/null; then
    echo "The client pinned to CPU 0 (\`taskset -c 0\`), the cluster and the floor server to CPU 1 (started"
    echo "under \`taskset -c 1\`), both through the coalescing SDK at $pinned_rate calls/s: half of the lower of"
    echo "the two unpinned peaks ($first, medians: seqsvr $peak_seqsvr/s, floor coalesced $peak_floor_coalesced/s), a rate both sustain."
    echo
    "$bench" report --latency "$results/pinned"/*.json --against "floor, coalesced, pinned, at $pinned_rate/s"
  else
    echo "Not run: this machine has $(nproc) CPU."
  fi
  echo
  echo "## Step boundaries: Zipf at $half_seqsvr calls/s, step 100 vs step 100,000"
  echo
  "$bench" report --latency "$results/step"/*.json --against "seqsvr step 100000"
  echo
  echo "## AllocSvr memory"
  echo
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%d uids touched: RSS of set 0'"'"'s AllocSvrs %.1f → %.1f MiB, **%.2f bytes per uid**." % (d["uids_touched"], d["rss_before"]/2**20, d["rss_after"]/2**20, d["bytes_per_uid"]))' "$memory"
  echo
  echo "## Crash check (kill -9 the peer right after a load, restart, one next per uid)"
  echo
  echo "| target | uids checked | uids whose next value went backwards |"
  echo "|---|---|---|"
  while read -r line; do
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("| %s | %d | %d |" % (d["label"], d["uids_checked"], d["regressed_uids"]))' "$line"
  done <"$crash_file"
} | tee docs/benchmarks/results.md
if python3 -c 'import matplotlib' 2>/dev/null || pip install -q matplotlib >/dev/null 2>&1; then
  for dist in $dists; do
    python3 scripts/plot_bench.py "$results/$dist" "docs/benchmarks/latency-$dist.png" \
      && echo ">> docs/benchmarks/latency-$dist.png"
  done
fi
cp -r "$results" docs/benchmarks/raw

if [ "$skip_ids" -eq 1 ]; then
  echo ">> --skip-ids: docs/benchmarks/ids.md left as it is"
else
  ids_benchmark
fi
