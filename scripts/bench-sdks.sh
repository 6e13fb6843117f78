#!/usr/bin/env bash
# Issue 32's SDK benchmark: each SDK (Rust, Go, Java, Python asyncio) against one cluster, and
# Redis INCR over one shared pipelined connection driven from the same language, 64 callers,
# in rotated rounds (seqbench sdks; crates/seqbench/src/sdks.rs says what is measured).
#   scripts/bench-sdks.sh                       3 rounds of 10 s, writes docs/benchmarks/sdks.md
#   scripts/bench-sdks.sh --runs 1 --seconds 5  a quick look (still writes the report)
#   scripts/bench-sdks.sh --langs rust,go       only these languages
# The cluster is scripts/dev-cluster.sh's in a directory of its own
# ($CARGO_TARGET_DIR/bench-sdks, wiped at the start) with its ports moved by 2000
# (SEQSVR_BENCH_SDKS_PORT_OFFSET), so a dev cluster or the conformance suite may run beside it;
# the Redis (AOF everysec, as in results.md) listens on 6393. Both are stopped by PID at the end,
# also on failure. Raw runs: $CARGO_TARGET_DIR/bench-sdks/out/.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"

RUNS=3 SECONDS_PER_RUN=10 LANGS=rust,go,java,python CONCURRENCY=64
REPORT=$SEQSVR_ROOT/docs/benchmarks/sdks.md
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --langs) LANGS=$2; shift 2 ;;
    --report) REPORT=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--seconds S] [--langs rust,go,java,python] [--report FILE]" >&2; exit 2 ;;
  esac
done

BASE=$CARGO_TARGET_DIR/bench-sdks
export SEQSVR_DEV_DIR=$BASE/dev
export SEQSVR_DEV_PORT_OFFSET=${SEQSVR_BENCH_SDKS_PORT_OFFSET:-2000}
REDIS_PORT=6393
CLUSTER=$SEQSVR_DEV_DIR/cluster.toml
CERT=$SEQSVR_DEV_DIR/certs/client.pem KEY=$SEQSVR_DEV_DIR/certs/client.key

ensure_build_deps
command -v redis-server >/dev/null || {
  as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server >/dev/null
}
build_release_bins
IFS=, read -r -a langs <<<"$LANGS"
for lang in "${langs[@]}"; do
  case $lang in
    rust) ;;
    go | java | python)
      echo ">> $lang SDK and its bench driver (sdk/$lang/build.sh, log $BASE/$lang-build.log)"
      mkdir -p "$BASE"
      # Unit tests only: with SEQSVR_DEV_DIR set the Go SDK's live tests would look for a
      # cluster that is not up yet (conformance.sh runs them).
      env -u SEQSVR_DEV_DIR -u SEQSVR_DEV_PORT_OFFSET "$SEQSVR_ROOT/sdk/$lang/build.sh" \
        >"$BASE/$lang-build.log" 2>&1 ||
        { tail -n 30 "$BASE/$lang-build.log" >&2; exit 1; }
      if [ "$lang" = python ]; then # the Redis peer's client, into the SDK's venv
        "${SEQSVR_PY_VENV:-$HOME/.cache/seqsvr/python/venv}/bin/pip" install -q "redis==8.2.0"
      fi ;;
    *) echo "error: unknown language $lang (rust, go, java, python)" >&2; exit 2 ;;
  esac
done

cleanup() {
  "$SEQSVR_ROOT/scripts/dev-cluster.sh" down >/dev/null 2>&1 || true
  [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null || true
}
trap cleanup EXIT
rm -rf "$BASE/dev" "$BASE/out" "$BASE/redis"
mkdir -p "$BASE/redis"
"$SEQSVR_ROOT/scripts/dev-cluster.sh" up >"$BASE/up.log" 2>&1 || { cat "$BASE/up.log" >&2; exit 1; }
redis-server --port $REDIS_PORT --bind 127.0.0.1 --dir "$BASE/redis" --appendonly yes \
  --appendfsync everysec --save '' >"$BASE/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 100); do redis-cli -p $REDIS_PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p $REDIS_PORT ping >/dev/null || { echo "error: redis did not start ($BASE/redis.log)" >&2; exit 1; }
server_pids=$(cat "$SEQSVR_DEV_DIR"/pids/*.pid | paste -sd, -)

# Every driver: 64 callers, uniform over uids [0, 100000) (set 0's first AllocSvr's sections,
# as results.md's main table), the cluster file and the application certificate.
common="--concurrency $CONCURRENCY --seconds $SECONDS_PER_RUN --uids 100000 --dist uniform"
sdk_args="--config $CLUSTER --cert $CERT --key $KEY $common"
redis_url=redis://127.0.0.1:$REDIS_PORT
cases=()
for lang in "${langs[@]}"; do
  case $lang in
    rust)
      cases+=(--case "rust:seqsvr=$SEQSVR_BIN/seqbench run --target seqsvr --config $CLUSTER --tls-cert $CERT --tls-key $KEY $common --out {out}")
      cases+=(--case "rust:redis=$SEQSVR_BIN/seqbench run --target redis --redis-conn shared --url $redis_url/ $common --out {out}") ;;
    go)
      go_bench=${SEQSVR_GO_WORK:-$HOME/.cache/seqsvr/go}/bin/seqsvr-go-bench
      cases+=(--case "go:seqsvr=$go_bench --target seqsvr $sdk_args")
      cases+=(--case "go:redis=$go_bench --target redis --redis-url $redis_url $common") ;;
    java)
      # 10 s of the same load before the window, uncounted: the JIT compiles the hot path
      # (without it a 10 s window spends half its CPU in the C1/C2 compiler threads).
      cases+=(--case "java:seqsvr=$SEQSVR_ROOT/sdk/java/bench --target seqsvr --warmup 10s $sdk_args")
      cases+=(--case "java:redis=$SEQSVR_ROOT/sdk/java/bench --target redis --warmup 10s --redis-url $redis_url $common") ;;
    python)
      py=${SEQSVR_PY_VENV:-$HOME/.cache/seqsvr/python/venv}/bin/python
      cases+=(--case "python:seqsvr=$py $SEQSVR_ROOT/sdk/python/examples/bench.py --target seqsvr $sdk_args")
      cases+=(--case "python:redis=$py $SEQSVR_ROOT/sdk/python/examples/bench.py --target redis --redis-url $redis_url $common") ;;
  esac
done

# The Redis keys start from nothing in every run, as the cluster's uids do not: INCR's cost
# does not depend on the value.
tmp_report=$BASE/report.md
"$SEQSVR_BIN/seqbench" sdks --runs "$RUNS" --seqsvr-pids "$server_pids" --redis-pids "$redis_pid" \
  --out "$BASE/out" --report "$tmp_report" "${cases[@]}"
{
  echo "# The SDKs side by side (issue 32)"
  echo
  echo "Produced by \`scripts/bench-sdks.sh --runs $RUNS --seconds $SECONDS_PER_RUN --langs $LANGS\` on $(date -u +%F)."
  echo "$CONCURRENCY concurrent callers, each a closed loop of one \`next(uid)\` after another, uids"
  echo "uniform over [0, 100000) (all in sections of set 0's first AllocSvr, as results.md's"
  echo "main table). Servers: the local cluster of \`scripts/dev-cluster.sh\` (3 StoreSvrs and 2"
  echo "AllocSvrs per set, 2 sets, mutual TLS) and one Redis with AOF everysec, all on this machine."
  echo "CPU µs/call: the driver's own CPU over its timed window (getrusage, or the JVM's"
  echo "process CPU time), and the charged servers' (every cluster process, or the Redis) from"
  echo "/proc over the same window (the driver prints its edges), divided by the calls served."
  echo "\"Other cores busy\": the rest of the machine during the window. The Java driver runs"
  echo "the same load for 10 s before its window (JIT warm-up); the others have no warm-up."
  echo "Drivers:"
  echo "\`seqbench run\` (Rust), \`sdk/go/examples/bench\`, \`sdk/java/bench\`,"
  echo "\`sdk/python/examples/bench.py\`; each Redis peer is that language's client with one"
  echo "connection shared by every caller and pipelined (READMEs of the drivers say how)."
  echo "docs/benchmarks/README.md (\"Issue 32\") says what the profiles found; raw runs in"
  echo "raw-sdks/sdks.json."
  echo
  cat "$tmp_report"
} >"$REPORT.new"
mv "$REPORT.new" "$REPORT"
if [ "$REPORT" = "$SEQSVR_ROOT/docs/benchmarks/sdks.md" ]; then
  mkdir -p "$SEQSVR_ROOT/docs/benchmarks/raw-sdks"
  cp "$BASE/out/sdks.json" "$SEQSVR_ROOT/docs/benchmarks/raw-sdks/sdks.json"
fi
echo ">> report: $REPORT (raw runs in $BASE/out)"
