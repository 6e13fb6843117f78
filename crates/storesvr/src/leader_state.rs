//! What the driver keeps per leadership: the proposals waiting for their entries to apply, and
//! the arbiter. Both belong to one Raft term: a member that steps down and wins again (two
//! leader transfers inside one tick: `MsgTimeoutNow` campaigns inside `step`) is a new leader
//! that knows nothing of the grants the leader in between made, so it needs a new arbiter that
//! waits a full lease, and its old arbiter proposals must not hold up the new one's rounds.
//!
//! Kept apart from `driver/` (which owns the `RawNode`) so these rules are unit-tested.

use std::collections::BTreeMap;

/// A proposal waiting for its log index to apply.
pub struct Pending<R> {
    /// The leader term it was proposed in: the entry that applies at its index is ours only if
    /// it has this term (Log Matching).
    pub term: u64,
    /// Proposed by the arbiter (a planning round waits for these).
    pub arbiter: bool,
    /// When it was proposed (for the proposal-to-apply latency).
    pub proposed_at: std::time::Instant,
    pub reply: R,
}

/// How a proposal ended, when it did not simply apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unapplied {
    /// Another entry holds its index: it was not and will never be applied.
    Superseded,
    /// Its index was covered by a snapshot this member installed: it may or may not have been
    /// applied. The caller must retry (every command is idempotent or fenced).
    Unknown,
}

/// Proposals by log index. Invariant: every key is > the applied index once `drain_applied`
/// ran for it.
pub struct Proposals<R> {
    by_index: BTreeMap<u64, Pending<R>>,
    /// Arbiter proposals not yet resolved, per term.
    arbiter_by_term: BTreeMap<u64, usize>,
}

impl<R> Default for Proposals<R> {
    fn default() -> Self {
        Proposals { by_index: BTreeMap::new(), arbiter_by_term: BTreeMap::new() }
    }
}

impl<R> Proposals<R> {
    pub fn len(&self) -> usize {
        self.by_index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_index.is_empty()
    }

    /// Records a proposal at `index`. A proposal already there (ours, from an earlier term whose
    /// entry was overwritten) is returned: the caller must answer it [`Unapplied::Superseded`],
    /// or its caller waits forever and, for the arbiter, every later round is frozen.
    pub fn insert(&mut self, index: u64, pending: Pending<R>) -> Option<Pending<R>> {
        if pending.arbiter {
            *self.arbiter_by_term.entry(pending.term).or_default() += 1;
        }
        let displaced = self.by_index.insert(index, pending);
        if let Some(d) = &displaced {
            self.forget_arbiter(d);
        }
        displaced
    }

    /// The proposal at `index`, if any, once the entry there applied with `term`:
    /// `Ok` if that entry is ours, `Err(Superseded)` if another leader's entry took its place.
    pub fn take_applied(
        &mut self,
        index: u64,
        term: u64,
    ) -> Option<(Pending<R>, Result<(), Unapplied>)> {
        let p = self.by_index.remove(&index)?;
        self.forget_arbiter(&p);
        let outcome = if p.term == term { Ok(()) } else { Err(Unapplied::Superseded) };
        Some((p, outcome))
    }

    /// Every proposal at or below `applied` still waiting: their entries were never seen
    /// applying, so a snapshot covered them (outcome unknown).
    pub fn drain_applied(&mut self, applied: u64) -> Vec<(u64, Pending<R>, Unapplied)> {
        let later = self.by_index.split_off(&(applied + 1));
        let done = std::mem::replace(&mut self.by_index, later);
        done.into_iter()
            .map(|(index, p)| {
                self.forget_arbiter(&p);
                (index, p, Unapplied::Unknown)
            })
            .collect()
    }

    /// Everything, for shutdown.
    pub fn drain_all(&mut self) -> Vec<(u64, Pending<R>)> {
        self.arbiter_by_term.clear();
        std::mem::take(&mut self.by_index).into_iter().collect()
    }

    /// Arbiter proposals of `term` not yet resolved: the next planning round waits for them.
    /// Those of other terms never count: a new term's arbiter starts with none in flight.
    pub fn arbiter_in_flight(&self, term: u64) -> usize {
        self.arbiter_by_term.get(&term).copied().unwrap_or(0)
    }

    /// The replies owed to every pending proposal, in index order.
    pub fn replies(&self) -> impl Iterator<Item = &R> + '_ {
        self.by_index.values().map(|p| &p.reply)
    }

    /// Whether any pending proposal matches `pred` (e.g. a membership change).
    pub fn any(&self, pred: impl Fn(&R) -> bool) -> Option<u64> {
        self.by_index.iter().find(|(_, p)| pred(&p.reply)).map(|(&i, _)| i)
    }

    fn forget_arbiter(&mut self, p: &Pending<R>) {
        if !p.arbiter {
            return;
        }
        if let Some(n) = self.arbiter_by_term.get_mut(&p.term) {
            *n -= 1;
            if *n == 0 {
                self.arbiter_by_term.remove(&p.term);
            }
        }
    }
}

/// The arbiter of one leader term. `get` hands out the arbiter of the current term, creating a
/// new one (which starts with the new-leader wait) whenever the term changed, even if this
/// member was leader in the term before.
pub struct TermSlot<A> {
    current: Option<(u64, A)>,
}

impl<A> Default for TermSlot<A> {
    fn default() -> Self {
        TermSlot { current: None }
    }
}

/// What `TermSlot::get` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotChange {
    Kept,
    /// First leadership (or after having been a follower).
    Started,
    /// Leader in a new term with an arbiter of an older term still in place: replaced.
    Replaced {
        old_term: u64,
    },
}

impl<A> TermSlot<A> {
    /// The arbiter for `term`, made by `make` if there is none for this very term.
    pub fn get(&mut self, term: u64, make: impl FnOnce() -> A) -> (&mut A, SlotChange) {
        let change = match &self.current {
            Some((t, _)) if *t == term => SlotChange::Kept,
            Some((t, _)) => SlotChange::Replaced { old_term: *t },
            None => SlotChange::Started,
        };
        if change != SlotChange::Kept {
            self.current = Some((term, make()));
        }
        let (_, arbiter) = self.current.as_mut().expect("set above");
        (arbiter, change)
    }

    /// The arbiter, only if it belongs to `term`.
    pub fn of_term(&self, term: u64) -> Option<&A> {
        self.current.as_ref().filter(|(t, _)| *t == term).map(|(_, a)| a)
    }

    /// The arbiter, mutably, only if it belongs to `term`.
    pub fn get_mut_of_term(&mut self, term: u64) -> Option<&mut A> {
        self.current.as_mut().filter(|(t, _)| *t == term).map(|(_, a)| a)
    }

    /// Drops the arbiter (no longer leader); true if there was one.
    pub fn clear(&mut self) -> bool {
        self.current.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(term: u64, arbiter: bool, tag: &'static str) -> Pending<&'static str> {
        Pending { term, arbiter, proposed_at: std::time::Instant::now(), reply: tag }
    }

    #[test]
    fn a_displaced_arbiter_proposal_is_returned_and_never_freezes_the_rounds() {
        let mut p = Proposals::default();
        assert!(p.insert(10, pending(5, true, "old round")).is_none());
        assert_eq!(p.arbiter_in_flight(5), 1);
        // Leader again in term 7; index 10 was overwritten and is reused.
        let displaced = p.insert(10, pending(7, true, "new round")).expect("old one returned");
        assert_eq!(displaced.reply, "old round");
        assert_eq!(p.arbiter_in_flight(5), 0, "the displaced round no longer counts");
        assert_eq!(p.arbiter_in_flight(7), 1);
        let (done, outcome) = p.take_applied(10, 7).unwrap();
        assert_eq!((done.reply, outcome), ("new round", Ok(())));
        assert_eq!(p.arbiter_in_flight(7), 0, "round over: the next plan may run");
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_new_term_starts_with_no_arbiter_round_in_flight() {
        let mut p = Proposals::default();
        p.insert(3, pending(2, true, "term 2 round"));
        // Term 4: the term-2 round is still unresolved (its entry not yet applied), but the new
        // arbiter must not wait for it.
        assert_eq!(p.arbiter_in_flight(4), 0);
        assert_eq!(p.arbiter_in_flight(2), 1);
    }

    #[test]
    fn another_entry_at_our_index_supersedes_and_a_snapshot_leaves_it_unknown() {
        let mut p = Proposals::default();
        p.insert(4, pending(3, false, "a"));
        p.insert(5, pending(3, false, "b"));
        p.insert(9, pending(3, false, "c"));
        let (_, outcome) = p.take_applied(4, 4).unwrap();
        assert_eq!(outcome, Err(Unapplied::Superseded), "a term-4 entry holds index 4");
        // A snapshot at index 8 covered index 5: it may have applied; we cannot tell.
        let drained = p.drain_applied(8);
        assert_eq!(drained.len(), 1);
        assert_eq!((drained[0].0, drained[0].2), (5, Unapplied::Unknown));
        assert_eq!(p.len(), 1, "index 9 still waits");
    }

    #[test]
    fn the_arbiter_belongs_to_one_term_even_when_the_same_member_wins_again() {
        let mut slot: TermSlot<Vec<&str>> = TermSlot::default();
        let (a, change) = slot.get(5, Vec::new);
        assert_eq!(change, SlotChange::Started);
        a.push("granted alloc 1 in term 5");
        let (a, change) = slot.get(5, Vec::new);
        assert_eq!(change, SlotChange::Kept);
        assert_eq!(a.len(), 1, "same term: same knowledge");
        // Stepped down and won again between two looks (term 6 belonged to someone else).
        let (a, change) = slot.get(7, Vec::new);
        assert_eq!(change, SlotChange::Replaced { old_term: 5 });
        assert!(a.is_empty(), "a new term's arbiter starts from nothing (and waits a lease)");
        assert!(slot.of_term(5).is_none());
        assert!(slot.of_term(7).is_some());
        assert!(slot.clear());
        assert!(!slot.clear());
    }
}
