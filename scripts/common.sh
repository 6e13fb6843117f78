# Shared by the scripts: installs what the build needs when missing, and picks the one build
# profile and target dir every script uses. Source it; do not run it.

SEQSVR_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# One profile (release) for tests, the local cluster and benchmarks: RocksDB's C++ build takes
# ~25 minutes per profile on 2 cores. The target dir lives outside the clone so a CI cache (or a
# second clone) reuses it; override with CARGO_TARGET_DIR.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/seqsvr/target}
SEQSVR_BIN=$CARGO_TARGET_DIR/release

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# RocksDB's bindgen needs libclang; its C++ sources need a C++ compiler.
ensure_build_deps() {
  local missing=()
  if ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; then
    missing+=(libclang-dev)
  fi
  command -v c++ >/dev/null 2>&1 || missing+=(g++)
  command -v make >/dev/null 2>&1 || missing+=(make)
  # The nemesis jumps AllocSvrs' wall clocks with libfaketime.
  [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || missing+=(faketime)
  if [ ${#missing[@]} -gt 0 ]; then
    echo ">> installing build dependencies: ${missing[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
  fi
}

# cargo-deny (scripts/deny.sh), pinned: deny.toml is written for this version's keys. A cargo-deny
# of this version on PATH is used as it is; otherwise it is built (~7 min on 2 cores) into
# $SEQSVR_TOOLS/bin, never over a cargo-deny of another version the developer installed, and not
# in the workspace's target dir. Sets CARGO_DENY to the binary to run.
SEQSVR_CARGO_DENY_VERSION=0.20.2
SEQSVR_TOOLS=${SEQSVR_TOOLS:-$HOME/.cache/seqsvr/tools}
ensure_cargo_deny() {
  local want="cargo-deny $SEQSVR_CARGO_DENY_VERSION"
  CARGO_DENY=$(command -v cargo-deny || true)
  if [ -n "$CARGO_DENY" ] && [ "$("$CARGO_DENY" --version 2>/dev/null)" = "$want" ]; then
    return
  fi
  CARGO_DENY=$SEQSVR_TOOLS/bin/cargo-deny
  if [ "$("$CARGO_DENY" --version 2>/dev/null)" != "$want" ]; then
    echo ">> installing $want into $SEQSVR_TOOLS"
    # Without CARGO_TARGET_DIR (exported above), cargo install builds in a temporary dir.
    env -u CARGO_TARGET_DIR cargo install cargo-deny --version "$SEQSVR_CARGO_DENY_VERSION" --locked \
      --root "$SEQSVR_TOOLS"
  fi
}

build_release_bins() {
  echo ">> cargo build --release --bins (target dir: $CARGO_TARGET_DIR; a cold build takes ~25 min)"
  (cd "$SEQSVR_ROOT" && cargo build --release --workspace --bins)
}

# Builds the one deliberately unsafe "teeth" build of the servers (every switch compiled in,
# `--features seqsvr-core/teeth`; the one that is on is chosen at start-up by SEQSVR_TEETH, see
# crates/seqsvr-core/src/teeth.rs) into $CARGO_TARGET_DIR/teeth/, then restores the normal
# binaries. Only our own crates recompile; RocksDB is shared.
build_teeth_bins() {
  echo ">> building the teeth build (every switch; one chosen by SEQSVR_TEETH)"
  (cd "$SEQSVR_ROOT" && cargo build --release -p seqsvr-storesvr -p seqsvr-allocsvr \
    --features seqsvr-core/teeth)
  mkdir -p "$CARGO_TARGET_DIR/teeth"
  cp "$SEQSVR_BIN/storesvr" "$SEQSVR_BIN/allocsvr" "$CARGO_TARGET_DIR/teeth/"
  (cd "$SEQSVR_ROOT" && cargo build --release --workspace --bins)
  # Runs against the teeth dir make the test PKI with its seqctl when the normal run's has aged
  # out or was never made; seqctl has no teeth, so the normal one serves.
  cp "$SEQSVR_BIN/seqctl" "$CARGO_TARGET_DIR/teeth/"
}

# check_no_teeth_names BINARY...: fails if a binary holds a teeth switch's name or the
# variables that choose one: release builds must have no switch to turn.
check_no_teeth_names() {
  local names bin found=0
  names=$(sed -n 's/^ *(Tooth::[A-Za-z]*, "\([a-z-]*\)"),$/\1/p' \
    "$SEQSVR_ROOT/crates/seqsvr-core/src/teeth.rs")
  if [ "$(echo "$names" | wc -l)" -lt 10 ]; then
    echo "error: could not read the teeth names from crates/seqsvr-core/src/teeth.rs" >&2
    return 1
  fi
  for bin in "$@"; do
    for name in $names SEQSVR_TEETH; do
      if grep -qaF -- "$name" "$bin"; then
        echo "error: $bin contains the teeth name '$name'" >&2
        found=1
      fi
    done
  done
  [ $found -eq 0 ] && echo "   no teeth names in: $*"
}
