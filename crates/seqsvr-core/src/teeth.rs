//! Test-only switches that break the promise on purpose, to prove the nemesis checker would
//! notice ("teeth"). Off by default; a server built with any of them refuses to start unless
//! `SEQSVR_TEETH_BUILD_OK=1` is set, and says so loudly. Never ship such a build.
//!
//! - `teeth-no-lease-wait`: the arbiter waits a third of a lease instead of `lease + margin`
//!   before it treats an AllocSvr as gone, settles a hand-over, or (as a new leader) reassigns:
//!   the new owner serves while the old one's lease may still run.
//! - `teeth-no-fencing`: `AdvanceMaxSeq` skips the owner/epoch check at apply.
//! - `teeth-bootstrap-empty-voter`: a StoreSvr that finds an empty data dir bootstraps itself as
//!   a voter of the configured members whatever `--initial-cluster-state` says, and votes at
//!   once (the lost-disk bug: a wiped member elects a leader that lacks committed entries).
//! - `teeth-lease-from-receive-time`: the AllocSvr measures its lease from when the heartbeat's
//!   answer arrived instead of when the heartbeat was sent (`lease::lease_end_ms`): a reply
//!   delayed by more than about `2 × margin` lets it serve after the store moved its sections.
//!   Only reachable when the AllocSvr waits that long for a heartbeat's answer: it gives each
//!   attempt `heartbeat / members` (150 ms to 1.5 s), which under the nemesis's default tuning
//!   (300 ms, 3 members, margin 200 ms) and `config/cluster.toml` is below `2 × margin`, so
//!   there the mistake is harmless. The nemesis fault `delay-alloc-replies` in a run with a long
//!   heartbeat and a short margin (`scripts/test.sh`: lease 9 s, margin 50 ms, heartbeat
//!   4.45 s) catches it.
//! - `teeth-lease-on-wall-clock`: the AllocSvr's lease clock (`seqsvr-server`'s `BootInstant`)
//!   reads `CLOCK_REALTIME` instead of `CLOCK_BOOTTIME`: a wall clock set back (NTP, an
//!   operator, libfaketime in the nemesis's `clock-jump`) makes a lapsed lease look valid for
//!   as long as the clock went back. (The store's arbiter reads the same clock in this build;
//!   the nemesis moves only AllocSvr wall clocks.)
//! - `teeth-no-alloc-lease-check`: the AllocSvr serves without checking that its lease is still
//!   valid (it keeps serving its last grant while cut off from the store or after a pause).
//! - `teeth-no-quorum-check`: the store leader proposes (and answers reads) without a quorum in
//!   sight; a lone leader takes requests into its log until raft-rs makes it step down.
//! - `teeth-no-readindex-before-grant`: the store leader grants a lease on a heartbeat at once,
//!   without confirming its leadership (ReadIndex) first: a deposed leader that has not noticed
//!   yet keeps granting while the new leader moves the sections.
//! - `teeth-no-control-persist`: applying a change of the control state (registry, assignment,
//!   lease epochs, route version) does not write it to disk, so a restarted member comes back
//!   with an older control state than it had applied.
//! - `teeth-release-before-stop`: on SIGTERM the AllocSvr hands its sections back
//!   (`ReleaseAlloc`) first and goes on serving its current lease for a while, instead of
//!   stopping first: the store moves the sections at once and two AllocSvrs serve them.
//! - `teeth-no-holder-check`: the store accepts a heartbeat, fenced advance or release for an
//!   AllocSvr registration from any `alloc` identity, not only the one that registered it: a
//!   release from another AllocSvr's certificate moves the sections while their owner serves.
//! - `teeth-no-worker-wait`: the arbiter frees an AllocSvr's worker ids (issue 10) once it has
//!   had no grant for a third of a lease, or once a newer registration replaced it, instead of
//!   once its lease must be over: the next holder issues with that worker id while the old
//!   holder still may, so one worker id's ids stop increasing in real time.
//! - `teeth-no-high-water`: a new holder of a worker id starts from its own clock instead of
//!   above the worker id's persisted high-water mark: with the clock set back, it reissues ids
//!   an earlier holder issued.
//! - `teeth-no-session-floor`: a new owner of a section's `rongcloud` sessions starts from its
//!   own clock instead of above the section's time mark in the store (`allocsvr/src/sessions.rs`):
//!   with its clock set back (or behind the old owner's), a session's ids go back or repeat.
//! - `teeth-no-rebase`: the AllocSvr's per-uid 32-bit `cur_seq` offset (`alloc.rs`, issue 13)
//!   wraps (a truncating cast) instead of rebasing its section first: a uid served more than
//!   2^32 values above its section's base goes back to near the base. No nemesis run reaches
//!   2^32 values of one uid; the allocation table's model test with a tiny offset limit
//!   (`alloc::tests`, `scripts/test.sh`) catches it ("I1 violated").
//! - `teeth-no-commands-gate`: the store leader proposes commands of any version, and raises the
//!   set's commands version, without waiting for every member to report a build that applies
//!   them (`storesvr/src/driver/versions.rs`): in a rolling upgrade a member of an older build
//!   stops on a command it cannot apply. The driver's mixed-version test (a member playing a
//!   build before the gate, `driver::tests`, `scripts/test.sh`) catches it ("older member
//!   stopped").

/// Whether worker ids are freed before their holder's lease is over (see the module doc).
pub const NO_WORKER_WAIT: bool = cfg!(feature = "teeth-no-worker-wait");
/// Whether a new holder of a worker id ignores its high-water mark (see the module doc).
pub const NO_HIGH_WATER: bool = cfg!(feature = "teeth-no-high-water");
/// Whether a new owner of a section's sessions ignores the section's time mark.
pub const NO_SESSION_FLOOR: bool = cfg!(feature = "teeth-no-session-floor");
/// Whether the arbiter's waits are cut short (see the module doc).
pub const NO_LEASE_WAIT: bool = cfg!(feature = "teeth-no-lease-wait");
/// Whether the store skips fencing (see the module doc).
pub const NO_FENCING: bool = cfg!(feature = "teeth-no-fencing");
/// Whether an empty data dir is bootstrapped as a voter (see the module doc).
pub const BOOTSTRAP_EMPTY_VOTER: bool = cfg!(feature = "teeth-bootstrap-empty-voter");
/// Whether the AllocSvr's lease runs from the reply's arrival (see the module doc).
pub const LEASE_FROM_RECEIVE_TIME: bool = cfg!(feature = "teeth-lease-from-receive-time");
/// Whether leases are measured on the wall clock (see the module doc).
pub const LEASE_ON_WALL_CLOCK: bool = cfg!(feature = "teeth-lease-on-wall-clock");
/// Whether the AllocSvr serves without a lease check (see the module doc).
pub const NO_ALLOC_LEASE_CHECK: bool = cfg!(feature = "teeth-no-alloc-lease-check");
/// Whether the store leader proposes without a quorum in sight (see the module doc).
pub const NO_QUORUM_CHECK: bool = cfg!(feature = "teeth-no-quorum-check");
/// Whether heartbeats are granted without ReadIndex (see the module doc).
pub const NO_READINDEX_BEFORE_GRANT: bool = cfg!(feature = "teeth-no-readindex-before-grant");
/// Whether applied control-state changes are left unwritten (see the module doc).
pub const NO_CONTROL_PERSIST: bool = cfg!(feature = "teeth-no-control-persist");
/// Whether a shutting-down AllocSvr releases before it stops serving (see the module doc).
pub const RELEASE_BEFORE_STOP: bool = cfg!(feature = "teeth-release-before-stop");
/// Whether any `alloc` identity may act for any registration (see the module doc).
pub const NO_HOLDER_CHECK: bool = cfg!(feature = "teeth-no-holder-check");
/// Whether a `cur_seq` offset wraps instead of rebasing its section (see the module doc).
pub const NO_REBASE: bool = cfg!(feature = "teeth-no-rebase");
/// Whether the store leader ignores the commands version gate (see the module doc).
pub const NO_COMMANDS_GATE: bool = cfg!(feature = "teeth-no-commands-gate");

/// Every switch and its feature name, so a new one is listed in exactly one more place.
const ALL: [(bool, &str); 16] = [
    (NO_LEASE_WAIT, "teeth-no-lease-wait"),
    (NO_FENCING, "teeth-no-fencing"),
    (BOOTSTRAP_EMPTY_VOTER, "teeth-bootstrap-empty-voter"),
    (LEASE_FROM_RECEIVE_TIME, "teeth-lease-from-receive-time"),
    (LEASE_ON_WALL_CLOCK, "teeth-lease-on-wall-clock"),
    (NO_ALLOC_LEASE_CHECK, "teeth-no-alloc-lease-check"),
    (NO_QUORUM_CHECK, "teeth-no-quorum-check"),
    (NO_READINDEX_BEFORE_GRANT, "teeth-no-readindex-before-grant"),
    (NO_CONTROL_PERSIST, "teeth-no-control-persist"),
    (RELEASE_BEFORE_STOP, "teeth-release-before-stop"),
    (NO_HOLDER_CHECK, "teeth-no-holder-check"),
    (NO_WORKER_WAIT, "teeth-no-worker-wait"),
    (NO_HIGH_WATER, "teeth-no-high-water"),
    (NO_SESSION_FLOOR, "teeth-no-session-floor"),
    (NO_REBASE, "teeth-no-rebase"),
    (NO_COMMANDS_GATE, "teeth-no-commands-gate"),
];

/// The teeth compiled into this build.
pub fn enabled() -> Vec<&'static str> {
    ALL.iter().filter(|(on, _)| *on).map(|&(_, name)| name).collect()
}

/// `Err` with a message when this is a teeth build not explicitly allowed to run.
pub fn check_allowed(allowed_by_env: bool) -> Result<(), String> {
    let on = enabled();
    if on.is_empty() || allowed_by_env {
        return Ok(());
    }
    Err(format!(
        "this binary was built with {} (deliberately unsafe, for checker tests only); \
         refusing to start without SEQSVR_TEETH_BUILD_OK=1",
        on.join(", ")
    ))
}
