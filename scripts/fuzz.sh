#!/usr/bin/env bash
# Fuzzes every decoder of outside bytes (fuzz/, docs/reliability/fuzzing.md) with cargo-fuzz
# (libFuzzer, AddressSanitizer, debug assertions and overflow checks on): one target after the
# other, FUZZ_SECONDS (default 120) each, one fuzzing process at a time.
#
#   scripts/fuzz.sh                      # every target, 120 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh     # 10 minutes each
#   scripts/fuzz.sh raft_message id_text # only these
#
# Seeds: fuzz/corpus/<target>/seed-* (real encodings, written by fuzz/examples/seed_corpus.rs and
# kept in git). What libFuzzer finds goes to fuzz/work/corpus/<target> (not in git, reused by the
# next run); a crash leaves its input in fuzz/artifacts/<target>/ and makes the script fail,
# after the remaining targets ran. Reproduce one with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<crash file>
# from fuzz/. Needs the nightly toolchain (libFuzzer's sanitizer flags); without it, stable with
# RUSTC_BOOTSTRAP=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FUZZ_DIR=$ROOT/fuzz
FUZZ_SECONDS=${FUZZ_SECONDS:-120}
# Its own target dir: fuzz builds use other flags than the workspace's release build.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/seqsvr/target-fuzz}

if cargo +nightly --version >/dev/null 2>&1; then
  CARGO=(cargo +nightly)
else
  echo ">> no nightly toolchain: using stable with RUSTC_BOOTSTRAP=1"
  export RUSTC_BOOTSTRAP=1
  CARGO=(cargo)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo ">> installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

cd "$FUZZ_DIR"
echo ">> writing seed corpora"
"${CARGO[@]}" run --quiet --example seed_corpus -- "$FUZZ_DIR"

if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  mapfile -t TARGETS < <("${CARGO[@]}" fuzz list)
fi

mkdir -p work/logs
summary=()
failed=()
for target in "${TARGETS[@]}"; do
  mkdir -p "work/corpus/$target" "corpus/$target"
  log=work/logs/$target.log
  echo ">> fuzzing $target for ${FUZZ_SECONDS}s (log: fuzz/$log)"
  status=0
  # One in-process libFuzzer loop (no -fork/-jobs): one core. -timeout: an input taking over
  # 10 s counts as a hang (a crash).
  "${CARGO[@]}" fuzz run "$target" "work/corpus/$target" "corpus/$target" -- \
    -max_total_time="$FUZZ_SECONDS" -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
  # (A crashed run prints no final stats: `|| true` keeps set -e from ending the script.)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | awk '{print $5}' | tail -1 || true)
  # libFuzzer's last status line: coverage and the in-memory corpus (entries/size).
  final=$(grep -P '\tDONE ' "$log" | tail -1 | grep -o 'cov: [0-9]* ft: [0-9]* corp: [^ ]*' || true)
  corpus=$(find "work/corpus/$target" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    failed+=("$target")
    echo "!! $target failed (exit $status); the end of its log:"
    tail -n 40 "$log"
  fi
  summary+=("$(printf '%-20s %11s runs %5ss  %-34s %6s files  exit %s' \
    "$target" "${runs:-?}" "${secs:-?}" "${final:-?}" "$corpus" "$status")")
done

echo
echo ">> summary (FUZZ_SECONDS=$FUZZ_SECONDS)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "!! crashes or errors in: ${failed[*]} (inputs in fuzz/artifacts/)"
  exit 1
fi
echo ">> no crash"
