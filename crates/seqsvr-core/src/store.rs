//! The StoreSvr state machine: one `max_seq` per section of a set.
//!
//! Every member applies the same committed commands in the same order, so `apply` must be
//! deterministic and must never fail on a command the leader accepted: all validation that can
//! reject input happens before proposing ([`validate_advance`], [`validate_read`]). Leases, the
//! AllocSvr registry and the route table join this struct as new [`Command`] variants.
//!
//! Invariant I4: a section's `max_seq` never decreases. `apply` only ever raises values
//! (`max(current, requested)`), and `restore` refuses a snapshot that would lower one.

use crate::ids::SectionId;
use crate::section::SectionRange;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A replicated command, the payload of one Raft log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Raise each listed section's `max_seq` to at least the given value.
    AdvanceMaxSeq { sections: Vec<(SectionId, u64)> },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("undecodable store command or snapshot: {0}")]
    Decode(String),
}

impl Command {
    pub fn encode(&self) -> Vec<u8> {
        // Serializing enums of integers to JSON cannot fail.
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
    sections: &[(SectionId, u64)],
) -> Result<(), InputError> {
    let ids: Vec<SectionId> = sections.iter().map(|&(s, _)| s).collect();
    validate_read(range, max_batch, &ids)
}

/// What applying one command did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// The committed value of each section the command named, in command order.
    pub results: Vec<(SectionId, u64)>,
    /// The sections whose value changed, with their new value: what the caller must persist.
    pub changed: Vec<(SectionId, u64)>,
}

/// The in-memory state machine. The storage layer persists `ApplyOutcome::changed` together with
/// the applied index in one write, so disk and memory never disagree after a crash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreState {
    /// Invariant: only sections ever advanced are present, and no value is 0.
    max_seq: BTreeMap<SectionId, u64>,
}

/// Serialized form of the whole state machine: a Raft snapshot's data.
#[derive(Serialize, Deserialize)]
struct SnapshotData {
    format: u32,
    max_seq: Vec<(SectionId, u64)>,
}

const SNAPSHOT_FORMAT: u32 = 1;

impl StoreState {
    pub fn new() -> StoreState {
        StoreState::default()
    }

    /// Rebuilds the state from persisted `(section, max_seq)` pairs (storage load path).
    pub fn from_entries(entries: impl IntoIterator<Item = (SectionId, u64)>) -> StoreState {
        StoreState { max_seq: entries.into_iter().filter(|&(_, v)| v > 0).collect() }
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

    pub fn apply(&mut self, command: &Command) -> ApplyOutcome {
        match command {
            Command::AdvanceMaxSeq { sections } => {
                let mut outcome = ApplyOutcome::default();
                for &(section, requested) in sections {
                    let current = self.max_seq(section);
                    let next = current.max(requested);
                    assert!(next >= current, "I4: max_seq of section {section} would decrease");
                    if next > current {
                        self.max_seq.insert(section, next);
                        outcome.changed.push((section, next));
                    }
                    outcome.results.push((section, next));
                }
                outcome
            }
        }
    }

    pub fn encode_snapshot(&self) -> Vec<u8> {
        let data = SnapshotData { format: SNAPSHOT_FORMAT, max_seq: self.iter().collect() };
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
        Ok(StoreState::from_entries(data.max_seq))
    }

    /// The first section whose value would go down if `self` were replaced by `newer`: a
    /// snapshot is always of a later state, so any such section means corruption (I4).
    pub fn first_regression(&self, newer: &StoreState) -> Option<(SectionId, u64, u64)> {
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
            validate_advance(r, 4, &[(SectionId(10), 1), (SectionId(10), 2)]),
            Err(InputError::DuplicateSection(SectionId(10)))
        );
        assert_eq!(validate_advance(r, 4, &[(SectionId(19), 1)]), Ok(()));
    }

    #[test]
    fn asking_for_less_returns_current() {
        let mut s = StoreState::new();
        let cmd = |v| Command::AdvanceMaxSeq { sections: vec![(SectionId(1), v)] };
        assert_eq!(s.apply(&cmd(100)).changed, vec![(SectionId(1), 100)]);
        let out = s.apply(&cmd(50));
        assert_eq!(out.results, vec![(SectionId(1), 100)]);
        assert!(out.changed.is_empty());
    }

    #[test]
    fn command_and_snapshot_round_trip() {
        let cmd = Command::AdvanceMaxSeq { sections: vec![(SectionId(3), 7), (SectionId(4), 9)] };
        assert_eq!(Command::decode(&cmd.encode()).unwrap(), cmd);
        assert!(Command::decode(b"garbage").is_err());
        let mut s = StoreState::new();
        s.apply(&cmd);
        let back = StoreState::decode_snapshot(&s.encode_snapshot()).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.first_regression(&StoreState::new()), Some((SectionId(3), 7, 0)));
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
                let cmd = Command::AdvanceMaxSeq {
                    sections: batch.iter().map(|&(s, v)| (SectionId(s), v)).collect(),
                };
                let out = state.apply(&cmd);
                for (i, &(s, v)) in batch.iter().enumerate() {
                    let m = model.entry(s).or_insert(0);
                    *m = (*m).max(v);
                    // A repeated section in one command sees its earlier raise.
                    prop_assert!(out.results[i].1 >= v);
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
