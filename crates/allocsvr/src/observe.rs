//! What the AllocSvr tells operators about itself, refreshed every [`REFRESH`]: the gauges of
//! [`crate::metrics`] and the gRPC health status (SERVING only while it holds a valid lease:
//! a load balancer or container runtime then sends traffic only where it can be answered).
//! A lease that lapses or comes back is logged once, with what it means.

use crate::state::Shared;
use seqsvr_server::grpc::Health;
use seqsvr_server::BootInstant;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often gauges and health are refreshed (a lease lapses silently, by time passing).
pub const REFRESH: Duration = Duration::from_millis(100);

/// Refreshes gauges and health until `stop` flips.
pub async fn observe(shared: Arc<Shared>, health: Health, mut stop: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(REFRESH);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut had_lease: Option<bool> = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        let now = BootInstant::now();
        let (valid, left, route_version, usage, alloc, stopping) = {
            let inner = shared.lock();
            let valid = inner.lease_valid(now);
            let left = inner
                .lease_until
                .filter(|_| valid)
                .map_or(Duration::ZERO, |until| until.duration_since(now));
            (valid, left, inner.route.version, inner.table.usage(), inner.alloc_id, inner.stopping)
        };
        let m = &shared.metrics;
        m.lease_valid.set(if valid { 1.0 } else { 0.0 });
        m.lease_remaining.set(left.as_secs_f64());
        m.route_version.set(route_version as f64);
        m.sections_ready.set(usage.sections_ready as f64);
        m.sections_loading.set(usage.sections_loading as f64);
        m.sections_touched.set(usage.sections_touched as f64);
        m.cur_seq_bytes.set(usage.cur_seq_bytes as f64);
        m.offset_rebases.absolute(usage.rebases);
        publish_budgets(&shared);

        if had_lease != Some(valid) && !stopping {
            match (had_lease, valid) {
                (_, true) => tracing::info!(alloc = ?alloc.map(|a| a.0),
                    sections = usage.sections_ready + usage.sections_loading,
                    "lease valid: serving the sections granted to this AllocSvr"),
                (Some(true), false) => tracing::warn!(alloc = ?alloc.map(|a| a.0),
                    "lease lapsed: serving nothing until a heartbeat is answered (store \
                     unreachable, no leader, or this AllocSvr was paused)"),
                (None | Some(false), false) => {}
            }
            had_lease = Some(valid);
        }
        let reason = match (stopping, valid) {
            (true, _) => "shutting down: sections handed back",
            (false, true) => "holds a valid lease",
            (false, false) => "holds no valid lease",
        };
        health.set(valid, reason).await;
    }
}

/// What each budget holds now (`seqsvr_alloc_budget_in_use`).
fn publish_budgets(shared: &Shared) {
    use crate::metrics::Budget;
    use std::sync::atomic::Ordering;
    let tuning = &shared.config.tuning;
    let streams = tuning.max_streams.saturating_sub(shared.stream_slots.available_permits());
    for (budget, in_use) in [
        (Budget::WaitingCalls, shared.waiting_calls.load(Ordering::Relaxed)),
        (Budget::WaitingIdCalls, shared.waiting_id_calls.load(Ordering::Relaxed)),
        (Budget::Streams, streams),
        (Budget::StreamBytes, shared.budgets.stream_bytes_in_use()),
        (Budget::IdsInFlight, shared.budgets.ids_in_use()),
    ] {
        shared.metrics.budget(budget).in_use.set(in_use as f64);
    }
}
