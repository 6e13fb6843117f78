//! The clock as both issuers (`workers.rs`, `sessions.rs`) meet it: a wait until it reaches a
//! unit already used, the clock-back events they count, a layout whose time ran out, and the
//! pause after a failed reservation in the store; and how callers share one generator's lead
//! on the clock ([`CHUNK`], [`ahead_share`], [`beyond_share`]).
//!
//! # Sharing a generator
//! One generator (a worker id's, a `rongcloud` section's) serves every caller, and it may run
//! only `ids.max_ahead_ms` ahead of the clock. Left alone, one caller asking for `ids.max_count`
//! again and again would use all of that lead, and every other caller would wait for the clock.
//! So a call of more than [`CHUNK`] ids issues in chunks (the lock let go and the task yielded
//! between them, so small calls interleave) and takes the generator at most half the lead
//! ahead ([`ahead_share`]); the other half is left to calls of at most one chunk, which are
//! answered at once while the big ones wait for the clock.

use crate::config::WallClock;
use crate::metrics::AllocMetrics;
use crate::rpc::AllocError;
use seqsvr_core::idscheme::{Generator, Layout};
use tokio::time::Instant;

/// Most ids a call issues per look under the state lock (one `snowflake` millisecond): a bigger
/// call issues in chunks, yielding in between, so no call holds the lock for long and the
/// callers of one generator interleave.
pub const CHUNK: usize = 4_096;

/// How far ahead of the clock (in units) a call of `count` ids may take a generator that may run
/// `max_ahead_units` ahead: all of it for a call of at most [`CHUNK`] ids, half of it for a
/// bigger call (the rest is left to the small calls).
pub fn ahead_share(max_ahead_units: u64, count: usize) -> u64 {
    if count <= CHUNK {
        max_ahead_units
    } else {
        max_ahead_units / 2
    }
}

/// None if a call whose share is `share` units ahead of the clock (`ahead_share`) may take the
/// next stamp of `generator` at clock reading `now`; else the unit the clock must reach first.
/// The generator itself refuses to go further than its whole lead; this refuses a big call
/// the part of it left to small calls.
pub fn beyond_share(generator: &Generator, layout: &Layout, now: u64, share: u64) -> Option<u64> {
    if share >= generator.max_ahead_units() {
        return None; // the generator's own rule
    }
    let max_sequence = layout.max_sequence();
    // The generator's last stamp (before the first: its floor's unit, as if used up).
    let (time, sequence) = match generator.last_issued() {
        Some(last) => (last.time, last.sequence),
        None => (generator.floor(), max_sequence),
    };
    // The unit its next stamp takes (`Generator::next`): the clock's, the last one's, or the
    // one after the last.
    let next = if now > time {
        now
    } else if sequence < max_sequence {
        time
    } else {
        time.saturating_add(1)
    };
    (next > now.saturating_add(share) && next <= layout.max_time()).then(|| next - share)
}

/// After a failed background reservation, the next waits this long (calls that need one at
/// once still ask).
pub const RESERVE_BACKOFF: std::time::Duration = std::time::Duration::from_millis(200);

/// Counts and logs clock-back events `stats` has seen since `logged` (once each).
pub fn note_clock_back(
    metrics: &AllocMetrics,
    name: &str,
    issuer: impl FnOnce() -> String,
    stats: seqsvr_core::idscheme::GenStats,
    logged: &mut u64,
) {
    if stats.clock_back_events > *logged {
        let issuer = issuer();
        *logged = stats.clock_back_events;
        metrics.ids_clock_back.increment(1);
        tracing::warn!(scheme = %name, issuer, clock_back_events = stats.clock_back_events,
            "the wall clock stepped back: issuing on from the last time used, never below it");
    }
}

/// Sleeps until `clock` reads `unit` of `layout` (the time already used is ahead of it),
/// unless that would pass `deadline`: then UNAVAILABLE at once.
pub async fn wait_for_unit(
    metrics: &AllocMetrics,
    clock: &WallClock,
    scheme: &str,
    layout: &Layout,
    unit: u64,
    deadline: Instant,
) -> Result<(), AllocError> {
    let now_ms = clock.now_ms();
    let wait_ms = layout.unix_ms(unit).saturating_sub(now_ms).max(1);
    let wait = std::time::Duration::from_millis(wait_ms);
    metrics.ids_clock_waits.increment(1);
    if Instant::now() + wait > deadline {
        tracing::warn!(scheme = %scheme, wait_ms,
            "ids wait for the clock: the time already used is ahead of it");
        return Err(AllocError::ClockBehind { scheme: scheme.to_string(), wait_ms });
    }
    tokio::time::sleep(wait).await;
    Ok(())
}

/// RESOURCE_EXHAUSTED: the layout's time field has no unit left.
pub fn ran_out(name: &str, layout: &Layout, error: seqsvr_core::idscheme::GenError) -> AllocError {
    AllocError::RanOut { name: name.to_string(), error, range: layout.describe_range() }
}
