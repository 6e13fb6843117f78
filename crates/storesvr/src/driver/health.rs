//! Whether this member can serve: a quorum in sight (for proposals and for gRPC health), the
//! gauges published every tick, the leader hint of redirects, and the status view.

use super::api::{NodeStatus, RequestError, Role, Serving};
use super::Driver;
use raft::StateRole;
use seqsvr_core::ids::NodeId;
use seqsvr_core::teeth::Tooth;
use std::time::Instant;

impl Driver {
    /// A request may enter Raft only on a leader that heard from a quorum within one election
    /// timeout: otherwise it could sit uncommitted in our log and apply long after the caller was
    /// told UNAVAILABLE.
    pub(super) fn check_can_serve(
        &self,
        pending: usize,
        pending_max: usize,
    ) -> Result<(), RequestError> {
        if self.node.raft.state != StateRole::Leader {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        }
        let (heard, voters) = self.voters_heard();
        if heard <= voters / 2 && !Tooth::NoQuorumCheck.on() {
            return Err(RequestError::NoQuorum { heard, voters });
        }
        if pending >= pending_max {
            return Err(RequestError::Overloaded);
        }
        Ok(())
    }

    /// Voters heard from within one election timeout (this member counts itself), and all
    /// voters.
    fn voters_heard(&self) -> (usize, usize) {
        let voters = &self.node.store().conf_state().voters;
        (self.heard_of(voters), voters.len())
    }

    /// How many of `voters` this leader heard from within an election timeout (itself counts).
    pub(super) fn heard_of(&self, voters: &[u64]) -> usize {
        let now = Instant::now();
        voters
            .iter()
            .filter(|&&v| v == self.config.node_id.0 || self.heard_within_election_timeout(v, now))
            .count()
    }

    pub(super) fn heard_within_election_timeout(&self, peer: u64, now: Instant) -> bool {
        let window = self.config.tick * self.config.election_ticks as u32;
        self.last_heard.get(&peer).is_some_and(|&t| now.duration_since(t) < window)
    }

    /// Whether this member knows a leader that has a quorum in sight: the leader itself heard
    /// from a majority within an election timeout, or a follower heard from its leader within
    /// one (check_quorum makes a leader without a quorum step down within that time).
    fn serving_now(&self) -> Serving {
        let raft = &self.node.raft;
        let (serving, reason) = match raft.state {
            StateRole::Leader => {
                let (heard, voters) = self.voters_heard();
                if heard > voters / 2 {
                    (true, "leader with a quorum in sight")
                } else {
                    (false, "leader without a quorum in sight")
                }
            }
            _ if raft.leader_id == raft::INVALID_ID => {
                (false, "no leader known (election in progress?)")
            }
            _ if self.heard_within_election_timeout(raft.leader_id, Instant::now()) => {
                (true, "follower of a live leader")
            }
            _ => (false, "the leader has not been heard from lately"),
        };
        Serving { serving, reason, established: serving && self.every_voter_past_bootstrap() }
    }

    /// Leader only: every voter acknowledged an entry past the bootstrap (so none of them can
    /// still be a member whose first start has not happened yet).
    pub(super) fn every_voter_past_bootstrap(&self) -> bool {
        let raft = &self.node.raft;
        raft.state == StateRole::Leader
            && self.node.store().conf_state().voters.iter().all(|&id| {
                raft.prs()
                    .get(id)
                    .is_some_and(|pr| pr.matched > crate::storage::BOOTSTRAP_LOG_INDEX)
            })
    }

    /// Once per tick: gauges, leader changes, and the health state.
    pub(super) fn publish(&mut self) {
        let raft = &self.node.raft;
        let store = self.node.store();
        let m = &self.metrics;
        let leader = raft.leader_id;
        m.is_leader.set(if raft.state == StateRole::Leader { 1.0 } else { 0.0 });
        m.term.set(raft.term as f64);
        m.commit_index.set(raft.raft_log.committed as f64);
        m.applied_index.set(store.applied_index() as f64);
        m.last_index.set(raft.raft_log.last_index() as f64);
        m.proposals_pending.set(self.proposals.len() as f64);
        m.vote_blocked.set(if store.vote_blocked() { 1.0 } else { 0.0 });
        let control = store.state().control();
        m.commands_version.set(f64::from(control.commands_version));
        let registered = control.allocs.values().filter(|a| !a.replaced).count();
        let unsettled: u64 = control
            .assignment
            .runs()
            .filter(|(_, owner)| !owner.settled)
            .map(|(range, _)| range.len())
            .sum();
        m.allocsvrs_registered.set(registered as f64);
        m.sections_unsettled.set(unsettled as f64);
        let serving = self.serving_now();
        m.has_leader.set(if serving.serving { 1.0 } else { 0.0 });
        if leader != self.published_leader {
            m.leader_changes.increment(1);
            tracing::info!(term = raft.term, leader, previous = self.published_leader,
                role = ?raft.state, "leader changed");
            self.published_leader = leader;
        }
        self.serving.send_if_modified(|current| {
            let changed = *current != serving;
            *current = serving;
            changed
        });
    }

    pub(super) fn leader_hint(&self) -> Option<(NodeId, String)> {
        let leader = self.node.raft.leader_id;
        if leader == raft::INVALID_ID {
            return None;
        }
        self.addr_of(leader).map(|addr| (NodeId(leader), addr))
    }

    pub(super) fn status(&self) -> NodeStatus {
        let raft = &self.node.raft;
        let store = self.node.store();
        NodeStatus {
            role: Role::of(raft.state),
            term: raft.term,
            leader_id: raft.leader_id,
            commit_index: raft.raft_log.committed,
            applied_index: store.applied_index(),
            first_index: store.truncated_index() + 1,
            last_index: raft.raft_log.last_index(),
            snapshot_index: store.truncated_index(),
            voters: store.conf_state().voters.clone(),
            learners: store.conf_state().learners.clone(),
            n_sections_advanced: store.state().n_sections_advanced() as u64,
            leader_addr: self.leader_hint().map(|(_, a)| a).unwrap_or_default(),
            members: self.membership_view(),
            vote_blocked: store.vote_blocked(),
            lease: store.state().control().lease.unwrap_or(self.config.lease),
            commands_version: store.state().control().commands_version,
            layout: store.state().control().layout,
        }
    }
}
