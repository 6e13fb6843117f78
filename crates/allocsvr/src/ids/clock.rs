//! The clock as both issuers (`workers.rs`, `sessions.rs`) meet it: a wait until it reaches a
//! unit already used, the clock-back events they count, a layout whose time ran out, and the
//! pause after a failed reservation in the store.

use crate::metrics::AllocMetrics;
use crate::rpc::AllocError;
use seqsvr_core::idscheme::Layout;
use tokio::time::Instant;

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

/// Sleeps until the clock reads `unit` of `layout` (the time already used is ahead of it),
/// unless that would pass `deadline`: then UNAVAILABLE at once.
pub async fn wait_for_unit(
    metrics: &AllocMetrics,
    scheme: &str,
    layout: &Layout,
    unit: u64,
    deadline: Instant,
) -> Result<(), AllocError> {
    let now_ms = seqsvr_server::clock::unix_ms_now();
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
