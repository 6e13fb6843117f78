//! The AllocSvr's shared state and its two background loops:
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
//!
//! Both retry by the clients' one policy (`seqsvr_client::retry`: jittered exponential
//! back-off); the store calls themselves retry and follow the leader within their deadlines.

use crate::config::AllocConfig;
use seqsvr_client::retry::RetryPolicy;
use seqsvr_client::store::StoreClient;
use seqsvr_core::alloc::{AllocConfig as TableConfig, AllocTable};
use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId};
use seqsvr_core::lease;
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::SectionAdvance;
use seqsvr_core::teeth::Tooth;
use seqsvr_proto::v1 as pb;
use seqsvr_server::BootInstant;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tonic::Code;

/// Everything the request path reads, under one `std::sync::Mutex`: held only for in-memory
/// work, never across an `.await`.
pub struct Inner {
    pub table: AllocTable,
    /// Serve only while `now < lease_until` on `CLOCK_BOOTTIME`. None: no lease (never had
    /// one, or it was revoked).
    pub lease_until: Option<BootInstant>,
    pub alloc_id: Option<AllocId>,
    /// The newest route table this AllocSvr has seen (versions only go up).
    pub route: pb::RouteTable,
    /// Shutting down: serves nothing more, ever (set before its sections are released).
    pub stopping: bool,
    /// The worker ids held for id schemes and their generators (`ids.rs`).
    pub ids: crate::ids::IdWorkers,
}

/// Milliseconds since boot, rounded down: a lease measured from it starts no later than the
/// instant itself, and a whole-millisecond end is compared exactly.
fn boot_ms(t: BootInstant) -> u64 {
    u64::try_from(t.since_boot().as_millis()).unwrap_or(u64::MAX)
}

fn from_boot_ms(ms: u64) -> BootInstant {
    BootInstant::from_since_boot(Duration::from_millis(ms))
}

/// When a lease granted by a heartbeat sent at `sent`, whose answer arrived at `received`, ends:
/// [`lease::lease_end_ms`] on the boot clock (`sent + lease - margin`; a margin of at least the
/// lease gives no lease at all).
pub fn lease_end(
    sent: BootInstant,
    received: BootInstant,
    lease_ms: u64,
    lease_margin_ms: u64,
) -> BootInstant {
    from_boot_ms(lease::lease_end_ms(boot_ms(sent), boot_ms(received), lease_ms, lease_margin_ms))
}

impl Inner {
    /// [`lease::valid`] at `now` (in whole milliseconds, rounded down: an end that is not a
    /// whole millisecond is treated as the millisecond before, never later).
    pub fn lease_valid(&self, now: BootInstant) -> bool {
        lease::valid(boot_ms(now), self.lease_until.map(boot_ms))
    }

    /// A renewal ending at `until` ([`lease::extended`]): a late answer can never shorten the
    /// lease.
    pub fn extend_lease(&mut self, until: BootInstant) {
        let current = self.lease_until.map(boot_ms);
        self.lease_until = Some(from_boot_ms(lease::extended(current, boot_ms(until))));
    }

    /// Keeps `table` if it is newer than ours; a table never goes back. Returns whether it was
    /// installed.
    pub fn install_route(&mut self, table: pb::RouteTable) -> bool {
        if table.set_id != self.route.set_id || table.version <= self.route.version {
            return false;
        }
        tracing::info!(
            version = table.version,
            entries = table.entries.len(),
            "route table updated"
        );
        self.route = table;
        true
    }

    /// Whether the route table names this AllocSvr as the owner of `section` (a hand-over to us
    /// may be in progress even though we cannot serve it yet).
    pub fn routed_here(&self, section: SectionId, alloc: Option<AllocId>) -> bool {
        let Some(alloc) = alloc else { return false };
        self.route.entries.iter().any(|e| {
            e.alloc_id == alloc.0 && e.section_begin <= section.0 && section.0 < e.section_end
        })
    }
}

pub struct Shared {
    pub config: AllocConfig,
    inner: Mutex<Inner>,
    /// Woken whenever something a waiting request depends on changed: an advance committed, a
    /// section loaded, a grant installed or the lease lost.
    pub changed: Notify,
    /// Woken when a section wants an advance.
    pub wake_advancer: Notify,
    /// Woken when the store refused an advance: a heartbeat will tell what we still own.
    pub wake_heartbeat: Notify,
    pub store: StoreClient,
    pub metrics: crate::metrics::AllocMetrics,
    /// Numbers the calls that bring no `x-request-id` of their own.
    pub next_request_id: std::sync::atomic::AtomicU64,
    /// Tells this process's request ids from another's.
    pub request_id_prefix: u32,
    /// The id of the first call that waited for an advance since the last one was sent: the
    /// advancer passes it to the store, so one slow call can be followed across both logs.
    advance_cause: Mutex<Option<String>>,
    /// Calls waiting now (for an advance, a load, a hand-over or a lease), at most
    /// `alloc.max_waiting_calls` (see `service.rs::WaitSlot`).
    pub waiting_calls: std::sync::atomic::AtomicUsize,
    /// The id schemes served (`[ids]`).
    pub ids: crate::ids::IdSetup,
    /// One worker id lease in flight per scheme.
    pub id_locks: std::collections::BTreeMap<String, tokio::sync::Mutex<()>>,
    /// Set once, when this AllocSvr stops serving (`hand_back`): every `NextStream` stream
    /// answers the batches it holds and ends, so a graceful shutdown does not wait for clients
    /// to close their streams.
    pub streams_stop: tokio::sync::watch::Sender<bool>,
    /// One per `NextStream` stream open (`alloc.max_streams`): the per-connection call limit
    /// counts a stream only while it opens.
    pub stream_slots: Arc<tokio::sync::Semaphore>,
}

impl Shared {
    pub fn new(config: AllocConfig) -> anyhow::Result<Arc<Shared>> {
        let table = AllocTable::new(TableConfig {
            section_size: config.section_size,
            step: config.tuning.step,
            prefetch_remaining: config.tuning.prefetch_remaining(),
        });
        let route = pb::RouteTable {
            set_id: config.set_id.0,
            version: 0,
            uid_begin: config.uid_begin,
            uid_end: config.uid_end,
            section_size: config.section_size,
            entries: Vec::new(),
        };
        let store = StoreClient::for_set(config.set_id, &config.stores)?;
        let ids = config.ids.clone();
        let id_locks = ids.schemes.keys().map(|k| (k.clone(), Default::default())).collect();
        let max_streams = config.tuning.max_streams;
        Ok(Arc::new(Shared {
            ids,
            id_locks,
            config,
            inner: Mutex::new(Inner {
                table,
                lease_until: None,
                alloc_id: None,
                route,
                stopping: false,
                ids: Default::default(),
            }),
            changed: Notify::new(),
            wake_advancer: Notify::new(),
            wake_heartbeat: Notify::new(),
            store,
            metrics: crate::metrics::AllocMetrics::new(),
            next_request_id: std::sync::atomic::AtomicU64::new(1),
            request_id_prefix: {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                std::process::id().rotate_left(16) ^ nanos
            },
            advance_cause: Mutex::new(None),
            waiting_calls: std::sync::atomic::AtomicUsize::new(0),
            streams_stop: tokio::sync::watch::Sender::new(false),
            stream_slots: Arc::new(tokio::sync::Semaphore::new(max_streams)),
        }))
    }

    /// Remembers `request_id` as the cause of the next advance, unless one is noted already.
    pub fn note_advance_cause(&self, request_id: &dyn std::fmt::Display) {
        let mut cause = self.advance_cause.lock().unwrap_or_else(|e| e.into_inner());
        if cause.is_none() {
            *cause = Some(request_id.to_string());
        }
    }

    fn take_advance_cause(&self) -> Option<String> {
        self.advance_cause.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock is a bug that already crashed a request; the state
        // itself stays consistent (every mutation is complete before returning).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

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
                backoff.reset();
                install_grant(&shared, alloc, sent_boot, received_boot, reply);
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
    for (range, lease_epoch) in to_load {
        let shared = shared.clone();
        tokio::spawn(async move {
            let wait = Duration::from_millis(shared.config.tuning.request_timeout_ms);
            match shared.store.load(range, wait).await {
                Ok(values) => {
                    shared.lock().table.loaded(range, lease_epoch, &values);
                    tracing::info!(alloc = %alloc, begin = %range.begin(), end = %range.end(),
                        lease_epoch = lease_epoch.0, "sections loaded; serving them");
                    shared.changed.notify_waiters();
                }
                Err(status) => {
                    // Still Loading: the next heartbeat re-grants and we try again.
                    tracing::warn!(begin = %range.begin(), end = %range.end(), error = %status.message(),
                        "loading granted sections failed");
                    let mut inner = shared.lock();
                    for s in range.begin().0..range.end().0 {
                        inner.table.drop_section(SectionId(s));
                    }
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

    fn inner() -> Inner {
        let table =
            AllocTable::new(TableConfig { section_size: 10, step: 10, prefetch_remaining: 9 });
        let route = pb::RouteTable { set_id: 1, version: 3, ..Default::default() };
        Inner {
            table,
            lease_until: None,
            alloc_id: Some(AllocId(1)),
            route,
            stopping: false,
            ids: Default::default(),
        }
    }

    fn at(ms: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_millis(ms))
    }

    /// Injected boot-clock times: the lease runs from the heartbeat's send time (not the
    /// answer's arrival) for `lease - margin`, never shrinks, and a margin of a whole lease
    /// gives none.
    #[test]
    fn the_lease_runs_from_the_send_time_for_lease_minus_margin() {
        let mut inner = inner();
        assert!(!inner.lease_valid(at(0)), "no lease before the first grant");
        let slow_answer = lease_end(at(100_000), at(100_800), 5_000, 500);
        if Tooth::LeaseFromReceiveTime.on() {
            assert_eq!(slow_answer, at(105_300), "the teeth build counts from the arrival");
            return;
        }
        assert_eq!(slow_answer, at(104_500), "the answer's arrival does not count");
        inner.extend_lease(lease_end(at(100_000), at(100_010), 5_000, 500));
        assert!(inner.lease_valid(at(100_000)));
        assert!(inner.lease_valid(at(104_499)));
        assert!(!inner.lease_valid(at(104_500)), "ends at send + lease - margin");
        // A host suspended for an hour wakes with its boot clock an hour later: lapsed.
        assert!(!inner.lease_valid(at(100_000 + 3_600_000)));
        // An older heartbeat's late answer never shortens it; a newer one extends it.
        inner.extend_lease(lease_end(at(99_000), at(99_010), 5_000, 500));
        assert!(inner.lease_valid(at(104_499)));
        inner.extend_lease(lease_end(at(101_000), at(101_010), 5_000, 500));
        assert!(inner.lease_valid(at(105_499)) && !inner.lease_valid(at(105_500)));
        let mut other = self::inner();
        other.extend_lease(lease_end(at(100_000), at(100_000), 500, 800));
        assert!(!other.lease_valid(at(100_000)), "margin >= lease: no lease at all");
    }

    /// The lease is measured on CLOCK_BOOTTIME: `lease_valid` with the boot clock's now.
    #[test]
    fn the_lease_is_on_the_boot_clock() {
        let mut inner = inner();
        let sent = BootInstant::now();
        inner.extend_lease(lease_end(sent, sent, 60_000, 500));
        assert!(inner.lease_valid(BootInstant::now()));
        let boot = seqsvr_server::clock::boottime_now();
        assert!(inner.lease_until.unwrap().since_boot() > boot, "on the boot clock's scale");
        assert!(inner.lease_until.unwrap().since_boot() <= boot + Duration::from_secs(60));
    }

    #[test]
    fn route_tables_never_go_back() {
        let mut inner = inner();
        let table = |version| pb::RouteTable { set_id: 1, version, ..Default::default() };
        assert!(!inner.install_route(table(2)), "older");
        assert!(!inner.install_route(table(3)), "same version");
        assert!(inner.install_route(table(7)));
        assert!(!inner.install_route(table(5)), "a late answer with an older table");
        assert!(!inner.install_route(pb::RouteTable { set_id: 2, version: 9, ..table(0) }));
        assert_eq!(inner.route.version, 7);
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

    // Tests written for survivors of the mutation run (docs/reliability/mutants.md).

    fn shared() -> Arc<Shared> {
        Shared::new(crate::config::AllocConfig::for_tests()).unwrap()
    }

    /// A section is routed here when an entry naming this AllocSvr covers it (`[begin, end)`),
    /// and nothing is routed to an AllocSvr that is not registered.
    #[test]
    fn routed_here_means_an_entry_of_this_alloc_covers_the_section() {
        let mut inner = inner();
        let entry = |section_begin, section_end, alloc_id| pb::RouteEntry {
            section_begin,
            section_end,
            alloc_id,
            addr: String::new(),
        };
        inner.route.entries = vec![entry(0, 2, 2), entry(2, 4, 1), entry(4, 5, 2)];
        let here: Vec<bool> =
            (0..6).map(|s| inner.routed_here(SectionId(s), Some(AllocId(1)))).collect();
        assert_eq!(here, [false, false, true, true, false, false]);
        assert!(!inner.routed_here(SectionId(2), None), "not registered: nothing routed here");
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
            workers: Vec::new(),
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
