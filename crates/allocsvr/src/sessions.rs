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

use crate::ids::{IdServer, SchemeSetup, RESERVE_BACKOFF};
use crate::lease::{Inner, Shared};
use seqsvr_core::alloc::{AllocTable, SeqError};
use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId};
use seqsvr_core::idscheme::{
    session_fields, session_hash_of, session_key, Generator, Layout, NextRun, Stamp,
    SESSION_HASHES, SESSION_TYPES,
};
use seqsvr_core::teeth::Tooth;
use seqsvr_proto::v1 as pb;
use seqsvr_server::BootInstant;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::time::Instant;
use tonic::{Code, Response, Status};

/// The generator of one section's sessions of one scheme, under one lease epoch.
#[derive(Debug)]
pub struct SessionSlot {
    pub lease_epoch: LeaseEpoch,
    pub generator: Generator,
    /// The committed mark in the layout's units: nothing above it is issued.
    pub high_water: u64,
    /// A background reservation is in flight.
    pub reserving: bool,
    /// No background reservation before this (one just failed).
    pub reserve_after: Option<Instant>,
    /// Clock-back events already logged.
    pub logged_clock_back: u64,
}

/// The section slots of every `rongcloud` scheme (inside `lease::Inner`, under its lock).
#[derive(Debug, Default)]
pub struct Sessions {
    pub slots: BTreeMap<(String, SectionId), SessionSlot>,
    /// Per (scheme, section): the newest lease epoch the store answered a reservation under,
    /// and the highest mark (Unix ms) answered under it. Bounded by the set's sections.
    seen: BTreeMap<(String, SectionId), (LeaseEpoch, u64)>,
    /// Slots whose first reservation is in flight: one per slot, the other calls wait for it
    /// (a herd of first reservations would each be a Raft write, and a later-applied one
    /// answered first would start the slot needlessly far ahead).
    pub installing: BTreeSet<(String, SectionId, LeaseEpoch)>,
}

/// What a committed reservation did here.
#[derive(Debug, PartialEq, Eq)]
pub enum Answered {
    /// A new slot starts above this unit.
    Installed { floor: u64 },
    /// The slot's mark was raised.
    Raised,
    /// Nothing: the answer is for an older epoch, or the section is not served at its epoch.
    Ignored,
}

impl Sessions {
    /// Forgets everything (the registration is gone: the next one gets new lease epochs).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.seen.clear();
        self.installing.clear();
    }

    /// Drops the slots of sections this AllocSvr no longer serves at the slot's epoch.
    pub fn prune(&mut self, table: &AllocTable) {
        self.slots
            .retain(|(_, section), slot| table.serving_epoch(*section) == Ok(slot.lease_epoch));
    }

    /// The slot of (`scheme`, `section`) if it was installed under `lease_epoch`.
    pub fn slot(
        &mut self,
        scheme: &str,
        section: SectionId,
        lease_epoch: LeaseEpoch,
    ) -> Option<&mut SessionSlot> {
        // A String key: the map is small (sections held × rongcloud schemes).
        self.slots
            .get_mut(&(scheme.to_string(), section))
            .filter(|slot| slot.lease_epoch == lease_epoch)
    }

    /// The store committed a reservation of (`scheme`, `section`) under `lease_epoch`: the mark
    /// was `before_ms` and is now `after_ms`. Raises the slot of that epoch, or installs one
    /// (if `table` serves the section at that epoch) starting above `before_ms` and above every
    /// mark answered before under the same epoch.
    #[allow(clippy::too_many_arguments)]
    pub fn answered(
        &mut self,
        table: &AllocTable,
        scheme: &str,
        setup: &SchemeSetup,
        section: SectionId,
        lease_epoch: LeaseEpoch,
        before_ms: u64,
        after_ms: u64,
    ) -> Result<Answered, seqsvr_core::idscheme::GenError> {
        let key = (scheme.to_string(), section);
        let prior = match self.seen.get(&key) {
            Some(&(e, _)) if e > lease_epoch => return Ok(Answered::Ignored),
            Some(&(e, mark)) if e == lease_epoch => Some(mark),
            _ => None,
        };
        self.seen.insert(key.clone(), (lease_epoch, prior.unwrap_or(0).max(after_ms)));
        let layout: &Layout = &setup.layout;
        if let Some(slot) = self.slots.get_mut(&key).filter(|s| s.lease_epoch == lease_epoch) {
            slot.high_water = slot.high_water.max(layout.units_at(after_ms));
            slot.reserving = false;
            return Ok(Answered::Raised);
        }
        if table.serving_epoch(section) != Ok(lease_epoch) {
            return Ok(Answered::Ignored);
        }
        let floor_ms = before_ms.max(prior.unwrap_or(0));
        let floor = if Tooth::NoSessionFloor.on() { 0 } else { layout.units_at(floor_ms) };
        let generator = Generator::new(layout, floor, setup.max_ahead_units)?;
        self.slots.insert(
            key,
            SessionSlot {
                lease_epoch,
                generator,
                high_water: layout.units_at(after_ms),
                reserving: false,
                reserve_after: None,
                logged_clock_back: 0,
            },
        );
        Ok(Answered::Installed { floor })
    }

    /// A reservation of the slot under `lease_epoch` failed for a passing reason: no
    /// background reservation for a while.
    pub fn back_off(
        &mut self,
        scheme: &str,
        section: SectionId,
        lease_epoch: LeaseEpoch,
        until: Instant,
    ) {
        if let Some(slot) = self.slot(scheme, section, lease_epoch) {
            slot.reserving = false;
            slot.reserve_after = Some(until);
        }
    }

    /// The store refused a reservation under `lease_epoch` (fenced: not the owner at it).
    pub fn drop_slot(&mut self, scheme: &str, section: SectionId, lease_epoch: LeaseEpoch) {
        let key = (scheme.to_string(), section);
        if self.slots.get(&key).is_some_and(|s| s.lease_epoch == lease_epoch) {
            self.slots.remove(&key);
        }
    }
}

/// What a session call must do before it can go on issuing.
enum SessionStep {
    /// Reserve the section's mark (`Reservation::unit`).
    Reserve(Reservation),
    /// No slot yet: this call makes the first reservation, which installs it.
    Install(Reservation),
    /// No slot yet, and another call's first reservation is in flight: wait for it.
    AwaitInstall,
    /// The clock must reach this unit.
    Wait {
        unit: u64,
    },
    Done,
}

/// NOT_OWNER for a session: `status` (this set's NOT_OWNER with its route table) or, for a uid
/// of another set, a plain one; both carry the session's uid so the client routes it.
fn session_not_owner(uid: u64, status: Option<Status>) -> Status {
    let mut status = status.unwrap_or_else(|| {
        Status::failed_precondition(format!(
            "NOT_OWNER: the session is routed by uid {uid}, which another set owns: ask an \
             AllocSvr of that set"
        ))
    });
    status.metadata_mut().insert(
        seqsvr_proto::SESSION_UID_METADATA,
        uid.to_string().parse().expect("digits are valid metadata"),
    );
    status
}

impl IdServer {
    /// `NextIds` of a `rongcloud` scheme: `count` ids of one session, from its section's owner.
    pub(crate) async fn next_session_ids(
        &self,
        r: pb::NextIdsRequest,
        setup: &SchemeSetup,
        deadline: Instant,
    ) -> Result<Response<pb::NextIdsResponse>, Status> {
        if r.business != 0 {
            return Err(Status::invalid_argument(format!(
                "id scheme {:?} has no business number: send 0",
                r.scheme
            )));
        }
        let session_hash = match (r.session_id.is_empty(), r.session_hash) {
            (true, Some(hash)) => hash,
            (false, None) => session_hash_of(&r.session_id),
            (false, Some(_)) => {
                return Err(Status::invalid_argument(
                    "give the session as session_id or as session_hash, not both",
                ))
            }
            (true, None) => {
                return Err(Status::invalid_argument(format!(
                    "id scheme {:?} is rongcloud: its ids belong to a session; give session_type \
                     and session_id (or session_hash)",
                    r.scheme
                )))
            }
        };
        let session_type = u64::from(r.session_type);
        let key = session_key(session_type, session_hash).ok_or_else(|| {
            Status::invalid_argument(format!(
                "session type {session_type} and hash {session_hash} must be below {SESSION_TYPES} \
                 and {SESSION_HASHES}"
            ))
        })?;
        let uid = setup.session_uid(key);
        let layout = &setup.layout;
        let want = r.count as usize;
        let mut out: Vec<u128> = Vec::with_capacity(want);
        loop {
            // Armed before the look under the lock, so a slot installed meanwhile wakes it.
            let installed = self.shared.changed.notified();
            tokio::pin!(installed);
            installed.as_mut().enable();
            let step = {
                let mut inner = self.shared.lock();
                let fields = (session_type, session_hash);
                self.issue_session(&mut inner, &r.scheme, setup, uid, fields, want, &mut out)?
            };
            match step {
                SessionStep::Done => break,
                SessionStep::Reserve(reservation) => {
                    reserve_session(&self.shared, &r.scheme, reservation, deadline).await?;
                }
                SessionStep::Install(reservation) => {
                    // A task of its own: it ends the install (and wakes the waiters) even if
                    // this call is dropped meanwhile.
                    let (shared, name) = (self.shared.clone(), r.scheme.clone());
                    let install = tokio::spawn(async move {
                        let key = (name.clone(), reservation.section, reservation.lease_epoch);
                        let _done = Installing { shared: shared.clone(), key };
                        reserve_session(&shared, &name, reservation, deadline).await
                    });
                    let answered = install.await.map_err(|e| {
                        Status::internal(format!("the first session reservation failed: {e}"))
                    })??;
                    if answered == Answered::Ignored {
                        // The section moved on meanwhile: look again after a pause, not in a
                        // loop of Raft writes.
                        tokio::time::sleep_until(deadline.min(Instant::now() + RESERVE_BACKOFF))
                            .await;
                    }
                }
                SessionStep::AwaitInstall => {
                    if tokio::time::timeout_at(deadline, installed).await.is_err() {
                        return Err(Status::unavailable(format!(
                            "the sessions of this section of {:?} still wait for their first \
                             time reservation in the store (slow, or without quorum?): retry",
                            r.scheme
                        )));
                    }
                }
                SessionStep::Wait { unit } => {
                    crate::ids::wait_for_unit(&self.shared, &r.scheme, layout, unit, deadline)
                        .await?
                }
            }
        }
        self.shared.metrics.ids_issued.increment(out.len() as u64);
        let mut response = pb::NextIdsResponse { session_uid: uid, ..Default::default() };
        seqsvr_proto::put_ids128(&mut response, &out, r.packed_ids128);
        Ok(Response::new(response))
    }

    /// Issues as many of `want` more ids of the session as it can now, under the lock.
    #[allow(clippy::too_many_arguments)]
    fn issue_session(
        &self,
        inner: &mut Inner,
        name: &str,
        setup: &SchemeSetup,
        uid: u64,
        (session_type, session_hash): (u64, u64),
        want: usize,
        out: &mut Vec<u128>,
    ) -> Result<SessionStep, Status> {
        if inner.stopping {
            return Err(Status::unavailable(
                "this AllocSvr is shutting down: ask the AllocSvr the route table names",
            ));
        }
        if !Tooth::NoAllocLeaseCheck.on() && !inner.lease_valid(BootInstant::now()) {
            return Err(Status::unavailable(
                "this AllocSvr holds no valid lease (store unreachable, or its registration is \
                 being renewed); retry, possibly at another AllocSvr",
            ));
        }
        let Some(alloc) = inner.alloc_id else {
            return Err(Status::unavailable("this AllocSvr is not registered with its store yet"));
        };
        let config = &self.shared.config;
        if uid < config.uid_begin || uid >= config.uid_end {
            return Err(session_not_owner(uid, None));
        }
        let section = SectionId(uid / config.section_size);
        let lease_epoch = match inner.table.serving_epoch(section) {
            Ok(e) => e,
            Err(SeqError::NotOwned(_)) if inner.routed_here(section, inner.alloc_id) => {
                return Err(Status::unavailable(format!(
                    "section {section} is being handed over to this AllocSvr; it serves once the \
                     previous owner's lease has run out: retry"
                )))
            }
            Err(SeqError::NotOwned(_)) => {
                let status = crate::service::not_owner(section, &inner.route);
                return Err(session_not_owner(uid, Some(status)));
            }
            Err(e) => return Err(Status::unavailable(format!("{e}: retry"))),
        };
        let layout = &setup.layout;
        let now = layout.units_at(seqsvr_server::clock::unix_ms_now());
        let ahead = now.saturating_add(setup.reserve_units).min(layout.max_time());
        let Some(slot) = inner.ids.sessions.slot(name, section, lease_epoch) else {
            let key = (name.to_string(), section, lease_epoch);
            if inner.ids.sessions.installing.contains(&key) {
                return Ok(SessionStep::AwaitInstall);
            }
            inner.ids.sessions.installing.insert(key);
            let unit = ahead;
            return Ok(SessionStep::Install(Reservation { alloc, section, lease_epoch, unit }));
        };
        // The session's fields are fixed for this call: checked once, then each id is shifts
        // and ORs (the generator never passes the time or sequence fields).
        let zero = Stamp { time: 0, sequence: 0 };
        let packer = layout
            .packer(&session_fields(zero, session_type, session_hash), 0)
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut step = None;
        while out.len() < want {
            match slot.generator.next_run(now, slot.high_water, (want - out.len()) as u64) {
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
                Err(e) => return Err(crate::ids::ran_out(name, layout, e)),
            }
        }
        let stats = slot.generator.stats();
        let issuer = || format!("section {section}");
        let logged = &mut slot.logged_clock_back;
        crate::ids::note_clock_back(&self.shared, name, issuer, stats, logged);
        // Keep the mark half a reservation ahead, off the call path.
        let backing_off = slot.reserve_after.is_some_and(|t| Instant::now() < t);
        if !slot.reserving
            && !backing_off
            && slot.high_water < now.saturating_add(setup.reserve_units / 2)
        {
            slot.reserving = true;
            let unit = ahead;
            let (shared, name) = (self.shared.clone(), name.to_string());
            let timeout = std::time::Duration::from_millis(config.tuning.request_timeout_ms);
            tokio::spawn(async move {
                let reservation = Reservation { alloc, section, lease_epoch, unit };
                let _ =
                    reserve_session(&shared, &name, reservation, Instant::now() + timeout).await;
            });
        }
        Ok(step.unwrap_or(SessionStep::Done))
    }
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
) -> Result<Answered, Status> {
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
                .map_err(|e| {
                    Status::resource_exhausted(format!(
                        "id scheme {name:?}, section {section}: {e}"
                    ))
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
            Err(Status::unavailable(format!(
                "section {section} is no longer served here ({}); retry at its owner",
                status.message()
            )))
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
            Err(Status::failed_precondition(format!(
                "the store refuses time reservations for the sessions of {name:?}: {}",
                status.message()
            )))
        }
        Err(status) => {
            inner.ids.sessions.back_off(
                name,
                section,
                lease_epoch,
                Instant::now() + RESERVE_BACKOFF,
            );
            drop(guard);
            Err(Status::unavailable(format!(
                "could not reserve time for the sessions of section {section} of {name:?} in the \
                 store: {}",
                status.message()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_core::alloc::AllocConfig;
    use seqsvr_core::idscheme::{LayoutSpec, Next, Scheme};
    use seqsvr_core::section::SectionRange;

    const NOW_MS: u64 = 1_796_000_000_000;

    fn setup() -> SchemeSetup {
        let layout = LayoutSpec::of(Scheme::RongCloud).load(NOW_MS).unwrap();
        SchemeSetup {
            fingerprint: layout.fingerprint(),
            layout,
            max_ahead_units: 2_000,
            reserve_units: 3_000,
            session_uids: 0..1_000,
        }
    }

    fn table_serving(section: u64, epoch: u64) -> AllocTable {
        let mut table =
            AllocTable::new(AllocConfig { section_size: 100, step: 10, prefetch_remaining: 0 });
        let run = SectionRange::new(SectionId(section), SectionId(section + 1)).unwrap();
        table.grant(&[(run, LeaseEpoch(epoch))]);
        table.loaded(run, LeaseEpoch(epoch), &BTreeMap::new());
        table
    }

    fn first_time(sessions: &mut Sessions, epoch: u64) -> u64 {
        let slot = sessions.slot("rc", SectionId(3), LeaseEpoch(epoch)).expect("a slot");
        match slot.generator.next(NOW_MS, slot.high_water).unwrap() {
            Next::Issue(stamp) => stamp.time,
            other => panic!("{other:?}"),
        }
    }

    /// A slot starts above the mark before its reservation (whatever the clock says), and
    /// above every mark answered under the same epoch: a late answer with a lower `before`,
    /// after the slot was dropped, does not start a slot below what the dropped one could
    /// issue. Answers of an older epoch, or for a section not served at the answer's epoch,
    /// install nothing.
    #[test]
    fn a_slot_starts_above_every_mark_its_epoch_was_answered() {
        let setup = setup();
        let mut sessions = Sessions::default();
        let table = table_serving(3, 7);
        let answer = |s: &mut Sessions, table: &AllocTable, epoch, before, after| {
            s.answered(table, "rc", &setup, SectionId(3), LeaseEpoch(epoch), before, after).unwrap()
        };
        assert_eq!(
            answer(&mut sessions, &table, 7, NOW_MS + 10, NOW_MS + 3_000),
            Answered::Installed { floor: NOW_MS + 10 }
        );
        assert_eq!(first_time(&mut sessions, 7), NOW_MS + 11, "above the mark, ahead of the clock");
        assert_eq!(answer(&mut sessions, &table, 7, NOW_MS, NOW_MS + 5_000), Answered::Raised);
        assert_eq!(
            sessions.slot("rc", SectionId(3), LeaseEpoch(7)).unwrap().high_water,
            NOW_MS + 5_000
        );
        sessions.drop_slot("rc", SectionId(3), LeaseEpoch(7));
        // A late answer (applied before the others) must not start below NOW_MS + 5_000.
        assert_eq!(
            answer(&mut sessions, &table, 7, 0, NOW_MS + 1_000),
            Answered::Installed { floor: NOW_MS + 5_000 }
        );
        assert_eq!(answer(&mut sessions, &table, 6, 0, NOW_MS + 9_000), Answered::Ignored);
        let elsewhere = table_serving(4, 7);
        sessions.drop_slot("rc", SectionId(3), LeaseEpoch(7));
        assert_eq!(answer(&mut sessions, &elsewhere, 7, 0, NOW_MS), Answered::Ignored);
        // A new epoch starts from its own answer (the store's `before` covers older owners).
        let moved = table_serving(3, 9);
        assert_eq!(
            answer(&mut sessions, &moved, 9, NOW_MS + 6_000, NOW_MS + 8_000),
            Answered::Installed { floor: NOW_MS + 6_000 }
        );
        sessions.prune(&table_serving(3, 10));
        assert!(sessions.slots.is_empty(), "pruned: not served at its epoch");
    }
}
