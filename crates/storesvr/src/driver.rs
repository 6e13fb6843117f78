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

use crate::leader_state::{Pending, Proposals, SlotChange, TermSlot, Unapplied};
use crate::storage::{AppliedBatch, Members, NodeStorage, StorageFault};
use crate::transport::{PeerReport, Transport};
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeType, ConfChangeV2, Entry, EntryType, Message,
    MessageType,
};
use raft::{RawNode, SnapshotStatus, StateRole};
use seqsvr_core::arbiter::{grant_for, Arbiter, LeaseChangeError, LeaseConfig};
use seqsvr_core::ids::{AllocId, NodeId, SectionId, SetId};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{Applied, Command, Rejected, SectionAdvance};
use seqsvr_server::BootInstant;
use std::collections::HashMap;
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
/// A learner is promoted only when its match index is at most this far behind the leader's
/// commit index (as etcd's `member promote` requires a caught-up learner).
pub const PROMOTE_LAG_MAX: u64 = 64;

pub struct DriverConfig {
    pub set_id: SetId,
    pub node_id: NodeId,
    /// The address the others dial for this member.
    pub addr: String,
    /// The members the cluster file lists, with this process's view of their addresses (which
    /// wins over the replicated directory: tests route links through proxies).
    pub members: Vec<(NodeId, String)>,
    pub tick: Duration,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    pub compact_log_entries: u64,
    pub sections: SectionRange,
    /// This member's config lease: proposed only while the set has no replicated lease yet
    /// (every grant and wait uses the replicated one).
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
    /// Valid, but not now (a membership change pending, a learner not caught up).
    #[error("{0}")]
    Precondition(String),
    /// Covered by a snapshot this member installed: it may or may not have applied.
    #[error("outcome unknown")]
    OutcomeUnknown,
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
    pub released: bool,
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

#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub leader_addr: String,
    pub members: Vec<MemberView>,
    pub vote_blocked: bool,
    pub lease: LeaseConfig,
}

/// One member as the replicated membership (and, on the leader, its progress) says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberView {
    pub id: u64,
    pub addr: String,
    pub learner: bool,
    pub match_index: u64,
    pub lag: u64,
}

/// A membership change (one at a time; see `Driver::propose_membership`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipChange {
    AddLearner { id: NodeId, addr: String },
    Promote { id: NodeId },
    Remove { id: NodeId },
}

/// The membership once a change applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipDone {
    pub members: Vec<MemberView>,
    pub applied_index: u64,
}

type Reply<T> = oneshot::Sender<Result<T, RequestError>>;

pub enum Input {
    Advance {
        alloc: Option<AllocId>,
        sections: Vec<SectionAdvance>,
        reply: Reply<Advanced>,
    },
    Register {
        addr: String,
        reply: Reply<AllocId>,
    },
    Heartbeat {
        alloc: AllocId,
        route_version: u64,
        reply: Reply<Grant>,
    },
    Load {
        range: SectionRange,
        reply: Reply<ReadDone>,
    },
    Route {
        reply: Reply<RouteView>,
    },
    Leases {
        reply: Reply<LeasesView>,
    },
    Move {
        range: SectionRange,
        to: AllocId,
        reply: Reply<u64>,
    },
    Drain {
        alloc: AllocId,
        drain: bool,
        reply: Reply<()>,
    },
    /// Shutting down: if leader, hand leadership to the most up-to-date voter that may lead.
    /// Answers the target, or None (not leader, or nobody to hand it to).
    StepDown {
        reply: Reply<Option<NodeId>>,
    },
    /// The AllocSvr stopped serving for good (see `Command::ReleaseAlloc`).
    Release {
        alloc: AllocId,
        reply: Reply<()>,
    },
    Read {
        sections: Vec<SectionId>,
        reply: Reply<ReadDone>,
    },
    Status {
        reply: oneshot::Sender<NodeStatus>,
    },
    LocalRead {
        sections: Vec<SectionId>,
        reply: oneshot::Sender<ReadDone>,
    },
    TransferLeader {
        target: NodeId,
        reply: Reply<()>,
    },
    Membership {
        change: MembershipChange,
        reply: Reply<MembershipDone>,
    },
    SetLease {
        lease: LeaseConfig,
        reply: Reply<LeaseConfig>,
    },
    /// Messages from a peer; `from_addr` is where it says it can be reached, `vote_blocked`
    /// whether it may vote.
    Raft {
        from_addr: String,
        vote_blocked: bool,
        messages: Vec<Message>,
    },
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

    /// See [`Input::StepDown`].
    pub async fn step_down(&self, wait: Duration) -> Result<Option<NodeId>, RequestError> {
        self.call(wait, |reply| Input::StepDown { reply }).await
    }

    pub async fn release(&self, alloc: AllocId, wait: Duration) -> Result<(), RequestError> {
        self.call(wait, |reply| Input::Release { alloc, reply }).await
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

    pub async fn membership(
        &self,
        change: MembershipChange,
        wait: Duration,
    ) -> Result<MembershipDone, RequestError> {
        self.call(wait, |reply| Input::Membership { change, reply }).await
    }

    pub async fn set_lease(
        &self,
        lease: LeaseConfig,
        wait: Duration,
    ) -> Result<LeaseConfig, RequestError> {
        self.call(wait, |reply| Input::SetLease { lease, reply }).await
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

    pub async fn step(
        &self,
        from_addr: String,
        vote_blocked: bool,
        messages: Vec<Message>,
    ) -> Result<(), RequestError> {
        let input = Input::Raft { from_addr, vote_blocked, messages };
        self.tx.send(input).await.map_err(|_| RequestError::Stopped)
    }
}

/// Who waits for a proposal, and what they want back.
enum ProposalReply {
    Advance(Reply<Advanced>),
    Register(Reply<AllocId>),
    Move(Reply<u64>),
    Done(Reply<()>),
    Membership(Reply<MembershipDone>),
    Lease(Reply<LeaseConfig>),
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
            ProposalReply::Lease(r) => {
                // Answered with the new lease in `Driver::apply`; only failures come here.
                let _ =
                    r.send(result.and_then(|a| {
                        Err(RequestError::Dropped(format!("unexpected result {a:?}")))
                    }));
            }
            ProposalReply::Membership(r) => {
                // Answered with the membership in `Driver::apply`; only failures come here.
                let _ =
                    r.send(result.and_then(|a| {
                        Err(RequestError::Dropped(format!("unexpected result {a:?}")))
                    }));
            }
            ProposalReply::Arbiter => {
                if let Err(e) = result {
                    tracing::info!(error = %e, "arbiter proposal did not apply; will re-plan");
                }
            }
        }
    }
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
    proposals: Proposals<ProposalReply>,
    reads: HashMap<u64, PendingRead>,
    next_read_id: u64,
    /// When each peer was last heard from: the leader proposes only with a quorum in sight.
    last_heard: HashMap<u64, Instant>,
    /// Peers whose last batch said they are vote-blocked: no leadership for them, and they do
    /// not count toward the voters a removal must leave.
    blocked_peers: std::collections::HashSet<u64>,
    was_leader: bool,
    /// Present while this member is leader, for exactly one term (see `leader_state.rs`).
    arbiter: TermSlot<Arbiter>,
    /// Origin of the milliseconds handed to the arbiter: CLOCK_BOOTTIME, which keeps counting
    /// while the host is suspended (CLOCK_MONOTONIC, `Instant`, stops; a leader host suspended
    /// past a lease would wake up believing its grants and fences were younger than they are).
    clock: BootInstant,
    /// The term in which a blocked vote was last logged (one line per term, not per message).
    vote_block_logged_term: u64,
    metrics: crate::metrics::StoreMetrics,
    /// The leader id published last (a change counts in `leader_changes` and is logged).
    published_leader: u64,
    /// Whether this member knows a leader with a quorum in sight, and why not: what the
    /// StoreSvr's gRPC health reports.
    serving: watch::Sender<Serving>,
}

/// What health reports for this member (see `Driver::serving`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serving {
    pub serving: bool,
    pub reason: &'static str,
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
            proposals: Proposals::default(),
            reads: HashMap::new(),
            next_read_id: 1,
            last_heard: HashMap::new(),
            blocked_peers: Default::default(),
            was_leader: false,
            arbiter: TermSlot::default(),
            clock: BootInstant::now(),
            vote_block_logged_term: 0,
            metrics: crate::metrics::StoreMetrics::new(),
            published_leader: raft::INVALID_ID,
            serving: watch::channel(Serving { serving: false, reason: "starting" }).0,
        })
        .map(|mut driver| {
            driver.sync_peers();
            driver.transport.set_vote_blocked(driver.node.store().vote_blocked());
            if driver.node.store().vote_blocked() {
                tracing::warn!(
                    "this member started from an empty data dir of an existing set: it will not \
                     vote or campaign until a membership change applied from the log makes it a \
                     voter (seqctl store add-learner, then promote; a member that is still a \
                     voter must be removed first)"
                );
            }
            driver
        })
    }

    /// Follows whether this member knows a leader with a quorum in sight (updated every tick).
    pub fn serving(&self) -> watch::Receiver<Serving> {
        self.serving.subscribe()
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
                    // A vote-blocked member never campaigns: a follower's tick only counts
                    // toward an election.
                    if !self.node.store().vote_blocked()
                        || self.node.raft.state == StateRole::Leader
                    {
                        self.node.tick();
                    }
                    self.arbitrate();
                    self.publish();
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
            Input::Raft { from_addr, vote_blocked, messages } => {
                let now = Instant::now();
                let blocked = self.node.store().vote_blocked();
                for mut m in messages {
                    self.last_heard.insert(m.from, now);
                    if vote_blocked {
                        self.blocked_peers.insert(m.from);
                    } else {
                        self.blocked_peers.remove(&m.from);
                    }
                    self.learn_peer(m.from, &from_addr);
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
                    if let Err(e) = self.node.step(m) {
                        tracing::debug!(error = %e, "raft step refused a message");
                    }
                }
            }
            Input::Membership { change, reply } => self.propose_membership(change, reply),
            Input::SetLease { lease, reply } => {
                let now = self.now_ms();
                let term = self.node.raft.term;
                if let Err(e) = self.check_can_serve(self.proposals.len(), PENDING_PROPOSALS_MAX) {
                    let _ = reply.send(Err(e));
                    return;
                }
                if self.current_arbiter().is_none() {
                    let _ = reply.send(Err(RequestError::NotLeader { leader: self.leader_hint() }));
                    return;
                }
                let control = self.node.store().state().control();
                let Some(arbiter) = self.arbiter.get_mut_of_term(term) else { return };
                match arbiter.lease_change(now, control, lease) {
                    Ok(command) => {
                        tracing::info!(?lease, "lease change proposed");
                        self.propose(command, ProposalReply::Lease(reply));
                    }
                    Err(LeaseChangeError::Invalid(e)) => {
                        let _ = reply.send(Err(RequestError::Invalid(e.to_string())));
                    }
                    Err(e @ LeaseChangeError::NotBootstrapped) => {
                        let _ = reply.send(Err(RequestError::Dropped(e.to_string())));
                    }
                    Err(e @ LeaseChangeError::TooSoon { .. }) => {
                        let _ = reply.send(Err(RequestError::Precondition(e.to_string())));
                    }
                }
            }
            Input::Peer(PeerReport::Unreachable(to)) => self.node.report_unreachable(to.0),
            Input::Peer(PeerReport::Snapshot { to, delivered }) => {
                let status = if delivered {
                    self.metrics.snapshots_sent.increment(1);
                    SnapshotStatus::Finish
                } else {
                    SnapshotStatus::Failure
                };
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
            Input::StepDown { reply } => {
                let _ = reply.send(Ok(self.step_down()));
            }
            Input::Release { alloc, reply } => {
                tracing::info!(alloc = %alloc, "AllocSvr hands its sections back (graceful shutdown)");
                self.propose(Command::ReleaseAlloc { alloc }, ProposalReply::Done(reply));
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
                };
                let _ = reply.send(result);
            }
        }
    }

    /// Before a graceful exit: a leader hands leadership to the voter with the most of the log
    /// among those heard from lately and not vote-blocked, so the set elects no one by timeout.
    fn step_down(&mut self) -> Option<NodeId> {
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

    /// A member that holds nothing but a new set's bootstrap (log at index/term 5) refuses votes
    /// to candidates past it. At a set's creation every candidate is at the bootstrap too; later,
    /// such a member is one that never heard from a leader, or one whose lost data dir was
    /// wrongly re-created with `--initial-cluster-state new`: its vote could elect a candidate
    /// lacking entries it had acknowledged. It votes again once a leader caught it up.
    fn only_bootstrapped_and_behind(&self, m: &Message) -> bool {
        let log = &self.node.raft.raft_log;
        !seqsvr_core::teeth::BOOTSTRAP_EMPTY_VOTER
            && holds_only_bootstrap_and_candidate_is_past_it(log.last_index(), log.last_term(), m)
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
        self.track(before, reply);
    }

    /// Records a proposal raft-rs just appended (or answers it if raft did not append it).
    fn track(&mut self, before: u64, reply: ProposalReply) {
        let index = self.node.raft.raft_log.last_index();
        if index != before + 1 {
            let why = "raft did not append it (leader transfer?)".to_string();
            reply.answer(0, Err(RequestError::Dropped(why)));
            return;
        }
        let arbiter = matches!(reply, ProposalReply::Arbiter);
        let pending =
            Pending { term: self.node.raft.term, arbiter, proposed_at: Instant::now(), reply };
        if let Some(displaced) = self.proposals.insert(index, pending) {
            // Ours from an earlier term, overwritten: it will never apply.
            self.metrics.proposals_failed.increment(1);
            displaced.reply.answer(index, Err(RequestError::Superseded));
        }
    }

    /// One membership change at a time, validated here so that raft-rs never drops it silently
    /// (it turns a conf change proposed while another is unapplied into an empty entry).
    fn propose_membership(&mut self, change: MembershipChange, reply: Reply<MembershipDone>) {
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

    /// How many of `voters` this leader heard from within an election timeout (itself counts).
    fn heard_of(&self, voters: &[u64]) -> usize {
        let now = Instant::now();
        voters
            .iter()
            .filter(|&&v| v == self.config.node_id.0 || self.heard_within_election_timeout(v, now))
            .count()
    }

    /// Every member address known: the cluster file's view first, then the replicated directory.
    fn member_addrs(&self) -> Members {
        let mut all = self.node.store().members().clone();
        for (id, addr) in &self.config.members {
            all.insert(id.0, addr.clone());
        }
        all
    }

    fn addr_of(&self, id: u64) -> Option<String> {
        self.config
            .members
            .iter()
            .find(|(m, _)| m.0 == id)
            .map(|(_, a)| a.clone())
            .or_else(|| self.node.store().members().get(&id).cloned())
    }

    /// Makes sure the transport can reach every member of the configuration.
    fn sync_peers(&mut self) {
        let cs = self.node.store().conf_state().clone();
        let addrs = self.member_addrs();
        for id in cs.voters.iter().chain(cs.learners.iter()) {
            if *id == self.config.node_id.0 {
                continue;
            }
            // A file member keeps its file address; others follow the directory.
            if let Some(addr) = addrs.get(id) {
                if let Err(e) = self.transport.set_peer(NodeId(*id), addr) {
                    tracing::warn!(peer = id, %addr, error = %e, "cannot dial raft peer");
                }
            }
        }
    }

    /// A message from a member we have no address for (a leader added after the cluster file
    /// was written, talking to a new member): answer it where it says it listens.
    fn learn_peer(&mut self, from: u64, from_addr: &str) {
        if from == self.config.node_id.0
            || from_addr.is_empty()
            || self.transport.knows(NodeId(from))
        {
            return;
        }
        if let Err(e) = self.transport.set_peer(NodeId(from), from_addr) {
            tracing::warn!(peer = from, addr = %from_addr, error = %e, "cannot dial raft peer");
        }
    }

    fn membership_view(&self) -> Vec<MemberView> {
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

    fn read(&mut self, kind: ReadKind) {
        if let Err(e) = self.check_can_serve(self.reads.len(), PENDING_READS_MAX) {
            kind.fail(e);
            return;
        }
        let kind = match kind {
            ReadKind::Heartbeat { alloc, route_version, reply }
                if seqsvr_core::teeth::NO_READINDEX_BEFORE_GRANT =>
            {
                let _ = reply.send(self.grant(alloc, route_version));
                return;
            }
            kind => kind,
        };
        let id = self.next_read_id;
        self.next_read_id += 1;
        self.node.read_index(id.to_be_bytes().to_vec());
        self.reads.insert(id, PendingRead { kind, read_index: None });
    }

    /// The arbiter of the current term while leader (a new one whenever the term changed, even
    /// if this member led the term before: it does not know what the leader in between granted).
    fn current_arbiter(&mut self) -> Option<&mut Arbiter> {
        if self.node.raft.state != StateRole::Leader {
            if self.arbiter.clear() {
                tracing::info!("lost leadership: arbiter stopped");
            }
            return None;
        }
        let now = self.now_ms();
        let lease = self.config.lease;
        let term = self.node.raft.term;
        let control = self.node.store().state().control();
        let wait_ms = control.longest_hold_ms().unwrap_or(lease.hold_ms());
        let (arbiter, change) = self.arbiter.get(term, || Arbiter::new(now, lease));
        match change {
            SlotChange::Kept => {}
            SlotChange::Started => tracing::info!(
                term,
                wait_ms,
                "became leader: arbiter starts; no section moves for one lease"
            ),
            SlotChange::Replaced { old_term } => {
                tracing::info!(
                term, old_term, wait_ms,
                "leader again in a new term: new arbiter (the leader in between may have granted \
                 leases); no section moves for one lease"
            )
            }
        }
        Some(arbiter)
    }

    /// Leader only, every tick: one planning round at a time (of this term: rounds proposed in
    /// an earlier term never hold up this one).
    fn arbitrate(&mut self) {
        if self.current_arbiter().is_none() {
            return;
        }
        let now = self.now_ms();
        let term = self.node.raft.term;
        if self.proposals.arbiter_in_flight(term) > 0 {
            return;
        }
        let control = self.node.store().state().control();
        let Some(arbiter) = self.arbiter.get_mut_of_term(term) else { return };
        let commands = arbiter.plan(now, control, self.config.sections);
        for command in commands {
            tracing::info!(?command, "arbiter proposes");
            self.propose(command, ProposalReply::Arbiter);
        }
    }

    /// Answers a heartbeat: leadership was confirmed by ReadIndex after it arrived.
    fn grant(&mut self, alloc: AllocId, route_version: u64) -> Result<Grant, RequestError> {
        let now = self.now_ms();
        if self.current_arbiter().is_none() {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        }
        let term = self.node.raft.term;
        let control = self.node.store().state().control();
        let Some(arbiter) = self.arbiter.get_mut_of_term(term) else {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        };
        if !control.allocs.contains_key(&alloc) {
            return Err(RequestError::UnknownAlloc(alloc));
        }
        let Some(lease) = control.lease else {
            return Err(RequestError::Dropped(
                "this set's lease timing is not committed yet (a new leader is committing it)"
                    .into(),
            ));
        };
        if !arbiter.may_grant(control, alloc) {
            return Err(RequestError::AllocExpired(alloc));
        }
        arbiter.on_granted(alloc, now);
        let route = (route_version < control.route_version).then(|| RouteView {
            version: control.route_version,
            entries: control.route_entries(),
        });
        Ok(Grant { runs: grant_for(control, alloc), lease, route })
    }

    fn leases(&self) -> Result<LeasesView, RequestError> {
        let leader = self.node.raft.state == StateRole::Leader;
        let Some(arbiter) = self.arbiter.of_term(self.node.raft.term).filter(|_| leader) else {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        };
        let now = self.now_ms();
        let control = self.node.store().state().control();
        let load = control.assignment.load();
        let lease = control.lease.unwrap_or(self.config.lease);
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
                    released: r.released,
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
        let (heard, voters) = self.voters_heard();
        if heard <= voters / 2 && !seqsvr_core::teeth::NO_QUORUM_CHECK {
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

    fn heard_within_election_timeout(&self, peer: u64, now: Instant) -> bool {
        let window = self.config.tick * self.config.election_ticks as u32;
        self.last_heard.get(&peer).is_some_and(|&t| now.duration_since(t) < window)
    }

    /// Whether this member knows a leader that has a quorum in sight: the leader itself heard
    /// from a majority within an election timeout, or a follower heard from its leader within
    /// one (check_quorum makes a leader without a quorum step down within that time).
    fn serving_now(&self) -> Serving {
        let raft = &self.node.raft;
        match raft.state {
            StateRole::Leader => {
                let (heard, voters) = self.voters_heard();
                if heard > voters / 2 {
                    Serving { serving: true, reason: "leader with a quorum in sight" }
                } else {
                    Serving { serving: false, reason: "leader without a quorum in sight" }
                }
            }
            _ if raft.leader_id == raft::INVALID_ID => {
                Serving { serving: false, reason: "no leader known (election in progress?)" }
            }
            _ if self.heard_within_election_timeout(raft.leader_id, Instant::now()) => {
                Serving { serving: true, reason: "follower of a live leader" }
            }
            _ => Serving { serving: false, reason: "the leader has not been heard from lately" },
        }
    }

    /// Once per tick: gauges, leader changes, and the health state.
    fn publish(&mut self) {
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

    fn leader_hint(&self) -> Option<(NodeId, String)> {
        let leader = self.node.raft.leader_id;
        if leader == raft::INVALID_ID {
            return None;
        }
        self.addr_of(leader).map(|addr| (NodeId(leader), addr))
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
            leader_addr: self.leader_hint().map(|(_, a)| a).unwrap_or_default(),
            members: self.membership_view(),
            vote_blocked: store.vote_blocked(),
            lease: store.state().control().lease.unwrap_or(self.config.lease),
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
            // The snapshot carried the membership: dial whoever it names.
            self.sync_peers();
        }
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
        let mut conf_answers = Vec::new();
        let mut conf_changed = false;
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
                self.transport.remove_peer(NodeId(id));
                self.blocked_peers.remove(&id);
            }
            self.sync_peers();
            self.transport.set_vote_blocked(self.node.store().vote_blocked());
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
        Ok(())
    }

    /// The leader's arbiter learns what applied: fences start at apply time.
    fn tell_arbiter(&mut self, command: &Command, result: &Result<Applied, Rejected>) {
        let now = self.now_ms();
        let term = self.node.raft.term;
        let Some(arbiter) = self.arbiter.get_mut_of_term(term) else { return };
        match (command, result) {
            (Command::Assign { settled, moves }, Ok(Applied::Assigned { lease_epoch })) => {
                tracing::info!(lease_epoch, settled, ?moves, "sections assigned");
                arbiter.on_assigned(*lease_epoch, *settled, now);
            }
            (Command::SetLease { lease, .. }, Ok(Applied::LeaseChanged { lease_changes })) => {
                tracing::info!(?lease, lease_changes, "lease timing changed (replicated)");
                arbiter.on_lease_changed(now);
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
        for (index, p) in self.proposals.drain_all() {
            self.metrics.proposals_failed.increment(1);
            p.reply.answer(index, Err(error.clone()));
        }
        for (_, r) in self.reads.drain() {
            r.kind.fail(error.clone());
        }
    }
}

fn unapplied_error(unapplied: Unapplied) -> RequestError {
    match unapplied {
        Unapplied::Superseded => RequestError::Superseded,
        Unapplied::Unknown => RequestError::OutcomeUnknown,
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

/// A (legacy) single conf change as a V2 one with the same effect.
fn v1_to_v2(cc: ConfChange) -> ConfChangeV2 {
    let mut single = ConfChangeSingle::default();
    single.set_change_type(cc.get_change_type());
    single.node_id = cc.node_id;
    let mut v2 = ConfChangeV2::default();
    v2.set_changes(vec![single].into());
    v2.context = cc.context;
    v2
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
    matches!(m.get_msg_type(), MessageType::MsgRequestVote | MessageType::MsgRequestPreVote)
        && last_index == BOOTSTRAP_LOG_INDEX
        && last_term == BOOTSTRAP_LOG_TERM
        && m.index > BOOTSTRAP_LOG_INDEX
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::storage::MemStorage;

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
