#!/usr/bin/env bash
# Runs the whole test suite: format and lint checks, unit and property tests, and the cluster
# tests that start real processes on 127.0.0.1. Installs build dependencies when missing.
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
