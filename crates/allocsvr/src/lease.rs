//! The AllocSvr's background work on its state ([`crate::state`]): two loops and the hand-back.
//!
//! - the **lease loop** registers with the store, heartbeats every `heartbeat_ms`, installs each
//!   grant (sections it may serve, with lease epochs), loads newly granted sections' `max_seq`,
//!   and keeps the route table fresh. The lease runs until `send time of the heartbeat + lease -
//!   margin` on `CLOCK_BOOTTIME` ([`BootInstant`]), computed by `seqsvr_core::lease` (the
//!   arithmetic the core's lease simulation checks): wall-clock jumps cannot extend it, and a
//!   process paused (SIGSTOP) or a host suspended past it finds it lapsed when it wakes (Tokio's
//!   `Instant` is `CLOCK_MONOTONIC`, which stops during a suspend: it only paces the loops).
//! - the **advancer** batches every section that wants a higher `max_seq` into one
//!   `AdvanceMaxSeq` (fenced by alloc id and lease epochs) and publishes the committed values.
//! - the **hand-back** ([`hand_back`], on SIGTERM) stops serving, then releases the sections.
//!
//! Both loops retry by the clients' one policy (`seqsvr_client::retry`: jittered exponential
//! back-off); the store calls themselves retry and follow the leader within their deadlines.

use crate::state::{lease_end, Shared};
use seqsvr_client::retry::RetryPolicy;
use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{SectionAdvance, SetLayout};
use seqsvr_core::teeth::Tooth;
use seqsvr_proto::v1 as pb;
use seqsvr_server::BootInstant;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::Code;

/// Registers, heartbeats and loads until `stop` flips.
pub async fn lease_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let heartbeat = Duration::from_millis(shared.config.tuning.heartbeat_ms);
    // Between registration attempts: never longer than a heartbeat period (a registered
    // AllocSvr would have tried again by then). Reset by a renewed lease only, so a store that
    // registers us and then does not know us cannot make the loop spin.
    let mut backoff = RetryPolicy::STANDARD.capped(heartbeat).backoff();
    let mut last_error: Option<String> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let alloc = shared.lock().alloc_id;
        let alloc = match alloc {
            Some(a) => a,
            None => match shared.store.register(&shared.config.addr, heartbeat * 2).await {
                Ok(r) => {
                    let id = AllocId(r.alloc_id);
                    tracing::info!(alloc = %id, addr = %shared.config.addr, lease_ms = r.lease_ms,
                        "registered with the store");
                    shared.lock().alloc_id = Some(id);
                    id
                }
                Err(status) => {
                    note_error(&mut last_error, "registration with the store failed", &status);
                    sleep_or_stop(backoff.next_delay(), &mut stop).await;
                    continue;
                }
            },
        };
        let route_version = shared.lock().route.version;
        // Both clocks read before the send: the lease may only start earlier than the store's
        // grant, never later.
        let sent = Instant::now();
        let sent_boot = BootInstant::now();
        match shared.store.heartbeat(alloc, route_version, heartbeat).await {
            Ok(reply) => {
                let received_boot = BootInstant::now();
                shared.metrics.heartbeats_ok.increment(1);
                if last_error.take().is_some() {
                    tracing::info!(alloc = %alloc, "lease renewed again");
                }
                if let Some(why) = layout_refusal(&shared.config, &reply) {
                    // No grant under another layout: this AllocSvr's sections are not the
                    // store's (a uid would be served from another section's max_seq). It stops
                    // (hand-back, exit 1) rather than hold sections it will never serve.
                    shared.metrics.heartbeats_failed.increment(1);
                    tracing::error!(alloc = %alloc, "{why}: this AllocSvr stops");
                    shared.fatal.send_replace(Some(why));
                    return;
                } else {
                    backoff.reset();
                    install_grant(&shared, alloc, sent_boot, received_boot, reply);
                }
            }
            // PERMISSION_DENIED: the registration is not this process's identity's (made before
            // identities were recorded, or under a certificate name the cluster file no longer
            // maps): only a new registration gets grants again.
            Err(status)
                if matches!(
                    status.code(),
                    Code::NotFound | Code::FailedPrecondition | Code::PermissionDenied
                ) =>
            {
                tracing::warn!(alloc = %alloc, reason = %status.message(),
                    "registration lost: stop serving everything and register again");
                {
                    let mut inner = shared.lock();
                    inner.lease_until = None;
                    inner.table.grant(&[]);
                    inner.alloc_id = None;
                    inner.ids.clear();
                }
                shared.changed.notify_waiters();
                // Register again after a back-off: the first is short (the lease is gone, so
                // this AllocSvr serves nothing meanwhile), repeats grow.
                sleep_or_stop(backoff.next_delay(), &mut stop).await;
                continue;
            }
            Err(status) => {
                shared.metrics.heartbeats_failed.increment(1);
                note_error(
                    &mut last_error,
                    "heartbeat failed; the lease runs out on its own",
                    &status,
                );
            }
        }
        let next = sent + heartbeat;
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = shared.wake_heartbeat.notified() => {
                // Woken early (a fenced advance, a client that knows a newer route table): at
                // most one early heartbeat per `EARLY_HEARTBEAT_GAP`, however many ask.
                let early = sent + EARLY_HEARTBEAT_GAP.min(heartbeat);
                tokio::select! {
                    _ = tokio::time::sleep_until(early) => {}
                    _ = stop.changed() => return,
                }
            }
            _ = stop.changed() => return,
        }
    }
}

/// Why a heartbeat's grant must not be taken: the store grants under a layout (`section_size`,
/// the set's uid range) other than this AllocSvr's cluster config, which would serve a uid from
/// another section's `max_seq`. Checked on every heartbeat, against both layouts a reply may
/// carry: the grant's own (`HeartbeatResponse.layout`: the set's record, or the answering
/// leader's file while the set has recorded none, so a record made after we started, or a new
/// leader whose file differs, is seen at the next heartbeat) and the route table's (when one
/// came). A reply with neither (a store build before the layout field, and our table current)
/// passes: unknown is not a disagreement; the table we installed was checked when it came.
fn layout_refusal(
    config: &crate::config::AllocConfig,
    reply: &pb::HeartbeatResponse,
) -> Option<String> {
    let ours = SetLayout {
        section_size: config.section_size,
        uid_begin: config.uid_begin,
        uid_end: config.uid_end,
    };
    let of = |l: &pb::SetLayout| SetLayout {
        section_size: l.section_size,
        uid_begin: l.uid_begin,
        uid_end: l.uid_end,
    };
    let grant = reply.layout.as_ref().map(|l| {
        let source = if reply.layout_recorded {
            "the set's recorded layout"
        } else {
            "the store leader's cluster file (the set has recorded no layout yet)"
        };
        (of(l), source.to_string())
    });
    let table = reply.route_table.as_ref().map(|t| {
        let theirs =
            SetLayout { section_size: t.section_size, uid_begin: t.uid_begin, uid_end: t.uid_end };
        (theirs, format!("the store's route table for set {}", t.set_id))
    });
    grant.into_iter().chain(table).find_map(|(theirs, source)| {
        SetLayout::mismatch(Some(&theirs), &ours)?;
        Some(format!(
            "{source} maps uids as {theirs}, but this AllocSvr's cluster config says {ours}: a \
             uid would be served from another section, whose max_seq may be lower, and its \
             values could repeat. Give every StoreSvr and AllocSvr of the set the same \
             section_size and uid_begin/uid_end (a recorded layout cannot be changed in place)"
        ))
    })
}

/// The least time between the sends of two heartbeats when one is asked for early.
const EARLY_HEARTBEAT_GAP: Duration = Duration::from_millis(20);

fn install_grant(
    shared: &Arc<Shared>,
    alloc: AllocId,
    sent: BootInstant,
    received: BootInstant,
    reply: pb::HeartbeatResponse,
) {
    let until = lease_end(sent, received, reply.lease_ms, reply.lease_margin_ms);
    let runs: Vec<(SectionRange, LeaseEpoch)> = reply
        .runs
        .iter()
        .filter_map(|r| {
            let range = SectionRange::new(SectionId(r.section_begin), SectionId(r.section_end))?;
            Some((range, LeaseEpoch(r.lease_epoch)))
        })
        .collect();
    let to_load = {
        let mut inner = shared.lock();
        if inner.stopping {
            return; // shutting down: a grant that arrives now brings nothing back
        }
        inner.extend_lease(until);
        if let Some(table) = reply.route_table {
            inner.install_route(table);
        }
        let workers = reply.workers.iter().map(|w| (w.scheme.clone(), w.worker_id)).collect();
        inner.ids.keep_granted(&workers, sent);
        let to_load = inner.table.grant(&runs);
        let inner = &mut *inner;
        inner.ids.sessions.prune(&inner.table);
        to_load
    };
    shared.changed.notify_waiters();
    for load in to_load {
        let shared = shared.clone();
        tokio::spawn(async move {
            let wait = Duration::from_millis(shared.config.tuning.request_timeout_ms);
            let (range, lease_epoch) = (load.run, load.lease_epoch);
            match shared.store.load(range, wait).await {
                Ok(values) => {
                    let ready = shared.lock().table.loaded(&load, &values);
                    if ready == 0 {
                        // Dropped meanwhile, granted at another epoch, or loading again under a
                        // later load whose answer is the one to apply (`seqsvr_core::alloc::Load`).
                        tracing::debug!(alloc = %alloc, begin = %range.begin(), end = %range.end(),
                            lease_epoch = lease_epoch.0, load = load.generation,
                            "load answer ignored: its sections no longer wait for this load");
                        return;
                    }
                    tracing::info!(alloc = %alloc, begin = %range.begin(), end = %range.end(),
                        lease_epoch = lease_epoch.0, "sections loaded; serving them");
                    shared.changed.notify_waiters();
                }
                Err(status) => {
                    // Dropped, so that the next heartbeat's grant loads them again.
                    tracing::warn!(begin = %range.begin(), end = %range.end(), error = %status.message(),
                        "loading granted sections failed");
                    shared.lock().table.load_failed(&load);
                }
            }
        });
    }
}

/// Sends wanted advances in batches until `stop` flips.
pub async fn advancer(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let wait = Duration::from_millis(shared.config.tuning.request_timeout_ms);
    let mut backoff = RetryPolicy::STANDARD.backoff();
    loop {
        let (alloc, batch) = {
            let mut inner = shared.lock();
            let alloc = inner.alloc_id;
            let batch = match alloc {
                Some(_) => inner.table.take_wanted(shared.config.max_batch_sections),
                None => Vec::new(),
            };
            (alloc, batch)
        };
        let Some(alloc) = alloc.filter(|_| !batch.is_empty()) else {
            tokio::select! {
                _ = shared.wake_advancer.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stop.changed() => return,
            }
            continue;
        };
        let sent = Instant::now();
        let cause = shared.take_advance_cause();
        let request_id = cause.as_deref().unwrap_or("-");
        tracing::debug!(alloc = %alloc, n_sections = batch.len(), request_id, "advance sent");
        let advance = shared.store.advance_traced(Some(alloc), &batch, wait, cause.as_deref());
        let result = advance.await.and_then(|values| {
            // Checked in every build: committing one section's value to another would serve
            // values above what the store committed for it (I2). A reply that does not pair up
            // is a store bug; it is treated as "not committed", never trusted in part (a panic
            // would kill this task and leave every section waiting for advances forever).
            if pairs_with(&batch, &values) {
                Ok(values)
            } else {
                tracing::error!(asked = ?batch.iter().map(|a| a.section.0).collect::<Vec<_>>(),
                    answered = ?values.iter().map(|(s, _)| s.0).collect::<Vec<_>>(),
                    "the store answered an advance for other sections than asked: ignored");
                Err(tonic::Status::internal("advance answer does not pair with the request"))
            }
        });
        shared.metrics.advance(
            batch.len(),
            sent.elapsed(),
            result.as_ref().map(|_| ()).map_err(|s| s.code()),
        );
        match result {
            Ok(values) => {
                let mut inner = shared.lock();
                for (a, (section, committed)) in batch.iter().zip(values) {
                    inner.table.advanced(section, a.lease_epoch, Some(committed));
                }
                drop(inner);
                shared.changed.notify_waiters();
                backoff.reset();
            }
            Err(status) => {
                let fenced = status.code() == Code::FailedPrecondition;
                tracing::warn!(alloc = %alloc, n_sections = batch.len(), fenced, request_id,
                    error = %status.message(), "advance not committed");
                {
                    let mut inner = shared.lock();
                    for a in &batch {
                        inner.table.advanced(a.section, a.lease_epoch, None);
                    }
                }
                if fenced {
                    // We lost a section: learn which from a heartbeat before retrying.
                    shared.wake_heartbeat.notify_one();
                }
                shared.changed.notify_waiters();
                sleep_or_stop(backoff.next_delay(), &mut stop).await;
            }
        }
    }
}

/// SIGTERM: stop serving for good, then hand the sections back so the store moves them at once
/// instead of after the lease runs out. The order is the safety argument: once `stopping` is
/// set under the lock no value is handed out again (every value is handed out under that
/// lock), and only then does the store learn it may give the sections to someone else
/// (`ReleaseAlloc`; arbiter.rs moves a released AllocSvr's settled runs without a wait). The
/// lease loop is stopped before, so no late grant can bring a section back. If the release
/// does not commit in time, the sections move when the lease runs out, as after a crash.
pub async fn hand_back(shared: &Arc<Shared>, within: Duration) {
    let release = || async {
        let alloc = shared.lock().alloc_id;
        let Some(alloc) = alloc else { return };
        match shared.store.release(alloc, within).await {
            Ok(()) => tracing::info!(alloc = %alloc, "sections handed back to the store"),
            Err(status) if matches!(status.code(), Code::NotFound | Code::FailedPrecondition) => {
                tracing::info!(alloc = %alloc, reason = %status.message(),
                    "registration already gone: nothing to hand back")
            }
            Err(status) => tracing::warn!(alloc = %alloc, error = %status.message(),
                "handing sections back failed: they move when this AllocSvr's lease runs out"),
        }
    };
    let stop_serving = || {
        let mut inner = shared.lock();
        inner.stopping = true;
        inner.lease_until = None;
        inner.ids.clear();
        let held = inner.table.usage();
        inner.table.grant(&[]);
        drop(inner);
        shared.changed.notify_waiters();
        shared.streams_stop.send_replace(true);
        tracing::info!(
            sections = held.sections_ready + held.sections_loading,
            "stopped serving: every call is refused from now on"
        );
    };
    if Tooth::ReleaseBeforeStop.on() {
        release().await;
        tokio::time::sleep(Duration::from_millis(shared.config.tuning.lease_ms / 2)).await;
        stop_serving();
        return;
    }
    stop_serving();
    release().await;
}

/// Whether the store's answer to an advance names exactly the sections asked, in order.
fn pairs_with(batch: &[SectionAdvance], values: &[(SectionId, u64)]) -> bool {
    values.len() == batch.len() && batch.iter().zip(values).all(|(a, (s, _))| a.section == *s)
}

async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.changed() => {}
    }
}

/// Logs an error once per streak, not once per retry.
fn note_error(last: &mut Option<String>, what: &str, status: &tonic::Status) {
    let text = format!("{:?}: {}", status.code(), status.message());
    if last.as_deref() != Some(text.as_str()) {
        tracing::warn!(error = %text, "{what}");
        *last = Some(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_millis(ms))
    }

    #[test]
    fn an_advance_answer_must_pair_with_the_request() {
        let a = |s| SectionAdvance {
            section: SectionId(s),
            max_seq: seqsvr_core::ids::Seq(100),
            lease_epoch: LeaseEpoch(1),
        };
        let batch = [a(1), a(2)];
        assert!(pairs_with(&batch, &[(SectionId(1), 100), (SectionId(2), 120)]));
        assert!(!pairs_with(&batch, &[(SectionId(2), 100), (SectionId(1), 120)]), "order");
        assert!(!pairs_with(&batch, &[(SectionId(1), 100)]), "too few");
        assert!(!pairs_with(&batch, &[(SectionId(1), 1), (SectionId(2), 1), (SectionId(3), 1)]));
    }

    /// A grant whose route table maps uids otherwise than our config (a halved
    /// `section_size`, a moved uid range) is not taken; the same layout, or a reply without a
    /// table, is.
    #[test]
    fn a_grant_under_another_layout_is_refused() {
        let config = crate::config::AllocConfig::for_tests(); // uids [0, 100), sections of 10
        let reply = |section_size, uid_begin, uid_end| pb::HeartbeatResponse {
            route_table: Some(pb::RouteTable {
                set_id: 1,
                version: 2,
                uid_begin,
                uid_end,
                section_size,
                entries: Vec::new(),
            }),
            ..Default::default()
        };
        assert_eq!(layout_refusal(&config, &reply(10, 0, 100)), None);
        assert_eq!(layout_refusal(&config, &pb::HeartbeatResponse::default()), None);
        let why = layout_refusal(&config, &reply(5, 0, 100)).expect("a halved section size");
        assert!(why.contains("section_size 5") && why.contains("section_size 10"), "{why}");
        assert!(layout_refusal(&config, &reply(10, 0, 200)).is_some(), "another uid range");
        assert!(layout_refusal(&config, &reply(10, 50, 100)).is_some(), "another uid range");
    }

    /// The grant's own layout is checked on every heartbeat, with or without a route table (which
    /// comes only when the route version changed): a layout recorded after this AllocSvr
    /// started, or a new leader whose file differs while the set has recorded none, stops it at
    /// its next heartbeat. A store build that sends no layout is unknown, not a disagreement.
    /// Fails without the check of `HeartbeatResponse.layout` in `layout_refusal`.
    #[test]
    fn every_heartbeat_checks_the_layout_of_its_grant() {
        let config = crate::config::AllocConfig::for_tests(); // uids [0, 100), sections of 10
        let reply = |section_size, layout_recorded| pb::HeartbeatResponse {
            layout: Some(pb::SetLayout { section_size, uid_begin: 0, uid_end: 100 }),
            layout_recorded,
            ..Default::default()
        };
        assert_eq!(layout_refusal(&config, &reply(10, true)), None);
        assert_eq!(layout_refusal(&config, &reply(10, false)), None);
        let why = layout_refusal(&config, &reply(5, true)).expect("another recorded layout");
        assert!(why.contains("the set's recorded layout"), "{why}");
        assert!(why.contains("section_size 5") && why.contains("section_size 10"), "{why}");
        let why = layout_refusal(&config, &reply(5, false)).expect("another leader's file");
        assert!(why.contains("the store leader's cluster file"), "{why}");
        let moved = pb::HeartbeatResponse {
            layout: Some(pb::SetLayout { section_size: 10, uid_begin: 50, uid_end: 150 }),
            ..Default::default()
        };
        assert!(layout_refusal(&config, &moved).is_some(), "another uid range");
        // The grant's layout agrees, the route table that came with it does not: refused.
        let table =
            pb::RouteTable { set_id: 1, section_size: 5, uid_end: 100, ..Default::default() };
        let both = pb::HeartbeatResponse { route_table: Some(table), ..reply(10, true) };
        assert!(layout_refusal(&config, &both).is_some(), "the route table's layout");
    }

    // Tests written for survivors of the mutation run (docs/reliability/mutants.md).

    fn shared() -> Arc<Shared> {
        // A plaintext test AllocSvr: its (never dialled) store channels say so.
        seqsvr_client::tls::use_plaintext();
        Shared::new(crate::config::AllocConfig::for_tests()).unwrap()
    }

    /// A heartbeat's answer: the lease runs from the heartbeat's send time for `lease -
    /// margin`, the newer route table is kept, and the granted runs are installed (loading,
    /// not yet served) at their epochs.
    #[tokio::test]
    async fn a_grant_installs_the_lease_the_route_table_and_the_sections() {
        use seqsvr_core::alloc::SeqError;
        let shared = shared();
        let run = |section_begin, section_end, lease_epoch| pb::GrantedRun {
            section_begin,
            section_end,
            lease_epoch,
        };
        let reply = pb::HeartbeatResponse {
            lease_ms: 5_000,
            lease_margin_ms: 500,
            runs: vec![run(1, 3, 4)],
            route_table: Some(pb::RouteTable { set_id: 1, version: 9, ..Default::default() }),
            ..Default::default()
        };
        install_grant(&shared, AllocId(1), at(100_000), at(100_800), reply);
        let mut inner = shared.lock();
        let until = if Tooth::LeaseFromReceiveTime.on() { 105_300 } else { 104_500 };
        assert_eq!(inner.lease_until, Some(at(until)), "send time + lease - margin");
        assert_eq!(inner.route.version, 9);
        assert_eq!(inner.table.next(15), Err(SeqError::Loading(SectionId(1))));
        assert_eq!(inner.table.next(25), Err(SeqError::Loading(SectionId(2))));
        assert_eq!(inner.table.next(35), Err(SeqError::NotOwned(SectionId(3))));
    }
}
