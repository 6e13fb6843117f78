//! Who the members are and where they live: membership changes (one at a time, validated so
//! raft-rs never drops one silently), the peers the outbox dials, the membership view, and
//! leadership hand-off (step-down before exit, transfer on request).

use super::api::{MemberView, MembershipChange, MembershipDone, Reply, RequestError};
use super::replies::ProposalReply;
use super::{Driver, PENDING_PROPOSALS_MAX};
use crate::storage::Members;
use raft::eraftpb::{ConfChange, ConfChangeSingle, ConfChangeType, ConfChangeV2};
use raft::StateRole;
use seqsvr_core::ids::NodeId;
use std::time::Instant;

/// A learner is promoted only when its match index is at most this far behind the leader's
/// commit index (as etcd's `member promote` requires a caught-up learner).
pub const PROMOTE_LAG_MAX: u64 = 64;

impl Driver {
    /// Before a graceful exit: a leader hands leadership to the voter with the most of the log
    /// among those heard from lately and not vote-blocked, so the set elects no one by timeout.
    pub(super) fn step_down(&mut self) -> Option<NodeId> {
        if self.node.raft.state != StateRole::Leader {
            return None;
        }
        let now = Instant::now();
        let raft = &self.node.raft;
        let target = self
            .node
            .store()
            .conf_state()
            .voters
            .iter()
            .copied()
            .filter(|&v| v != self.config.node_id.0 && !self.blocked_peers.contains(&v))
            .filter(|&v| self.heard_within_election_timeout(v, now))
            .max_by_key(|v| raft.prs().get(*v).map_or(0, |p| p.matched))?;
        tracing::info!(to = target, "shutting down: transferring leadership first");
        self.node.transfer_leader(target);
        Some(NodeId(target))
    }

    /// Hands leadership to `target` on request (seqctl store transfer-leader): only a leader,
    /// only to a voter that may lead.
    pub(super) fn transfer_leader(&mut self, target: NodeId) -> Result<(), RequestError> {
        if self.node.raft.state != StateRole::Leader {
            Err(RequestError::NotLeader { leader: self.leader_hint() })
        } else if !self.node.store().conf_state().voters.contains(&target.0) {
            Err(RequestError::Invalid(format!("member {target} is not a voter of this set")))
        } else if self.blocked_peers.contains(&target.0) {
            Err(RequestError::Precondition(format!(
                "member {target} is vote-blocked (started empty in an existing set): it \
                 cannot lead; remove and re-add it first"
            )))
        } else {
            if target != self.config.node_id {
                self.node.transfer_leader(target.0);
            }
            Ok(())
        }
    }

    /// One membership change at a time, validated here so that raft-rs never drops it silently
    /// (it turns a conf change proposed while another is unapplied into an empty entry).
    pub(super) fn propose_membership(
        &mut self,
        change: MembershipChange,
        reply: Reply<MembershipDone>,
    ) {
        let result = self.check_membership(&change);
        let (cc, context) = match result {
            Ok(Some(cc)) => cc,
            Ok(None) => return, // answered (leader handed over first)
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        tracing::info!(?change, "membership change proposed");
        let before = self.node.raft.raft_log.last_index();
        if let Err(e) = self.node.propose_conf_change(context, cc) {
            let _ = reply.send(Err(RequestError::Dropped(e.to_string())));
            return;
        }
        self.track(before, ProposalReply::Membership(reply));
    }

    /// The conf change for `change`, or why not. `Ok(None)`: removing the leader itself, which
    /// handed leadership to another voter first (the caller retries there).
    #[allow(clippy::type_complexity)]
    fn check_membership(
        &mut self,
        change: &MembershipChange,
    ) -> Result<Option<(ConfChangeV2, Vec<u8>)>, RequestError> {
        self.check_can_serve(self.proposals.len(), PENDING_PROPOSALS_MAX)?;
        let raft = &self.node.raft;
        if raft.has_pending_conf() {
            return Err(RequestError::Precondition(format!(
                "a membership change is still pending (proposed at index {}, applied {}); \
                 one change at a time: retry once it applied",
                raft.pending_conf_index, raft.raft_log.applied
            )));
        }
        if let Some(index) = self.unapplied_raise() {
            return Err(RequestError::Precondition(format!(
                "the set's commands version is being raised (index {index}, not applied yet): \
                 membership changes wait until it applied, so that a member added now is \
                 judged against it; retry in a moment"
            )));
        }
        if let Some(index) = self.proposals.any(|r| matches!(r, ProposalReply::Membership(_))) {
            return Err(RequestError::Precondition(format!(
                "a membership change is still pending (proposed at index {index}); retry once it applied"
            )));
        }
        if raft.raft_log.first_index() <= 1 {
            // A set created before explicit bootstrap keeps entries from index 1, which a new or
            // wiped member would replay onto an empty configuration.
            return Err(RequestError::Precondition(format!(
                "this leader's log still starts at index 1 (a set created before explicit \
                 bootstrap): membership changes wait until the log was compacted once (every {} \
                 applied entries), so that members catch up by snapshot",
                self.config.compact_log_entries
            )));
        }
        let cs = self.node.store().conf_state().clone();
        let is_voter = |id: NodeId| cs.voters.contains(&id.0);
        let is_learner = |id: NodeId| cs.learners.contains(&id.0);
        let single = |kind: ConfChangeType, id: NodeId| {
            let mut c = ConfChangeSingle::default();
            c.set_change_type(kind);
            c.node_id = id.0;
            let mut cc = ConfChangeV2::default();
            cc.set_changes(vec![c].into());
            cc
        };
        match change {
            MembershipChange::AddLearner { id, addr } => {
                if id.0 == 0 {
                    return Err(RequestError::Invalid("node id 0 is reserved".into()));
                }
                if is_voter(*id) || is_learner(*id) {
                    let what = if is_voter(*id) { "a voter" } else { "a learner" };
                    return Err(RequestError::Precondition(format!(
                        "member {id} is already {what} of this set; to replace it, remove it first"
                    )));
                }
                if let Some(other) = self.member_addrs().into_iter().find(|(other, a)| {
                    a == addr
                        && *other != id.0
                        && (is_voter(NodeId(*other)) || is_learner(NodeId(*other)))
                }) {
                    return Err(RequestError::Invalid(format!(
                        "address {addr} already belongs to member {}",
                        other.0
                    )));
                }
                if let Some((_, file_addr)) =
                    self.config.members.iter().find(|(m, a)| m == id && a != addr)
                {
                    // The file's address may be this process's own route to the member (a
                    // proxy), so this is not refused; but a member re-added on a new machine
                    // under a listed id is only reached once the cluster file says so.
                    tracing::warn!(member = %id, %addr, %file_addr,
                        "re-adding a member the cluster file lists at another address: members \
                         dial the file's address for it; update the file if it moved");
                }
                let mut cc = single(ConfChangeType::AddLearnerNode, *id);
                cc.context = addr.clone().into_bytes().into();
                Ok(Some((cc, Vec::new())))
            }
            MembershipChange::Promote { id } => {
                if is_voter(*id) {
                    return Err(RequestError::Precondition(format!(
                        "member {id} is already a voter"
                    )));
                }
                if !is_learner(*id) {
                    return Err(RequestError::Precondition(format!(
                        "member {id} is not a learner of this set: add it with add-learner first"
                    )));
                }
                let commit = raft.raft_log.committed;
                let matched = raft.prs().get(id.0).map_or(0, |p| p.matched);
                let lag = commit.saturating_sub(matched);
                // It must hold at least what our log no longer has (it installed a snapshot),
                // so the promotion reaches it through the log: only a conf change applied from
                // the log lifts a vote block. Lag alone passes an empty learner of a short log.
                let first = raft.raft_log.first_index();
                if matched == 0 || matched + 1 < first {
                    return Err(RequestError::Precondition(format!(
                        "learner {id} has not received the snapshot yet (match index {matched}, \
                         the leader's log starts at {first}); retry once it caught up"
                    )));
                }
                if lag > PROMOTE_LAG_MAX {
                    return Err(RequestError::Precondition(format!(
                        "learner {id} has not caught up: its match index is {matched}, the commit \
                         index {commit} (lag {lag} > {PROMOTE_LAG_MAX}); retry once it caught up"
                    )));
                }
                Ok(Some((single(ConfChangeType::AddNode, *id), Vec::new())))
            }
            MembershipChange::Remove { id } => {
                if !is_voter(*id) && !is_learner(*id) {
                    return Err(RequestError::Precondition(format!(
                        "member {id} is not a member of this set"
                    )));
                }
                if is_voter(*id) {
                    let rest: Vec<u64> = cs.voters.iter().copied().filter(|v| *v != id.0).collect();
                    if rest.is_empty() {
                        return Err(RequestError::Precondition(
                            "the only voter cannot be removed".into(),
                        ));
                    }
                    let able: Vec<u64> =
                        rest.iter().copied().filter(|v| !self.blocked_peers.contains(v)).collect();
                    let heard = self.heard_of(&able);
                    if heard <= rest.len() / 2 {
                        return Err(RequestError::Precondition(format!(
                            "removing member {id} would leave {} voters of which only {heard} \
                             answered within an election timeout and may vote (vote-blocked \
                             members cannot elect a leader): no electable quorum; bring members \
                             back, or remove and re-add blocked ones first",
                            rest.len()
                        )));
                    }
                    if *id == self.config.node_id {
                        // Hand leadership to the most up-to-date other voter first.
                        let raft = &self.node.raft;
                        let target = able
                            .iter()
                            .copied()
                            .max_by_key(|v| raft.prs().get(*v).map_or(0, |p| p.matched))
                            .expect("a quorum of the others may vote");
                        tracing::info!(
                            to = target,
                            "removing the leader: transferring leadership first"
                        );
                        self.node.transfer_leader(target);
                        let addr = self.addr_of(target).unwrap_or_default();
                        return Err(RequestError::NotLeader {
                            leader: Some((NodeId(target), addr)),
                        });
                    }
                }
                Ok(Some((single(ConfChangeType::RemoveNode, *id), Vec::new())))
            }
        }
    }

    /// Every member address known: the cluster file's view first, then the replicated directory.
    fn member_addrs(&self) -> Members {
        let mut all = self.node.store().members().clone();
        for (id, addr) in &self.config.members {
            all.insert(id.0, addr.clone());
        }
        all
    }

    pub(super) fn addr_of(&self, id: u64) -> Option<String> {
        self.config
            .members
            .iter()
            .find(|(m, _)| m.0 == id)
            .map(|(_, a)| a.clone())
            .or_else(|| self.node.store().members().get(&id).cloned())
    }

    /// Makes sure the outbox can reach every member of the configuration.
    pub(super) fn sync_peers(&mut self) {
        let cs = self.node.store().conf_state().clone();
        let addrs = self.member_addrs();
        for id in cs.voters.iter().chain(cs.learners.iter()) {
            if *id == self.config.node_id.0 {
                continue;
            }
            // A file member keeps its file address; others follow the directory.
            if let Some(addr) = addrs.get(id) {
                if let Err(e) = self.outbox.set_peer(NodeId(*id), addr) {
                    tracing::warn!(peer = id, %addr, error = %e, "cannot dial raft peer");
                }
            }
        }
    }

    /// A message from a member we have no address for (a leader added after the cluster file
    /// was written, talking to a new member): answer it where it says it listens.
    pub(super) fn learn_peer(&mut self, from: u64, from_addr: &str) {
        if from == self.config.node_id.0 || from_addr.is_empty() || self.outbox.knows(NodeId(from))
        {
            return;
        }
        if let Err(e) = self.outbox.set_peer(NodeId(from), from_addr) {
            tracing::warn!(peer = from, addr = %from_addr, error = %e, "cannot dial raft peer");
        }
    }

    pub(super) fn membership_view(&self) -> Vec<MemberView> {
        let store = self.node.store();
        let cs = store.conf_state();
        let raft = &self.node.raft;
        let leader = raft.state == StateRole::Leader;
        let commit = raft.raft_log.committed;
        let mut out: Vec<MemberView> = cs
            .voters
            .iter()
            .map(|id| (*id, false))
            .chain(cs.learners.iter().map(|id| (*id, true)))
            .map(|(id, learner)| {
                let matched = if !leader {
                    0
                } else if id == self.config.node_id.0 {
                    raft.raft_log.last_index()
                } else {
                    raft.prs().get(id).map_or(0, |p| p.matched)
                };
                MemberView {
                    id,
                    addr: self.addr_of(id).unwrap_or_default(),
                    learner,
                    match_index: matched,
                    lag: if leader { commit.saturating_sub(matched) } else { 0 },
                }
            })
            .collect();
        out.sort_by_key(|m| m.id);
        out
    }
}

/// A (legacy) single conf change as a V2 one with the same effect.
pub(super) fn v1_to_v2(cc: ConfChange) -> ConfChangeV2 {
    let mut single = ConfChangeSingle::default();
    single.set_change_type(cc.get_change_type());
    single.node_id = cc.node_id;
    let mut v2 = ConfChangeV2::default();
    v2.set_changes(vec![single].into());
    v2.context = cc.context;
    v2
}
