//! The AllocSvr's shared state and its two background loops:
//!
//! - the **lease loop** registers with the store, heartbeats every `heartbeat_ms`, installs each
//!   grant (sections it may serve, with lease epochs), loads newly granted sections' `max_seq`,
//!   and keeps the route table fresh. The lease runs until `send time of the heartbeat + lease -
//!   margin` on this process's monotonic clock (`Instant`): wall-clock jumps cannot extend it,
//!   and a process paused past it finds it lapsed when it wakes.
//! - the **advancer** batches every section that wants a higher `max_seq` into one
//!   `AdvanceMaxSeq` (fenced by alloc id and lease epochs) and publishes the committed values.

use crate::config::AllocConfig;
use seqsvr_client::store::StoreClient;
use seqsvr_core::alloc::{AllocConfig as TableConfig, AllocTable};
use seqsvr_core::ids::{AllocId, SectionId};
use seqsvr_core::section::SectionRange;
use seqsvr_proto::v1 as pb;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tonic::Code;

/// Everything the request path reads, under one `std::sync::Mutex`: held only for in-memory
/// work, never across an `.await`.
pub struct Inner {
    pub table: AllocTable,
    /// Serve only while `now < lease_until`. None: no lease (never had one, or it was revoked).
    pub lease_until: Option<Instant>,
    pub alloc_id: Option<AllocId>,
    pub route: pb::RouteTable,
}

impl Inner {
    pub fn lease_valid(&self, now: Instant) -> bool {
        self.lease_until.is_some_and(|until| now < until)
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
        let store = StoreClient::new(&config.stores)?;
        Ok(Arc::new(Shared {
            config,
            inner: Mutex::new(Inner { table, lease_until: None, alloc_id: None, route }),
            changed: Notify::new(),
            wake_advancer: Notify::new(),
            wake_heartbeat: Notify::new(),
            store,
        }))
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
    let mut backoff = Duration::from_millis(50);
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
                    sleep_or_stop(backoff, &mut stop).await;
                    backoff = (backoff * 2).min(heartbeat);
                    continue;
                }
            },
        };
        let route_version = shared.lock().route.version;
        let sent = Instant::now();
        match shared.store.heartbeat(alloc, route_version, heartbeat).await {
            Ok(reply) => {
                if last_error.take().is_some() {
                    tracing::info!(alloc = %alloc, "lease renewed again");
                }
                backoff = Duration::from_millis(50);
                install_grant(&shared, alloc, sent, reply);
            }
            Err(status) if matches!(status.code(), Code::NotFound | Code::FailedPrecondition) => {
                tracing::warn!(alloc = %alloc, reason = %status.message(),
                    "registration lost: stop serving everything and register again");
                let mut inner = shared.lock();
                inner.lease_until = None;
                inner.table.grant(&[]);
                inner.alloc_id = None;
                drop(inner);
                shared.changed.notify_waiters();
                continue;
            }
            Err(status) => {
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
            _ = shared.wake_heartbeat.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

fn install_grant(
    shared: &Arc<Shared>,
    alloc: AllocId,
    sent: Instant,
    reply: pb::HeartbeatResponse,
) {
    let lease_ms = reply.lease_ms.saturating_sub(reply.lease_margin_ms);
    let until = sent + Duration::from_millis(lease_ms);
    let runs: Vec<(SectionRange, u64)> = reply
        .runs
        .iter()
        .filter_map(|r| {
            let range = SectionRange::new(SectionId(r.section_begin), SectionId(r.section_end))?;
            Some((range, r.lease_epoch))
        })
        .collect();
    let to_load = {
        let mut inner = shared.lock();
        // Heartbeats are sequential, so `sent` only grows and so does the lease.
        inner.lease_until = Some(inner.lease_until.map_or(until, |u| u.max(until)));
        if let Some(table) = reply.route_table {
            if table.version > inner.route.version {
                tracing::info!(
                    version = table.version,
                    entries = table.entries.len(),
                    "route table updated"
                );
                inner.route = table;
            }
        }
        inner.table.grant(&runs)
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
                        lease_epoch, "sections loaded; serving them");
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
    let mut backoff = Duration::from_millis(20);
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
        match shared.store.advance_as(Some(alloc), &batch, wait).await {
            Ok(values) => {
                let mut inner = shared.lock();
                for (a, (section, committed)) in batch.iter().zip(values) {
                    debug_assert_eq!(a.section, section);
                    inner.table.advanced(section, a.lease_epoch, Some(committed));
                }
                drop(inner);
                shared.changed.notify_waiters();
                backoff = Duration::from_millis(20);
            }
            Err(status) => {
                let fenced = status.code() == Code::FailedPrecondition;
                tracing::warn!(alloc = %alloc, n_sections = batch.len(), fenced, error = %status.message(),
                    "advance not committed");
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
                sleep_or_stop(backoff, &mut stop).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
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
