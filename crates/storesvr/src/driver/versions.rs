//! The commands version gate: which commands the leader may propose while members of older
//! builds may still be in the set (a rolling upgrade), and when it raises the set's version.
//!
//! Each member reports the commands version of its build in every Raft message batch
//! (`RaftMessageBatch.sender_commands_version`; builds before the gate report none, read as 0).
//! The leader proposes [`Command::RaiseCommandsVersion`] only once every member of the
//! configuration (voters and learners, both halves of a joint one) was heard from within an
//! election timeout reporting at least its own build's version (and no membership change is
//! pending, whose new member could be of an older build); until the raise applies, it
//! proposes only commands of the set's replicated version ([`Command::needs_version`]) and
//! falls back (or refuses, retryably) for the rest. A member that applies a command above its
//! build's version stops with a storage fault (`ready.rs`), as a build that cannot decode the
//! command does.

use super::api::RequestError;
use super::Driver;
use raft::eraftpb::{EntryType, Message, MessageType};
use seqsvr_core::store::Command;
use seqsvr_core::teeth::Tooth;
use std::time::Instant;

impl Driver {
    /// The set's replicated commands version (as this member applied it).
    pub(super) fn set_commands_version(&self) -> u32 {
        self.node.store().state().control().commands_version
    }

    /// Whether the set's version covers commands that need `version`: every member applies them.
    pub(super) fn commands_cover(&self, version: u32) -> bool {
        Tooth::NoCommandsGate.on() || self.set_commands_version() >= version
    }

    /// `Ok` if the set's version covers `version`; else the retryable refusal for `what`.
    pub(super) fn require_commands_version(
        &self,
        version: u32,
        what: &str,
    ) -> Result<(), RequestError> {
        if self.commands_cover(version) {
            return Ok(());
        }
        Err(RequestError::CommandsVersion(format!(
            "{what} need the set's commands version {version}, and it is {}: a member still runs \
             an older StoreSvr build (rolling upgrade?). Upgrade every member of the set; the \
             leader raises the version once all of them report it (seqctl store status)",
            self.set_commands_version()
        )))
    }

    /// Records the commands version a peer's batch reported, from its answers to this
    /// leader's appends and heartbeats of the current term only: a removed member still
    /// running (whose id may come back on another machine and build) or a stray campaign
    /// message never counts as a member's report.
    pub(super) fn note_commands_version(
        &mut self,
        m: &Message,
        version: u32,
        layout: Option<seqsvr_core::store::SetLayout>,
        now: Instant,
    ) {
        let raft = &self.node.raft;
        let answer = matches!(
            m.get_msg_type(),
            MessageType::MsgAppendResponse | MessageType::MsgHeartbeatResponse
        );
        if answer && m.term == raft.term && raft.prs().get(m.from).is_some() {
            self.peer_commands_versions.insert(m.from, (version, m.term, now));
            self.peer_layouts.insert(m.from, (layout, m.term, now));
        }
    }

    /// Every member of the configuration but this one (voters and learners, of both halves of
    /// a joint configuration), in id order: whose reports the version raise and the layout
    /// record wait for.
    fn other_members(&self) -> Vec<u64> {
        let cs = self.node.store().conf_state();
        let mut members: Vec<u64> = (cs.voters.iter())
            .chain(&cs.learners)
            .chain(&cs.voters_outgoing)
            .chain(&cs.learners_next)
            .copied()
            .filter(|&m| m != self.config.node_id.0)
            .collect();
        members.sort_unstable();
        members.dedup();
        members
    }

    /// Leader only: the members (voters and learners but this one) that did not lately report
    /// `ours` as their cluster file's layout, in this term, with what they reported (`None`:
    /// nothing lately, or a build that reports none). The set's layout is recorded only when
    /// this is empty: one member's file must not become the set's record.
    pub(super) fn members_with_another_layout(
        &self,
        ours: &seqsvr_core::store::SetLayout,
        now: Instant,
    ) -> Vec<(u64, Option<seqsvr_core::store::SetLayout>)> {
        let term = self.node.raft.term;
        let window = self.config.tick * self.config.election_ticks as u32;
        self.other_members()
            .into_iter()
            .filter_map(|m| match self.peer_layouts.get(&m) {
                Some(&(Some(reported), at_term, at))
                    if reported == *ours && at_term == term && now.duration_since(at) < window =>
                {
                    None
                }
                Some(&(reported, at_term, at))
                    if at_term == term && now.duration_since(at) < window =>
                {
                    Some((m, reported))
                }
                _ => Some((m, None)),
            })
            .collect()
    }

    /// Leader only, in the arbiter's round: the raise to this build's version, once every
    /// member reported it lately. Logs (once per change) who the set waits for.
    pub(super) fn commands_version_raise(&mut self) -> Option<Command> {
        let ours = self.config.commands_version;
        if self.set_commands_version() >= ours {
            return None;
        }
        if Tooth::NoCommandsGate.on() {
            return Some(Command::RaiseCommandsVersion { version: ours });
        }
        // A member being added is not in the applied configuration yet: wait until it is, and
        // has reported.
        if self.node.raft.has_pending_conf() {
            return None;
        }
        let behind = self.members_behind(ours, Instant::now());
        if behind.is_empty() {
            self.commands_version_wait_logged = None;
            tracing::info!(
                from = self.set_commands_version(),
                to = ours,
                "every member reports commands version {ours}: raising the set's version"
            );
            return Some(Command::RaiseCommandsVersion { version: ours });
        }
        if self.commands_version_wait_logged.as_ref() != Some(&behind) {
            tracing::warn!(set_version = self.set_commands_version(), build_version = ours,
                behind = ?behind,
                "commands version {ours} waits for members that report an older build (or \
                 were not heard from lately; `(member, version)`, 0: a build before the \
                 version gate): commands that need it are not proposed until every member \
                 is upgraded");
            self.commands_version_wait_logged = Some(behind);
        }
        None
    }

    /// The index of a `RaiseCommandsVersion` in the log not applied yet, if any: no membership
    /// change may be proposed behind it (`membership.rs`), as the raise was judged on the
    /// members before the change (a member added behind it could be of an older build). An
    /// unreadable tail counts as one (refusing is the safe answer).
    pub(super) fn unapplied_raise(&self) -> Option<u64> {
        let log = &self.node.raft.raft_log;
        let from = log.applied + 1;
        if from > log.last_index() {
            return None;
        }
        let Ok(entries) = log.entries(from, None, raft::GetEntriesContext::empty(false)) else {
            return Some(from);
        };
        entries
            .iter()
            .filter(|e| e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty())
            .find(|e| matches!(Command::decode(&e.data), Ok(Command::RaiseCommandsVersion { .. })))
            .map(|e| e.index)
    }

    /// The members of the configuration that did not report at least `version` within an
    /// election timeout before `now`, in this leader's current term (a report to an earlier
    /// term of this member, before a leader in between, says nothing about the member now),
    /// with what they last reported (0 if nothing).
    pub(super) fn members_behind(&self, version: u32, now: Instant) -> Vec<(u64, u32)> {
        let term = self.node.raft.term;
        let window = self.config.tick * self.config.election_ticks as u32;
        self.other_members()
            .into_iter()
            .filter_map(|m| match self.peer_commands_versions.get(&m) {
                Some(&(reported, at_term, at))
                    if reported >= version
                        && at_term == term
                        && now.duration_since(at) < window =>
                {
                    None
                }
                Some(&(reported, ..)) => Some((m, reported)),
                None => Some((m, 0)),
            })
            .collect()
    }
}
