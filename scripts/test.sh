#!/usr/bin/env bash
# Runs the whole test suite: format and lint checks, unit and property tests, the cluster tests
# that start real processes on 127.0.0.1, a short nemesis run (every fault kind), and the
# checker's teeth (unsafe builds the nemesis must catch). Installs build dependencies when
# missing.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"
ensure_build_deps

echo ">> cargo fmt --check"
cargo fmt --all --check
build_release_bins
echo ">> cargo clippy (release profile, shares the build)"
cargo clippy --release --workspace --all-targets -- -D warnings
echo ">> cargo test --release"
cargo test --release --workspace

out=$(mktemp -d -t seqsvr-nemesis-XXXXXX)
echo ">> short nemesis run (every fault kind; history in $out/main)"
"$SEQSVR_BIN/seqcheck" nemesis --seconds 100 --seed "${SEQSVR_NEMESIS_SEED:-1}" --step 1000 --out "$out/main"

# Teeth: deliberately broken builds must be caught.
build_teeth_bins no-lease-wait no-fencing
echo ">> teeth: the nemesis must catch no-lease-wait (exit 1 = violations found)"
set +e
SEQSVR_BIN_DIR="$CARGO_TARGET_DIR/teeth/no-lease-wait" "$SEQSVR_BIN/seqcheck" nemesis \
  --seconds 30 --seed 1 --step 100000 --faults partition-alloc,pause-alloc,kill-alloc \
  --out "$out/teeth-no-lease-wait"
rc=$?
set -e
if [ $rc -ne 1 ]; then
  echo "error: the nemesis did not catch teeth-no-lease-wait (exit $rc, expected 1)" >&2
  exit 1
fi
# With leases intact a stale advance hands out nothing, so missing fencing only shows when an
# AllocSvr misses the end of its lease: the zombie-advance fault plays exactly that.
echo ">> teeth: the nemesis must catch no-fencing"
set +e
SEQSVR_BIN_DIR="$CARGO_TARGET_DIR/teeth/no-fencing" "$SEQSVR_BIN/seqcheck" nemesis \
  --seconds 10 --seed 1 --sets 1 --faults zombie-advance --out "$out/teeth-no-fencing"
rc=$?
set -e
if [ $rc -ne 1 ]; then
  echo "error: the nemesis did not catch teeth-no-fencing (exit $rc, expected 1)" >&2
  exit 1
fi
echo ">> nemesis and teeth checks passed (histories in $out)"
