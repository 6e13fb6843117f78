//! How many worker ids of a scheme one `alloc` identity may hold in a set: what the leader
//! checks before it proposes a worker lease (`Input::AcquireWorker`).
//!
//! A registration costs an identity nothing but an address (up to
//! `[tls] max_registrations_per_identity`, 8 by default), so a rule per registration lets one
//! certificate take every worker id of a small pool (`weibo` has 4 a set) by registering made-up
//! addresses. The rule is per identity instead: the set's pool is shared between the identities
//! registered in the set now (current registrations, and the one asking), `share = max(1,
//! pool / identities)` each. An identity may always take up to its share; past it, only while
//! every other identity's missing share stays free. So no certificate can keep a registered
//! AllocSvr of another from its share, and a correct cluster never meets the rule where the
//! pool could have served it: an AllocSvr per identity holds one id (two for a lease after a
//! crash restart, whose old registration holds its id until its lease ends), within its share
//! or from a spare no other identity is owed; AllocSvrs that share one identity share the whole
//! pool. Not the configured identities (`[tls.identities]`): files list spare ones (the test
//! PKI lists 8 a set), and owing each a share would make a restarted AllocSvr wait out its old
//! lease for ids the pool has. So an identity that registers while the others are away may take
//! their shares meanwhile; holdings are never revoked, and an identity registered later gets its
//! share as the others' old registrations end.

use super::replies::ProposalReply;
use super::{Driver, RequestError};
use seqsvr_core::ids::AllocId;
use std::collections::{BTreeMap, BTreeSet};

/// The worker ids of one scheme held per identity, and how large the pool is.
pub(super) struct Holdings<'a> {
    pub(super) pool: u64,
    /// Ids held (applied) or being leased (proposed, not applied), by the holder's identity.
    pub(super) by_identity: BTreeMap<&'a str, u64>,
    /// Every id held or being leased, whoever holds it (plaintext registrations too).
    pub(super) total: u64,
    /// Every identity the pool is shared between.
    pub(super) identities: BTreeSet<&'a str>,
}

impl Holdings<'_> {
    /// Each identity's share: never 0 (an identity always gets one while one is free).
    pub(super) fn share(&self) -> u64 {
        (self.pool / self.identities.len().max(1) as u64).max(1)
    }

    /// `Ok` if `identity` may take one more id; else how many it holds and why not.
    pub(super) fn may_take(&self, identity: &str) -> Result<(), u64> {
        let share = self.share();
        let held = |i: &str| self.by_identity.get(i).copied().unwrap_or(0);
        let mine = held(identity);
        if mine < share {
            return Ok(());
        }
        let free = self.pool.saturating_sub(self.total);
        let missing: u64 = (self.identities.iter())
            .filter(|&&other| other != identity)
            .map(|&other| share.saturating_sub(held(other)))
            .sum();
        if free > missing {
            Ok(())
        } else {
            Err(mine)
        }
    }
}

impl Driver {
    /// What `scheme`'s pool of `pool` worker ids is held as, counting leases proposed and not
    /// applied yet (several acquisitions in one batch must not all pass on the applied state).
    fn worker_holdings(&self, scheme: &str, pool: u64) -> Holdings<'_> {
        let control = self.node.store().state().control();
        let identity_of = |a: &AllocId| control.allocs.get(a).and_then(|r| r.identity.as_deref());
        let holders: BTreeSet<AllocId> = (control.workers.get(scheme).into_iter().flatten())
            .filter_map(|(_, w)| w.holder)
            .collect();
        let being_leased: BTreeSet<AllocId> = (self.proposals.replies())
            .filter_map(|r| match r {
                ProposalReply::Worker { alloc, scheme: s, .. } if s == scheme => Some(*alloc),
                _ => None,
            })
            .filter(|a| !holders.contains(a))
            .collect();
        let mut by_identity = BTreeMap::new();
        for identity in holders.iter().chain(&being_leased).filter_map(identity_of) {
            *by_identity.entry(identity).or_insert(0) += 1;
        }
        let registered = (control.allocs.iter())
            .filter(|&(&id, _)| control.is_current(id))
            .filter_map(|(_, r)| r.identity.as_deref());
        let identities = registered.collect();
        Holdings {
            pool,
            by_identity,
            total: (holders.len() + being_leased.len()) as u64,
            identities,
        }
    }

    /// May `alloc` lease one more worker id of `scheme` (a pool of `pool` ids)? See the module
    /// doc. One that holds an id of it already may ask again (the lease answers that one).
    pub(super) fn check_worker_share(
        &self,
        alloc: AllocId,
        scheme: &str,
        pool: u64,
    ) -> Result<(), RequestError> {
        let control = self.node.store().state().control();
        let Some(identity) = control.allocs.get(&alloc).and_then(|r| r.identity.as_deref()) else {
            return Ok(()); // plaintext, or not applied here yet (then the apply refuses)
        };
        let workers = control.workers.get(scheme);
        if workers.into_iter().flatten().any(|(_, w)| w.holder == Some(alloc)) {
            return Ok(());
        }
        let mut holdings = self.worker_holdings(scheme, pool);
        holdings.identities.insert(identity);
        let Err(held) = holdings.may_take(identity) else { return Ok(()) };
        Err(RequestError::WorkerShare(format!(
            "identity {identity:?} holds {held} of the {pool} worker ids of scheme {scheme:?} in \
             this set (or is being leased them), its share of {} among the {} identities \
             registered here, and the rest are kept for the others' shares: wait until its \
             old registrations' leases end (a restarted AllocSvr's previous one holds its id \
             until then), or give each AllocSvr its own identity",
            holdings.share(),
            holdings.identities.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::Holdings;

    fn holdings<'a>(pool: u64, held: &[(&'a str, u64)], identities: &[&'a str]) -> Holdings<'a> {
        Holdings {
            pool,
            by_identity: held.iter().copied().collect(),
            total: held.iter().map(|&(_, n)| n).sum(),
            identities: identities.iter().copied().collect(),
        }
    }

    /// Past its share an identity takes an id only if every other identity's missing share
    /// stays free; within it always (given a free id, which the apply checks).
    #[test]
    fn an_identity_takes_past_its_share_only_what_no_other_identity_is_owed() {
        let two = ["a", "b"];
        assert_eq!(holdings(4, &[("a", 1)], &two).may_take("a"), Ok(()), "within its share");
        assert_eq!(holdings(4, &[("a", 2)], &two).may_take("a"), Err(2), "b is owed two");
        assert_eq!(holdings(4, &[("a", 2), ("b", 1)], &two).may_take("a"), Err(2), "b is owed one");
        assert_eq!(holdings(4, &[("a", 2), ("b", 2)], &two).may_take("b"), Err(2), "none free");
        let three = ["a", "b", "c"];
        // share 1 each, one spare: the spare goes to whoever asks first.
        assert_eq!(holdings(4, &[("a", 1), ("b", 1), ("c", 1)], &three).may_take("a"), Ok(()));
        assert_eq!(holdings(4, &[("a", 1), ("b", 1)], &three).may_take("a"), Ok(()), "c owed 1");
        assert_eq!(holdings(4, &[("a", 2), ("b", 1)], &three).may_take("a"), Err(2));
        // One identity (AllocSvrs sharing a certificate): the whole pool.
        assert_eq!(holdings(4, &[("a", 3)], &["a"]).may_take("a"), Ok(()));
        // More identities than ids: one each, first come, none a second while one is owed.
        let five = ["a", "b", "c", "d", "e"];
        assert_eq!(holdings(4, &[], &five).may_take("a"), Ok(()));
        assert_eq!(holdings(4, &[("a", 1)], &five).may_take("a"), Err(1));
    }
}
