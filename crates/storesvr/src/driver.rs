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
//!
//! On the leader the driver also runs the arbiter (`seqsvr-core::arbiter`): each tick it asks
//! for a plan and proposes it (one round in flight at a time), answers AllocSvr heartbeats with
//! grants after a ReadIndex confirms leadership, and tells the arbiter what applied.

use crate::storage::{AppliedBatch, NodeStorage, StorageFault};
use crate::transport::{PeerReport, Transport};
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message};
use raft::{RawNode, SnapshotStatus, StateRole};
use seqsvr_core::arbiter::{grant_for, Arbiter, LeaseConfig};
use seqsvr_core::ids::{AllocId, NodeId, SectionId, SetId};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{Applied, Command, Rejected, SectionAdvance};
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
    pub sections: SectionRange,
    pub lease: LeaseConfig,
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
    /// A committed command that changed nothing (fencing, unknown alloc).
    #[error("{0}")]
    Rejected(Rejected),
    #[error("alloc {0} is not registered (or was forgotten)")]
    UnknownAlloc(AllocId),
    #[error("alloc {0}'s registration expired or was replaced")]
    AllocExpired(AllocId),
}

/// A lease grant for one heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub runs: Vec<(SectionRange, u64)>,
    pub lease: LeaseConfig,
    /// Present when the caller's route version is stale.
    pub route: Option<RouteView>,
}

/// The route table of this set, in core types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteView {
    pub version: u64,
    pub entries: Vec<(SectionRange, AllocId, String)>,
}

/// The leader's view of AllocSvr leases (seqctl leases).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasesView {
    pub lease: LeaseConfig,
    pub allocs: Vec<AllocLeaseView>,
    pub runs: Vec<(SectionRange, seqsvr_core::assign::Owner)>,
    pub route_version: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocLeaseView {
    pub alloc: AllocId,
    pub addr: String,
    pub draining: bool,
    pub replaced: bool,
    pub expired: bool,
    pub ms_since_grant: Option<u64>,
    pub lease_left_ms: u64,
    pub n_sections: u64,
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
    Advance { alloc: Option<AllocId>, sections: Vec<SectionAdvance>, reply: Reply<Advanced> },
    Register { addr: String, reply: Reply<AllocId> },
    Heartbeat { alloc: AllocId, route_version: u64, reply: Reply<Grant> },
    Load { range: SectionRange, reply: Reply<ReadDone> },
    Route { reply: Reply<RouteView> },
    Leases { reply: Reply<LeasesView> },
    Move { range: SectionRange, to: AllocId, reply: Reply<u64> },
    Drain { alloc: AllocId, drain: bool, reply: Reply<()> },
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
        alloc: Option<AllocId>,
        sections: Vec<SectionAdvance>,
        wait: Duration,
    ) -> Result<Advanced, RequestError> {
        self.call(wait, |reply| Input::Advance { alloc, sections, reply }).await
    }

    pub async fn register(&self, addr: String, wait: Duration) -> Result<AllocId, RequestError> {
        self.call(wait, |reply| Input::Register { addr, reply }).await
    }

    pub async fn heartbeat(
        &self,
        alloc: AllocId,
        route_version: u64,
        wait: Duration,
    ) -> Result<Grant, RequestError> {
        self.call(wait, |reply| Input::Heartbeat { alloc, route_version, reply }).await
    }

    pub async fn load(
        &self,
        range: SectionRange,
        wait: Duration,
    ) -> Result<ReadDone, RequestError> {
        self.call(wait, |reply| Input::Load { range, reply }).await
    }

    pub async fn route(&self, wait: Duration) -> Result<RouteView, RequestError> {
        self.call(wait, |reply| Input::Route { reply }).await
    }

    pub async fn leases(&self, wait: Duration) -> Result<LeasesView, RequestError> {
        self.call(wait, |reply| Input::Leases { reply }).await
    }

    pub async fn move_sections(
        &self,
        range: SectionRange,
        to: AllocId,
        wait: Duration,
    ) -> Result<u64, RequestError> {
        self.call(wait, |reply| Input::Move { range, to, reply }).await
    }

    pub async fn drain(
        &self,
        alloc: AllocId,
        drain: bool,
        wait: Duration,
    ) -> Result<(), RequestError> {
        self.call(wait, |reply| Input::Drain { alloc, drain, reply }).await
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

/// Who waits for a proposal, and what they want back.
enum ProposalReply {
    Advance(Reply<Advanced>),
    Register(Reply<AllocId>),
    Move(Reply<u64>),
    Done(Reply<()>),
    /// The arbiter's own proposal: nobody waits, but the round is over when it resolves.
    Arbiter,
}

impl ProposalReply {
    fn answer(self, index: u64, result: Result<Applied, RequestError>) {
        match self {
            ProposalReply::Advance(r) => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::MaxSeq(sections) => Ok(Advanced { sections, applied_index: index }),
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::Register(r) => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::Registered(id) => Ok(id),
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::Move(r) => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::Assigned { lease_epoch } => Ok(lease_epoch),
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::Done(r) => {
                let _ = r.send(result.map(|_| ()));
            }
            ProposalReply::Arbiter => {
                if let Err(e) = result {
                    tracing::info!(error = %e, "arbiter proposal did not apply; will re-plan");
                }
            }
        }
    }
}

struct PendingProposal {
    term: u64,
    reply: ProposalReply,
}

/// What a confirmed ReadIndex is for.
enum ReadKind {
    MaxSeq { sections: Vec<SectionId>, reply: Reply<ReadDone> },
    Load { range: SectionRange, reply: Reply<ReadDone> },
    Heartbeat { alloc: AllocId, route_version: u64, reply: Reply<Grant> },
    Route { reply: Reply<RouteView> },
}

impl ReadKind {
    fn fail(self, error: RequestError) {
        match self {
            ReadKind::MaxSeq { reply, .. } | ReadKind::Load { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            ReadKind::Heartbeat { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            ReadKind::Route { reply } => {
                let _ = reply.send(Err(error));
            }
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            ReadKind::MaxSeq { reply, .. } | ReadKind::Load { reply, .. } => reply.is_closed(),
            ReadKind::Heartbeat { reply, .. } => reply.is_closed(),
            ReadKind::Route { reply } => reply.is_closed(),
        }
    }
}

struct PendingRead {
    kind: ReadKind,
    /// Set once the leader confirmed its leadership for this read (ReadIndex).
    read_index: Option<u64>,
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
    /// Present exactly while this member is leader.
    arbiter: Option<Arbiter>,
    /// Arbiter proposals not yet applied (or superseded): the next plan waits for them.
    arbiter_in_flight: usize,
    /// Origin of the monotonic milliseconds handed to the arbiter.
    clock: Instant,
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
            arbiter: None,
            arbiter_in_flight: 0,
            clock: Instant::now(),
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
                    self.arbitrate();
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

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
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
            Input::Advance { alloc, sections, reply } => {
                let command = Command::AdvanceMaxSeq { alloc, sections };
                self.propose(command, ProposalReply::Advance(reply));
            }
            Input::Register { addr, reply } => {
                self.propose(Command::RegisterAlloc { addr }, ProposalReply::Register(reply));
            }
            Input::Move { range, to, reply } => {
                let control = self.node.store().state().control();
                let eligible = control.allocs.get(&to).is_some_and(|r| !r.replaced && !r.draining);
                if !self.config.sections.contains(range.begin())
                    || range.end() > self.config.sections.end()
                    || range.is_empty()
                {
                    let _ = reply.send(Err(RequestError::Invalid(format!(
                        "sections [{}, {}) are not a non-empty part of this set's [{}, {})",
                        range.begin(),
                        range.end(),
                        self.config.sections.begin(),
                        self.config.sections.end()
                    ))));
                } else if !eligible {
                    let _ = reply.send(Err(RequestError::Invalid(format!(
                        "alloc {to} is not a registered, non-draining AllocSvr of this set"
                    ))));
                } else {
                    // Fenced: the old owner may serve until its lease must have run out.
                    let command = Command::Assign { moves: vec![(range, to)], settled: false };
                    self.propose(command, ProposalReply::Move(reply));
                }
            }
            Input::Drain { alloc, drain, reply } => {
                let command = Command::SetDraining { alloc, draining: drain };
                self.propose(command, ProposalReply::Done(reply));
            }
            Input::Read { sections, reply } => self.read(ReadKind::MaxSeq { sections, reply }),
            Input::Load { range, reply } => self.read(ReadKind::Load { range, reply }),
            Input::Heartbeat { alloc, route_version, reply } => {
                self.read(ReadKind::Heartbeat { alloc, route_version, reply })
            }
            Input::Route { reply } => self.read(ReadKind::Route { reply }),
            Input::Leases { reply } => {
                let _ = reply.send(self.leases());
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

    fn propose(&mut self, command: Command, reply: ProposalReply) {
        if let Err(e) = self.check_can_serve(self.proposals.len(), PENDING_PROPOSALS_MAX) {
            reply.answer(0, Err(e));
            return;
        }
        let before = self.node.raft.raft_log.last_index();
        if let Err(e) = self.node.propose(vec![], command.encode()) {
            reply.answer(0, Err(RequestError::Dropped(e.to_string())));
            return;
        }
        let index = self.node.raft.raft_log.last_index();
        if index != before + 1 {
            let why = "raft did not append it (leader transfer?)".to_string();
            reply.answer(0, Err(RequestError::Dropped(why)));
            return;
        }
        if matches!(reply, ProposalReply::Arbiter) {
            self.arbiter_in_flight += 1;
        }
        self.proposals.insert(index, PendingProposal { term: self.node.raft.term, reply });
    }

    fn read(&mut self, kind: ReadKind) {
        if let Err(e) = self.check_can_serve(self.reads.len(), PENDING_READS_MAX) {
            kind.fail(e);
            return;
        }
        let id = self.next_read_id;
        self.next_read_id += 1;
        self.node.read_index(id.to_be_bytes().to_vec());
        self.reads.insert(id, PendingRead { kind, read_index: None });
    }

    /// Leader only, every tick: one planning round at a time.
    fn arbitrate(&mut self) {
        let is_leader = self.node.raft.state == StateRole::Leader;
        if !is_leader {
            if self.arbiter.take().is_some() {
                tracing::info!("lost leadership: arbiter stopped");
            }
            return;
        }
        let now = self.now_ms();
        let arbiter = self.arbiter.get_or_insert_with(|| {
            tracing::info!(
                wait_ms = self.config.lease.hold_ms(),
                "became leader: arbiter starts; no section moves for one lease"
            );
            Arbiter::new(now, self.config.lease)
        });
        if self.arbiter_in_flight > 0 {
            return;
        }
        let commands = arbiter.plan(now, self.node.store().state().control(), self.config.sections);
        for command in commands {
            tracing::info!(?command, "arbiter proposes");
            self.propose(command, ProposalReply::Arbiter);
        }
    }

    /// Answers a heartbeat: leadership was confirmed by ReadIndex after it arrived.
    fn grant(&mut self, alloc: AllocId, route_version: u64) -> Result<Grant, RequestError> {
        let now = self.now_ms();
        let Some(arbiter) = self.arbiter.as_mut() else {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        };
        let control = self.node.store().state().control();
        if !control.allocs.contains_key(&alloc) {
            return Err(RequestError::UnknownAlloc(alloc));
        }
        if !arbiter.may_grant(control, alloc) {
            return Err(RequestError::AllocExpired(alloc));
        }
        arbiter.on_granted(alloc, now);
        let route = (route_version < control.route_version).then(|| RouteView {
            version: control.route_version,
            entries: control.route_entries(),
        });
        Ok(Grant { runs: grant_for(control, alloc), lease: self.config.lease, route })
    }

    fn leases(&self) -> Result<LeasesView, RequestError> {
        let Some(arbiter) = self.arbiter.as_ref() else {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        };
        let now = self.now_ms();
        let control = self.node.store().state().control();
        let load = control.assignment.load();
        let lease = self.config.lease;
        let allocs = control
            .allocs
            .iter()
            .map(|(&id, r)| {
                let last = arbiter.last_grant_ms(id);
                AllocLeaseView {
                    alloc: id,
                    addr: r.addr.clone(),
                    draining: r.draining,
                    replaced: r.replaced,
                    expired: arbiter.is_expired(id),
                    ms_since_grant: last.map(|t| now.saturating_sub(t)),
                    lease_left_ms: last.map_or(0, |t| (t + lease.lease_ms).saturating_sub(now)),
                    n_sections: load.get(&id).copied().unwrap_or(0),
                }
            })
            .collect();
        Ok(LeasesView {
            lease,
            allocs,
            runs: control.assignment.runs().collect(),
            route_version: control.route_version,
        })
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
                    batch.control_changed |= outcome.control_changed;
                    self.tell_arbiter(&command, &outcome.result);
                    answers.push((entry.index, entry.term, outcome.result));
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
        for (index, term, result) in answers {
            if let Some(p) = self.proposals.remove(&index) {
                let answer = if p.term == term {
                    result.map_err(RequestError::Rejected)
                } else {
                    Err(RequestError::Superseded)
                };
                self.resolve(p, index, answer);
            }
        }
        // Our proposals at applied indexes that hold another leader's entries were overwritten.
        let later = self.proposals.split_off(&(applied_index + 1));
        for (index, p) in std::mem::replace(&mut self.proposals, later) {
            self.resolve(p, index, Err(RequestError::Superseded));
        }
        Ok(())
    }

    fn resolve(&mut self, p: PendingProposal, index: u64, answer: Result<Applied, RequestError>) {
        if matches!(p.reply, ProposalReply::Arbiter) {
            self.arbiter_in_flight = self.arbiter_in_flight.saturating_sub(1);
        }
        p.reply.answer(index, answer);
    }

    /// The leader's arbiter learns what applied: fences start at apply time.
    fn tell_arbiter(&mut self, command: &Command, result: &Result<Applied, Rejected>) {
        let now = self.now_ms();
        let Some(arbiter) = self.arbiter.as_mut() else { return };
        match (command, result) {
            (Command::Assign { settled, moves }, Ok(Applied::Assigned { lease_epoch })) => {
                tracing::info!(lease_epoch, settled, ?moves, "sections assigned");
                arbiter.on_assigned(*lease_epoch, *settled, now);
            }
            (Command::RemoveAlloc { alloc }, Ok(_)) => {
                tracing::info!(%alloc, "alloc registration removed");
                arbiter.forget(*alloc);
            }
            (Command::RegisterAlloc { addr }, Ok(Applied::Registered(id))) => {
                tracing::info!(alloc = %id, %addr, "alloc registered");
            }
            _ => {}
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
                ReadKind::Heartbeat { alloc, route_version, reply } => {
                    let _ = reply.send(self.grant(alloc, route_version));
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

    fn fail_all(&mut self, error: RequestError) {
        for (index, p) in std::mem::take(&mut self.proposals) {
            self.resolve(p, index, Err(error.clone()));
        }
        for (_, r) in self.reads.drain() {
            r.kind.fail(error.clone());
        }
    }
}
