//! The arbiter: seqsvr part 2's arbitration service, folded into the store's Raft leader. It
//! decides who owns which section; the decisions become Raft commands, so every member agrees.
//!
//! Lease arithmetic (all times are the leader's monotonic milliseconds; `hold = lease + margin`):
//! - An AllocSvr serves only until `send_time + lease - margin` of its last successful
//!   heartbeat (its own monotonic clock), and a grant is made after the heartbeat was sent, so
//!   its lease ends before `last_grant + lease`: once `now >= last_grant + hold`, it is over.
//! - A run that changes hands while its old owner may still hold a lease is assigned unsettled;
//!   grants only ever include settled runs, and the run is settled `hold` after the assignment
//!   was applied (no grant after that apply includes it for the old owner).
//! - A new leader does not know its predecessor's grants: it treats every AllocSvr as granted
//!   at the moment it became leader, and reassigns nothing for one `hold`.
//! - An AllocSvr found dead is expired first (never granted again), then its sections move.
//! - An AllocSvr that released its sections (`ReleaseAlloc`, sent on a graceful shutdown after
//!   it stopped serving) holds no lease by its own word: it is expired at once and its settled
//!   runs move settled, without the wait. Its unsettled runs stay fenced for the owner before.
//!
//! The lease timing is replicated (`ControlState::lease`, changed only by `SetLease`), never a
//! leader's own config: a leader whose config differs (a rolling change) would otherwise wait
//! too little for leases its predecessor granted. A set without a replicated lease (new, or
//! from before the lease was replicated) first commits the leader's config lease, and nothing
//! is granted before it applied. A lease change keeps the lease it replaced as
//! `previous_lease`, whose grants may still run; so an event at `t` (a grant, an assignment,
//! this leader's start) is surely over at `max(t + hold, changed + previous hold)`, where
//! `changed` is when this arbiter saw the last change apply (its own start if earlier). Any
//! lease before the previous one is over: a change is allowed only once the previous hold has
//! passed since the last change applied, and only on top of that change (compare-and-set).
//!
//! No I/O and no clock: the driver passes `now_ms` in, so all of this is tested exhaustively.

use crate::assign::Owner;
use crate::ids::{AllocId, LeaseEpoch};
use crate::section::SectionRange;
use crate::store::{validate_lease, Command, ControlState, InputError};
use crate::teeth::Tooth;
use std::collections::{BTreeMap, BTreeSet};

// The lease timing lives in `lease.rs` (the store's `SetLease` and this arbiter both use it);
// re-exported here, where the store's callers have always found it.
pub use crate::lease::{LeaseConfig, MAX_LEASE_MS};

/// Why a lease change was not proposed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeaseChangeError {
    /// Bad input (→ `INVALID_ARGUMENT`).
    #[error(transparent)]
    Invalid(#[from] InputError),
    /// The leader is still committing the set's first lease (→ `UNAVAILABLE`, retryable).
    #[error("this set has no replicated lease yet: the leader is committing its first one; retry")]
    NotBootstrapped,
    /// Leases granted under the lease before the last change may still run (→
    /// `FAILED_PRECONDITION`).
    #[error(
        "refusing a second lease change so soon: leases granted before the last change may still \
         run for {wait_ms} ms (the last change applied, or this leader took over, {since_ms} ms \
         ago); retry after that"
    )]
    TooSoon { wait_ms: u64, since_ms: u64 },
}

/// Leader-local arbitration state. Dropped when leadership is lost.
#[derive(Debug)]
pub struct Arbiter {
    /// This leader's config lease: proposed only while the set has no replicated lease.
    bootstrap_lease: LeaseConfig,
    leader_since_ms: u64,
    /// When this arbiter saw the last `SetLease` apply; its start if that was earlier.
    lease_changed_ms: u64,
    /// Last grant this leader made to each AllocSvr.
    last_grant_ms: BTreeMap<AllocId, u64>,
    /// When a plan first saw each registration: one registered under this leader has a hold
    /// from then to heartbeat, not from the leader's start (expired at once, it would be
    /// refused, register again, and so on for as long as a plan comes before its grant).
    first_seen_ms: BTreeMap<AllocId, u64>,
    /// Found dead: never granted again by this leader.
    expired: BTreeSet<AllocId>,
    /// Unsettled lease epoch → when its `Assign` applied.
    fences: BTreeMap<LeaseEpoch, u64>,
}

/// The runs an AllocSvr may serve: its settled runs, with their lease epochs.
pub fn grant_for(control: &ControlState, alloc: AllocId) -> Vec<(SectionRange, LeaseEpoch)> {
    control
        .assignment
        .runs()
        .filter(|(_, o)| o.alloc == alloc && o.settled)
        .map(|(r, o)| (r, o.lease_epoch))
        .collect()
}

impl Arbiter {
    /// A new leader's arbiter. `bootstrap_lease` (the leader's config) is used only to commit
    /// a first lease into a set that has none; every grant and wait uses the replicated one.
    pub fn new(now_ms: u64, bootstrap_lease: LeaseConfig) -> Arbiter {
        Arbiter {
            bootstrap_lease,
            leader_since_ms: now_ms,
            lease_changed_ms: now_ms,
            last_grant_ms: BTreeMap::new(),
            first_seen_ms: BTreeMap::new(),
            expired: BTreeSet::new(),
            fences: BTreeMap::new(),
        }
    }

    /// Whether a heartbeat from `alloc` may be answered with a grant (of `control.lease`,
    /// which is then `Some`). Never before the set has a replicated lease.
    pub fn may_grant(&self, control: &ControlState, alloc: AllocId) -> bool {
        control.lease.is_some() && control.is_current(alloc) && !self.expired.contains(&alloc)
    }

    /// When anything granted or assigned at `at_ms` (by any leader, if at or before our start)
    /// is surely over: `max(at + hold, lease change + previous hold)`.
    fn over_at(&self, at_ms: u64, control: &ControlState) -> u64 {
        let current = control.lease.unwrap_or(self.bootstrap_lease).hold_ms();
        let previous = control.previous_lease.map_or(current, |l| l.hold_ms());
        at_ms.saturating_add(current).max(self.lease_changed_ms.saturating_add(previous))
    }

    /// Records an applied `SetLease` (`Applied::LeaseChanged`).
    pub fn on_lease_changed(&mut self, now_ms: u64) {
        self.lease_changed_ms = self.lease_changed_ms.max(now_ms);
    }

    /// The command that changes the set's lease to `lease`, if that is allowed now: the input
    /// is valid, the set has a lease, and the lease before the last change is surely over
    /// (its hold has passed since this arbiter saw that change apply, or since it started).
    /// The command applies only on top of the change this arbiter saw (compare-and-set).
    pub fn lease_change(
        &self,
        now_ms: u64,
        control: &ControlState,
        lease: LeaseConfig,
    ) -> Result<Command, LeaseChangeError> {
        validate_lease(&lease)?;
        let Some(current) = control.lease else {
            return Err(LeaseChangeError::NotBootstrapped);
        };
        let previous = control.previous_lease.unwrap_or(current).hold_ms();
        let until = self.lease_changed_ms.saturating_add(previous);
        if now_ms < until {
            return Err(LeaseChangeError::TooSoon {
                wait_ms: until - now_ms,
                since_ms: now_ms.saturating_sub(self.lease_changed_ms),
            });
        }
        Ok(Command::SetLease { lease, after_change: control.lease_changes })
    }

    /// Records a grant; the caller must have checked `may_grant` in the same step.
    pub fn on_granted(&mut self, alloc: AllocId, now_ms: u64) {
        debug_assert!(!self.expired.contains(&alloc));
        self.last_grant_ms.insert(alloc, now_ms);
    }

    /// Records an applied `Assign`: unsettled runs are fenced for one `hold` from now (the
    /// longest hold a lease that may still run was granted with).
    pub fn on_assigned(&mut self, lease_epoch: LeaseEpoch, settled: bool, now_ms: u64) {
        if !settled {
            self.fences.insert(lease_epoch, now_ms);
        }
    }

    pub fn last_grant_ms(&self, alloc: AllocId) -> Option<u64> {
        self.last_grant_ms.get(&alloc).copied()
    }

    pub fn is_expired(&self, alloc: AllocId) -> bool {
        self.expired.contains(&alloc)
    }

    /// Whether the new-leader wait is over (never before the set has a replicated lease).
    pub fn is_settled_in(&self, now_ms: u64, control: &ControlState) -> bool {
        control.lease.is_some() && now_ms >= self.over_at(self.leader_since_ms, control)
    }

    fn lease_over(&self, alloc: AllocId, now_ms: u64, control: &ControlState) -> bool {
        let granted = self.last_grant_ms.get(&alloc).or(self.first_seen_ms.get(&alloc));
        let last = granted.copied().unwrap_or(self.leader_since_ms).max(self.leader_since_ms);
        let released = control.allocs.get(&alloc).is_some_and(|r| r.released);
        self.expired.contains(&alloc) || released || now_ms >= self.over_at(last, control)
    }

    /// The commands that move the set toward: every section owned by a live AllocSvr, fences
    /// settled, dead registrations forgotten. Idempotent given the same state: the caller
    /// proposes them and calls again only after they applied.
    pub fn plan(
        &mut self,
        now_ms: u64,
        control: &ControlState,
        sections: SectionRange,
    ) -> Vec<Command> {
        for &id in control.allocs.keys() {
            self.first_seen_ms.entry(id).or_insert(now_ms);
        }
        if control.lease.is_none() {
            // Nothing is granted or moved before the set's lease is replicated.
            let first = self.bootstrap_lease;
            return vec![Command::SetLease { lease: first, after_change: control.lease_changes }];
        }
        if !self.is_settled_in(now_ms, control) {
            return Vec::new(); // a new leader reassigns nothing for one full lease
        }
        let mut commands = Vec::new();

        // 1. Settle fences that have passed (those of a previous leader: from our start).
        let unsettled: BTreeSet<LeaseEpoch> = control
            .assignment
            .runs()
            .filter(|(_, o)| !o.settled)
            .map(|(_, o)| o.lease_epoch)
            .collect();
        for e in unsettled {
            let assigned = self.fences.get(&e).copied().unwrap_or(self.leader_since_ms);
            if now_ms >= self.over_at(assigned, control) {
                commands.push(Command::Settle { lease_epoch: e });
            }
        }
        self.fences.retain(|e, _| {
            control.assignment.runs().any(|(_, o)| o.lease_epoch == *e && !o.settled)
        });

        // 2. Expire AllocSvrs whose lease must be over: from now on they get no grant.
        for (&id, _) in control.allocs.iter() {
            if !self.expired.contains(&id) && self.lease_over(id, now_ms, control) {
                self.expired.insert(id);
            }
        }

        // 3. Who may receive sections: current, not draining, alive under this leader.
        let eligible: Vec<AllocId> = control
            .allocs
            .iter()
            .filter(|(id, r)| {
                !r.replaced
                    && !r.draining
                    && !self.expired.contains(id)
                    && self.last_grant_ms.contains_key(id)
            })
            .map(|(&id, _)| id)
            .collect();

        // 4. Orphans: unassigned sections and runs of anyone not eligible.
        let mut orphans: Vec<(SectionRange, Option<Owner>)> =
            control.assignment.unassigned(sections).into_iter().map(|r| (r, None)).collect();
        orphans.extend(
            control
                .assignment
                .runs()
                .filter(|(_, o)| !eligible.contains(&o.alloc))
                .map(|(r, o)| (r, Some(o))),
        );
        orphans.sort_by_key(|(r, _)| r.begin());

        if !eligible.is_empty() {
            let assigned = control.assignment.load();
            let mut load: BTreeMap<AllocId, u64> =
                eligible.iter().map(|&a| (a, assigned.get(&a).copied().unwrap_or(0))).collect();
            let n_orphaned: u64 = orphans.iter().map(|(r, _)| r.len()).sum();
            let total: u64 = load.values().sum::<u64>() + n_orphaned;
            let target = total.div_ceil(eligible.len() as u64);
            let mut settled_moves = Vec::new();
            let mut fenced_moves = Vec::new();
            for (range, previous) in orphans {
                // Free to serve at once only if the previous owner can hold no lease and will
                // never be granted again, and the run is settled: an unsettled run is still
                // fenced for the owner before, whose lease may outlast the current owner's
                // (moving it on as settled would drop that fence).
                let free = previous.is_none_or(|o| {
                    o.settled
                        && self.lease_over(o.alloc, now_ms, control)
                        && !self.may_grant(control, o.alloc)
                });
                let mut begin = range.begin();
                while begin < range.end() {
                    let Some((&to, &have)) = load.iter().min_by_key(|&(&a, &l)| (l, a)) else {
                        break;
                    };
                    let take = (range.end().0 - begin.0).min(target.saturating_sub(have).max(1));
                    let end = crate::ids::SectionId(begin.0 + take);
                    let piece = SectionRange::new(begin, end).expect("begin < end");
                    if free {
                        settled_moves.push((piece, to))
                    } else {
                        fenced_moves.push((piece, to))
                    }
                    *load.entry(to).or_insert(0) += take;
                    begin = end;
                }
            }
            if !settled_moves.is_empty() {
                commands.push(Command::Assign { moves: settled_moves, settled: true });
            }
            if !fenced_moves.is_empty() {
                commands.push(Command::Assign { moves: fenced_moves, settled: false });
            }
            // 5. Rebalance toward an AllocSvr that owns nothing (a newly started one): it takes
            //    half of the most loaded one's sections, from the end of that one's largest run.
            if n_orphaned == 0 {
                let empty = eligible.iter().copied().find(|a| load.get(a) == Some(&0));
                let busiest = load.iter().max_by_key(|&(&a, &l)| (l, std::cmp::Reverse(a)));
                if let (Some(empty), Some((&busiest, &busiest_load))) = (empty, busiest) {
                    let largest = control
                        .assignment
                        .runs()
                        .filter(|(_, o)| o.alloc == busiest)
                        .max_by_key(|(r, _)| r.len());
                    if let Some((run, _)) = largest.filter(|_| busiest_load >= 2) {
                        let take = (busiest_load / 2).min(run.len()).max(1);
                        let from = crate::ids::SectionId(run.end().0 - take);
                        let upper = SectionRange::new(from, run.end()).expect("from < end");
                        commands
                            .push(Command::Assign { moves: vec![(upper, empty)], settled: false });
                    }
                }
            }
        }

        // 6. Free the worker ids of AllocSvrs whose lease must be over (expired above, which
        //    includes released ones): the next holder starts above each one's high-water mark.
        //    A registration that holds worker ids is not forgotten before they are freed.
        let mut holding = BTreeSet::new();
        for (_, ws) in control.workers.iter() {
            holding.extend(ws.values().filter_map(|r| r.holder));
        }
        for &id in &holding {
            let free = self.expired.contains(&id)
                || !control.allocs.contains_key(&id)
                || (Tooth::NoWorkerWait.on() && self.missed_a_third(id, now_ms, control));
            if free {
                commands.push(Command::FreeWorkers { alloc: id });
            }
        }
        // 7. Forget registrations that are gone and own nothing.
        let owners = control.assignment.load();
        for (&id, r) in &control.allocs {
            if (r.replaced || self.expired.contains(&id))
                && !owners.contains_key(&id)
                && !holding.contains(&id)
            {
                commands.push(Command::RemoveAlloc { alloc: id });
            }
        }
        commands
    }

    /// The `teeth-no-worker-wait` build's shortcut: no grant for a third of a lease (or a
    /// registration replaced by a newer one) counts as gone, although its lease may still run.
    fn missed_a_third(&self, alloc: AllocId, now_ms: u64, control: &ControlState) -> bool {
        let replaced = control.allocs.get(&alloc).is_some_and(|r| r.replaced);
        let third = control.lease.map_or(0, |l| l.lease_ms / 3);
        let last = self.last_grant_ms.get(&alloc).copied().unwrap_or(self.leader_since_ms);
        replaced || now_ms >= last.saturating_add(third)
    }

    /// Drops leader-local memory of a registration the state no longer has.
    pub fn forget(&mut self, alloc: AllocId) {
        self.last_grant_ms.remove(&alloc);
        self.first_seen_ms.remove(&alloc);
        self.expired.remove(&alloc);
    }
}

#[cfg(test)]
mod tests;
