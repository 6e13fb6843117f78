//! The StoreSvr state machine: one `max_seq` per section of a set, plus the control state the
//! arbiter (the Raft leader) keeps: the AllocSvr registry, the section → AllocSvr assignment
//! with lease epochs, and the route table version.
//!
//! Every member applies the same committed commands in the same order, so `apply` is
//! deterministic. Input that can be refused up front is refused before proposing
//! ([`validate_advance`], [`validate_read`]); what can only be judged against the state at the
//! moment of apply (fencing: is the caller the section's current owner at this epoch?) is judged
//! in `apply`, which then changes nothing and returns [`Rejected`].
//!
//! Invariants:
//! - I4: a section's `max_seq` never decreases (`apply` only takes `max`), and lease epochs only
//!   grow (`last_lease_epoch` is bumped by every `Assign`).
//! - I3 (store side): an `AdvanceMaxSeq` from an AllocSvr applies only if that AllocSvr owns
//!   every named section at the named epoch and the hand-over fence has passed.

use crate::assign::{Assignment, Owner};
use crate::ids::{AllocId, SectionId};
use crate::section::SectionRange;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One section of an `AdvanceMaxSeq`: raise `section` to at least `max_seq`, as the owner at
/// `lease_epoch` (ignored for operator advances).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionAdvance {
    pub section: SectionId,
    pub max_seq: u64,
    pub lease_epoch: u64,
}

/// A replicated command, the payload of one Raft log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Raise each listed section's `max_seq` to at least the given value. `alloc: None` is an
    /// operator raise (seqctl): unfenced, which is safe because raising only creates gaps.
    AdvanceMaxSeq { alloc: Option<AllocId>, sections: Vec<SectionAdvance> },
    /// A new AllocSvr incarnation at `addr`. An older registration with the same address is
    /// marked replaced: it is never granted again and its sections are handed over.
    RegisterAlloc { addr: String },
    /// Give section ranges to AllocSvrs under one new lease epoch. `settled`: the arbiter knows
    /// every previous owner's lease is over, so the new owner may serve at once.
    Assign { moves: Vec<(SectionRange, AllocId)>, settled: bool },
    /// The fence of `lease_epoch` has passed: its owners may serve.
    Settle { lease_epoch: u64 },
    /// A draining AllocSvr gets no sections; the arbiter moves its sections away.
    SetDraining { alloc: AllocId, draining: bool },
    /// Forget a registration that owns nothing.
    RemoveAlloc { alloc: AllocId },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("undecodable store command or snapshot: {0}")]
    Decode(String),
}

impl Command {
    pub fn encode(&self) -> Vec<u8> {
        // Serializing enums of integers and strings to JSON cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Command, CodecError> {
        serde_json::from_slice(bytes).map_err(|e| CodecError::Decode(e.to_string()))
    }
}

/// Input the store refuses before proposing anything (→ `INVALID_ARGUMENT`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    #[error("empty batch: name at least one section")]
    EmptyBatch,
    #[error("batch of {len} sections exceeds the limit of {max}")]
    BatchTooLarge { len: usize, max: usize },
    #[error("section {section} is outside this set's sections [{begin}, {end})")]
    SectionOutOfRange { section: SectionId, begin: SectionId, end: SectionId },
    #[error("section {0} appears more than once in the batch")]
    DuplicateSection(SectionId),
}

/// Checks a read request: non-empty, within the batch limit, each section in range and once.
pub fn validate_read(
    range: SectionRange,
    max_batch: usize,
    sections: &[SectionId],
) -> Result<(), InputError> {
    if sections.is_empty() {
        return Err(InputError::EmptyBatch);
    }
    if sections.len() > max_batch {
        return Err(InputError::BatchTooLarge { len: sections.len(), max: max_batch });
    }
    let mut seen = BTreeSet::new();
    for &section in sections {
        if !range.contains(section) {
            return Err(InputError::SectionOutOfRange {
                section,
                begin: range.begin(),
                end: range.end(),
            });
        }
        if !seen.insert(section) {
            return Err(InputError::DuplicateSection(section));
        }
    }
    Ok(())
}

/// Checks an advance request the same way as a read.
pub fn validate_advance(
    range: SectionRange,
    max_batch: usize,
    sections: &[SectionAdvance],
) -> Result<(), InputError> {
    let ids: Vec<SectionId> = sections.iter().map(|a| a.section).collect();
    validate_read(range, max_batch, &ids)
}

/// Why a committed command changed nothing. Deterministic: every member rejects alike.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejected {
    #[error(
        "NOT_OWNER: alloc {alloc} at lease epoch {lease_epoch} does not own section {section} \
         (owner: {owner})"
    )]
    NotOwner { alloc: AllocId, lease_epoch: u64, section: SectionId, owner: String },
    #[error("unknown or replaced alloc {0}")]
    UnknownAlloc(AllocId),
    #[error("alloc {alloc} still owns {n_sections} sections")]
    AllocOwnsSections { alloc: AllocId, n_sections: u64 },
}

/// What a command produced for its proposer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The committed value of each section, in command order.
    MaxSeq(Vec<(SectionId, u64)>),
    Registered(AllocId),
    Assigned {
        lease_epoch: u64,
    },
    Done,
}

/// What applying one command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyOutcome {
    pub result: Result<Applied, Rejected>,
    /// Sections whose value changed, with their new value: what the caller must persist.
    pub changed: Vec<(SectionId, u64)>,
    /// The control state changed: the caller must persist it.
    pub control_changed: bool,
}

impl ApplyOutcome {
    fn control(result: Result<Applied, Rejected>) -> ApplyOutcome {
        let control_changed = result.is_ok();
        ApplyOutcome { result, changed: Vec::new(), control_changed }
    }
}

/// One AllocSvr registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocRecord {
    pub addr: String,
    pub draining: bool,
    /// A newer registration took this address: never granted again.
    pub replaced: bool,
}

/// The arbiter's replicated state. Small (a few runs per AllocSvr): persisted as one record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlState {
    pub allocs: BTreeMap<AllocId, AllocRecord>,
    pub assignment: Assignment,
    /// The last id handed out; ids are never reused.
    pub last_alloc_id: u64,
    /// Invariant: every owner's `lease_epoch` is <= this, and it never decreases (I4).
    pub last_lease_epoch: u64,
    /// Bumped whenever the route table (assignment or addresses) changes.
    pub route_version: u64,
}

impl ControlState {
    /// An alloc that may hold sections: registered and not replaced.
    pub fn is_current(&self, alloc: AllocId) -> bool {
        self.allocs.get(&alloc).is_some_and(|r| !r.replaced)
    }

    /// The route table: each run's owner and its address, in section order.
    pub fn route_entries(&self) -> Vec<(SectionRange, AllocId, String)> {
        self.assignment
            .runs()
            .map(|(r, o)| {
                let addr = self.allocs.get(&o.alloc).map(|a| a.addr.clone()).unwrap_or_default();
                (r, o.alloc, addr)
            })
            .collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<ControlState, CodecError> {
        serde_json::from_slice(bytes).map_err(|e| CodecError::Decode(e.to_string()))
    }
}

/// The in-memory state machine. The storage layer persists each `ApplyOutcome` together with
/// the applied index in one write, so disk and memory never disagree after a crash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreState {
    /// Invariant: only sections ever advanced are present, and no value is 0.
    max_seq: BTreeMap<SectionId, u64>,
    control: ControlState,
}

/// Serialized form of the whole state machine: a Raft snapshot's data.
#[derive(Serialize, Deserialize)]
struct SnapshotData {
    format: u32,
    max_seq: Vec<(SectionId, u64)>,
    control: ControlState,
}

const SNAPSHOT_FORMAT: u32 = 2;

impl StoreState {
    pub fn new() -> StoreState {
        StoreState::default()
    }

    /// Rebuilds the state from persisted parts (storage load path).
    pub fn from_parts(
        max_seq: impl IntoIterator<Item = (SectionId, u64)>,
        control: ControlState,
    ) -> StoreState {
        StoreState { max_seq: max_seq.into_iter().filter(|&(_, v)| v > 0).collect(), control }
    }

    /// The committed `max_seq` of a section; 0 if it was never advanced.
    pub fn max_seq(&self, section: SectionId) -> u64 {
        self.max_seq.get(&section).copied().unwrap_or(0)
    }

    pub fn n_sections_advanced(&self) -> usize {
        self.max_seq.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (SectionId, u64)> + '_ {
        self.max_seq.iter().map(|(&s, &v)| (s, v))
    }

    /// Advanced sections within `range`, in order.
    pub fn range(&self, range: SectionRange) -> impl Iterator<Item = (SectionId, u64)> + '_ {
        self.max_seq.range(range.begin()..range.end()).map(|(&s, &v)| (s, v))
    }

    pub fn control(&self) -> &ControlState {
        &self.control
    }

    pub fn apply(&mut self, command: &Command) -> ApplyOutcome {
        match command {
            Command::AdvanceMaxSeq { alloc, sections } => self.advance(*alloc, sections),
            Command::RegisterAlloc { addr } => {
                let c = &mut self.control;
                c.last_alloc_id += 1;
                let id = AllocId(c.last_alloc_id);
                for r in c.allocs.values_mut().filter(|r| r.addr == *addr) {
                    r.replaced = true;
                }
                c.allocs.insert(
                    id,
                    AllocRecord { addr: addr.clone(), draining: false, replaced: false },
                );
                ApplyOutcome::control(Ok(Applied::Registered(id)))
            }
            Command::Assign { moves, settled } => {
                if let Some(&(_, bad)) = moves.iter().find(|(_, a)| !self.control.is_current(*a)) {
                    return ApplyOutcome::control(Err(Rejected::UnknownAlloc(bad)));
                }
                let c = &mut self.control;
                c.last_lease_epoch += 1;
                let lease_epoch = c.last_lease_epoch;
                for &(range, alloc) in moves {
                    c.assignment.assign(range, Owner { alloc, lease_epoch, settled: *settled });
                }
                c.route_version += 1;
                ApplyOutcome::control(Ok(Applied::Assigned { lease_epoch }))
            }
            Command::Settle { lease_epoch } => {
                let changed = self.control.assignment.settle(*lease_epoch);
                ApplyOutcome {
                    result: Ok(Applied::Done),
                    changed: Vec::new(),
                    control_changed: changed,
                }
            }
            Command::SetDraining { alloc, draining } => {
                match self.control.allocs.get_mut(alloc) {
                    Some(r) => r.draining = *draining,
                    None => return ApplyOutcome::control(Err(Rejected::UnknownAlloc(*alloc))),
                }
                ApplyOutcome::control(Ok(Applied::Done))
            }
            Command::RemoveAlloc { alloc } => {
                let owned = self.control.assignment.load().get(alloc).copied().unwrap_or(0);
                if owned > 0 {
                    return ApplyOutcome::control(Err(Rejected::AllocOwnsSections {
                        alloc: *alloc,
                        n_sections: owned,
                    }));
                }
                if self.control.allocs.remove(alloc).is_none() {
                    return ApplyOutcome::control(Err(Rejected::UnknownAlloc(*alloc)));
                }
                self.control.route_version += 1;
                ApplyOutcome::control(Ok(Applied::Done))
            }
        }
    }

    fn advance(&mut self, alloc: Option<AllocId>, sections: &[SectionAdvance]) -> ApplyOutcome {
        if let Some(alloc) = alloc {
            // Fencing, judged at apply so an advance racing a reassignment cannot slip through.
            for a in sections {
                let owner = self.control.assignment.get(a.section);
                let ok = owner.is_some_and(|o| {
                    o.alloc == alloc && o.lease_epoch == a.lease_epoch && o.settled
                });
                if !ok && !crate::teeth::NO_FENCING {
                    let owner = match owner {
                        Some(o) => format!(
                            "alloc {} at epoch {}{}",
                            o.alloc,
                            o.lease_epoch,
                            if o.settled { "" } else { ", in hand-over" }
                        ),
                        None => "none".into(),
                    };
                    return ApplyOutcome {
                        result: Err(Rejected::NotOwner {
                            alloc,
                            lease_epoch: a.lease_epoch,
                            section: a.section,
                            owner,
                        }),
                        changed: Vec::new(),
                        control_changed: false,
                    };
                }
            }
        }
        let mut results = Vec::with_capacity(sections.len());
        let mut changed = Vec::new();
        for a in sections {
            let current = self.max_seq(a.section);
            let next = current.max(a.max_seq);
            assert!(next >= current, "I4: max_seq of section {} would decrease", a.section);
            if next > current {
                self.max_seq.insert(a.section, next);
                changed.push((a.section, next));
            }
            results.push((a.section, next));
        }
        ApplyOutcome { result: Ok(Applied::MaxSeq(results)), changed, control_changed: false }
    }

    pub fn encode_snapshot(&self) -> Vec<u8> {
        let data = SnapshotData {
            format: SNAPSHOT_FORMAT,
            max_seq: self.iter().collect(),
            control: self.control.clone(),
        };
        serde_json::to_vec(&data).unwrap_or_default()
    }

    pub fn decode_snapshot(bytes: &[u8]) -> Result<StoreState, CodecError> {
        let data: SnapshotData =
            serde_json::from_slice(bytes).map_err(|e| CodecError::Decode(e.to_string()))?;
        if data.format != SNAPSHOT_FORMAT {
            return Err(CodecError::Decode(format!(
                "snapshot format {} (this build reads {SNAPSHOT_FORMAT})",
                data.format
            )));
        }
        Ok(StoreState::from_parts(data.max_seq, data.control))
    }

    /// The first value that would go down if `self` were replaced by `newer`: a snapshot is
    /// always of a later state, so any such value means corruption (I4). Sections report
    /// `(section, ours, theirs)`; a lease epoch going back reports section `u64::MAX`.
    pub fn first_regression(&self, newer: &StoreState) -> Option<(SectionId, u64, u64)> {
        if newer.control.last_lease_epoch < self.control.last_lease_epoch {
            return Some((
                SectionId(u64::MAX),
                self.control.last_lease_epoch,
                newer.control.last_lease_epoch,
            ));
        }
        self.iter().find(|&(s, v)| newer.max_seq(s) < v).map(|(s, v)| (s, v, newer.max_seq(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn range() -> SectionRange {
        SectionRange::new(SectionId(10), SectionId(20)).unwrap()
    }

    fn adv(section: u64, max_seq: u64, lease_epoch: u64) -> SectionAdvance {
        SectionAdvance { section: SectionId(section), max_seq, lease_epoch }
    }

    fn operator(sections: Vec<SectionAdvance>) -> Command {
        Command::AdvanceMaxSeq { alloc: None, sections }
    }

    fn values(out: &ApplyOutcome) -> Vec<(SectionId, u64)> {
        match &out.result {
            Ok(Applied::MaxSeq(v)) => v.clone(),
            other => panic!("expected max_seq values, got {other:?}"),
        }
    }

    #[test]
    fn validation_rejects_bad_batches() {
        let r = range();
        assert_eq!(validate_read(r, 4, &[]), Err(InputError::EmptyBatch));
        assert_eq!(
            validate_read(r, 2, &[SectionId(10), SectionId(11), SectionId(12)]),
            Err(InputError::BatchTooLarge { len: 3, max: 2 })
        );
        assert!(matches!(
            validate_read(r, 4, &[SectionId(20)]),
            Err(InputError::SectionOutOfRange { .. })
        ));
        assert_eq!(
            validate_advance(r, 4, &[adv(10, 1, 0), adv(10, 2, 0)]),
            Err(InputError::DuplicateSection(SectionId(10)))
        );
        assert_eq!(validate_advance(r, 4, &[adv(19, 1, 0)]), Ok(()));
    }

    #[test]
    fn asking_for_less_returns_current() {
        let mut s = StoreState::new();
        assert_eq!(s.apply(&operator(vec![adv(1, 100, 0)])).changed, vec![(SectionId(1), 100)]);
        let out = s.apply(&operator(vec![adv(1, 50, 0)]));
        assert_eq!(values(&out), vec![(SectionId(1), 100)]);
        assert!(out.changed.is_empty());
    }

    fn registered(s: &mut StoreState, addr: &str) -> AllocId {
        match s.apply(&Command::RegisterAlloc { addr: addr.into() }).result {
            Ok(Applied::Registered(id)) => id,
            other => panic!("{other:?}"),
        }
    }

    fn assigned(s: &mut StoreState, b: u64, e: u64, to: AllocId, settled: bool) -> u64 {
        let r = SectionRange::new(SectionId(b), SectionId(e)).unwrap();
        match s.apply(&Command::Assign { moves: vec![(r, to)], settled }).result {
            Ok(Applied::Assigned { lease_epoch }) => lease_epoch,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn advances_are_fenced_by_owner_epoch_and_settlement() {
        let mut s = StoreState::new();
        let a = registered(&mut s, "a:1");
        let b = registered(&mut s, "b:1");
        let e1 = assigned(&mut s, 0, 10, a, true);
        let by = |alloc, section, v, e| Command::AdvanceMaxSeq {
            alloc: Some(alloc),
            sections: vec![adv(section, v, e)],
        };
        assert_eq!(values(&s.apply(&by(a, 3, 100, e1))), vec![(SectionId(3), 100)]);
        // Not the owner; wrong epoch: rejected, nothing changes.
        assert!(matches!(s.apply(&by(b, 3, 200, e1)).result, Err(Rejected::NotOwner { .. })));
        assert!(matches!(s.apply(&by(a, 3, 200, e1 + 7)).result, Err(Rejected::NotOwner { .. })));
        // Hand-over to b: a's old epoch is stale at once; b waits for the fence to settle.
        let e2 = assigned(&mut s, 0, 10, b, false);
        assert!(e2 > e1, "lease epochs grow");
        let stale = s.apply(&by(a, 3, 300, e1));
        assert!(matches!(stale.result, Err(Rejected::NotOwner { .. })));
        assert!(stale.changed.is_empty());
        assert!(matches!(s.apply(&by(b, 3, 300, e2)).result, Err(Rejected::NotOwner { .. })));
        s.apply(&Command::Settle { lease_epoch: e2 });
        assert_eq!(values(&s.apply(&by(b, 3, 300, e2))), vec![(SectionId(3), 300)]);
        // A batch with one bad section changes nothing at all.
        let mixed = Command::AdvanceMaxSeq {
            alloc: Some(b),
            sections: vec![adv(4, 999, e2), adv(11, 999, e2)],
        };
        assert!(s.apply(&mixed).result.is_err());
        assert_eq!(s.max_seq(SectionId(4)), 0);
        assert_eq!(s.max_seq(SectionId(3)), 300);
    }

    #[test]
    fn registry_replaces_by_address_and_removes_only_empty_allocs() {
        let mut s = StoreState::new();
        let a1 = registered(&mut s, "a:1");
        assigned(&mut s, 0, 5, a1, true);
        let a2 = registered(&mut s, "a:1");
        assert_ne!(a1, a2, "ids are never reused");
        assert!(!s.control().is_current(a1));
        let r = SectionRange::new(SectionId(5), SectionId(6)).unwrap();
        assert_eq!(
            s.apply(&Command::Assign { moves: vec![(r, a1)], settled: true }).result,
            Err(Rejected::UnknownAlloc(a1)),
            "a replaced registration gets nothing"
        );
        assert!(matches!(
            s.apply(&Command::RemoveAlloc { alloc: a1 }).result,
            Err(Rejected::AllocOwnsSections { .. })
        ));
        assigned(&mut s, 0, 5, a2, false);
        assert_eq!(s.apply(&Command::RemoveAlloc { alloc: a1 }).result, Ok(Applied::Done));
    }

    #[test]
    fn command_and_snapshot_round_trip() {
        let cmd = operator(vec![adv(3, 7, 0), adv(4, 9, 0)]);
        assert_eq!(Command::decode(&cmd.encode()).unwrap(), cmd);
        assert!(Command::decode(b"garbage").is_err());
        let mut s = StoreState::new();
        s.apply(&cmd);
        let a = registered(&mut s, "a:1");
        assigned(&mut s, 0, 5, a, false);
        let back = StoreState::decode_snapshot(&s.encode_snapshot()).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.first_regression(&StoreState::new()), Some((SectionId(u64::MAX), 1, 0)));
        assert_eq!(StoreState::new().first_regression(&s), None);
    }

    proptest! {
        /// Against a reference model (a map of the largest value ever requested per section):
        /// the state equals the model after every command, and no value ever goes down (I4).
        #[test]
        fn matches_reference_model(
            batches in prop::collection::vec(
                prop::collection::vec((0u64..8, 0u64..1_000), 1..6), 1..40)
        ) {
            let mut state = StoreState::new();
            let mut model: BTreeMap<u64, u64> = BTreeMap::new();
            for batch in batches {
                let before = state.clone();
                let cmd = operator(batch.iter().map(|&(s, v)| adv(s, v, 0)).collect());
                let out = state.apply(&cmd);
                let results = values(&out);
                for (i, &(s, v)) in batch.iter().enumerate() {
                    let m = model.entry(s).or_insert(0);
                    *m = (*m).max(v);
                    // A repeated section in one command sees its earlier raise.
                    prop_assert!(results[i].1 >= v);
                }
                for (&s, &m) in &model {
                    prop_assert_eq!(state.max_seq(SectionId(s)), m);
                }
                prop_assert_eq!(before.first_regression(&state), None);
                // Persisting `changed` in order must leave exactly the in-memory values.
                let mut persisted = BTreeMap::new();
                for &(s, v) in &out.changed {
                    persisted.insert(s, v);
                }
                for (&s, &v) in &persisted {
                    prop_assert_eq!(state.max_seq(s), v);
                }
            }
        }
    }
}
