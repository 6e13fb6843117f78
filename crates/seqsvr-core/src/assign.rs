//! Which AllocSvr owns which section: a map from non-overlapping section ranges ("runs") to an
//! owner, the lease epoch of that assignment, and whether its hand-over fence has passed.
//!
//! Runs keep the state small (a handful of entries instead of one per section) and make the
//! route table a direct read-out. Adjacent runs with equal attributes are always merged, so the
//! representation of a given assignment is unique.

use crate::ids::{AllocId, LeaseEpoch, SectionId};
use crate::section::SectionRange;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The owner of a run of sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub alloc: AllocId,
    /// The fencing token: bumped every time the run changes hands.
    pub lease_epoch: LeaseEpoch,
    /// The previous owner's lease must have run out: the new owner may serve.
    pub settled: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// begin → (end, owner). Invariant: runs are non-empty, non-overlapping, and no two adjacent
    /// runs (end of one == begin of next) have the same owner.
    runs: BTreeMap<SectionId, (SectionId, Owner)>,
}

impl Assignment {
    pub fn new() -> Assignment {
        Assignment::default()
    }

    pub fn get(&self, section: SectionId) -> Option<Owner> {
        let (_, &(end, owner)) = self.runs.range(..=section).next_back()?;
        (section < end).then_some(owner)
    }

    /// Every run in section order: `(range, owner)`.
    pub fn runs(&self) -> impl Iterator<Item = (SectionRange, Owner)> + '_ {
        self.runs.iter().filter_map(|(&b, &(e, o))| Some((SectionRange::new(b, e)?, o)))
    }

    /// Gives `range` to `owner`, splitting runs at its edges.
    pub fn assign(&mut self, range: SectionRange, owner: Owner) {
        if range.is_empty() {
            return;
        }
        self.carve(range);
        self.runs.insert(range.begin(), (range.end(), owner));
        self.merge_around(range.begin());
        self.merge_around(range.end());
    }

    /// Marks every run of `lease_epoch` settled.
    pub fn settle(&mut self, lease_epoch: LeaseEpoch) -> bool {
        let mut changed = false;
        let keys: Vec<SectionId> = self
            .runs
            .iter()
            .filter(|(_, (_, o))| o.lease_epoch == lease_epoch && !o.settled)
            .map(|(&b, _)| b)
            .collect();
        for b in &keys {
            if let Some((_, o)) = self.runs.get_mut(b) {
                o.settled = true;
                changed = true;
            }
        }
        for b in keys {
            self.merge_around(b);
            if let Some(&(e, _)) = self.runs.get(&b) {
                self.merge_around(e);
            }
        }
        changed
    }

    /// The parts of `within` no run covers.
    pub fn unassigned(&self, within: SectionRange) -> Vec<SectionRange> {
        let mut gaps = Vec::new();
        let mut at = within.begin();
        for (r, _) in self.runs() {
            if r.end() <= at || r.begin() >= within.end() {
                continue;
            }
            if r.begin() > at {
                gaps.extend(SectionRange::new(at, r.begin()));
            }
            at = at.max(r.end());
        }
        if at < within.end() {
            gaps.extend(SectionRange::new(at, within.end()));
        }
        gaps
    }

    /// Number of sections each owner holds.
    pub fn load(&self) -> BTreeMap<AllocId, u64> {
        let mut load = BTreeMap::new();
        for (r, o) in self.runs() {
            *load.entry(o.alloc).or_insert(0) += r.len();
        }
        load
    }

    /// Removes whatever overlaps `range`, keeping the parts of runs outside it.
    fn carve(&mut self, range: SectionRange) {
        let overlapping: Vec<(SectionId, SectionId, Owner)> = self
            .runs
            .range(..range.end())
            .filter(|(_, (e, _))| *e > range.begin())
            .map(|(&b, &(e, o))| (b, e, o))
            .collect();
        for (b, e, o) in overlapping {
            self.runs.remove(&b);
            if b < range.begin() {
                self.runs.insert(b, (range.begin(), o));
            }
            if e > range.end() {
                self.runs.insert(range.end(), (e, o));
            }
        }
    }

    /// Merges the run starting at `at` with the run ending at `at`, if their owners are equal.
    fn merge_around(&mut self, at: SectionId) {
        let Some(&(right_end, right)) = self.runs.get(&at) else { return };
        let Some((&left_begin, &(left_end, left))) = self.runs.range(..at).next_back() else {
            return;
        };
        if left_end == at && left == right {
            self.runs.remove(&at);
            self.runs.insert(left_begin, (right_end, left));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn owner(a: u64, e: u64, settled: bool) -> Owner {
        Owner { alloc: AllocId(a), lease_epoch: LeaseEpoch(e), settled }
    }

    fn range(b: u64, e: u64) -> SectionRange {
        SectionRange::new(SectionId(b), SectionId(e)).unwrap()
    }

    #[test]
    fn assign_splits_and_merges() {
        let mut a = Assignment::new();
        a.assign(range(0, 100), owner(1, 1, true));
        a.assign(range(40, 60), owner(2, 2, false));
        assert_eq!(a.runs().count(), 3);
        assert_eq!(a.get(SectionId(39)), Some(owner(1, 1, true)));
        assert_eq!(a.get(SectionId(40)), Some(owner(2, 2, false)));
        assert_eq!(a.get(SectionId(60)), Some(owner(1, 1, true)));
        assert_eq!(a.get(SectionId(100)), None);
        a.assign(range(40, 60), owner(1, 1, true));
        assert_eq!(a.runs().count(), 1, "equal neighbours merge back");
        assert_eq!(a.unassigned(range(0, 120)), vec![range(100, 120)]);
    }

    proptest! {
        /// Against a per-section reference model: every section reads back what was last
        /// assigned (and settled), and the runs are canonical (merged, non-overlapping).
        #[test]
        fn matches_per_section_model(
            ops in prop::collection::vec((0u64..50, 0u64..50, 1u64..4, prop::bool::ANY, 0u64..6), 1..40)
        ) {
            let mut a = Assignment::new();
            let mut model: BTreeMap<u64, Owner> = BTreeMap::new();
            for (epoch, (x, y, alloc, settle_instead, settle_epoch)) in ops.into_iter().enumerate() {
                let epoch = epoch as u64 + 1;
                if settle_instead {
                    a.settle(LeaseEpoch(settle_epoch));
                    for o in model.values_mut() {
                        if o.lease_epoch == LeaseEpoch(settle_epoch) { o.settled = true; }
                    }
                } else {
                    let (b, e) = (x.min(y), x.max(y));
                    let o = owner(alloc, epoch, false);
                    a.assign(range(b, e), o);
                    for s in b..e { model.insert(s, o); }
                }
                for s in 0..50 {
                    prop_assert_eq!(a.get(SectionId(s)), model.get(&s).copied());
                }
                let runs: Vec<_> = a.runs().collect();
                for w in runs.windows(2) {
                    prop_assert!(w[0].0.end() <= w[1].0.begin());
                    prop_assert!(!(w[0].0.end() == w[1].0.begin() && w[0].1 == w[1].1), "unmerged");
                }
                let covered: u64 = runs.iter().map(|(r, _)| r.len()).sum();
                prop_assert_eq!(covered, model.len() as u64);
            }
        }
    }

    // Tests written for survivors of the mutation run (docs/reliability/mutants.md).

    /// `unassigned` lists exactly the gaps inside `within`. The arbiter hands them out as never
    /// owned, free to serve at once (no lease wait): a gap that overlapped a run would break
    /// I3; one outside `within` or an empty one would hand out junk.
    #[test]
    fn unassigned_lists_exactly_the_gaps_inside_the_range() {
        let mut a = Assignment::new();
        a.assign(range(10, 20), owner(1, 1, true));
        a.assign(range(40, 60), owner(2, 2, false));
        a.assign(range(80, 90), owner(1, 3, true));
        let gaps = vec![range(0, 10), range(20, 40), range(60, 80), range(90, 100)];
        assert_eq!(a.unassigned(range(0, 100)), gaps);
        assert_eq!(a.unassigned(range(0, 50)), vec![range(0, 10), range(20, 40)]);
        assert_eq!(a.unassigned(range(15, 45)), vec![range(20, 40)]);
        assert_eq!(a.unassigned(range(40, 60)), vec![]);
        assert_eq!(a.unassigned(range(50, 90)), vec![range(60, 80)]);
    }

    proptest! {
        /// `unassigned(within)` is exactly the maximal runs of sections of `within` that no run
        /// covers, in order.
        #[test]
        fn unassigned_matches_the_per_section_model(
            ops in prop::collection::vec((0u64..50, 0u64..50, 1u64..4), 0..12),
            x in 0u64..60,
            y in 0u64..60,
        ) {
            let mut a = Assignment::new();
            let mut covered = std::collections::BTreeSet::new();
            for (epoch, (p, q, alloc)) in ops.into_iter().enumerate() {
                let (b, e) = (p.min(q), p.max(q));
                a.assign(range(b, e), owner(alloc, epoch as u64 + 1, false));
                covered.extend(b..e);
            }
            let (b, e) = (x.min(y), x.max(y));
            let mut gaps = Vec::new();
            let mut start = None;
            for s in b..e {
                if !covered.contains(&s) {
                    start.get_or_insert(s);
                } else if let Some(g) = start.take() {
                    gaps.push(range(g, s));
                }
            }
            if let Some(g) = start {
                gaps.push(range(g, e));
            }
            prop_assert_eq!(a.unassigned(range(b, e)), gaps);
        }
    }
}
