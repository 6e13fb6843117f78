//! Raft messages from peers: what each batch tells about its sender, and the messages this
//! member must not act on (votes while vote-blocked or holding only the bootstrap, heartbeat
//! commit indexes past its log).

use super::Driver;
use raft::eraftpb::{Message, MessageType};
use seqsvr_core::teeth::Tooth;
use std::time::Instant;

impl Driver {
    /// A batch of messages from one peer; `from_addr` is where it says it can be reached,
    /// `vote_blocked` whether it may vote, `commands_version` what its build applies.
    pub(super) fn step_messages(
        &mut self,
        from_addr: &str,
        vote_blocked: bool,
        commands_version: u32,
        layout: Option<seqsvr_core::store::SetLayout>,
        messages: Vec<Message>,
    ) {
        let now = Instant::now();
        let blocked = self.node.store().vote_blocked();
        for mut m in messages {
            self.last_heard.insert(m.from, now);
            self.note_commands_version(&m, commands_version, layout, now);
            if vote_blocked {
                self.blocked_peers.insert(m.from);
            } else {
                self.blocked_peers.remove(&m.from);
            }
            self.learn_peer(m.from, from_addr);
            if !peer_may_send(m.get_msg_type(), m.from, self.node.raft.leader_id) {
                metrics::counter!("seqsvr_store_raft_messages_refused_total").increment(1);
                tracing::warn!(from = m.from, kind = ?m.get_msg_type(),
                    "a raft message no member of ours sends to another: dropped (a forged peer?)");
                continue;
            }
            if is_vote_or_campaign(m.get_msg_type())
                && (blocked || self.only_bootstrapped_and_behind(&m))
            {
                if self.vote_block_logged_term < m.term {
                    self.vote_block_logged_term = m.term;
                    tracing::warn!(from = m.from, term = m.term, kind = ?m.get_msg_type(),
                        vote_blocked = blocked,
                        "ignoring a vote request / campaign order: this member may not vote \
                         (vote-blocked, or it holds only the bootstrap and the candidate is \
                         past it)");
                }
                continue;
            }
            let log = &self.node.raft.raft_log;
            let (last_index, committed) = (log.last_index(), log.committed);
            if clamp_heartbeat_commit(&mut m, last_index, committed, blocked) {
                tracing::warn!(
                    from = m.from,
                    last_index,
                    "heartbeat commit index past our log (lost data dir?): ignored"
                );
            }
            if m.get_msg_type() == MessageType::MsgHeartbeatResponse {
                self.reprobe_if_emptied(&m);
            }
            if let Err(e) = self.node.step(m) {
                tracing::debug!(error = %e, "raft step refused a message");
            }
        }
    }

    /// A follower whose data dir was emptied answers heartbeats with a commit index at or
    /// before the bootstrap (0 when it restarted empty, the bootstrap's when it was wrongly
    /// re-created with `new`), while the leader's progress still says it holds every entry it
    /// had acknowledged. raft-rs only sends appends to a peer whose match is behind the log, so
    /// with nothing new proposed the member would wait for the next write, and a leadership
    /// transfer (which picks the best match) could even pick it. The leader probes it again
    /// from what it reports: the appends (or a snapshot) that follow fill it. A healthy member
    /// past the bootstrap reports a commit past it; a late answer from before the set's first
    /// commit costs one extra probe.
    fn reprobe_if_emptied(&mut self, m: &Message) {
        use crate::storage::BOOTSTRAP_LOG_INDEX;
        let raft = &mut self.node.raft;
        if raft.state != raft::StateRole::Leader
            || m.term != raft.term
            || m.from == raft.id
            || m.commit > BOOTSTRAP_LOG_INDEX
        {
            return;
        }
        let Some(pr) = raft.mut_prs().get_mut(m.from) else { return };
        if pr.matched <= BOOTSTRAP_LOG_INDEX {
            return;
        }
        tracing::warn!(
            peer = m.from,
            matched = pr.matched,
            reported_commit = m.commit,
            "a member reports a commit index at or before the bootstrap after acknowledging \
             entries past it (its data dir was emptied?): probing it again"
        );
        pr.matched = m.commit;
        pr.become_probe();
    }

    /// A member that holds nothing but a new set's bootstrap (log at index/term 5) refuses votes
    /// to candidates past it. At a set's creation every candidate is at the bootstrap too; later,
    /// such a member is one that never heard from a leader, or one whose lost data dir was
    /// wrongly re-created with `--initial-cluster-state new`: its vote could elect a candidate
    /// lacking entries it had acknowledged. It votes again once a leader caught it up.
    fn only_bootstrapped_and_behind(&self, m: &Message) -> bool {
        let log = &self.node.raft.raft_log;
        !Tooth::BootstrapEmptyVoter.on()
            && holds_only_bootstrap_and_candidate_is_past_it(log.last_index(), log.last_term(), m)
    }
}

/// Whether a peer may send this kind of message. Proposals, read requests and leadership
/// transfer requests never travel between our members (the driver proposes, reads and
/// transfers only on the leader, and redirects elsewhere): from a peer they are a forged
/// member's, and raft-rs would append a proposal's entries as they are (an `Assign` that gives
/// a section two owners) or abort on an empty one. A campaign order (`MsgTimeoutNow`) comes
/// only from the leader handing leadership over.
fn peer_may_send(kind: MessageType, from: u64, leader: u64) -> bool {
    match kind {
        MessageType::MsgPropose | MessageType::MsgReadIndex | MessageType::MsgTransferLeader => {
            false
        }
        MessageType::MsgTimeoutNow => from == leader,
        _ => true,
    }
}

/// Messages a vote-blocked member must not act on: it would vote, or campaign (and vote for
/// itself).
fn is_vote_or_campaign(kind: MessageType) -> bool {
    matches!(
        kind,
        MessageType::MsgRequestVote | MessageType::MsgRequestPreVote | MessageType::MsgTimeoutNow
    )
}

/// A heartbeat whose commit index is past our log: the leader's progress for us predates our
/// data (a replaced disk, a member re-started empty). raft-rs aborts the process on it
/// (`commit_to` out of range), and a forged message could do the same. Keep our own commit
/// index instead (committing entries we hold past it could commit a stale tail); the appends
/// that follow find the gap and a snapshot or entries fill it.
///
/// A vote-blocked member never takes its commit index from a heartbeat at all: after its data
/// loss it may have accepted entries from a deposed leader, and the current leader's progress
/// for it (and so the heartbeat's commit) may still date from before the loss, so a commit
/// within its log could commit entries no majority holds. Appends move its commit instead: they
/// commit only entries whose match with the leader's log raft-rs has just checked.
/// True if the commit index was past the log.
fn clamp_heartbeat_commit(
    m: &mut Message,
    last_index: u64,
    committed: u64,
    vote_blocked: bool,
) -> bool {
    if m.get_msg_type() != MessageType::MsgHeartbeat {
        return false;
    }
    let past_log = m.commit > last_index;
    if past_log || vote_blocked {
        m.commit = m.commit.min(committed);
    }
    past_log
}

/// See `Driver::only_bootstrapped_and_behind`.
fn holds_only_bootstrap_and_candidate_is_past_it(
    last_index: u64,
    last_term: u64,
    m: &Message,
) -> bool {
    use crate::storage::{BOOTSTRAP_LOG_INDEX, BOOTSTRAP_LOG_TERM};
    let only_bootstrap = last_index == BOOTSTRAP_LOG_INDEX && last_term == BOOTSTRAP_LOG_TERM;
    match m.get_msg_type() {
        MessageType::MsgRequestVote | MessageType::MsgRequestPreVote => {
            only_bootstrap && m.index > BOOTSTRAP_LOG_INDEX
        }
        // A leader hands leadership only to a member it believes caught up: one holding only
        // the bootstrap is not, whatever the leader's (stale) progress says.
        MessageType::MsgTimeoutNow => only_bootstrap,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::storage::MemStorage;
    use raft::RawNode;

    fn vote_request(kind: MessageType, last_index: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(kind);
        m.index = last_index;
        m.log_term = 6;
        m
    }

    #[test]
    fn a_member_holding_only_the_bootstrap_votes_only_at_the_creation() {
        let refuses = |kind, candidate_last, (ours_last, ours_term)| {
            holds_only_bootstrap_and_candidate_is_past_it(
                ours_last,
                ours_term,
                &vote_request(kind, candidate_last),
            )
        };
        // The set's first election: everyone at the bootstrap.
        assert!(!refuses(MessageType::MsgRequestVote, 5, (5, 5)));
        assert!(!refuses(MessageType::MsgRequestPreVote, 5, (5, 5)));
        // A candidate past it, and we hold nothing else: a lost disk re-created with `new`.
        assert!(refuses(MessageType::MsgRequestVote, 6, (5, 5)));
        assert!(refuses(MessageType::MsgRequestPreVote, 9, (5, 5)));
        // Caught up by a leader: votes as usual.
        assert!(!refuses(MessageType::MsgRequestVote, 9, (7, 6)));
        // Other messages are never filtered here.
        assert!(!refuses(MessageType::MsgAppend, 9, (5, 5)));
        // A leadership transfer to a member holding only the bootstrap: the leader's progress
        // for it is stale (it lost what it had acknowledged).
        assert!(refuses(MessageType::MsgTimeoutNow, 0, (5, 5)));
        assert!(!refuses(MessageType::MsgTimeoutNow, 0, (7, 6)));
    }

    fn follower() -> RawNode<MemStorage> {
        let storage = MemStorage::new_with_conf_state((vec![1, 2], vec![]));
        let config = raft::Config { id: 2, ..Default::default() };
        RawNode::new(&config, storage, &crate::raft_log::logger()).expect("raw node")
    }

    fn heartbeat(commit: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = 1;
        m.to = 2;
        m.term = 1;
        m.commit = commit;
        m
    }

    /// The failure the clamp exists for: raft-rs aborts on a heartbeat past the log.
    #[test]
    fn raft_rs_aborts_on_a_heartbeat_commit_past_the_log() {
        let aborted = std::panic::catch_unwind(|| {
            let mut node = follower();
            let _ = node.step(heartbeat(10));
        });
        assert!(aborted.is_err(), "raft-rs accepted a commit index past the log");
    }

    #[test]
    fn a_heartbeat_commit_past_the_log_is_clamped_to_our_commit() {
        let mut node = follower();
        let mut m = heartbeat(10);
        let log = &node.raft.raft_log;
        assert!(clamp_heartbeat_commit(&mut m, log.last_index(), log.committed, false));
        assert_eq!(m.commit, 0);
        node.step(m).expect("stepped");
        assert_eq!(node.raft.raft_log.committed, 0);
        assert_eq!(node.raft.leader_id, 1, "the heartbeat still tells who leads");
        // Within the log: untouched.
        let mut m = heartbeat(0);
        assert!(!clamp_heartbeat_commit(&mut m, 0, 0, false));
        let mut m = heartbeat(3);
        assert!(!clamp_heartbeat_commit(&mut m, 5, 1, false));
        assert_eq!(m.commit, 3, "a member that may vote takes the leader's commit");
        // A vote-blocked member takes no commit index from a heartbeat, even within its log.
        assert!(!clamp_heartbeat_commit(&mut m, 5, 1, true));
        assert_eq!(m.commit, 1);
    }
}
