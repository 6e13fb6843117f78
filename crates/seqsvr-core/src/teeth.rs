//! Test-only switches that break the promise on purpose, to prove the nemesis checker would
//! notice ("teeth").
//!
//! One build carries them all: the `teeth` feature compiles every switch in, and the one that is
//! on is chosen when the process starts, by name, from `SEQSVR_TEETH` (for example
//! `SEQSVR_TEETH=no-fencing`); with it unset, a teeth build behaves like the release build. A
//! server built with the feature refuses to start unless `SEQSVR_TEETH_BUILD_OK=1` is set, or
//! when `SEQSVR_TEETH` names no switch, and says so loudly. Without the feature (every build
//! but `scripts/test.sh`'s teeth build) [`Tooth::on`] is a constant `false`: there is no switch to turn,
//! no environment variable is read and no switch's name is in the binary (`scripts/test.sh`
//! checks the release binaries for the names). Never ship a teeth build.
//!
//! - `no-lease-wait`: the arbiter waits a third of a lease instead of `lease + margin`
//!   before it treats an AllocSvr as gone, settles a hand-over, or (as a new leader) reassigns:
//!   the new owner serves while the old one's lease may still run.
//! - `no-fencing`: `AdvanceMaxSeq` skips the owner/epoch check at apply.
//! - `bootstrap-empty-voter`: a StoreSvr that finds an empty data dir bootstraps itself as
//!   a voter of the configured members whatever `--initial-cluster-state` says, and votes at
//!   once (the lost-disk bug: a wiped member elects a leader that lacks committed entries).
//! - `lease-from-receive-time`: the AllocSvr measures its lease from when the heartbeat's
//!   answer arrived instead of when the heartbeat was sent (`lease::lease_end_ms`): a reply
//!   delayed by more than about `2 × margin` lets it serve after the store moved its sections.
//!   Only reachable when the AllocSvr waits that long for a heartbeat's answer: it gives each
//!   attempt `heartbeat / members` (150 ms to 1.5 s), which under the nemesis's default tuning
//!   (300 ms, 3 members, margin 200 ms) and `config/cluster.toml` is below `2 × margin`, so
//!   there the mistake is harmless. The nemesis fault `delay-alloc-replies` in a run with a long
//!   heartbeat and a short margin (`scripts/test.sh`) catches it.
//! - `lease-on-wall-clock`: the AllocSvr's lease clock (`seqsvr-server`'s `BootInstant`)
//!   reads `CLOCK_REALTIME` instead of `CLOCK_BOOTTIME`: a wall clock set back (NTP, an
//!   operator, libfaketime in the nemesis's `clock-jump`) makes a lapsed lease look valid for
//!   as long as the clock went back. (The store's arbiter reads the same clock in this build;
//!   the nemesis moves only AllocSvr wall clocks.)
//! - `no-alloc-lease-check`: the AllocSvr serves without checking that its lease is still
//!   valid (it keeps serving its last grant while cut off from the store or after a pause).
//! - `no-quorum-check`: the store leader proposes (and answers reads) without a quorum in
//!   sight; a lone leader takes requests into its log until raft-rs makes it step down.
//! - `no-readindex-before-grant`: the store leader grants a lease on a heartbeat at once,
//!   without confirming its leadership (ReadIndex) first: a deposed leader that has not noticed
//!   yet keeps granting while the new leader moves the sections.
//! - `no-control-persist`: applying a change of the control state (registry, assignment,
//!   lease epochs, route version) does not write it to disk, so a restarted member comes back
//!   with an older control state than it had applied.
//! - `release-before-stop`: on SIGTERM the AllocSvr hands its sections back
//!   (`ReleaseAlloc`) first and goes on serving its current lease for a while, instead of
//!   stopping first: the store moves the sections at once and two AllocSvrs serve them.
//! - `no-holder-check`: the store accepts a heartbeat, fenced advance or release for an
//!   AllocSvr registration from any `alloc` identity, not only the one that registered it: a
//!   release from another AllocSvr's certificate moves the sections while their owner serves.
//! - `no-worker-wait`: the arbiter frees an AllocSvr's worker ids (issue 10) once it has
//!   had no grant for a third of a lease, or once a newer registration replaced it, instead of
//!   once its lease must be over: the next holder issues with that worker id while the old
//!   holder still may, so one worker id's ids stop increasing in real time.
//! - `no-high-water`: a new holder of a worker id starts from its own clock instead of
//!   above the worker id's persisted high-water mark: with the clock set back, it reissues ids
//!   an earlier holder issued.
//! - `no-session-floor`: a new owner of a section's `rongcloud` sessions starts from its
//!   own clock instead of above the section's time mark in the store
//!   (`allocsvr/src/state/id_slots.rs`): with its clock set back (or behind the old owner's), a
//!   session's ids go back or repeat.
//! - `no-rebase`: the AllocSvr's per-uid 32-bit `cur_seq` offset (`alloc.rs`, issue 13)
//!   wraps (a truncating cast) instead of rebasing its section first: a uid served more than
//!   2^32 values above its section's base goes back to near the base. No nemesis run reaches
//!   2^32 values of one uid; the allocation table's model test with a tiny offset limit
//!   (`alloc::tests`, `scripts/test.sh`) catches it ("I1 violated").
//! - `no-commands-gate`: the store leader proposes commands of any version, and raises the
//!   set's commands version, without waiting for every member to report a build that applies
//!   them (`storesvr/src/driver/versions.rs`): in a rolling upgrade a member of an older build
//!   stops on a command it cannot apply. The driver's mixed-version test (a member playing a
//!   build before the gate, `driver::tests`, `scripts/test.sh`) catches it ("older member
//!   stopped").
//! - `no-layout-check`: a changed `section_size` or set uid range is not compared with the
//!   layout the set recorded (`store.rs` `SetLayout::mismatch`): a StoreSvr restarted with a
//!   halved `section_size` starts and serves, and a uid whose section number changed goes
//!   back to the new section's lower `max_seq` (`tests/tests/cluster/t95_teeth_layout.rs` catches it).
//! - `accept-stale-load`: the AllocSvr's allocation table applies a load answer to a section
//!   loading at the same lease epoch whatever load it answers (`alloc.rs`, `Load`): a late
//!   answer of a load started before the section was dropped and granted again makes it ready
//!   at an older `max_seq`, below values it served before the drop. No nemesis run times a load
//!   answer that late; the table's unit test of that interleaving (`alloc::tests`,
//!   `scripts/test.sh`) catches it ("stale load").

/// One deliberately unsafe switch (see the module doc for what each breaks).
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "teeth", derive(Debug))]
pub enum Tooth {
    /// `no-lease-wait`: the arbiter's waits are cut short.
    NoLeaseWait,
    /// `no-fencing`: the store skips fencing.
    NoFencing,
    /// `bootstrap-empty-voter`: an empty data dir is bootstrapped as a voter.
    BootstrapEmptyVoter,
    /// `lease-from-receive-time`: the AllocSvr's lease runs from the reply's arrival.
    LeaseFromReceiveTime,
    /// `lease-on-wall-clock`: leases are measured on the wall clock.
    LeaseOnWallClock,
    /// `no-alloc-lease-check`: the AllocSvr serves without a lease check.
    NoAllocLeaseCheck,
    /// `no-quorum-check`: the store leader proposes without a quorum in sight.
    NoQuorumCheck,
    /// `no-readindex-before-grant`: heartbeats are granted without ReadIndex.
    NoReadindexBeforeGrant,
    /// `no-control-persist`: applied control-state changes are left unwritten.
    NoControlPersist,
    /// `release-before-stop`: a shutting-down AllocSvr releases before it stops serving.
    ReleaseBeforeStop,
    /// `no-holder-check`: any `alloc` identity may act for any registration.
    NoHolderCheck,
    /// `no-worker-wait`: worker ids are freed before their holder's lease is over.
    NoWorkerWait,
    /// `no-high-water`: a new holder of a worker id ignores its high-water mark.
    NoHighWater,
    /// `no-session-floor`: a new owner of a section's sessions ignores the section's time mark.
    NoSessionFloor,
    /// `no-rebase`: a `cur_seq` offset wraps instead of rebasing its section.
    NoRebase,
    /// `no-commands-gate`: the store leader ignores the commands version gate.
    NoCommandsGate,
    /// `no-layout-check`: a layout differing from the recorded one is served.
    NoLayoutCheck,
    /// `accept-stale-load`: a load answer is applied whatever load of the section it answers.
    AcceptStaleLoad,
}

impl Tooth {
    /// Whether this is the switch the process runs with. Always `false` (a constant the
    /// compiler folds away) in a build without the `teeth` feature.
    #[inline(always)]
    pub fn on(self) -> bool {
        #[cfg(feature = "teeth")]
        {
            chosen::active() == Ok(Some(self))
        }
        #[cfg(not(feature = "teeth"))]
        {
            false
        }
    }
}

/// `Err` with a message when this process must not start: a teeth build not explicitly allowed
/// to run (`SEQSVR_TEETH_BUILD_OK=1`), or one whose `SEQSVR_TEETH` names no switch. `Ok(None)`
/// in a build without the feature; in a teeth build `Ok(Some(warning))`, the loud line the
/// servers log, naming the switch that is on (the warning's words live here, so the release
/// binaries hold none of them).
pub fn check_allowed() -> Result<Option<String>, String> {
    #[cfg(feature = "teeth")]
    {
        let active = chosen::active()?;
        if std::env::var_os("SEQSVR_TEETH_BUILD_OK").is_none_or(|v| v != "1") {
            return Err("this binary was built with the teeth feature (deliberately unsafe \
                        switches, for checker tests only); refusing to start without \
                        SEQSVR_TEETH_BUILD_OK=1"
                .to_string());
        }
        Ok(Some(format!(
            "UNSAFE TEETH BUILD: it breaks the promise on purpose (SEQSVR_TEETH switch on: {})",
            active.map_or("none", chosen::name)
        )))
    }
    #[cfg(not(feature = "teeth"))]
    {
        Ok(None)
    }
}

#[cfg(feature = "teeth")]
pub use chosen::{name, ALL};

#[cfg(feature = "teeth")]
mod chosen {
    use super::Tooth;
    use std::sync::OnceLock;

    /// Every switch and the name `SEQSVR_TEETH` gives it.
    pub const ALL: [(Tooth, &str); 18] = [
        (Tooth::NoLeaseWait, "no-lease-wait"),
        (Tooth::NoFencing, "no-fencing"),
        (Tooth::BootstrapEmptyVoter, "bootstrap-empty-voter"),
        (Tooth::LeaseFromReceiveTime, "lease-from-receive-time"),
        (Tooth::LeaseOnWallClock, "lease-on-wall-clock"),
        (Tooth::NoAllocLeaseCheck, "no-alloc-lease-check"),
        (Tooth::NoQuorumCheck, "no-quorum-check"),
        (Tooth::NoReadindexBeforeGrant, "no-readindex-before-grant"),
        (Tooth::NoControlPersist, "no-control-persist"),
        (Tooth::ReleaseBeforeStop, "release-before-stop"),
        (Tooth::NoHolderCheck, "no-holder-check"),
        (Tooth::NoWorkerWait, "no-worker-wait"),
        (Tooth::NoHighWater, "no-high-water"),
        (Tooth::NoSessionFloor, "no-session-floor"),
        (Tooth::NoRebase, "no-rebase"),
        (Tooth::NoCommandsGate, "no-commands-gate"),
        (Tooth::NoLayoutCheck, "no-layout-check"),
        (Tooth::AcceptStaleLoad, "accept-stale-load"),
    ];

    /// The name of a switch.
    pub fn name(tooth: Tooth) -> &'static str {
        ALL.iter().find(|(t, _)| *t == tooth).map(|&(_, n)| n).expect("every tooth is listed")
    }

    /// The switch `SEQSVR_TEETH` chose, read once per process.
    pub(super) fn active() -> Result<Option<Tooth>, String> {
        static ACTIVE: OnceLock<Result<Option<Tooth>, String>> = OnceLock::new();
        ACTIVE
            .get_or_init(|| {
                let Some(value) = std::env::var_os("SEQSVR_TEETH") else { return Ok(None) };
                let value = value.to_string_lossy();
                ALL.iter().find(|(_, n)| *n == value).map(|&(t, _)| Some(t)).ok_or_else(|| {
                    let names: Vec<&str> = ALL.iter().map(|&(_, n)| n).collect();
                    format!(
                        "SEQSVR_TEETH={value} names no teeth switch; known: {}",
                        names.join(", ")
                    )
                })
            })
            .clone()
    }
}
