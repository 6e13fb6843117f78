//! The Raft driver: the one owner of the `RawNode`. Only this file touches raft-rs's node.
//!
//! It runs on a thread of its own (RocksDB fsyncs block), fed by a bounded channel of [`Input`]s:
//! requests from gRPC handlers (each with a oneshot for the answer), messages from peers, and
//! transport reports. Each turn of the loop handles what arrived, ticks on schedule, and then
//! processes the Ready in the order raft-rs prescribes:
//!
//! 1. send the leader's messages (they may go out before the leader's own append is durable);
//! 2. note read states (ReadIndex answers);
//! 3. persist snapshot + entries + hard state in ONE synced `WriteBatch`;
//! 4. apply committed entries (all persisted by earlier Readies) and answer their proposers;
//! 5. send persisted messages (votes, append responses): only now may others rely on them;
//! 6. `advance`, then the light Ready: its messages, its committed entries, `advance_apply`;
//! 7. answer reads whose index is applied; compact the log when it grew past the threshold.

use crate::storage::{AppliedBatch, NodeStorage, StorageFault};
use crate::transport::{PeerReport, Transport};
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message};
use raft::{RawNode, SnapshotStatus, StateRole};
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use seqsvr_core::store::Command;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Requests queued for the driver before callers wait (backpressure).
pub const DRIVER_QUEUE_MAX: usize = 4096;
/// Proposals awaiting apply at most; past it, callers get UNAVAILABLE (overloaded).
const PENDING_PROPOSALS_MAX: usize = 16_384;
/// Reads awaiting their ReadIndex at most.
const PENDING_READS_MAX: usize = 16_384;
/// Inputs handled per loop turn before processing the Ready (batching without starving ticks).
const INPUTS_PER_TURN_MAX: usize = 512;

pub struct DriverConfig {
    pub set_id: SetId,
    pub node_id: NodeId,
    /// Every member of the set with its address, this one included.
    pub members: Vec<(NodeId, String)>,
    pub tick: Duration,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    pub compact_log_entries: u64,
}

/// Why a request was not served. Mapped to gRPC status codes in `service.rs`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("not the leader")]
    NotLeader { leader: Option<(NodeId, String)> },
    #[error("no quorum")]
    NoQuorum { heard: usize, voters: usize },
    #[error("proposal dropped: {0}")]
    Dropped(String),
    #[error("leadership changed before the proposal committed")]
    Superseded,
    #[error("overloaded")]
    Overloaded,
    #[error("timed out")]
    Timeout { waited: Duration },
    #[error("shutting down")]
    Stopped,
    #[error("invalid request: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advanced {
    pub sections: Vec<(SectionId, u64)>,
    pub applied_index: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadDone {
    pub sections: Vec<(SectionId, u64)>,
    pub read_index: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeStatus {
    pub role: String,
    pub term: u64,
    pub leader_id: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub first_index: u64,
    pub last_index: u64,
    pub snapshot_index: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub n_sections_advanced: u64,
}

type Reply<T> = oneshot::Sender<Result<T, RequestError>>;

pub enum Input {
    Advance { sections: Vec<(SectionId, u64)>, reply: Reply<Advanced> },
    Read { sections: Vec<SectionId>, reply: Reply<ReadDone> },
    Status { reply: oneshot::Sender<NodeStatus> },
    LocalRead { sections: Vec<SectionId>, reply: oneshot::Sender<ReadDone> },
    TransferLeader { target: NodeId, reply: Reply<()> },
    Raft(Vec<Message>),
    Peer(PeerReport),
}

/// The gRPC side's handle on the driver.
#[derive(Clone)]
pub struct DriverHandle {
    tx: mpsc::Sender<Input>,
}

impl DriverHandle {
    async fn call<T>(
        &self,
        wait: Duration,
        make: impl FnOnce(Reply<T>) -> Input,
    ) -> Result<T, RequestError> {
        let (reply, rx) = oneshot::channel();
        let call = async {
            self.tx.send(make(reply)).await.map_err(|_| RequestError::Stopped)?;
            rx.await.map_err(|_| RequestError::Stopped)?
        };
        match tokio::time::timeout(wait, call).await {
            Ok(result) => result,
            Err(_) => Err(RequestError::Timeout { waited: wait }),
        }
    }

    pub async fn advance(
        &self,
        sections: Vec<(SectionId, u64)>,
        wait: Duration,
    ) -> Result<Advanced, RequestError> {
        self.call(wait, |reply| Input::Advance { sections, reply }).await
    }

    pub async fn read(
        &self,
        sections: Vec<SectionId>,
        wait: Duration,
    ) -> Result<ReadDone, RequestError> {
        self.call(wait, |reply| Input::Read { sections, reply }).await
    }

    pub async fn transfer_leader(
        &self,
        target: NodeId,
        wait: Duration,
    ) -> Result<(), RequestError> {
        self.call(wait, |reply| Input::TransferLeader { target, reply }).await
    }

    pub async fn status(&self) -> Result<NodeStatus, RequestError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Input::Status { reply }).await.map_err(|_| RequestError::Stopped)?;
        rx.await.map_err(|_| RequestError::Stopped)
    }

    pub async fn local_read(&self, sections: Vec<SectionId>) -> Result<ReadDone, RequestError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Input::LocalRead { sections, reply })
            .await
            .map_err(|_| RequestError::Stopped)?;
        rx.await.map_err(|_| RequestError::Stopped)
    }

    pub async fn step(&self, messages: Vec<Message>) -> Result<(), RequestError> {
        self.tx.send(Input::Raft(messages)).await.map_err(|_| RequestError::Stopped)
    }
}

struct PendingProposal {
    term: u64,
    reply: Reply<Advanced>,
}

struct PendingRead {
    sections: Vec<SectionId>,
    /// Set once the leader confirmed its leadership for this read (ReadIndex).
    read_index: Option<u64>,
    reply: Reply<ReadDone>,
}

pub struct Driver {
    node: RawNode<NodeStorage>,
    config: DriverConfig,
    transport: Transport,
    /// Proposals by log index. Invariant: every key is > the applied index.
    proposals: BTreeMap<u64, PendingProposal>,
    reads: HashMap<u64, PendingRead>,
    next_read_id: u64,
    /// When each peer was last heard from: the leader proposes only with a quorum in sight.
    last_heard: HashMap<u64, Instant>,
    was_leader: bool,
}

/// Creates the channel the driver reads; the sender half goes to the transport and handlers.
pub fn channel() -> (DriverHandle, mpsc::Sender<Input>, mpsc::Receiver<Input>) {
    let (tx, rx) = mpsc::channel(DRIVER_QUEUE_MAX);
    (DriverHandle { tx: tx.clone() }, tx, rx)
}

impl Driver {
    pub fn new(
        storage: NodeStorage,
        config: DriverConfig,
        transport: Transport,
    ) -> anyhow::Result<Driver> {
        let raft_config = raft::Config {
            id: config.node_id.0,
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            applied: storage.applied_index(),
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        raft_config.validate()?;
        let node = RawNode::new(&raft_config, storage, &crate::raft_log::logger())?;
        Ok(Driver {
            node,
            config,
            transport,
            proposals: BTreeMap::new(),
            reads: HashMap::new(),
            next_read_id: 1,
            last_heard: HashMap::new(),
            was_leader: false,
        })
    }

    /// Runs until `shutdown` flips or every sender is gone. An `Err` is a storage fault: the
    /// process must stop, because acknowledging anything after a failed write could break I2.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<Input>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), StorageFault> {
        let mut ticker = tokio::time::interval(self.config.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                _ = ticker.tick() => {
                    self.node.tick();
                }
                input = rx.recv() => {
                    let Some(input) = input else { break };
                    self.handle(input);
                    for _ in 1..INPUTS_PER_TURN_MAX {
                        match rx.try_recv() {
                            Ok(input) => self.handle(input),
                            Err(_) => break,
                        }
                    }
                }
            }
            self.on_ready()?;
        }
        self.fail_all(RequestError::Stopped);
        Ok(())
    }

    fn handle(&mut self, input: Input) {
        match input {
            Input::Raft(messages) => {
                let now = Instant::now();
                for m in messages {
                    self.last_heard.insert(m.from, now);
                    if let Err(e) = self.node.step(m) {
                        tracing::debug!(error = %e, "raft step refused a message");
                    }
                }
            }
            Input::Peer(PeerReport::Unreachable(to)) => self.node.report_unreachable(to.0),
            Input::Peer(PeerReport::Snapshot { to, delivered }) => {
                let status =
                    if delivered { SnapshotStatus::Finish } else { SnapshotStatus::Failure };
                self.node.report_snapshot(to.0, status);
            }
            Input::Advance { sections, reply } => {
                if let Err(e) = self.check_can_serve(self.proposals.len(), PENDING_PROPOSALS_MAX) {
                    let _ = reply.send(Err(e));
                    return;
                }
                let data = Command::AdvanceMaxSeq { sections }.encode();
                let before = self.node.raft.raft_log.last_index();
                if let Err(e) = self.node.propose(vec![], data) {
                    let _ = reply.send(Err(RequestError::Dropped(e.to_string())));
                    return;
                }
                let index = self.node.raft.raft_log.last_index();
                if index != before + 1 {
                    let _ = reply.send(Err(RequestError::Dropped(
                        "raft did not append it (leader transfer?)".into(),
                    )));
                    return;
                }
                self.proposals.insert(index, PendingProposal { term: self.node.raft.term, reply });
            }
            Input::Read { sections, reply } => {
                if let Err(e) = self.check_can_serve(self.reads.len(), PENDING_READS_MAX) {
                    let _ = reply.send(Err(e));
                    return;
                }
                let id = self.next_read_id;
                self.next_read_id += 1;
                self.node.read_index(id.to_be_bytes().to_vec());
                self.reads.insert(id, PendingRead { sections, read_index: None, reply });
            }
            Input::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Input::LocalRead { sections, reply } => {
                let store = self.node.store();
                let values = sections.iter().map(|&s| (s, store.state().max_seq(s))).collect();
                let _ =
                    reply.send(ReadDone { sections: values, read_index: store.applied_index() });
            }
            Input::TransferLeader { target, reply } => {
                let result = if self.node.raft.state != StateRole::Leader {
                    Err(RequestError::NotLeader { leader: self.leader_hint() })
                } else if !self.node.store().conf_state().voters.contains(&target.0) {
                    Err(RequestError::Invalid(format!(
                        "member {target} is not a voter of this set"
                    )))
                } else {
                    if target != self.config.node_id {
                        self.node.transfer_leader(target.0);
                    }
                    Ok(())
                };
                let _ = reply.send(result);
            }
        }
    }

    /// A request may enter Raft only on a leader that heard from a quorum within one election
    /// timeout: otherwise it could sit uncommitted in our log and apply long after the caller was
    /// told UNAVAILABLE.
    fn check_can_serve(&self, pending: usize, pending_max: usize) -> Result<(), RequestError> {
        if self.node.raft.state != StateRole::Leader {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        }
        let voters = &self.node.store().conf_state().voters;
        let window = self.config.tick * self.config.election_ticks as u32;
        let now = Instant::now();
        let heard = voters
            .iter()
            .filter(|&&v| {
                v == self.config.node_id.0
                    || self.last_heard.get(&v).is_some_and(|&t| now.duration_since(t) < window)
            })
            .count();
        if heard <= voters.len() / 2 {
            return Err(RequestError::NoQuorum { heard, voters: voters.len() });
        }
        if pending >= pending_max {
            return Err(RequestError::Overloaded);
        }
        Ok(())
    }

    fn leader_hint(&self) -> Option<(NodeId, String)> {
        let leader = self.node.raft.leader_id;
        self.config
            .members
            .iter()
            .find(|(id, _)| id.0 == leader && leader != raft::INVALID_ID)
            .cloned()
    }

    fn status(&self) -> NodeStatus {
        let raft = &self.node.raft;
        let store = self.node.store();
        let role = match raft.state {
            StateRole::Leader => "leader",
            StateRole::Follower => "follower",
            StateRole::Candidate => "candidate",
            StateRole::PreCandidate => "pre_candidate",
        };
        NodeStatus {
            role: role.into(),
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
        }
    }

    fn on_ready(&mut self) -> Result<(), StorageFault> {
        if !self.node.has_ready() {
            self.after_apply()?;
            return Ok(());
        }
        let mut ready = self.node.ready();
        // 1.
        self.transport.send(ready.take_messages());
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
            tracing::info!(
                index = s.get_metadata().index,
                term = s.get_metadata().term,
                "installing snapshot"
            );
        }
        self.node.mut_store().persist(snapshot.as_ref(), ready.entries(), ready.hs())?;
        // 4.
        self.apply(ready.take_committed_entries(), None)?;
        // 5.
        self.transport.send(ready.take_persisted_messages());
        // 6.
        let mut light = self.node.advance(ready);
        self.transport.send(light.take_messages());
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
        for entry in &entries {
            batch.applied_index = entry.index;
            match entry.get_entry_type() {
                EntryType::EntryNormal if entry.get_data().is_empty() => {} // a new leader's no-op
                EntryType::EntryNormal => {
                    let command =
                        Command::decode(entry.get_data()).map_err(|e| self.fault(entry, e))?;
                    let outcome = self.node.mut_store().state_mut().apply(&command);
                    batch.changed.extend(outcome.changed);
                    answers.push((entry.index, entry.term, outcome.results));
                }
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(entry.get_data())
                        .map_err(|e| self.fault(entry, e))?;
                    let cs = self.node.apply_conf_change(&cc).map_err(|e| self.fault(entry, e))?;
                    tracing::info!(index = entry.index, voters = ?cs.voters, learners = ?cs.learners, "membership changed");
                    batch.conf_state = Some(cs);
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(entry.get_data())
                        .map_err(|e| self.fault(entry, e))?;
                    let cs = self.node.apply_conf_change(&cc).map_err(|e| self.fault(entry, e))?;
                    tracing::info!(index = entry.index, voters = ?cs.voters, learners = ?cs.learners, "membership changed");
                    batch.conf_state = Some(cs);
                }
            }
        }
        let applied_index = batch.applied_index;
        self.node.mut_store().commit_apply(batch)?;
        for (index, term, sections) in answers {
            if let Some(p) = self.proposals.remove(&index) {
                let answer = if p.term == term {
                    Ok(Advanced { sections, applied_index: index })
                } else {
                    Err(RequestError::Superseded)
                };
                let _ = p.reply.send(answer);
            }
        }
        // Our proposals at applied indexes that hold another leader's entries were overwritten.
        let later = self.proposals.split_off(&(applied_index + 1));
        for (_, p) in std::mem::replace(&mut self.proposals, later) {
            let _ = p.reply.send(Err(RequestError::Superseded));
        }
        Ok(())
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
                let _ = read.reply.send(Err(RequestError::NotLeader { leader: leader.clone() }));
            }
        }
        self.was_leader = is_leader;

        let store = self.node.store();
        let applied = store.applied_index();
        let ready: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, r)| r.read_index.is_some_and(|i| i <= applied))
            .map(|(&id, _)| id)
            .collect();
        for id in ready {
            if let Some(read) = self.reads.remove(&id) {
                let state = store.state();
                let sections = read.sections.iter().map(|&s| (s, state.max_seq(s))).collect();
                let read_index = read.read_index.unwrap_or(applied);
                let _ = read.reply.send(Ok(ReadDone { sections, read_index }));
            }
        }
        // Callers that gave up (timeout) leave closed replies behind: drop them.
        self.reads.retain(|_, r| !r.reply.is_closed());

        let threshold = self.config.compact_log_entries;
        if applied.saturating_sub(store.truncated_index()) >= threshold {
            // Keep the most recent half of the window for followers that are a little behind;
            // one further behind catches up by snapshot.
            let compact_to = applied - threshold / 2;
            tracing::debug!(compact_to, applied, "compacting raft log");
            self.node.mut_store().compact(compact_to)?;
        }
        Ok(())
    }

    fn fail_all(&mut self, error: RequestError) {
        for (_, p) in std::mem::take(&mut self.proposals) {
            let _ = p.reply.send(Err(error.clone()));
        }
        for (_, r) in self.reads.drain() {
            let _ = r.reply.send(Err(error.clone()));
        }
    }
}
