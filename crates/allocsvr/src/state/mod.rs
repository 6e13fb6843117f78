//! The AllocSvr's state: everything the request path, the lease loop and the id issuers share.
//!
//! [`Shared`] is made once at start and handed to every task; [`Inner`] is the part under its
//! one `std::sync::Mutex` (the allocation table, the lease, the registration, the route table,
//! `stopping`, the id slots), held only for in-memory work, never across an `.await`. The checks
//! every answer depends on live here: [`Inner::lease_valid`] (on `CLOCK_BOOTTIME`, by
//! `seqsvr_core::lease`), [`Inner::extend_lease`], [`Inner::install_route`] and
//! [`Inner::routed_here`].
//!
//! This module imports only the configuration, the metrics (a leaf) and seqsvr-core: the loops
//! (`lease.rs`), the services (`service.rs`, `ids/`) and the RPC rules (`rpc.rs`) build on it.
//!
//! # Layout
//! - this file: [`Shared`], [`Inner`], the lease checks and "routed here";
//! - [`id_slots`]: the id state under the lock: the worker id held per scheme, and the
//!   `rongcloud` slot per section served, with the rules of when each may issue;
//! - [`budgets`]: the memory budgets of the public calls (ids in flight, `NextStream` bytes).

pub mod budgets;
pub mod id_slots;

use crate::config::{AllocConfig, IdSetup};
use crate::metrics::AllocMetrics;
use id_slots::IdWorkers;
use seqsvr_client::store::StoreClient;
use seqsvr_core::alloc::{AllocConfig as TableConfig, AllocTable};
use seqsvr_core::ids::{AllocId, SectionId};
use seqsvr_core::lease;
use seqsvr_proto::v1 as pb;
use seqsvr_server::BootInstant;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

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
    /// The worker ids held for id schemes and their generators, and the `rongcloud` section
    /// slots ([`id_slots`]).
    pub ids: IdWorkers,
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
        self.route.owner_of_section(section.0).is_some_and(|e| e.alloc_id == alloc.0)
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
    pub metrics: AllocMetrics,
    /// Numbers the calls that bring no `x-request-id` of their own.
    pub next_request_id: std::sync::atomic::AtomicU64,
    /// Tells this process's request ids from another's.
    pub request_id_prefix: u32,
    /// The id of the first call that waited for an advance since the last one was sent: the
    /// advancer passes it to the store, so one slow call can be followed across both logs.
    advance_cause: Mutex<Option<String>>,
    /// `SeqService` calls waiting now (for an advance, a load, a hand-over or a lease), at most
    /// `alloc.max_waiting_calls` (see `rpc.rs::WaitSlot`).
    pub waiting_calls: std::sync::atomic::AtomicUsize,
    /// `NextIds` calls waiting now (for the clock, a worker id, a time reservation), at most
    /// `alloc.max_waiting_id_calls`: a pool of their own.
    pub waiting_id_calls: std::sync::atomic::AtomicUsize,
    /// The id schemes served (`[ids]`).
    pub ids: IdSetup,
    /// One worker id lease in flight per scheme.
    pub id_locks: std::collections::BTreeMap<String, tokio::sync::Mutex<()>>,
    /// Set once, when this AllocSvr stops serving (`hand_back`): every `NextStream` stream
    /// answers the batches it holds and ends, so a graceful shutdown does not wait for clients
    /// to close their streams.
    pub streams_stop: tokio::sync::watch::Sender<bool>,
    /// Set once, with why, when this AllocSvr must not go on (its cluster file maps uids
    /// otherwise than its set's store): the process hands back and exits with the error.
    pub fatal: tokio::sync::watch::Sender<Option<String>>,
    /// One per `NextStream` stream open (`alloc.max_streams`), held until the transport drops
    /// its reply body, not only while its serving task runs (`service.rs::StreamHold`): the
    /// per-connection call limit counts a stream only while it opens.
    pub stream_slots: Arc<tokio::sync::Semaphore>,
    /// `NextStream` streams open per connection (its remote address), for
    /// `service.rs::MAX_STREAMS_PER_CONNECTION`; an address with none has no entry.
    pub streams_per_connection: Mutex<std::collections::HashMap<std::net::SocketAddr, usize>>,
    /// What the public calls may hold in memory ([`budgets`]).
    pub budgets: budgets::Budgets,
    /// Where calls for uids this AllocSvr does not own go (`forward.rs`).
    pub forward: crate::forward::Forwarder,
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
        let budgets = budgets::Budgets::new(&config.tuning);
        let metrics = AllocMetrics::new();
        metrics.budget_limits(&config.tuning);
        let forward =
            crate::forward::Forwarder::new(config.forward.clone(), &config.addr, config.set_id);
        Ok(Arc::new(Shared {
            forward,
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
            metrics,
            next_request_id: std::sync::atomic::AtomicU64::new(1),
            request_id_prefix: {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                std::process::id().rotate_left(16) ^ nanos
            },
            advance_cause: Mutex::new(None),
            waiting_calls: std::sync::atomic::AtomicUsize::new(0),
            waiting_id_calls: std::sync::atomic::AtomicUsize::new(0),
            streams_stop: tokio::sync::watch::Sender::new(false),
            fatal: tokio::sync::watch::Sender::new(None),
            stream_slots: Arc::new(tokio::sync::Semaphore::new(max_streams)),
            streams_per_connection: Mutex::new(std::collections::HashMap::new()),
            budgets,
        }))
    }

    /// Remembers `request_id` as the cause of the next advance, unless one is noted already.
    pub fn note_advance_cause(&self, request_id: &dyn std::fmt::Display) {
        let mut cause = self.advance_cause.lock().unwrap_or_else(|e| e.into_inner());
        if cause.is_none() {
            *cause = Some(request_id.to_string());
        }
    }

    /// The cause noted since the last advance was sent, if any (the advancer takes it).
    pub fn take_advance_cause(&self) -> Option<String> {
        self.advance_cause.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock is a bug that already crashed a request; the state
        // itself stays consistent (every mutation is complete before returning).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_core::teeth::Tooth;

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

    // Tests written for survivors of the mutation run (docs/reliability/mutants.md).

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
}
