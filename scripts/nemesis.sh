#!/usr/bin/env bash
# A long nemesis (soak) run against a fresh local cluster on 127.0.0.1:
#   scripts/nemesis.sh --minutes 30 --seed 7 [--out DIR] [--step N] [--clients N] [--faults a,b]
# Prints every fault as it happens and a summary table at the end; writes history.jsonl,
# report.json and summary.md to DIR (default data/nemesis/seed-S). Exit 1 if any violation,
# 2 if the run could not be carried out (the cluster did not recover, or a fault kind could not
# run at all: faults that cannot run at their turn are retried, then skipped and reported).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"
minutes=10 seed=1 step=1000 clients=12 out="" faults=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --step) step=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --faults) faults=(--faults "$2"); shift 2 ;;
    *) echo "usage: $0 [--minutes N] [--seed S] [--step N] [--clients N] [--faults a,b] [--out DIR]" >&2; exit 2 ;;
  esac
done
out=${out:-data/nemesis/seed-$seed}
ensure_build_deps
build_release_bins
exec "$SEQSVR_BIN/seqcheck" nemesis --seconds $((minutes * 60)) --seed "$seed" --step "$step" \
  --clients "$clients" --out "$out" "${faults[@]}"
