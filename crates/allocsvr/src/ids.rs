//! Globally unique, time-ordered ids (issue 10): the AllocSvr's `IdService`.
//!
//! Each id scheme with worker ids (`snowflake`, `uid-generator`, `weibo`, `uuidv7`) is served
//! under a **worker id leased from the set's store** (`AcquireWorker`) for as long as this
//! AllocSvr's registration holds its lease: heartbeats list the worker ids held, and the store's
//! arbiter frees one only once its holder's lease must be over. The per-worker state machine is
//! pure (`seqsvr_core::idscheme::Generator`); this module feeds it the wall clock and keeps the
//! worker's **high-water mark** in the store ahead of what it issues (`ReserveTime`), so:
//!
//! - a new holder of a worker id (after a restart, a failover, with the clock set back) starts
//!   strictly above every time an earlier holder may have used: no id is issued twice;
//! - while running, a clock that steps back never makes the issued time go back: the generator
//!   keeps issuing in the last unit, borrows later units up to `ids.max_ahead_ms` ahead of the
//!   clock and never above the reserved mark, then waits (counted, logged);
//! - ids are issued only under the same lease check as sequence numbers (`Inner::lease_valid`),
//!   so one worker id's ids strictly increase in real time across holders.
//!
//! Everything that issues runs under the AllocSvr's one state lock (`lease::Inner`), so the
//! graceful stop (`lease::hand_back` sets `stopping` under it) ends issuing before the
//! registration is released.

use crate::lease::{Inner, Shared};
use seqsvr_core::config::ClusterConfig;
use seqsvr_core::ids::{AllocId, SetId};
use seqsvr_core::idscheme::{issued_fields, Layout, NextRun, Scheme, Stamp, UUID_RANDOM_BITS};
use seqsvr_core::teeth::Tooth;
use seqsvr_proto::v1 as pb;
use seqsvr_server::BootInstant;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};

/// One served scheme: its layout and its limits in the layout's time units.
#[derive(Clone, Debug)]
pub struct SchemeSetup {
    pub layout: Layout,
    /// How far ahead of the clock issued times may run (borrowing) before a call waits.
    pub max_ahead_units: u64,
    /// How far ahead of the clock the high-water mark is reserved in the store.
    pub reserve_units: u64,
    /// What the store records for the scheme and refuses to see change
    /// (`IdSchemeConfig::fingerprint`).
    pub fingerprint: String,
    /// `rongcloud`: the uids its sessions are routed by (`IdSchemeConfig::session_uids`).
    pub session_uids: std::ops::Range<u64>,
}

impl SchemeSetup {
    /// The most ids one worker id (one section, for `rongcloud`) can issue within `left_ms`
    /// from now: every unit up to `max_ahead_units` ahead of the clock, and the units the clock
    /// passes meanwhile, each with its whole sequence. A count above it could only time out.
    pub fn ids_within(&self, left_ms: u64) -> u64 {
        // The clock can cross one unit boundary more than `left_ms / unit` says.
        let passed = left_ms.div_ceil(self.layout.unit().ms().max(1)).saturating_add(1);
        let units = self.max_ahead_units.saturating_add(1).saturating_add(passed);
        units.saturating_mul(self.layout.max_sequence().saturating_add(1))
    }
    /// `rongcloud`: the uid session `key` is routed by (`IdSchemeConfig::session_uid`).
    pub fn session_uid(&self, key: u64) -> u64 {
        seqsvr_core::config::session_uid(self.session_uids.clone(), key)
    }
}

/// The id schemes of the cluster config, loaded at start.
#[derive(Clone, Debug, Default)]
pub struct IdSetup {
    pub schemes: BTreeMap<String, SchemeSetup>,
    pub max_count: u32,
}

impl IdSetup {
    /// Loads `[ids]` for set `set` (a layout that cannot issue at `now_ms` is logged; its `NextIds` is refused).
    pub fn from_cluster(
        cluster: &ClusterConfig,
        set: SetId,
        now_ms: u64,
    ) -> anyhow::Result<IdSetup> {
        let mut schemes = BTreeMap::new();
        // Shapes only: a scheme that ran out (or whose epoch is ahead of this clock) must not
        // stop the AllocSvr, which serves the sequences too; its NextIds is refused instead.
        for (name, (layout, scheme)) in cluster.ids.load_shapes(&cluster.sets)? {
            if let Err(e) = layout.usable_at(now_ms) {
                tracing::error!(scheme = %name, error = %e,
                    "id scheme cannot issue ids at this clock: its NextIds is refused");
            }
            scheme
                .worker_pool(&layout, set)
                .map_err(|e| anyhow::anyhow!("ids.schemes.{name}: {e}"))?;
            let unit = layout.unit().ms();
            let max_ahead_units = cluster.ids.max_ahead_ms / unit;
            let reserve_units = cluster.ids.reserve_ms.div_ceil(unit).max(max_ahead_units + 1);
            tracing::info!(scheme = %name, layout = %layout.scheme(), range = %layout.describe_range(),
                "id scheme loaded");
            let fingerprint = scheme.fingerprint(&layout);
            let session_uids = scheme.session_uids();
            schemes.insert(
                name,
                SchemeSetup { layout, max_ahead_units, reserve_units, fingerprint, session_uids },
            );
        }
        Ok(IdSetup { schemes, max_count: cluster.ids.max_count })
    }
}

/// The worker id held for one scheme and its generator.
#[derive(Debug)]
pub struct WorkerSlot {
    pub worker: u64,
    generator: seqsvr_core::idscheme::Generator,
    /// The high-water mark the store has committed, in the layout's units: nothing above it is
    /// issued.
    high_water: u64,
    /// When the store's answer leasing it arrived: a heartbeat sent before may not list it yet.
    acquired_at: BootInstant,
    /// Tells this slot from a later one for the same scheme (answers that arrive late).
    incarnation: u64,
    /// A background reservation is in flight.
    reserving: bool,
    /// No background reservation before this (one just failed: the store is down or refuses).
    reserve_after: Option<Instant>,
    /// Clock-back events already logged.
    logged_clock_back: u64,
}

/// The worker ids this AllocSvr holds, per scheme name (inside `lease::Inner`).
#[derive(Debug, Default)]
pub struct IdWorkers {
    slots: BTreeMap<String, WorkerSlot>,
    next_incarnation: u64,
    /// `rongcloud`: one generator per section served (`sessions.rs`).
    pub sessions: crate::sessions::Sessions,
}

impl IdWorkers {
    /// Forgets every worker id (the registration is gone, or the AllocSvr stops).
    pub fn clear(&mut self) {
        if !self.slots.is_empty() {
            tracing::info!(n = self.slots.len(), "worker ids dropped with the registration");
        }
        self.slots.clear();
        self.sessions.clear();
    }

    /// A grant from a heartbeat sent at `sent` lists the worker ids the store says this
    /// registration holds: one it does not list, leased before that heartbeat was sent, was
    /// freed (its lease ran out under some leader) and may be someone else's now.
    ///
    /// One leased after that send is kept, but its answer may have been late: the lease could
    /// have applied before the grant was made and been freed since. So it issues nothing more
    /// until a new reservation succeeds, which the store applies only for the holder (a
    /// refusal drops it). A new incarnation ignores reservations answered before.
    pub fn keep_granted(&mut self, granted: &BTreeSet<(String, u64)>, sent: BootInstant) {
        let mut next = self.next_incarnation;
        self.slots.retain(|scheme, slot| {
            if granted.contains(&(scheme.clone(), slot.worker)) {
                return true;
            }
            if slot.acquired_at > sent {
                slot.high_water = slot.generator.floor();
                slot.incarnation = next;
                slot.reserving = false;
                next += 1;
                return true;
            }
            tracing::warn!(scheme = %scheme, worker = slot.worker,
                "the store no longer lists this worker id as ours: not issuing with it again");
            false
        });
        self.next_incarnation = next;
    }

    /// `(scheme, worker id)` of every worker id held.
    pub fn held(&self) -> Vec<(String, u64)> {
        self.slots.iter().map(|(s, w)| (s.clone(), w.worker)).collect()
    }
}

/// The ids a call issued so far, all with one worker id.
#[derive(Default)]
struct Issued {
    ids: Vec<u128>,
    worker: Option<u64>,
}

/// After a failed background reservation, the next waits this long (calls that need one at
/// once still ask).
pub(crate) const RESERVE_BACKOFF: std::time::Duration = std::time::Duration::from_millis(200);

/// What a call must do before it can go on issuing.
enum Step {
    /// Lease a worker id for the scheme.
    Acquire(AllocId),
    /// The clock must reach this unit (it is behind the time already used).
    Wait { unit: u64 },
    /// The store must raise the high-water mark to at least `unit` first.
    Reserve { alloc: AllocId, worker: u64, incarnation: u64, unit: u64 },
    /// Done: every id was issued.
    Done { worker: u64 },
}

/// Random bits for UUIDv7 `rand_b` below the worker id (not needed for uniqueness, which the
/// worker id and the counter give; RFC 9562 asks for them). `RandomState` is seeded from the
/// OS once per process and varied per call.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static STATE: (std::collections::hash_map::RandomState, std::cell::Cell<u64>) =
            (std::collections::hash_map::RandomState::new(), std::cell::Cell::new(0));
    }
    STATE.with(|(state, n)| {
        n.set(n.get().wrapping_add(1));
        let mut h = state.build_hasher();
        h.write_u64(n.get());
        h.finish()
    })
}

/// The `IdService` of one AllocSvr.
pub struct IdServer {
    pub shared: Arc<Shared>,
}

impl IdServer {
    fn setup(&self, name: &str) -> Result<&SchemeSetup, Status> {
        let ids = &self.shared.ids;
        ids.schemes.get(name).ok_or_else(|| {
            let known: Vec<&str> = ids.schemes.keys().map(String::as_str).collect();
            Status::not_found(format!(
                "no id scheme named {name:?} in the cluster config's [ids.schemes] (configured: \
                 {known:?})"
            ))
        })
    }

    /// Issues as many of `want` more ids as it can now, under the lock.
    fn issue(
        &self,
        inner: &mut Inner,
        name: &str,
        setup: &SchemeSetup,
        business: u64,
        want: usize,
        issued: &mut Issued,
    ) -> Result<Step, Status> {
        let Issued { ids: out, worker: worker_of_out } = issued;
        if inner.stopping {
            return Err(Status::unavailable(
                "this AllocSvr is shutting down: ask another AllocSvr for ids",
            ));
        }
        if !Tooth::NoAllocLeaseCheck.on() && !inner.lease_valid(BootInstant::now()) {
            return Err(Status::unavailable(
                "this AllocSvr holds no valid lease, so no worker id: retry, possibly at another \
                 AllocSvr",
            ));
        }
        let Some(alloc) = inner.alloc_id else {
            return Err(Status::unavailable("this AllocSvr is not registered with its store yet"));
        };
        let Some(slot) = inner.ids.slots.get_mut(name) else {
            return Ok(Step::Acquire(alloc));
        };
        if *worker_of_out != Some(slot.worker) {
            // The worker id changed under this call (dropped and leased again): its ids so far
            // are dropped (gaps, never reissued) so one answer carries one worker id.
            out.clear();
            *worker_of_out = Some(slot.worker);
        }
        let layout = &setup.layout;
        let now = layout.units_at(seqsvr_server::clock::unix_ms_now());
        // Every field but the stamp (and uuidv7's random bits) is fixed for this call: checked
        // once, then each id is shifts and ORs. The layout holds every field: the worker id
        // comes from this set's share of the scheme's worker ids, the business number was
        // checked, and the generator never passes the time or sequence fields.
        let zero = Stamp { time: 0, sequence: 0 };
        let random_bits = if layout.scheme() == Scheme::UuidV7 { UUID_RANDOM_BITS } else { 0 };
        let packer = layout
            .packer(&issued_fields(layout, slot.worker, zero, business, 0), random_bits)
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut step = None;
        while out.len() < want {
            match slot.generator.next_run(now, slot.high_water, (want - out.len()) as u64) {
                Ok(NextRun::Issue(run)) => {
                    let random = || if packer.takes_random() { random_u64() } else { 0 };
                    out.extend(run.stamps().map(|s| packer.pack(s.time, s.sequence, random())));
                }
                Ok(NextRun::WaitUntil(unit)) => {
                    step = Some(Step::Wait { unit });
                    break;
                }
                Ok(NextRun::RaiseHighWater(unit)) => {
                    step = Some(Step::Reserve {
                        alloc,
                        worker: slot.worker,
                        incarnation: slot.incarnation,
                        unit: unit.max(now.saturating_add(setup.reserve_units)),
                    });
                    break;
                }
                Err(e) => return Err(ran_out(name, layout, e)),
            }
        }
        let stats = slot.generator.stats();
        let worker = slot.worker;
        let issuer = || format!("worker id {worker}");
        note_clock_back(&self.shared, name, issuer, stats, &mut slot.logged_clock_back);
        // Keep the mark half a reservation ahead, off the call path.
        let backing_off = slot.reserve_after.is_some_and(|t| Instant::now() < t);
        if !slot.reserving
            && !backing_off
            && slot.high_water < now.saturating_add(setup.reserve_units / 2)
        {
            slot.reserving = true;
            let target = now.saturating_add(setup.reserve_units).min(layout.max_time());
            let (shared, name) = (self.shared.clone(), name.to_string());
            let (worker, incarnation) = (slot.worker, slot.incarnation);
            tokio::spawn(async move {
                let deadline = Instant::now()
                    + std::time::Duration::from_millis(shared.config.tuning.request_timeout_ms);
                let _ = reserve(&shared, &name, alloc, worker, incarnation, target, deadline).await;
            });
        }
        Ok(step.unwrap_or(Step::Done { worker: slot.worker }))
    }
}

/// Leases a worker id of `name` for `alloc` and installs its generator above the high-water
/// mark. One lease at a time per scheme (a call that finds one installed meanwhile is done).
async fn acquire(
    shared: &Arc<Shared>,
    name: &str,
    setup: &SchemeSetup,
    alloc: AllocId,
    deadline: Instant,
) -> Result<(), Status> {
    let lock = shared.id_locks.get(name).expect("a lock per configured scheme");
    let _one_at_a_time = tokio::time::timeout_at(deadline, lock.lock())
        .await
        .map_err(|_| Status::unavailable("timed out waiting for a worker id lease"))?;
    if shared.lock().ids.slots.contains_key(name) {
        return Ok(());
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let leased = shared.store.acquire_worker(alloc, name, &setup.fingerprint, left).await;
    let (worker, high_water_ms) = leased.map_err(|s| match s.code() {
        Code::ResourceExhausted => s,
        Code::InvalidArgument => Status::failed_precondition(format!(
            "the store refuses to lease a worker id of {name:?}: {}",
            s.message()
        )),
        _ => Status::unavailable(format!(
            "could not lease a worker id of {name:?} from the store: {}",
            s.message()
        )),
    })?;
    let acquired_at = BootInstant::now();
    let layout = &setup.layout;
    // The first time issued is above every time an earlier holder may have used.
    let floor = if Tooth::NoHighWater.on() { 0 } else { layout.units_at(high_water_ms) };
    let generator = seqsvr_core::idscheme::Generator::new(layout, floor, setup.max_ahead_units)
        .map_err(|e| {
            Status::resource_exhausted(format!("id scheme {name:?}, worker id {worker}: {e}"))
        })?;
    let mut inner = shared.lock();
    if inner.alloc_id != Some(alloc) || inner.stopping {
        return Err(Status::unavailable(
            "the registration changed while leasing a worker id; retry",
        ));
    }
    let incarnation = inner.ids.next_incarnation;
    inner.ids.next_incarnation += 1;
    inner.ids.slots.insert(
        name.to_string(),
        WorkerSlot {
            worker,
            generator,
            high_water: floor,
            acquired_at,
            incarnation,
            reserving: false,
            reserve_after: None,
            logged_clock_back: 0,
        },
    );
    drop(inner);
    shared.metrics.ids_workers_leased.increment(1);
    tracing::info!(scheme = %name, worker, alloc = %alloc, high_water_ms,
        starts_above = %seqsvr_core::idscheme::rfc3339_ms(layout.unix_ms(floor)),
        "worker id leased: issuing above its high-water mark");
    Ok(())
}

/// Raises the worker's high-water mark in the store to `unit` and records the committed mark.
async fn reserve(
    shared: &Arc<Shared>,
    name: &str,
    alloc: AllocId,
    worker: u64,
    incarnation: u64,
    unit: u64,
    deadline: Instant,
) -> Result<(), Status> {
    let setup = shared.ids.schemes.get(name).expect("a configured scheme");
    let layout = &setup.layout;
    let left = deadline.saturating_duration_since(Instant::now());
    let up_to_ms = layout.unix_ms(unit);
    let result =
        shared.store.reserve_time(alloc, name, worker, up_to_ms, &setup.fingerprint, left).await;
    let mut inner = shared.lock();
    let slot = inner.ids.slots.get_mut(name).filter(|s| s.incarnation == incarnation);
    match (result, slot) {
        (Ok(high_water_ms), Some(slot)) => {
            slot.reserving = false;
            slot.high_water = slot.high_water.max(layout.units_at(high_water_ms));
            shared.metrics.ids_reservations.increment(1);
            Ok(())
        }
        // The slot was reset or dropped meanwhile: the caller looks again (and reserves for the
        // new incarnation, or leases again).
        (Ok(_), None) => Ok(()),
        (Err(status), slot) => {
            if status.code() == Code::FailedPrecondition {
                // Not the holder any more: never issue with it again.
                if slot.is_some() {
                    inner.ids.slots.remove(name);
                }
                drop(inner);
                tracing::warn!(scheme = %name, worker, error = %status.message(),
                    "the store refused to reserve time for this worker id: dropped it");
                shared.wake_heartbeat.notify_one();
            } else if let Some(slot) = slot {
                slot.reserving = false;
                slot.reserve_after = Some(Instant::now() + RESERVE_BACKOFF);
            }
            Err(Status::unavailable(format!(
                "could not reserve time for worker id {worker} of {name:?} in the store: {}",
                status.message()
            )))
        }
    }
}

/// RESOURCE_EXHAUSTED: the layout's time field has no unit left.
pub(crate) fn ran_out(name: &str, layout: &Layout, e: seqsvr_core::idscheme::GenError) -> Status {
    Status::resource_exhausted(format!(
        "id scheme {name:?}: {e}; its layout has run out of time ({})",
        layout.describe_range()
    ))
}

/// Counts and logs clock-back events `stats` has seen since `logged` (once each).
pub(crate) fn note_clock_back(
    shared: &Shared,
    name: &str,
    issuer: impl FnOnce() -> String,
    stats: seqsvr_core::idscheme::GenStats,
    logged: &mut u64,
) {
    if stats.clock_back_events > *logged {
        let issuer = issuer();
        *logged = stats.clock_back_events;
        shared.metrics.ids_clock_back.increment(1);
        tracing::warn!(scheme = %name, issuer, clock_back_events = stats.clock_back_events,
            "the wall clock stepped back: issuing on from the last time used, never below it");
    }
}

/// Sleeps until the clock reads `unit` of `layout` (the time already used is ahead of it),
/// unless that would pass `deadline`: then UNAVAILABLE at once.
pub(crate) async fn wait_for_unit(
    shared: &Shared,
    scheme: &str,
    layout: &Layout,
    unit: u64,
    deadline: Instant,
) -> Result<(), Status> {
    let now_ms = seqsvr_server::clock::unix_ms_now();
    let wait_ms = layout.unix_ms(unit).saturating_sub(now_ms).max(1);
    let wait = std::time::Duration::from_millis(wait_ms);
    shared.metrics.ids_clock_waits.increment(1);
    if Instant::now() + wait > deadline {
        tracing::warn!(scheme = %scheme, wait_ms,
            "ids wait for the clock: the time already used is ahead of it");
        return Err(Status::unavailable(format!(
            "id scheme {scheme:?}: the clock is {wait_ms} ms behind the time already used (clock \
             set back, or the sequence of every unit up to ids.max_ahead_ms ahead is used): \
             waiting would pass this call's deadline; retry later or at another AllocSvr"
        )));
    }
    tokio::time::sleep(wait).await;
    Ok(())
}

#[tonic::async_trait]
impl pb::id_service_server::IdService for IdServer {
    async fn next_ids(
        &self,
        request: Request<pb::NextIdsRequest>,
    ) -> Result<Response<pb::NextIdsResponse>, Status> {
        let deadline =
            crate::service::call_deadline(&request, self.shared.config.tuning.request_timeout_ms);
        let r = request.into_inner();
        let setup = self.setup(&r.scheme)?;
        let layout = &setup.layout;
        let max = self.shared.ids.max_count;
        if r.count == 0 || r.count > max {
            return Err(Status::invalid_argument(format!(
                "count {} must be within [1, {max}] (ids.max_count)",
                r.count
            )));
        }
        layout.usable_at(seqsvr_server::clock::unix_ms_now()).map_err(|e| {
            Status::failed_precondition(format!(
                "id scheme {:?} cannot issue ids now: {e} (fix the scheme's layout in the \
                 cluster config, or this host's clock)",
                r.scheme
            ))
        })?;
        let left_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64;
        let reachable = setup.ids_within(left_ms);
        if u64::from(r.count) > reachable {
            return Err(Status::invalid_argument(format!(
                "count {} is more than one worker id (or rongcloud section) of {:?} can issue \
                 within this call's deadline ({left_ms} ms): at most {reachable} ({} per time unit, \
                 up to ids.max_ahead_ms ahead of the clock; a call waits at most \
                 alloc.request_timeout_ms); ask for fewer per call",
                r.count,
                r.scheme,
                layout.max_sequence().saturating_add(1)
            )));
        }
        if layout.scheme() == Scheme::RongCloud {
            return self.next_session_ids(r, setup, deadline).await;
        }
        if r.session_type != 0 || !r.session_id.is_empty() || r.session_hash.is_some() {
            return Err(Status::invalid_argument(format!(
                "id scheme {:?} has no session fields: send session_type 0, no session_id and \
                 session_hash 0",
                r.scheme
            )));
        }
        let business_max = layout.max_value(seqsvr_core::idscheme::Part::Business);
        if r.business > business_max {
            return Err(Status::invalid_argument(if business_max == 0 {
                format!("id scheme {:?} has no business number: send 0", r.scheme)
            } else {
                format!("business {} does not fit: at most {business_max}", r.business)
            }));
        }
        let want = r.count as usize;
        let mut issued = Issued { ids: Vec::with_capacity(want), worker: None };
        let worker_id = loop {
            let step = {
                let mut inner = self.shared.lock();
                self.issue(&mut inner, &r.scheme, setup, r.business, want, &mut issued)?
            };
            match step {
                Step::Done { worker } => break worker,
                Step::Acquire(alloc) => {
                    acquire(&self.shared, &r.scheme, setup, alloc, deadline).await?
                }
                Step::Reserve { alloc, worker, incarnation, unit } => {
                    let unit = unit.min(layout.max_time());
                    reserve(&self.shared, &r.scheme, alloc, worker, incarnation, unit, deadline)
                        .await?
                }
                Step::Wait { unit } => {
                    wait_for_unit(&self.shared, &r.scheme, layout, unit, deadline).await?
                }
            }
        };
        let out = issued.ids;
        self.shared.metrics.ids_issued.increment(out.len() as u64);
        let mut response = pb::NextIdsResponse { worker_id, ..Default::default() };
        if layout.scheme().id_bits() <= 64 {
            seqsvr_proto::put_ids64(&mut response, out.iter().map(|&id| id as u64), r.packed_ids64);
        } else {
            seqsvr_proto::put_ids128(&mut response, &out, r.packed_ids128);
        }
        Ok(Response::new(response))
    }

    async fn decode(
        &self,
        request: Request<pb::DecodeIdRequest>,
    ) -> Result<Response<pb::DecodeIdResponse>, Status> {
        let r = request.into_inner();
        let layout = &self.setup(&r.scheme)?.layout;
        let id = if r.text.is_empty() {
            u128::from(r.id)
        } else {
            layout.parse(&r.text).map_err(|e| Status::invalid_argument(e.to_string()))?
        };
        // The same fields and text the SDK's pure decode gives, so both answers agree.
        let decoded = seqsvr_client::ids::decode_id(layout, id)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(decoded.to_response()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_core::idscheme::{Generator, LayoutSpec};
    use std::time::Duration;

    fn at(ms: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_millis(ms))
    }

    fn slot(worker: u64, acquired_ms: u64, incarnation: u64) -> WorkerSlot {
        let layout = LayoutSpec::of(Scheme::Snowflake).load(1_796_000_000_000).unwrap();
        WorkerSlot {
            worker,
            generator: Generator::new(&layout, 100, 2_000).unwrap(),
            high_water: 5_000,
            acquired_at: at(acquired_ms),
            incarnation,
            reserving: true,
            reserve_after: None,
            logged_clock_back: 0,
        }
    }

    /// The count a call may ask for: whole sequences of every unit it can reach before its
    /// deadline (uid-generator's 8,192 per second: 40,960 in 2 s with 2 s ahead; snowflake's
    /// 4,096 per ms: millions).
    #[test]
    fn a_count_no_worker_id_can_issue_in_time_is_known_up_front() {
        let setup = |spec: LayoutSpec| {
            let layout = spec.load(1_796_000_000_000).unwrap();
            let max_ahead_units = 2_000 / layout.unit().ms();
            SchemeSetup {
                fingerprint: layout.fingerprint(),
                layout,
                max_ahead_units,
                reserve_units: max_ahead_units + 1,
                session_uids: 0..1,
            }
        };
        let uid_generator = setup(LayoutSpec {
            epoch_ms: Some(1_735_689_600_000),
            time_bits: Some(30),
            worker_bits: Some(20),
            seq_bits: Some(13),
            ..LayoutSpec::of(Scheme::UidGenerator)
        });
        assert_eq!(uid_generator.ids_within(2_000), (2 + 1 + 2 + 1) * 8_192);
        assert_eq!(uid_generator.ids_within(2_001), (2 + 1 + 3 + 1) * 8_192);
        assert_eq!(uid_generator.ids_within(0), (3 + 1) * 8_192);
        let snowflake = setup(LayoutSpec::of(Scheme::Snowflake));
        assert_eq!(snowflake.ids_within(2_000), (2_000 + 1 + 2_000 + 1) * 4_096);
    }

    /// A grant keeps the worker ids it lists; one it does not list is dropped if it was leased
    /// before the heartbeat was sent, and if leased after, kept but unable to issue until the
    /// store confirms it with a new reservation (its mark back at its floor, a new incarnation
    /// so a reservation answered before does not count).
    #[test]
    fn a_grant_decides_which_worker_ids_may_still_issue() {
        let mut workers =
            IdWorkers { slots: BTreeMap::new(), next_incarnation: 3, sessions: Default::default() };
        workers.slots.insert("listed".into(), slot(1, 100, 0));
        workers.slots.insert("freed".into(), slot(2, 100, 1));
        workers.slots.insert("late".into(), slot(3, 900, 2));
        let granted: BTreeSet<(String, u64)> = [("listed".to_string(), 1)].into();
        workers.keep_granted(&granted, at(500));
        assert_eq!(workers.held(), [("late".to_string(), 3), ("listed".to_string(), 1)]);
        let listed = &workers.slots["listed"];
        assert_eq!((listed.high_water, listed.incarnation, listed.reserving), (5_000, 0, true));
        let late = &workers.slots["late"];
        assert_eq!((late.high_water, late.incarnation, late.reserving), (100, 3, false));
        assert_eq!(workers.next_incarnation, 4);
        workers.clear();
        assert!(workers.held().is_empty());
    }
}
