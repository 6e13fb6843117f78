//! The Ready loop's steps (see the module doc of `driver`): send, persist, apply committed
//! entries and answer their proposers, answer reads, compact the log. A storage fault stops the
//! driver: nothing may be acknowledged after a failed write.

use super::api::{MembershipDone, ReadDone, RequestError, RouteView};
use super::membership::v1_to_v2;
use super::replies::{unapplied_error, ProposalReply, ReadKind};
use super::Driver;
use crate::storage::{AppliedBatch, StorageFault};
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfChangeV2, Entry, EntryType};
use raft::StateRole;
use seqsvr_core::ids::NodeId;
use seqsvr_core::store::{Applied, Command, SetLayout};
use std::time::Instant;

impl Driver {
    pub(crate) fn on_ready(&mut self) -> Result<(), StorageFault> {
        if !self.node.has_ready() {
            self.after_apply()?;
            return Ok(());
        }
        let mut ready = self.node.ready();
        // 1.
        self.outbox.send(ready.take_messages());
        // 2.
        for rs in ready.take_read_states() {
            let id = rs.request_ctx.as_slice().try_into().map(u64::from_be_bytes).unwrap_or(0);
            if let Some(read) = self.reads.get_mut(&id) {
                read.read_index = Some(rs.index);
            }
        }
        // 3.
        let snapshot = (!ready.snapshot().is_empty()).then(|| ready.snapshot().clone());
        if let Some(s) = &snapshot {
            self.metrics.snapshots_received.increment(1);
            tracing::info!(
                index = s.get_metadata().index,
                term = s.get_metadata().term,
                "installing snapshot"
            );
        }
        let write_started = Instant::now();
        let writes = snapshot.is_some() || !ready.entries().is_empty() || ready.hs().is_some();
        self.node.mut_store().persist(snapshot.as_ref(), ready.entries(), ready.hs())?;
        if writes {
            self.metrics.synced_write.record(write_started.elapsed().as_secs_f64());
        }
        if snapshot.is_some() {
            // It may carry the set's layout record: a member whose file differs stops here,
            // before it acknowledges, votes or answers anything under it.
            self.stop_on_layout_mismatch()?;
            // The snapshot carried the membership: dial whoever it names.
            self.sync_peers();
        }
        // 4.
        self.apply(ready.take_committed_entries(), None)?;
        // 5.
        self.outbox.send(ready.take_persisted_messages());
        // 6.
        let mut light = self.node.advance(ready);
        self.outbox.send(light.take_messages());
        let commit = light.commit_index();
        self.apply(light.take_committed_entries(), commit)?;
        self.node.advance_apply();
        // 7.
        self.after_apply()
    }

    fn apply(
        &mut self,
        entries: Vec<Entry>,
        commit_index: Option<u64>,
    ) -> Result<(), StorageFault> {
        if entries.is_empty() && commit_index.is_none() {
            return Ok(());
        }
        let mut batch = AppliedBatch {
            applied_index: self.node.store().applied_index(),
            commit_index,
            ..Default::default()
        };
        let mut answers = Vec::new();
        let mut conf_answers = Vec::new();
        let mut conf_changed = false;
        for entry in &entries {
            batch.applied_index = entry.index;
            match entry.get_entry_type() {
                EntryType::EntryNormal if entry.get_data().is_empty() => {} // a new leader's no-op
                EntryType::EntryNormal => {
                    let command =
                        Command::decode(entry.get_data()).map_err(|e| self.fault(entry, e))?;
                    let needs = command.needs_version();
                    if needs > self.config.commands_version {
                        // What a build of that version does with a command it cannot decode:
                        // stop, rather than apply something else than the others.
                        return Err(self.fault(
                            entry,
                            format!(
                                "it needs commands version {needs} and this build applies only \
                                 up to {}: the set was raised past this build; run the build \
                                 the other members run",
                                self.config.commands_version
                            ),
                        ));
                    }
                    let outcome = self.node.mut_store().state_mut().apply(&command);
                    batch.changed.extend(outcome.changed);
                    batch.control_changed |= outcome.control_changed;
                    self.tell_arbiter(&command, &outcome.result);
                    answers.push((entry.index, entry.term, outcome.result));
                }
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => {
                    let cc = if entry.get_entry_type() == EntryType::EntryConfChange {
                        v1_to_v2(
                            ConfChange::parse_from_bytes(entry.get_data())
                                .map_err(|e| self.fault(entry, e))?,
                        )
                    } else {
                        ConfChangeV2::parse_from_bytes(entry.get_data())
                            .map_err(|e| self.fault(entry, e))?
                    };
                    let cs = self.node.apply_conf_change(&cc).map_err(|e| self.fault(entry, e))?;
                    let mut members =
                        batch.members.take().unwrap_or_else(|| self.node.store().members().clone());
                    for c in cc.get_changes() {
                        match c.get_change_type() {
                            ConfChangeType::AddLearnerNode | ConfChangeType::AddNode => {
                                let addr = String::from_utf8_lossy(cc.get_context()).to_string();
                                if !addr.is_empty() {
                                    members.insert(c.node_id, addr);
                                }
                            }
                            ConfChangeType::RemoveNode => {
                                members.remove(&c.node_id);
                            }
                        }
                    }
                    let me = self.config.node_id.0;
                    if self.node.store().vote_blocked() && cs.voters.contains(&me) {
                        // Promoted by a change applied from the log: every entry committed
                        // before it is in our log, so our vote is sound again.
                        tracing::info!(
                            index = entry.index,
                            "promoted to voter: this member may vote again"
                        );
                        batch.vote_unblocked = true;
                    }
                    if !cs.voters.contains(&me) && !cs.learners.contains(&me) {
                        tracing::warn!(index = entry.index,
                            "this member was removed from the set: it takes no further part; stop it");
                    }
                    tracing::info!(index = entry.index, voters = ?cs.voters, learners = ?cs.learners,
                        members = ?members, "membership changed");
                    batch.conf_state = Some(cs);
                    batch.members = Some(members);
                    conf_changed = true;
                    conf_answers.push((entry.index, entry.term));
                }
            }
        }
        let applied_index = batch.applied_index;
        let removed: Vec<u64> = match &batch.conf_state {
            Some(cs) => self
                .node
                .store()
                .conf_state()
                .voters
                .iter()
                .chain(self.node.store().conf_state().learners.iter())
                .copied()
                .filter(|id| !cs.voters.contains(id) && !cs.learners.contains(id))
                .collect(),
            None => Vec::new(),
        };
        self.node.mut_store().commit_apply(batch)?;
        if conf_changed {
            for id in removed {
                self.outbox.remove_peer(NodeId(id));
                self.blocked_peers.remove(&id);
            }
            self.sync_peers();
            self.outbox.set_vote_blocked(self.node.store().vote_blocked());
        }
        for (index, term, result) in answers {
            if let Some((p, outcome)) = self.proposals.take_applied(index, term) {
                self.observe_answered(p.proposed_at, outcome.is_ok());
                let answer = match outcome {
                    Ok(()) => result.map_err(RequestError::Rejected),
                    Err(unapplied) => Err(unapplied_error(unapplied)),
                };
                match (p.reply, answer) {
                    (ProposalReply::Lease(reply), Ok(Applied::LeaseChanged { .. })) => {
                        let lease = self.node.store().state().control().lease;
                        let _ = reply.send(lease.ok_or_else(|| {
                            RequestError::Dropped("lease missing after SetLease applied".into())
                        }));
                    }
                    (reply, answer) => reply.answer(index, answer),
                }
            }
        }
        for (index, term) in conf_answers {
            if let Some((p, outcome)) = self.proposals.take_applied(index, term) {
                self.observe_answered(p.proposed_at, outcome.is_ok());
                match (p.reply, outcome) {
                    (ProposalReply::Membership(reply), Ok(())) => {
                        let done = MembershipDone {
                            members: self.membership_view(),
                            applied_index: index,
                        };
                        let _ = reply.send(Ok(done));
                    }
                    (reply, Ok(())) => reply.answer(
                        index,
                        Err(RequestError::Dropped(
                            "a membership change applied at its index".into(),
                        )),
                    ),
                    (reply, Err(unapplied)) => reply.answer(index, Err(unapplied_error(unapplied))),
                }
            }
        }
        // Proposals at applied indexes never seen applying: a snapshot covered them.
        for (index, p, unapplied) in self.proposals.drain_applied(applied_index) {
            self.metrics.proposals_failed.increment(1);
            p.reply.answer(index, Err(unapplied_error(unapplied)));
        }
        // A `RecordLayout` just applied (it is durable: a restart refuses to start on it).
        self.stop_on_layout_mismatch()
    }

    /// Stops this member (a fault ends the driver, and the process exits non-zero with it)
    /// when the set's recorded layout is not its cluster file's. `Driver::new` refuses to start
    /// on it; this covers a member that started before the record existed (added on an empty
    /// dir, or lagging behind it) and then applied it or installed it by snapshot. Running on
    /// would be worse than stopping: as leader it would refuse every AllocSvr call and keep its
    /// leadership (check_quorum and pre-vote see a live leader), so the whole set would lose its
    /// leases; as follower it would pin callers to itself. Checked at every place the recorded
    /// layout can change (start, apply, snapshot), so no member ever runs under another layout.
    fn stop_on_layout_mismatch(&self) -> Result<(), StorageFault> {
        let Some(ours) = &self.config.layout else { return Ok(()) };
        let recorded = self.node.store().state().control().layout;
        match SetLayout::mismatch(recorded.as_ref(), ours) {
            None => Ok(()),
            Some(why) => Err(StorageFault::LayoutMismatch { why }),
        }
    }

    /// A tracked proposal answered at apply: committed (its entry applied, whatever the state
    /// machine said) or failed (superseded, or covered by a snapshot).
    fn observe_answered(&self, proposed_at: Instant, applied: bool) {
        if applied {
            self.metrics.proposals_committed.increment(1);
            self.metrics.proposal_apply.record(proposed_at.elapsed().as_secs_f64());
        } else {
            self.metrics.proposals_failed.increment(1);
        }
    }

    fn fault(&self, entry: &Entry, e: impl std::fmt::Display) -> StorageFault {
        StorageFault::Corrupt {
            path: format!("raft log of set {} member {}", self.config.set_id, self.config.node_id)
                .into(),
            reason: format!(
                "committed entry {} (term {}) cannot be applied: {e}",
                entry.index, entry.term
            ),
        }
    }

    fn after_apply(&mut self) -> Result<(), StorageFault> {
        let is_leader = self.node.raft.state == StateRole::Leader;
        if self.was_leader && !is_leader {
            // Reads need a live leadership; proposals stay: they may still commit under the new
            // leader, and are answered when their index is applied.
            let leader = self.leader_hint();
            for (_, read) in self.reads.drain() {
                read.kind.fail(RequestError::NotLeader { leader: leader.clone() });
            }
        }
        self.was_leader = is_leader;

        let applied = self.node.store().applied_index();
        let ready: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, r)| r.read_index.is_some_and(|i| i <= applied))
            .map(|(&id, _)| id)
            .collect();
        for id in ready {
            let Some(read) = self.reads.remove(&id) else { continue };
            let read_index = read.read_index.unwrap_or(applied);
            let state = self.node.store().state();
            match read.kind {
                ReadKind::MaxSeq { sections, reply } => {
                    let sections = sections.iter().map(|&s| (s, state.max_seq(s))).collect();
                    let _ = reply.send(Ok(ReadDone { sections, read_index }));
                }
                ReadKind::Load { range, reply } => {
                    let sections = state.range(range).collect();
                    let _ = reply.send(Ok(ReadDone { sections, read_index }));
                }
                ReadKind::Route { reply } => {
                    let control = state.control();
                    let view = RouteView {
                        version: control.route_version,
                        entries: control.route_entries(),
                    };
                    let _ = reply.send(Ok(view));
                }
                ReadKind::Heartbeat { alloc, route_version, identity, reply } => {
                    let _ = reply.send(self.grant(alloc, route_version, identity.as_deref()));
                }
            }
        }
        // Callers that gave up (timeout) leave closed replies behind: drop them.
        self.reads.retain(|_, r| !r.kind.is_closed());

        let threshold = self.config.compact_log_entries;
        if applied.saturating_sub(self.node.store().truncated_index()) >= threshold {
            // Keep the most recent half of the window for followers that are a little behind;
            // one further behind catches up by snapshot.
            let compact_to = applied - threshold / 2;
            tracing::debug!(compact_to, applied, "compacting raft log");
            self.node.mut_store().compact(compact_to)?;
        }
        Ok(())
    }
}
