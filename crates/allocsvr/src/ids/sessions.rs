//! RongCloud message ids (issue 10, seed 000): one owner per session, its section's.
//!
//! A `rongcloud` id has no worker field: 42-bit ms + 12-bit sequence + 4-bit session type +
//! 22-bit session hash. It is unique because each session (type, hash) has **one issuer at a
//! time** and that issuer's (time, sequence) stamps only go up. The issuer is the owner of the
//! section of the session's uid (`IdSchemeConfig::session_uid`): the same lease, the same lease
//! epochs and the same fencing as the sequences of that section's uids, so a session moves with
//! its section and never has two owners (I3).
//!
//! Across owners, a **time mark per section** in the store (`Command::ReserveSessionTime`,
//! fenced by owner and lease epoch like an advance) plays the part a worker id's high-water
//! mark plays for the other schemes:
//! - the owner issues no time above the mark it has reserved (committed) for the section;
//! - a new owner (or this one at a new lease epoch) starts strictly above the mark as it was
//!   before its own first reservation (`before`), which is at or above every time an earlier
//!   owner could issue: an earlier owner's reservations after the move are fenced, and the ones
//!   before it applied before ours;
//! - within one owner's epoch, a slot dropped and installed again starts above the highest mark
//!   the store ever answered it under that epoch (`seen`), so a late answer with a lower
//!   `before` cannot start a slot below what an earlier slot issued.
//!
//! One generator per section serves all its sessions (every session's ids strictly increase,
//! since they are a subsequence of the section's stamps; the session fields make ids of
//! different sessions differ). A section issues up to 4,096 ids per ms before borrowing ahead.
//!
//! The section slots and the rule of where a slot starts are state under the lock
//! (`state/id_slots.rs`: `Sessions::answered`); this module issues from them and reserves.

use super::clock::{
    ahead_share, beyond_share, note_clock_back, ran_out, wait_for_unit, CHUNK, RESERVE_BACKOFF,
};
use crate::config::SchemeSetup;
use crate::rpc::{AllocError, NotOwner, WaitSlot};
use crate::state::id_slots::Answered;
use crate::state::{Inner, Shared};
use seqsvr_core::alloc::SeqError;
use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId};
use seqsvr_core::idscheme::{session_fields, session_hash_of, session_key, NextRun, Stamp};
use seqsvr_core::teeth::Tooth;
use seqsvr_proto::v1 as pb;
use seqsvr_server::BootInstant;
use std::sync::Arc;
use tokio::time::Instant;
use tonic::Code;

/// What a session call must do before it can go on issuing.
enum SessionStep {
    /// Reserve the section's mark (`Reservation::unit`).
    Reserve(Reservation),
    /// No slot yet: this call makes the first reservation, which installs it. The guard was
    /// made with the `installing` mark, so every way out of the call ends the mark (a wait slot
    /// refused, the call dropped, the reservation done or failed).
    Install(Reservation, Installing),
    /// No slot yet, and another call's first reservation is in flight: wait for it.
    AwaitInstall,
    /// The clock must reach this unit.
    Wait {
        unit: u64,
    },
    /// A chunk was issued: let the other callers in, then go on.
    Yield,
    Done,
}

/// `NextIds` of a `rongcloud` scheme: `count` ids of one session, from its section's owner,
/// issued in chunks as `workers.rs` does. A call that waits (for the clock, a reservation or
/// the section's first one) takes a wait slot first (`alloc.max_waiting_id_calls`). Returns the
/// uid the session is routed by and the ids.
pub async fn next_ids(
    shared: &Arc<Shared>,
    r: &pb::NextIdsRequest,
    setup: &SchemeSetup,
    deadline: Instant,
) -> Result<(u64, Vec<u128>), AllocError> {
    if r.business != 0 {
        return Err(AllocError::NoBusiness { name: r.scheme.clone() });
    }
    let session_hash = match (r.session_id.is_empty(), r.session_hash) {
        (true, Some(hash)) => hash,
        (false, None) => session_hash_of(&r.session_id),
        (false, Some(_)) => return Err(AllocError::SessionTwice),
        (true, None) => return Err(AllocError::NoSession { name: r.scheme.clone() }),
    };
    let session_type = u64::from(r.session_type);
    let key = session_key(session_type, session_hash)
        .ok_or(AllocError::BadSession { session_type, session_hash })?;
    let uid = setup.session_uid(key);
    let layout = &setup.layout;
    let want = r.count as usize;
    let mut out: Vec<u128> = Vec::with_capacity(want);
    let mut waiting: Option<WaitSlot> = None;
    loop {
        // Armed before the look under the lock, so a slot installed meanwhile wakes it.
        let installed = shared.changed.notified();
        tokio::pin!(installed);
        installed.as_mut().enable();
        let step = {
            let mut inner = shared.lock();
            let fields = (session_type, session_hash);
            issue(shared, &mut inner, &r.scheme, setup, uid, fields, want, &mut out)?
        };
        if !matches!(step, SessionStep::Done | SessionStep::Yield) && waiting.is_none() {
            waiting = Some(WaitSlot::take_for_ids(shared)?);
        }
        match step {
            SessionStep::Done => break,
            SessionStep::Yield => tokio::task::yield_now().await,
            SessionStep::Reserve(reservation) => {
                reserve_session(shared, &r.scheme, reservation, deadline).await?;
            }
            SessionStep::Install(reservation, installing) => {
                // A task of its own: it ends the install (and wakes the waiters) even if
                // this call is dropped meanwhile.
                let (shared, name) = (shared.clone(), r.scheme.clone());
                let install = tokio::spawn(async move {
                    let _done = installing;
                    reserve_session(&shared, &name, reservation, deadline).await
                });
                let answered =
                    install.await.map_err(|e| AllocError::InstallFailed(e.to_string()))??;
                if answered == Answered::Ignored {
                    // The section moved on meanwhile: look again after a pause, not in a
                    // loop of Raft writes.
                    tokio::time::sleep_until(deadline.min(Instant::now() + RESERVE_BACKOFF)).await;
                }
            }
            SessionStep::AwaitInstall => {
                if tokio::time::timeout_at(deadline, installed).await.is_err() {
                    return Err(AllocError::InstallSlow { name: r.scheme.clone() });
                }
            }
            SessionStep::Wait { unit } => {
                let clock = &shared.ids.clock;
                wait_for_unit(&shared.metrics, clock, &r.scheme, layout, unit, deadline).await?
            }
        }
    }
    Ok((uid, out))
}

/// Issues as many of `want` more ids of the session as it can now, at most one [`CHUNK`],
/// under the lock.
#[allow(clippy::too_many_arguments)]
fn issue(
    shared: &Arc<Shared>,
    inner: &mut Inner,
    name: &str,
    setup: &SchemeSetup,
    uid: u64,
    (session_type, session_hash): (u64, u64),
    want: usize,
    out: &mut Vec<u128>,
) -> Result<SessionStep, AllocError> {
    if inner.stopping {
        return Err(AllocError::StoppingSessions);
    }
    if !Tooth::NoAllocLeaseCheck.on() && !inner.lease_valid(BootInstant::now()) {
        return Err(AllocError::NoLease);
    }
    let Some(alloc) = inner.alloc_id else {
        return Err(AllocError::NotRegistered);
    };
    let config = &shared.config;
    if uid < config.uid_begin || uid >= config.uid_end {
        return Err(AllocError::SessionOtherSet { uid });
    }
    let section = SectionId(uid / config.section_size);
    let lease_epoch = match inner.table.serving_epoch(section) {
        Ok(e) => e,
        Err(SeqError::NotOwned(_)) if inner.routed_here(section, inner.alloc_id) => {
            return Err(AllocError::SessionHandOver(section))
        }
        Err(SeqError::NotOwned(_)) => {
            let not_owner = NotOwner::of(section, &inner.route);
            return Err(AllocError::SessionNotOwner { uid, not_owner });
        }
        Err(e) => return Err(AllocError::SectionNotReady(e)),
    };
    let layout = &setup.layout;
    let now = layout.units_at(shared.ids.clock.now_ms());
    let ahead = now.saturating_add(setup.reserve_units).min(layout.max_time());
    let Some(slot) = inner.ids.sessions.slot(name, section, lease_epoch) else {
        let key = (name.to_string(), section, lease_epoch);
        if inner.ids.sessions.installing.contains(&key) {
            return Ok(SessionStep::AwaitInstall);
        }
        inner.ids.sessions.installing.insert(key.clone());
        // Made with the mark: dropped (it takes the lock) only after the caller let it go.
        let installing = Installing { shared: shared.clone(), key };
        let unit = ahead;
        let reservation = Reservation { alloc, section, lease_epoch, unit };
        return Ok(SessionStep::Install(reservation, installing));
    };
    // The session's fields are fixed for this call: checked once, then each id is shifts
    // and ORs (the generator never passes the time or sequence fields).
    let zero = Stamp { time: 0, sequence: 0 };
    let packer = layout
        .packer(&session_fields(zero, session_type, session_hash), 0)
        .map_err(AllocError::Pack)?;
    let mut step = None;
    let share = ahead_share(setup.max_ahead_units, want);
    let chunk_end = want.min(out.len().saturating_add(CHUNK));
    while out.len() < chunk_end {
        if let Some(unit) = beyond_share(&slot.generator, layout, now, share) {
            step = Some(SessionStep::Wait { unit });
            break;
        }
        match slot.generator.next_run(now, slot.high_water, (chunk_end - out.len()) as u64) {
            Ok(NextRun::Issue(run)) => {
                out.extend(run.stamps().map(|s| packer.pack(s.time, s.sequence, 0)));
            }
            Ok(NextRun::WaitUntil(unit)) => {
                step = Some(SessionStep::Wait { unit });
                break;
            }
            Ok(NextRun::RaiseHighWater(wanted)) => {
                let unit = wanted.max(ahead);
                let reservation = Reservation { alloc, section, lease_epoch, unit };
                step = Some(SessionStep::Reserve(reservation));
                break;
            }
            Err(e) => return Err(ran_out(name, layout, e)),
        }
    }
    let stats = slot.generator.stats();
    let issuer = || format!("section {section}");
    let logged = &mut slot.logged_clock_back;
    note_clock_back(&shared.metrics, name, issuer, stats, logged);
    // Keep the mark half a reservation ahead, off the call path.
    let backing_off = slot.reserve_after.is_some_and(|t| Instant::now() < t);
    if !slot.reserving
        && !backing_off
        && slot.high_water < now.saturating_add(setup.reserve_units / 2)
    {
        slot.reserving = true;
        let unit = ahead;
        let (shared, name) = (shared.clone(), name.to_string());
        let timeout = std::time::Duration::from_millis(config.tuning.request_timeout_ms);
        tokio::spawn(async move {
            let reservation = Reservation { alloc, section, lease_epoch, unit };
            let _ = reserve_session(&shared, &name, reservation, Instant::now() + timeout).await;
        });
    }
    let done = out.len() >= want;
    Ok(step.unwrap_or(if done { SessionStep::Done } else { SessionStep::Yield }))
}

/// Ends a slot's first reservation when dropped (done, failed, or its task panicked): the next
/// call may install, and the calls waiting for it look again.
struct Installing {
    shared: Arc<Shared>,
    key: (String, SectionId, LeaseEpoch),
}

impl Drop for Installing {
    fn drop(&mut self) {
        self.shared.lock().ids.sessions.installing.remove(&self.key);
        self.shared.changed.notify_waiters();
    }
}

/// A reservation of one section's session time mark.
#[derive(Clone, Copy, Debug)]
struct Reservation {
    alloc: AllocId,
    section: SectionId,
    lease_epoch: LeaseEpoch,
    unit: u64,
}

/// Raises the section's session time mark in the store to `unit` and installs or raises its
/// slot. A fenced answer (not the owner at that epoch) stops the section at once.
async fn reserve_session(
    shared: &Arc<Shared>,
    name: &str,
    reservation: Reservation,
    deadline: Instant,
) -> Result<Answered, AllocError> {
    let Reservation { alloc, section, lease_epoch, unit } = reservation;
    let setup = shared.ids.schemes.get(name).expect("a configured scheme");
    let up_to_ms = setup.layout.unix_ms(unit);
    let left = deadline.saturating_duration_since(Instant::now());
    let result = shared
        .store
        .reserve_session_time(alloc, name, &setup.fingerprint, section, lease_epoch, up_to_ms, left)
        .await;
    let mut guard = shared.lock();
    let inner = &mut *guard;
    match result {
        Ok((before_ms, after_ms)) => {
            if inner.alloc_id != Some(alloc) {
                return Ok(Answered::Ignored); // registered again: its sections have new epochs
            }
            let answered = inner
                .ids
                .sessions
                .answered(&inner.table, name, setup, section, lease_epoch, before_ms, after_ms)
                .map_err(|error| AllocError::SessionRanOut {
                    name: name.to_string(),
                    section,
                    error,
                })?;
            drop(guard);
            shared.metrics.ids_reservations.increment(1);
            if let Answered::Installed { floor } = answered {
                tracing::info!(scheme = %name, %section, lease_epoch = %lease_epoch, before_ms,
                    starts_above = %seqsvr_core::idscheme::rfc3339_ms(setup.layout.unix_ms(floor)),
                    "rongcloud sessions of a section: issuing above its time mark");
            }
            Ok(answered)
        }
        Err(status) if status.code() == Code::FailedPrecondition => {
            // Not the owner at this epoch any more: neither its sessions nor its sequences.
            inner.ids.sessions.drop_slot(name, section, lease_epoch);
            if inner.table.serving_epoch(section) == Ok(lease_epoch) {
                inner.table.drop_section(section);
            }
            drop(guard);
            tracing::warn!(scheme = %name, %section, lease_epoch = %lease_epoch,
                error = %status.message(), "the store refused a session time reservation: \
                section dropped");
            shared.wake_heartbeat.notify_one();
            Err(AllocError::SectionLost { section, message: status.message().to_string() })
        }
        Err(status) if status.code() == Code::InvalidArgument => {
            // The store refuses the scheme itself (another config): retrying cannot help until
            // an operator fixes it. (A time too far ahead of the leader's clock is UNAVAILABLE:
            // retried below, as the clocks may agree again.)
            let until = Instant::now() + RESERVE_BACKOFF;
            inner.ids.sessions.back_off(name, section, lease_epoch, until);
            drop(guard);
            tracing::error!(scheme = %name, %section, error = %status.message(),
                "the store refuses session time reservations");
            let (name, message) = (name.to_string(), status.message().to_string());
            Err(AllocError::SessionsRefused { name, message })
        }
        Err(status) => {
            inner.ids.sessions.back_off(
                name,
                section,
                lease_epoch,
                Instant::now() + RESERVE_BACKOFF,
            );
            drop(guard);
            let (name, message) = (name.to_string(), status.message().to_string());
            Err(AllocError::SessionReserveFailed { section, name, message })
        }
    }
}
