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

/// Whether the arbiter's waits are cut short (see the module doc).
pub const NO_LEASE_WAIT: bool = cfg!(feature = "teeth-no-lease-wait");
/// Whether the store skips fencing (see the module doc).
pub const NO_FENCING: bool = cfg!(feature = "teeth-no-fencing");
/// Whether an empty data dir is bootstrapped as a voter (see the module doc).
pub const BOOTSTRAP_EMPTY_VOTER: bool = cfg!(feature = "teeth-bootstrap-empty-voter");

/// The teeth compiled into this build.
pub fn enabled() -> Vec<&'static str> {
    let mut on = Vec::new();
    if NO_LEASE_WAIT {
        on.push("teeth-no-lease-wait");
    }
    if NO_FENCING {
        on.push("teeth-no-fencing");
    }
    if BOOTSTRAP_EMPTY_VOTER {
        on.push("teeth-bootstrap-empty-voter");
    }
    on
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
