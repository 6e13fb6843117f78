#!/usr/bin/env bash
# Runs the whole test suite: format and lint checks, unit and property tests, the cluster tests
# that start real processes on 127.0.0.1, a short nemesis run (every fault kind), and the
# checker's teeth (one unsafe build, `--features seqsvr-core/teeth`, whose switch chosen by
# SEQSVR_TEETH the nemesis, the lost-disk replay or a targeted test must catch), and the
# container chaos test when a Docker engine answers. Installs build dependencies when missing.
# Prints a table of step timings at the end, also when a step fails
# (docs/reliability/README.md keeps the last one).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"

# step NAME CMD...: runs CMD as one timed step of the table printed at exit.
step_names=()
step_secs=()
suite_started=$(date +%s)
step() {
  local name=$1 started rc
  shift
  echo ">> [$name] $*"
  started=$(date +%s)
  set +e
  (
    set -e
    "$@"
  )
  rc=$?
  set -e
  step_names+=("$name")
  step_secs+=($(($(date +%s) - started)))
  if [ $rc -ne 0 ]; then
    step_names[-1]="$name (FAILED, exit $rc)"
    exit $rc
  fi
}
print_timings() {
  local rc=$? i total=$(($(date +%s) - suite_started))
  echo
  echo "step timings (s):"
  for i in "${!step_names[@]}"; do
    printf '  %6d  %s\n' "${step_secs[$i]}" "${step_names[$i]}"
  done
  printf '  %6d  total (exit %d)\n' "$total" "$rc"
}
trap print_timings EXIT

step "build deps" ensure_build_deps
step "cargo fmt --check" cargo fmt --all --check
# Dependency audit (cargo deny: bans, licenses, sources; advisories when a local copy of the
# advisory database is there, else reported as skipped): docs/reliability/dependencies.md.
step "cargo deny" scripts/deny.sh
step "build release bins" build_release_bins
step "clippy" cargo clippy --release --workspace --all-targets -- -D warnings
# The release binaries carry no teeth: no switch, no switch's name, no SEQSVR_TEETH.
step "no teeth in release bins" check_no_teeth_names "$SEQSVR_BIN"/{storesvr,allocsvr,seqctl}
step "cargo test (unit, property, doc)" cargo test --release --workspace \
  --exclude seqsvr-cluster-tests
# The cluster tests: one binary (tests/tests/cluster/), three tests at a time; each has ports
# and data dirs of its own, and most of their time goes to waiting on elections and leases.
step "cluster tests" cargo test --release -p seqsvr-cluster-tests -- --test-threads 3
step "mutation run" scripts/mutants.sh

out=$(mktemp -d -t seqsvr-nemesis-XXXXXX)
echo ">> nemesis histories and teeth logs in $out"
step "nemesis 100 s (every fault kind)" "$SEQSVR_BIN/seqcheck" nemesis --seconds 100 \
  --seed "${SEQSVR_NEMESIS_SEED:-1}" --step 1000 --out "$out/main"
# One AllocSvr under hostile clients while a good client runs (issue 30): its memory bound,
# that it lives, the good client's error rate, every refusal's code (docs/reliability/hostile.md).
step "hostile 24 s (one AllocSvr under hostile clients)" "$SEQSVR_BIN/seqcheck" hostile \
  --seconds 24 --out "$out/hostile"

# The SDKs (issue 32): each SDK's build, unit and live tests (go test, the Java tests, pytest),
# then every conformance case for Rust, Go, Java and Python against a cluster of its own
# (ports +1000), through a kill -9 and a section move (tests/conformance/README.md).
step "SDK conformance (rust, go, java, python)" scripts/conformance.sh

# Teeth: one deliberately broken build (every switch compiled in, scripts/common.sh), run with
# one switch on at a time (SEQSVR_TEETH=name), must be caught. (The normal build passing
# `seqcheck lost-disk` is cluster test t90.)
step "teeth build" build_teeth_bins
step "no teeth in release bins (restored)" check_no_teeth_names "$SEQSVR_BIN"/{storesvr,allocsvr,seqctl}
TEETH_DIR=$CARGO_TARGET_DIR/teeth
# A teeth run must make a seqcheck run report a violation (exit 1); anything else, a pass (0)
# or a run that could not be carried out (2), fails the suite.
expect_caught() { # teeth-name, then the seqcheck command line
  local name=$1 rc
  shift
  echo ">> teeth: seqcheck $1 must catch $name (exit 1 = violation found)"
  set +e
  SEQSVR_TEETH=$name SEQSVR_BIN_DIR="$TEETH_DIR" "$SEQSVR_BIN/seqcheck" "$@"
  rc=$?
  set -e
  if [ $rc -ne 1 ]; then
    echo "error: seqcheck $1 did not catch teeth $name (exit $rc, expected 1)" >&2
    return 1
  fi
}
step "teeth no-lease-wait" expect_caught no-lease-wait nemesis --seconds 30 --seed 1 \
  --step 100000 --faults partition-alloc,pause-alloc,kill-alloc --out "$out/teeth-no-lease-wait"
# With leases intact a stale advance hands out nothing, so missing fencing only shows when an
# AllocSvr misses the end of its lease: the zombie-advance fault plays exactly that.
step "teeth no-fencing" expect_caught no-fencing nemesis --seconds 10 --seed 1 --sets 1 \
  --faults zombie-advance --out "$out/teeth-no-fencing"
# A member that lost its disk and votes again lets a lagging member win an election without a
# committed max_seq (DESIGN.md §8).
step "teeth bootstrap-empty-voter" expect_caught bootstrap-empty-voter lost-disk
# An AllocSvr that serves without checking its lease keeps serving its old grant while it is
# cut off from the store or paused, after its sections moved on.
step "teeth no-alloc-lease-check" expect_caught no-alloc-lease-check nemesis --seconds 30 \
  --seed 1 --step 100000 --faults partition-alloc,pause-alloc \
  --out "$out/teeth-no-alloc-lease-check"
# An AllocSvr whose lease runs on the wall clock: clock-jump sets its clock back 2 h while it
# is cut off, and it still serves after another AllocSvr took its section over.
step "teeth lease-on-wall-clock" expect_caught lease-on-wall-clock nemesis --seconds 10 \
  --seed 1 --sets 1 --faults clock-jump --out "$out/teeth-lease-on-wall-clock"
# A lease measured from the heartbeat answer's arrival outlasts the store's wait once an answer
# takes longer than 2 × margin, and the AllocSvr takes an answer only within its heartbeat
# attempt timeout (heartbeat / members, 150 ms by default): so this run uses a long heartbeat
# and a short margin, and delay-alloc-replies holds the answers for most of that timeout.
step "teeth lease-from-receive-time" expect_caught lease-from-receive-time nemesis \
  --seconds 10 --seed 1 --sets 1 --faults delay-alloc-replies --lease-ms 9000 \
  --lease-margin-ms 50 --heartbeat-ms 4450 --no-id-load \
  --out "$out/teeth-lease-from-receive-time"
# Ids (issue 10): a new holder of a worker id that starts from its clock instead of above the
# persisted high-water mark reissues ids once clock-back-restart sets an AllocSvr's clock back.
step "teeth no-high-water (nemesis)" expect_caught no-high-water nemesis --seconds 60 --seed 3 \
  --sets 1 --faults clock-back-restart,kill-alloc --out "$out/teeth-no-high-water"
# A new owner of a section's rongcloud sessions that starts from its clock instead of above the
# section's time mark: the sessions of sections moved to an AllocSvr restarted with its clock
# set back go back.
step "teeth no-session-floor" expect_caught no-session-floor nemesis --seconds 60 --seed 3 \
  --sets 1 --faults clock-back-restart,kill-alloc --out "$out/teeth-no-session-floor"
# Teeth that no nemesis fault reaches have a targeted cluster test (tests/tests/cluster/t95_teeth_*.rs)
# that the normal build passed in `cargo test` above and the teeth run must fail, saying why.
# Runs a test command that must FAIL with `marker` in its output (a teeth run caught).
expect_fails_with() { # what, marker, log, command...
  local what=$1 marker=$2 log=$3 rc
  shift 3
  echo ">> teeth: $what (output in $log)"
  set +e
  "$@" >"$log" 2>&1
  rc=$?
  set -e
  if [ $rc -eq 0 ] || ! grep -qF "$marker" "$log"; then
    tail -n 40 "$log" >&2
    echo "error: $what: not caught (exit $rc, expected a failure with '$marker')" >&2
    return 1
  fi
}
expect_test_caught() { # teeth-name, test target, text its failure must contain
  expect_fails_with "cluster test $2 must catch $1" "$3" "$out/teeth-$1.log" \
    env SEQSVR_TEETH="$1" SEQSVR_BIN_DIR="$TEETH_DIR" \
    cargo test --release -p seqsvr-cluster-tests --test cluster -- "$2::"
}
step "teeth no-quorum-check" expect_test_caught no-quorum-check t95_teeth_no_quorum \
  "never answered 'no quorum'"
step "teeth no-readindex-before-grant" expect_test_caught no-readindex-before-grant \
  t95_teeth_readindex_grant "I1/I3 violated"
step "teeth no-control-persist" expect_test_caught no-control-persist \
  t95_teeth_control_persist "control state not persisted?"
# SIGTERM hand-back: an AllocSvr that releases its sections before it stops serving overlaps
# with the AllocSvr the store gives them to at once.
step "teeth release-before-stop" expect_test_caught release-before-stop \
  t95_teeth_release_before_stop "I1/I3 violated"
# ReleaseAlloc from another AllocSvr's certificate: the store moves the sections while their
# owner serves, unless only the registering identity may release.
step "teeth no-holder-check" expect_test_caught no-holder-check t95_teeth_foreign_release \
  "I1/I3 violated"
# A section_size changed under a set's data (issue 30): uid 150 moves to a section never
# advanced, unless the set's recorded layout refuses the changed cluster file.
step "teeth no-layout-check" expect_test_caught no-layout-check t95_teeth_layout "I1 violated"
# Ids (issue 10): a worker id handed on while its cut-off holder may still issue, and a new
# holder that starts from its clock (set back) instead of above the persisted high-water mark.
step "teeth no-worker-wait" expect_test_caught no-worker-wait t95_teeth_worker_wait \
  "ids violated"
step "teeth no-high-water (cluster test)" expect_test_caught no-high-water t95_teeth_high_water \
  "ids violated"
# Teeth inside one crate's logic, with no process to start: its unit tests (which the normal
# build passed above) must fail with the switch on, saying why. The teeth build of the unit
# tests of seqsvr-core and seqsvr-storesvr is made once, here.
step "teeth unit-test build" cargo test --release -p seqsvr-core -p seqsvr-storesvr \
  --features seqsvr-core/teeth --lib --no-run
# A property test the teeth make fail saves no regression case into the source tree
# (proptest-regressions/ holds cases the normal build once failed).
expect_unit_caught() { # teeth-name, crate, test filter, text its failure must contain
  expect_fails_with "$2 unit tests $3 must catch $1" "$4" "$out/teeth-$1.log" \
    env SEQSVR_TEETH="$1" PROPTEST_DISABLE_FAILURE_PERSISTENCE=1 \
    cargo test --release -p "$2" --features seqsvr-core/teeth --lib "$3"
}
# 32-bit cur_seq offsets (issue 13): an offset that wraps instead of rebasing its section sends
# a uid back; the allocation table's model test with a tiny offset limit sees it.
step "teeth no-rebase" expect_unit_caught no-rebase seqsvr-core alloc:: "rebase model: I1 violated"
# Section loads (issue 30): a late answer of a load started before the section was dropped and
# granted again at the same epoch starts it below values it served; the table's test of that
# interleaving sees it.
step "teeth accept-stale-load" expect_unit_caught accept-stale-load seqsvr-core \
  alloc::tests::stale_load "stale load applied"
# The commands version gate (rolling upgrades): a leader that proposes a command of version 1
# (or raises the set's version) while a member of an older build is in the set stops that
# member; the driver's mixed-version test, with a member playing a build before the gate, sees
# it stop.
step "teeth no-commands-gate" expect_unit_caught no-commands-gate seqsvr-storesvr \
  driver::tests::a_member_of_an_older_build "this build applies only up to 0"
echo ">> nemesis and teeth checks passed (histories in $out)"
# The same promise on real container networks (docker kill, network disconnect, pause, rolling
# restart, a store replaced with an empty volume); prints "skipped" without a Docker engine.
step "compose-test" scripts/compose-test.sh
