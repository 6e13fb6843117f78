//! Issuing under a worker id leased from the store (`snowflake`, `uid-generator`, `weibo`,
//! `uuidv7`): [`next_ids`] issues under the lock from the scheme's [`WorkerSlot`], and between
//! looks leases a worker id ([`acquire`], above its high-water mark), raises the mark
//! ([`reserve`], `ReserveTime`) or waits for the clock, as the generator asks.
//!
//! [`WorkerSlot`]: crate::state::id_slots::WorkerSlot

use super::clock::{
    ahead_share, beyond_share, note_clock_back, ran_out, wait_for_unit, CHUNK, RESERVE_BACKOFF,
};
use crate::config::SchemeSetup;
use crate::rpc::{AllocError, WaitSlot};
use crate::state::id_slots::WorkerSlot;
use crate::state::{Inner, Shared};
use seqsvr_core::ids::AllocId;
use seqsvr_core::idscheme::{issued_fields, NextRun, Scheme, Stamp, UUID_RANDOM_BITS};
use seqsvr_core::teeth::Tooth;
use seqsvr_server::BootInstant;
use std::sync::Arc;
use tokio::time::Instant;
use tonic::Code;

/// `want` ids of scheme `name` (not `rongcloud`) with business number `business`, all under
/// one worker id: issued under the lock (in chunks, yielding in between: `clock.rs`), leasing
/// a worker id, raising its high-water mark or waiting for the clock in between as the
/// generator asks. A call that waits takes a wait slot first (`alloc.max_waiting_id_calls`;
/// RESOURCE_EXHAUSTED past it). Returns the worker id and the ids.
pub async fn next_ids(
    shared: &Arc<Shared>,
    name: &str,
    setup: &SchemeSetup,
    business: u64,
    want: usize,
    deadline: Instant,
) -> Result<(u64, Vec<u128>), AllocError> {
    let layout = &setup.layout;
    let mut issued = Issued { ids: Vec::with_capacity(want), worker: None };
    let mut waiting: Option<WaitSlot> = None;
    let worker_id = loop {
        let step = {
            let mut inner = shared.lock();
            issue(shared, &mut inner, name, setup, business, want, &mut issued)?
        };
        if !matches!(step, Step::Done { .. } | Step::Yield) && waiting.is_none() {
            waiting = Some(WaitSlot::take_for_ids(shared)?);
        }
        match step {
            Step::Done { worker } => break worker,
            Step::Yield => tokio::task::yield_now().await,
            Step::Acquire(alloc) => acquire(shared, name, setup, alloc, deadline).await?,
            Step::Reserve { alloc, worker, incarnation, unit } => {
                let unit = unit.min(layout.max_time());
                reserve(shared, name, alloc, worker, incarnation, unit, deadline).await?
            }
            Step::Wait { unit } => {
                let clock = &shared.ids.clock;
                wait_for_unit(&shared.metrics, clock, name, layout, unit, deadline).await?
            }
        }
    };
    Ok((worker_id, issued.ids))
}

/// The ids a call issued so far, all with one worker id.
#[derive(Default)]
struct Issued {
    ids: Vec<u128>,
    worker: Option<u64>,
}

/// What a call must do before it can go on issuing.
enum Step {
    /// Lease a worker id for the scheme.
    Acquire(AllocId),
    /// The clock must reach this unit (it is behind the time already used).
    Wait { unit: u64 },
    /// The store must raise the high-water mark to at least `unit` first.
    Reserve { alloc: AllocId, worker: u64, incarnation: u64, unit: u64 },
    /// A chunk was issued: let the other callers in, then go on.
    Yield,
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

/// Issues as many of `want` more ids as it can now, at most one [`CHUNK`], under the lock.
fn issue(
    shared: &Arc<Shared>,
    inner: &mut Inner,
    name: &str,
    setup: &SchemeSetup,
    business: u64,
    want: usize,
    issued: &mut Issued,
) -> Result<Step, AllocError> {
    let Issued { ids: out, worker: worker_of_out } = issued;
    if inner.stopping {
        return Err(AllocError::StoppingIds);
    }
    if !Tooth::NoAllocLeaseCheck.on() && !inner.lease_valid(BootInstant::now()) {
        return Err(AllocError::NoLeaseNoWorker);
    }
    let Some(alloc) = inner.alloc_id else {
        return Err(AllocError::NotRegistered);
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
    let now = layout.units_at(shared.ids.clock.now_ms());
    // Every field but the stamp (and uuidv7's random bits) is fixed for this call: checked
    // once, then each id is shifts and ORs. The layout holds every field: the worker id
    // comes from this set's share of the scheme's worker ids, the business number was
    // checked, and the generator never passes the time or sequence fields.
    let zero = Stamp { time: 0, sequence: 0 };
    let random_bits = if layout.scheme() == Scheme::UuidV7 { UUID_RANDOM_BITS } else { 0 };
    let packer = layout
        .packer(&issued_fields(layout, slot.worker, zero, business, 0), random_bits)
        .map_err(AllocError::Pack)?;
    let mut step = None;
    let share = ahead_share(setup.max_ahead_units, want);
    let chunk_end = want.min(out.len().saturating_add(CHUNK));
    while out.len() < chunk_end {
        if let Some(unit) = beyond_share(&slot.generator, layout, now, share) {
            step = Some(Step::Wait { unit });
            break;
        }
        match slot.generator.next_run(now, slot.high_water, (chunk_end - out.len()) as u64) {
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
    note_clock_back(&shared.metrics, name, issuer, stats, &mut slot.logged_clock_back);
    // Keep the mark half a reservation ahead, off the call path.
    let backing_off = slot.reserve_after.is_some_and(|t| Instant::now() < t);
    if !slot.reserving
        && !backing_off
        && slot.high_water < now.saturating_add(setup.reserve_units / 2)
    {
        slot.reserving = true;
        let target = now.saturating_add(setup.reserve_units).min(layout.max_time());
        let (shared, name) = (shared.clone(), name.to_string());
        let (worker, incarnation) = (slot.worker, slot.incarnation);
        tokio::spawn(async move {
            let deadline = Instant::now()
                + std::time::Duration::from_millis(shared.config.tuning.request_timeout_ms);
            let _ = reserve(&shared, &name, alloc, worker, incarnation, target, deadline).await;
        });
    }
    let done = out.len() >= want;
    Ok(step.unwrap_or(if done { Step::Done { worker: slot.worker } } else { Step::Yield }))
}

/// Leases a worker id of `name` for `alloc` and installs its generator above the high-water
/// mark. One lease at a time per scheme (a call that finds one installed meanwhile is done).
async fn acquire(
    shared: &Arc<Shared>,
    name: &str,
    setup: &SchemeSetup,
    alloc: AllocId,
    deadline: Instant,
) -> Result<(), AllocError> {
    let lock = shared.id_locks.get(name).expect("a lock per configured scheme");
    let _one_at_a_time = tokio::time::timeout_at(deadline, lock.lock())
        .await
        .map_err(|_| AllocError::WorkerLeaseTimeout)?;
    if shared.lock().ids.slots.contains_key(name) {
        return Ok(());
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let leased = shared.store.acquire_worker(alloc, name, &setup.fingerprint, left).await;
    let (worker, high_water_ms) = leased.map_err(|s| {
        let (name, message) = (name.to_string(), s.message().to_string());
        match s.code() {
            Code::ResourceExhausted => AllocError::NoWorkerFree(Box::new(s)),
            Code::InvalidArgument => AllocError::WorkerRefused { name, message },
            _ => AllocError::WorkerUnreachable { name, message },
        }
    })?;
    let acquired_at = BootInstant::now();
    let layout = &setup.layout;
    // The first time issued is above every time an earlier holder may have used.
    let floor = if Tooth::NoHighWater.on() { 0 } else { layout.units_at(high_water_ms) };
    let generator = seqsvr_core::idscheme::Generator::new(layout, floor, setup.max_ahead_units)
        .map_err(|error| AllocError::WorkerRanOut { name: name.to_string(), worker, error })?;
    let mut inner = shared.lock();
    if inner.alloc_id != Some(alloc) || inner.stopping {
        return Err(AllocError::RegistrationChanged);
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
) -> Result<(), AllocError> {
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
            let (name, message) = (name.to_string(), status.message().to_string());
            Err(AllocError::ReserveFailed { worker, name, message })
        }
    }
}
