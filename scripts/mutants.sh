#!/usr/bin/env bash
# A short mutation run a CI can afford (issue 15; sized to CI's 30-minute budget in issue 29):
# cargo-mutants on the I1/I3 decisions of seqsvr-core — the AllocSvr's lease arithmetic
# (lease.rs: lease_end_ms, extended, valid, LeaseConfig::hold_ms), the arbiter's grant and
# lease-over decisions (may_grant, lease_over), the store's fencing (StoreState::fence) and who
# may act for a registration (ControlState::check_holder), and StoreState::advance (max_seq only
# rises) — against the crate's unit and property tests (about 35 mutants). The wider set that CI
# ran before (also over_at, is_settled_in, validate_advance, the id and session records: 64 mutants)
# is `SEQSVR_MUTANTS_WIDE=1 scripts/mutants.sh`; docs/reliability/mutants.md has the full runs.
#
# Fails (exit 1) if a mutant survives ("missed") that is not listed, with a reason, in
# docs/reliability/mutants-allowed.txt. Timeouts count as caught (the tests did not pass) but
# are reported. See docs/reliability/mutants.md for the full runs and what this one covers.
#
# Works on a private copy of the tree ($SEQSVR_MUTANTS_DIR/src), so a run never leaves a
# mutated file in the checkout and others' edits do not disturb it, with its own target dir
# ($SEQSVR_MUTANTS_DIR/target): it never shares (or locks) the main build's target dir.
# Env: SEQSVR_MUTANTS_DIR (default ~/.cache/seqsvr/mutants), SEQSVR_MUTANTS_TIMEOUT (s per
# mutant's tests, default 60), SEQSVR_MUTANTS_RE (override the selection regex), SEQSVR_MUTANTS_WIDE=1 (the wider set).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ALLOW=$ROOT/docs/reliability/mutants-allowed.txt
WORK=${SEQSVR_MUTANTS_DIR:-$HOME/.cache/seqsvr/mutants}
# The files and functions mutated.
FILES=(crates/seqsvr-core/src/lease.rs crates/seqsvr-core/src/arbiter.rs
  crates/seqsvr-core/src/store.rs)
WIDE_RE='lease\.rs|Arbiter::may_grant|Arbiter::over_at|Arbiter::lease_over|Arbiter::is_settled_in|StoreState::advance|StoreState::fence|StoreState::reserve_session_time|StoreState::record_schemes|StoreState::apply_acquire_worker|validate_advance|ControlState::check_holder'
SHORT_RE='lease_end_ms|extended|lease\.rs:.*valid|LeaseConfig::hold_ms|Arbiter::may_grant|Arbiter::lease_over|StoreState::fence|StoreState::advance|ControlState::check_holder'
if [ "${SEQSVR_MUTANTS_WIDE:-0}" = 1 ]; then RE=$WIDE_RE; else RE=$SHORT_RE; fi
RE=${SEQSVR_MUTANTS_RE:-$RE}

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found: install Rust (https://rustup.rs) first" >&2
  exit 1
fi
if ! cargo mutants --version >/dev/null 2>&1; then
  echo ">> installing cargo-mutants"
  # Not in a CARGO_TARGET_DIR the caller may have exported (scripts/common.sh does).
  env -u CARGO_TARGET_DIR cargo install cargo-mutants --locked
fi
echo ">> $(cargo mutants --version)"

# A fresh private copy of the tree (without target/, data/ and .git).
mkdir -p "$WORK"
rm -rf "$WORK/src" "$WORK/out"
mkdir -p "$WORK/src"
# `-m`: the copies get the current time, not the checkout's mtimes: cargo decides freshness by
# mtime, and a file older than the last build in $WORK/target would be taken as built already.
(cd "$ROOT" && tar --exclude=./target --exclude=./data --exclude=./.git -cf - .) |
  (cd "$WORK/src" && tar -xmf -)

args=()
for f in "${FILES[@]}"; do args+=(-f "$f"); done
echo ">> cargo mutants -p seqsvr-core ${args[*]} --re '$RE' (target dir $WORK/target)"
started=$(date +%s)
set +e
(cd "$WORK/src" && CARGO_TARGET_DIR="$WORK/target" cargo mutants --in-place -p seqsvr-core \
  "${args[@]}" --re "$RE" --timeout "${SEQSVR_MUTANTS_TIMEOUT:-60}" \
  --cargo-arg=--release --cargo-test-arg=--lib -o "$WORK/out")
rc=$?
set -e
echo ">> cargo mutants exited $rc after $(($(date +%s) - started)) s"
# 0: all caught; 2: some missed; 3: some timed out (and none missed). Anything else (the
# unmutated baseline failed, a usage error, an interrupted run) is a failure of this script.
case $rc in
  0 | 2 | 3) ;;
  *)
    echo "error: cargo-mutants failed (exit $rc); see $WORK/out/mutants.out" >&2
    exit 1
    ;;
esac

results=$WORK/out/mutants.out
for kind in caught missed timeout unviable; do
  printf '   %-9s %s\n' "$kind" "$(grep -c . "$results/$kind.txt" || true)"
done
if [ -s "$results/timeout.txt" ]; then
  echo ">> timed out (counted as caught: the tests did not pass):"
  sed 's/^/   /' "$results/timeout.txt"
fi

# A missed mutant is allowed only if the allow-list names it (file and mutation, without the
# line:column, which moves with every edit) followed by ' # ' and a reason.
key() { sed -E 's/^([^:]+):[0-9]+:[0-9]+: /\1: /'; }
allowed=$(grep -v '^[[:space:]]*#' "$ALLOW" | grep ' # .*[^[:space:]]' | sed 's/ # .*//' |
  sed 's/[[:space:]]*$//' || true)
unexplained=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  k=$(printf '%s\n' "$line" | key)
  if printf '%s\n' "$allowed" | grep -qxF "$k"; then
    echo "   allowed:     $line"
  else
    echo "   NOT ALLOWED: $line" >&2
    unexplained=$((unexplained + 1))
  fi
done <"$results/missed.txt"

if [ "$unexplained" -gt 0 ]; then
  echo "error: $unexplained mutant(s) survived the unit tests: kill each with a test, or add it" \
    "to $ALLOW with the reason it is harmless (see docs/reliability/mutants.md)" >&2
  exit 1
fi
echo ">> mutation run passed: every mutant caught, unviable or allowed"
