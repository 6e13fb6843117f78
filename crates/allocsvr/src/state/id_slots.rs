//! The id state under the AllocSvr's one lock (`state::Inner::ids`), and the rules of when it may
//! issue. `ids/` issues from it; the lease loop (`lease.rs`) applies each grant to it.
//!
//! - [`WorkerSlot`]: the worker id held for one scheme (`snowflake`, `uid-generator`, `weibo`,
//!   `uuidv7`), its generator and the high-water mark the store committed; [`IdWorkers`]: every
//!   scheme's, and which of them a grant still lets issue ([`IdWorkers::keep_granted`]).
//! - [`SessionSlot`]: the generator of one section's `rongcloud` sessions under one lease epoch;
//!   [`Sessions`]: every section's, and where a slot starts when a reservation is answered
//!   ([`Sessions::answered`]: above every mark its epoch was answered).

use crate::config::SchemeSetup;
use seqsvr_core::alloc::AllocTable;
use seqsvr_core::ids::{LeaseEpoch, SectionId};
use seqsvr_core::idscheme::{Generator, Layout};
use seqsvr_core::teeth::Tooth;
use seqsvr_server::BootInstant;
use std::collections::{BTreeMap, BTreeSet};
use tokio::time::Instant;

/// The worker id held for one scheme and its generator.
#[derive(Debug)]
pub struct WorkerSlot {
    pub worker: u64,
    pub generator: Generator,
    /// The high-water mark the store has committed, in the layout's units: nothing above it is
    /// issued.
    pub high_water: u64,
    /// When the store's answer leasing it arrived: a heartbeat sent before may not list it yet.
    pub acquired_at: BootInstant,
    /// Tells this slot from a later one for the same scheme (answers that arrive late).
    pub incarnation: u64,
    /// A background reservation is in flight.
    pub reserving: bool,
    /// No background reservation before this (one just failed: the store is down or refuses).
    pub reserve_after: Option<Instant>,
    /// Clock-back events already logged.
    pub logged_clock_back: u64,
}

/// The worker ids this AllocSvr holds, per scheme name (inside `state::Inner`).
#[derive(Debug, Default)]
pub struct IdWorkers {
    pub slots: BTreeMap<String, WorkerSlot>,
    pub next_incarnation: u64,
    /// `rongcloud`: one generator per section served (`ids/sessions.rs` issues from them).
    pub sessions: Sessions,
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

/// The section slots of every `rongcloud` scheme (inside `state::Inner`, under its lock).
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

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_core::alloc::AllocConfig;
    use seqsvr_core::idscheme::{LayoutSpec, Next, Scheme};
    use seqsvr_core::section::SectionRange;
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
        let loads = table.grant(&[(run, LeaseEpoch(epoch))]);
        table.loaded(&loads[0], &BTreeMap::new());
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
