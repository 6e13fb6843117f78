//! The AllocSvr's side of a lease, in milliseconds of the AllocSvr's *own* monotonic clock
//! (`CLOCK_BOOTTIME` in the binary). `allocsvr/src/state/mod.rs` calls these functions, and the
//! lease simulation in `arbiter/tests.rs` runs them on simulated, skewed clocks: the simulation
//! checks the AllocSvr's own arithmetic, not a copy of it.
//!
//! A heartbeat sent at `sent` and answered with a grant of `lease` (`lease_ms`, `margin_ms`) lets
//! the AllocSvr serve until `sent + lease - margin`. The store leader grants after the heartbeat
//! was sent and treats the lease as surely over `hold = lease + margin` after its grant
//! (`arbiter.rs`), so the AllocSvr's clock may run slower than the leader's by about
//! `2 × margin / lease` before the two overlap. Measuring from the *send* time matters: the
//! answer may be delayed arbitrarily (a slow or paused store leader), and a lease measured from
//! its arrival would outlast the leader's wait (`teeth-lease-from-receive-time` does just that).
//!
//! The lease timing itself ([`LeaseConfig`]: lease and margin, the rule they must meet, and the
//! arbiter's `hold`) is here too: the store's replicated `SetLease` (`store.rs`) and the
//! arbiter (`arbiter.rs`, which re-exports it) both use it, and neither imports the other for it.

use serde::{Deserialize, Serialize};

/// The longest lease a set accepts (10 minutes): a longer one is a typo, and would stall every
/// hand-over and every new leader for as long.
pub const MAX_LEASE_MS: u64 = 600_000;

/// A set's lease timing (replicated by `SetLease`): how long a grant lets an AllocSvr serve, and
/// the margin it stops early by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseConfig {
    pub lease_ms: u64,
    pub margin_ms: u64,
}

impl LeaseConfig {
    /// How long the arbiter waits for a lease granted under this timing to run out.
    pub fn hold_ms(&self) -> u64 {
        if crate::teeth::Tooth::NoLeaseWait.on() {
            return self.lease_ms / 3;
        }
        self.lease_ms.saturating_add(self.margin_ms)
    }

    /// The rule for a lease (the same as for `cluster.toml`'s `[alloc]`): `0 < margin`,
    /// `2 × margin < lease ≤` [`MAX_LEASE_MS`].
    pub fn check(&self) -> Result<(), String> {
        if self.lease_ms == 0 || self.lease_ms > MAX_LEASE_MS {
            return Err(format!(
                "lease_ms ({}) must be within [1, {MAX_LEASE_MS}] (10 minutes)",
                self.lease_ms
            ));
        }
        if self.margin_ms == 0 || self.margin_ms.saturating_mul(2) >= self.lease_ms {
            return Err(format!(
                "lease_margin_ms ({}) must be > 0 and less than half of lease_ms ({})",
                self.margin_ms, self.lease_ms
            ));
        }
        Ok(())
    }
}

/// When the lease granted in answer to a heartbeat sent at `sent_ms`, whose answer arrived at
/// `received_ms`, ends: `sent + lease - margin` (a margin of at least the lease gives no lease
/// at all). `received_ms` is used only by the `teeth-lease-from-receive-time` build.
pub fn lease_end_ms(sent_ms: u64, received_ms: u64, lease_ms: u64, margin_ms: u64) -> u64 {
    let start = if crate::teeth::Tooth::LeaseFromReceiveTime.on() { received_ms } else { sent_ms };
    start.saturating_add(lease_ms.saturating_sub(margin_ms))
}

/// The lease after a renewal ending at `until_ms`. Heartbeats are sequential, so their send
/// times only grow; taking the later end anyway means a late answer never shortens the lease.
pub fn extended(current_ms: Option<u64>, until_ms: u64) -> u64 {
    current_ms.map_or(until_ms, |u| u.max(until_ms))
}

/// Whether a lease ending at `until_ms` (None: no lease) lets the AllocSvr serve at `now_ms`.
pub fn valid(now_ms: u64, until_ms: Option<u64>) -> bool {
    until_ms.is_some_and(|until| now_ms < until)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_runs_from_the_send_time_for_lease_minus_margin() {
        let until = lease_end_ms(100_000, 100_700, 5_000, 500);
        if crate::teeth::Tooth::LeaseFromReceiveTime.on() {
            assert_eq!(until, 105_200);
        } else {
            assert_eq!(until, 104_500, "the arrival time does not count");
        }
        assert!(valid(100_000, Some(104_500)) && valid(104_499, Some(104_500)));
        assert!(!valid(104_500, Some(104_500)), "ends at send + lease - margin");
        assert!(!valid(0, None), "no lease before the first grant");
        assert_eq!(lease_end_ms(100_000, 100_000, 500, 800), 100_000, "margin >= lease: none");
        assert_eq!(extended(None, 7), 7);
        assert_eq!(extended(Some(9), 7), 9, "a late answer never shortens the lease");
        assert_eq!(extended(Some(9), 12), 12);
        assert_eq!(lease_end_ms(u64::MAX - 1, u64::MAX, 10, 1), u64::MAX, "saturates");
    }
}
