#!/usr/bin/env bash
# What mutual TLS costs: the local cluster (scripts/dev-cluster.sh) run with TLS and with
# --insecure, alternating, --runs rounds each, the same seqbench workloads against both:
#   scripts/bench-tls.sh [--runs 3] [--seconds 10] [--concurrency 64]
# Per mode and workload: the median calls/s, p99 and CPU time per call (seqbench itself, and
# every StoreSvr and AllocSvr process, from /proc), and the ratio TLS ÷ plaintext. Writes
# docs/benchmarks/tls.md and the raw JSON under its work dir. The cluster is left down.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"
runs=3 seconds=10 concurrency=64
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--seconds S] [--concurrency C]" >&2; exit 2 ;;
  esac
done
build_release_bins
bench=$SEQSVR_BIN/seqbench
work=$(mktemp -d -t seqsvr-bench-tls-XXXXXX)
doc=docs/benchmarks/tls.md
stop_all() {
  scripts/dev-cluster.sh down >/dev/null 2>&1 || true
  SEQSVR_DEV_INSECURE=1 scripts/dev-cluster.sh down >/dev/null 2>&1 || true
}
trap stop_all EXIT
stop_all

up() { # tls | insecure
  stop_all
  if [ "$1" = insecure ]; then
    SEQSVR_DEV_INSECURE=1 scripts/dev-cluster.sh up >/dev/null
  else
    scripts/dev-cluster.sh up >/dev/null
  fi
}

workloads=("seqsvr" "seqsvr-single")
for r in $(seq 1 "$runs"); do
  for mode in tls insecure; do
    echo ">> round $r of $runs: $mode"
    up "$mode"
    pids=$(cat data/local/pids/*.pid | paste -sd, -)
    if [ "$mode" = tls ]; then
      cfg=data/local/cluster.toml
      ident=(--tls-cert data/local/certs/client.pem --tls-key data/local/certs/client.key)
    else
      cfg=data/local/cluster-insecure.toml
      ident=()
    fi
    common=(--config "$cfg" "${ident[@]}" --concurrency "$concurrency" --seconds "$seconds"
      --uids 100000 --server-pids "$pids")
    "$bench" run --target seqsvr --label "seqsvr $mode" "${common[@]}" \
      --out "$work/seqsvr-$mode-$r.json"
    "$bench" run --target seqsvr --label "seqsvr $mode, no coalescing" --no-coalesce "${common[@]}" \
      --out "$work/seqsvr-single-$mode-$r.json"
  done
done
stop_all

python3 - "$work" "$runs" "$seconds" "$concurrency" "${workloads[@]}" >"$doc" <<'PY'
import json, statistics, sys, glob, datetime
work, runs, seconds, conc, *workloads = sys.argv[1:]
def med(name, mode, field):
    files = sorted(glob.glob(f"{work}/{name}-{mode}-*.json"))
    return statistics.median(json.load(open(f))[field] for f in files)
print("# What mutual TLS costs\n")
print(f"`scripts/bench-tls.sh --runs {runs} --seconds {seconds} --concurrency {conc}`, "
      f"{datetime.date.today()}, on this project's 2-core machine: the local cluster "
      "(2 sets × 3 StoreSvrs + 2 AllocSvrs, `scripts/dev-cluster.sh`) with mutual TLS on every "
      "plane and with `--insecure`, alternating, the same seqbench load (uniform over 100,000 "
      "uids; the SDK with and without coalescing). Medians of the rounds; CPU is user + system "
      "time from /proc per call served: the client (seqbench) and all ten server processes.\n")
print("| workload | mode | calls/s | p99 µs | client CPU µs/call | servers CPU µs/call |")
print("|---|---|---:|---:|---:|---:|")
labels = {"seqsvr": "SDK, coalescing", "seqsvr-single": "SDK, one RPC per call"}
for w in workloads:
    for mode in ("tls", "insecure"):
        print(f"| {labels[w]} | {mode} | {med(w, mode, 'calls_per_s'):.0f} | "
              f"{med(w, mode, 'p99_us'):.0f} | {med(w, mode, 'client_cpu_us_per_call'):.2f} | "
              f"{med(w, mode, 'server_cpu_us_per_call'):.2f} |")
print("\n| workload | throughput TLS ÷ plaintext | CPU per call TLS ÷ plaintext (all processes) |")
print("|---|---:|---:|")
for w in workloads:
    thr = med(w, "tls", "calls_per_s") / med(w, "insecure", "calls_per_s")
    cpu = lambda m: med(w, m, "client_cpu_us_per_call") + med(w, m, "server_cpu_us_per_call")
    print(f"| {labels[w]} | {thr:.2f}× | {cpu('tls') / cpu('insecure'):.2f}× |")
print("\nConnections are long-lived (one handshake per channel), so the cost is the record "
      "layer's encryption and the extra copies, per RPC; coalescing amortises it over many "
      "calls per RPC. Raw results: the JSON files in the run's work dir (printed by the script).")
PY
echo ">> wrote $doc (raw results in $work)"
cat "$doc"
