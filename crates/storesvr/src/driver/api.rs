//! The driver's public face: its configuration, the requests gRPC handlers send it ([`Input`],
//! through a [`DriverHandle`]) and the answers and admin views they get back. No Raft logic here.

use crate::outbox::{PeerReport, ReportFn};
use raft::eraftpb::Message;
use seqsvr_core::arbiter::LeaseConfig;
use seqsvr_core::ids::{AllocId, LeaseEpoch, NodeId, RouteVersion, SectionId, SetId};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{HolderRefused, Rejected, SectionAdvance};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Requests queued for the driver before callers wait (backpressure).
pub const DRIVER_QUEUE_MAX: usize = 4096;

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
    /// Every id scheme of the config → what this set records for it as soon as it runs
    /// (`Command::RecordSchemePools`, proposed by the leader): its fingerprint and the worker
    /// ids this set leases out (none for `rongcloud`, whose session reservations must name the
    /// same fingerprint).
    pub scheme_records: std::collections::BTreeMap<String, seqsvr_core::store::SchemeRecord>,
    /// The furthest a high-water mark may be reserved ahead of this member's wall clock.
    pub max_reserve_ahead_ms: u64,
    /// How this member's cluster config maps uids to sections: recorded by the leader as soon
    /// as the set's version allows (`Command::RecordLayout`); once recorded, a member whose
    /// layout differs refuses to start, and a running one stops with a fault the moment it
    /// applies or installs the record (`ready.rs`). `None`: neither recorded
    /// nor checked (the driver's tests, whose log indexes would count the record).
    pub layout: Option<seqsvr_core::store::SetLayout>,
    /// The commands version this member applies and reports to its peers: always
    /// [`seqsvr_core::store::COMMANDS_VERSION`] in the StoreSvr (what its transport reports);
    /// the driver's tests set a lower one to play a member of an older build, which stops on
    /// any command above it as that build would.
    pub commands_version: u32,
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
    /// The driver's queue stayed full ([`DRIVER_QUEUE_MAX`]) for the caller's whole wait: the
    /// request was never queued, so nothing was proposed.
    #[error("driver queue full")]
    QueueFull { waited: Duration },
    #[error("shutting down")]
    Stopped,
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A time reservation too far ahead of this leader's clock: one of the two clocks is
    /// wrong. Retryable (UNAVAILABLE): nothing was proposed, and the same request is accepted
    /// once the clocks agree again.
    #[error("{0}")]
    ClockAhead(String),
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
    /// The caller's certificate identity is not the one that registered the alloc.
    #[error("{0}")]
    NotTheHolder(HolderRefused),
    /// The request needs a command the set's commands version does not cover yet (a member
    /// runs an older build): retryable (UNAVAILABLE), nothing was proposed.
    #[error("{0}")]
    CommandsVersion(String),
    /// A registration refused before it was proposed: its identity already holds `current`
    /// registrations (applied or in flight) at other addresses, the most it may.
    #[error(
        "identity {identity:?} already holds {current} current AllocSvr registrations at other \
         addresses ({addrs}), the most one identity may ([tls] max_registrations_per_identity = \
         {max})"
    )]
    TooManyRegistrations { identity: String, current: usize, max: usize, addrs: String },
    /// A worker lease refused before it was proposed: the identity holds its share of the
    /// scheme's worker ids, and the free ones are owed to other identities
    /// (`worker_share.rs`).
    #[error("{0}")]
    WorkerShare(String),
}

/// A lease grant for one heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub runs: Vec<(SectionRange, LeaseEpoch)>,
    pub lease: LeaseConfig,
    /// Present when the caller's route version is stale.
    pub route: Option<RouteView>,
    /// The worker ids the AllocSvr holds: `(scheme, worker id, high-water mark ms)`.
    pub workers: Vec<(String, u64, u64)>,
    /// The layout the grant is made under, which the AllocSvr checks against its own file:
    /// the set's recorded one (`true`), else this leader's cluster file (`false`). `None` only
    /// for a driver configured without a layout (tests).
    pub layout: Option<(seqsvr_core::store::SetLayout, bool)>,
}

/// A `ReserveTime` request: raise `scheme`'s `worker`'s mark to `up_to_ms` for `alloc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeReservation {
    pub alloc: AllocId,
    pub scheme: String,
    pub worker: u64,
    pub up_to_ms: u64,
    /// The AllocSvr's layout fingerprint.
    pub layout: String,
}

/// A raise of a `rongcloud` section's session time mark (`Command::ReserveSessionTime`).
#[derive(Debug, Clone)]
pub struct SessionReservation {
    pub alloc: AllocId,
    pub scheme: String,
    /// The AllocSvr's scheme fingerprint (layout and session uid range).
    pub layout: String,
    pub section: SectionId,
    pub lease_epoch: LeaseEpoch,
    pub up_to_ms: u64,
}

/// A worker id leased to an AllocSvr (`AcquireWorker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLease {
    pub worker: u64,
    pub high_water_ms: u64,
}

/// The route table of this set, in core types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteView {
    pub version: RouteVersion,
    pub entries: Vec<(SectionRange, AllocId, String)>,
}

/// The leader's view of AllocSvr leases (seqctl leases).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasesView {
    pub lease: LeaseConfig,
    pub allocs: Vec<AllocLeaseView>,
    pub runs: Vec<(SectionRange, seqsvr_core::assign::Owner)>,
    pub route_version: RouteVersion,
    /// Every worker id record: `(scheme, worker id, holder, high-water mark ms)`.
    pub workers: Vec<(String, u64, Option<AllocId>, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocLeaseView {
    pub alloc: AllocId,
    pub addr: String,
    pub draining: bool,
    pub replaced: bool,
    pub released: bool,
    pub identity: Option<String>,
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

/// A member's Raft role, as status reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    PreCandidate,
}

impl Role {
    pub fn of(state: raft::StateRole) -> Role {
        match state {
            raft::StateRole::Leader => Role::Leader,
            raft::StateRole::Follower => Role::Follower,
            raft::StateRole::Candidate => Role::Candidate,
            raft::StateRole::PreCandidate => Role::PreCandidate,
        }
    }

    /// The name on the wire (`StoreStatusResponse.role`) and in seqctl.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::PreCandidate => "pre_candidate",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub role: Role,
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
    /// The set's commands version, as this member applied it.
    pub commands_version: u32,
    /// The set's recorded layout (`Command::RecordLayout`), as this member applied it.
    pub layout: Option<seqsvr_core::store::SetLayout>,
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

pub(crate) type Reply<T> = oneshot::Sender<Result<T, RequestError>>;

pub enum Input {
    /// `identity` (here and below): the caller's certificate identity when it calls as an
    /// AllocSvr (`None` over plaintext); checked against the registration's
    /// (`ControlState::check_holder`).
    Advance {
        alloc: Option<AllocId>,
        sections: Vec<SectionAdvance>,
        identity: Option<String>,
        reply: Reply<Advanced>,
    },
    /// A registration by `identity` (`None` over plaintext), refused before it is proposed
    /// when that identity already holds `max_current` current registrations at other
    /// addresses (`[tls] max_registrations_per_identity`).
    Register {
        addr: String,
        identity: Option<String>,
        max_current: usize,
        reply: Reply<AllocId>,
    },
    Heartbeat {
        alloc: AllocId,
        route_version: RouteVersion,
        identity: Option<String>,
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
        reply: Reply<LeaseEpoch>,
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
    /// Lease a worker id of an id scheme (see `Command::AcquireWorkerAt`).
    AcquireWorker {
        alloc: AllocId,
        scheme: String,
        layout: String,
        identity: Option<String>,
        reply: Reply<WorkerLease>,
    },
    /// Raise a worker id's high-water mark (see `Command::ReserveTime`).
    ReserveTime {
        reservation: TimeReservation,
        identity: Option<String>,
        reply: Reply<u64>,
    },
    /// Raise a section's session time mark (see `Command::ReserveSessionTime`): answers the
    /// mark before and after.
    ReserveSessionTime {
        reservation: SessionReservation,
        identity: Option<String>,
        reply: Reply<(u64, u64)>,
    },
    /// The AllocSvr stopped serving for good (see `Command::ReleaseAlloc`).
    Release {
        alloc: AllocId,
        identity: Option<String>,
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
    /// whether it may vote, `commands_version` the commands version of its build (0: a build
    /// before the version gate).
    Raft {
        from_addr: String,
        vote_blocked: bool,
        commands_version: u32,
        /// The sender's cluster-file layout (`RaftMessageBatch.sender_layout`).
        layout: Option<seqsvr_core::store::SetLayout>,
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
        let until = tokio::time::Instant::now() + wait;
        // A full queue makes the caller wait (backpressure), never past its deadline; a request
        // still not queued then was never seen: "saturated", not "outcome unknown".
        match tokio::time::timeout_at(until, self.tx.send(make(reply))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(RequestError::Stopped),
            Err(_) => return Err(RequestError::QueueFull { waited: wait }),
        }
        match tokio::time::timeout_at(until, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(RequestError::Stopped),
            Err(_) => Err(RequestError::Timeout { waited: wait }),
        }
    }

    pub async fn advance(
        &self,
        alloc: Option<AllocId>,
        sections: Vec<SectionAdvance>,
        identity: Option<String>,
        wait: Duration,
    ) -> Result<Advanced, RequestError> {
        self.call(wait, |reply| Input::Advance { alloc, sections, identity, reply }).await
    }

    pub async fn register(
        &self,
        addr: String,
        identity: Option<String>,
        max_current: usize,
        wait: Duration,
    ) -> Result<AllocId, RequestError> {
        self.call(wait, |reply| Input::Register { addr, identity, max_current, reply }).await
    }

    pub async fn heartbeat(
        &self,
        alloc: AllocId,
        route_version: RouteVersion,
        identity: Option<String>,
        wait: Duration,
    ) -> Result<Grant, RequestError> {
        self.call(wait, |reply| Input::Heartbeat { alloc, route_version, identity, reply }).await
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
    ) -> Result<LeaseEpoch, RequestError> {
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

    pub async fn release(
        &self,
        alloc: AllocId,
        identity: Option<String>,
        wait: Duration,
    ) -> Result<(), RequestError> {
        self.call(wait, |reply| Input::Release { alloc, identity, reply }).await
    }

    pub async fn acquire_worker(
        &self,
        alloc: AllocId,
        scheme: String,
        layout: String,
        identity: Option<String>,
        wait: Duration,
    ) -> Result<WorkerLease, RequestError> {
        self.call(wait, |reply| Input::AcquireWorker { alloc, scheme, layout, identity, reply })
            .await
    }

    pub async fn reserve_time(
        &self,
        reservation: TimeReservation,
        identity: Option<String>,
        wait: Duration,
    ) -> Result<u64, RequestError> {
        self.call(wait, |reply| Input::ReserveTime { reservation, identity, reply }).await
    }

    pub async fn reserve_session_time(
        &self,
        reservation: SessionReservation,
        identity: Option<String>,
        wait: Duration,
    ) -> Result<(u64, u64), RequestError> {
        self.call(wait, |reply| Input::ReserveSessionTime { reservation, identity, reply }).await
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
        commands_version: u32,
        layout: Option<seqsvr_core::store::SetLayout>,
        messages: Vec<Message>,
    ) -> Result<(), RequestError> {
        let input = Input::Raft { from_addr, vote_blocked, commands_version, layout, messages };
        self.tx.send(input).await.map_err(|_| RequestError::Stopped)
    }
}

/// What health reports for this member (see `Driver::serving`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serving {
    pub serving: bool,
    pub reason: &'static str,
    /// This member leads and every voter has acknowledged an entry past the bootstrap: the set
    /// exists on all of its members (what `--created-marker` records).
    pub established: bool,
}

/// Creates the channel the driver reads; the sender half goes to the transport and handlers.
pub fn channel() -> (DriverHandle, mpsc::Sender<Input>, mpsc::Receiver<Input>) {
    let (tx, rx) = mpsc::channel(DRIVER_QUEUE_MAX);
    (DriverHandle { tx: tx.clone() }, tx, rx)
}

/// Where the transport's reports go: into the driver's queue as [`Input::Peer`]. Never blocks:
/// with the queue full the report is dropped, as raft tolerates (the next send reports again).
pub fn peer_reports(driver: mpsc::Sender<Input>) -> ReportFn {
    Arc::new(move |report| {
        let _ = driver.try_send(Input::Peer(report));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that cannot even be queued (the driver's queue full for its whole wait) is
    /// told so: QueueFull ("never queued"), not Timeout ("outcome unknown"); one that was
    /// queued but not answered is still Timeout.
    #[tokio::test]
    async fn a_full_driver_queue_answers_queue_full() {
        let (handle, _tx, _rx) = channel(); // nobody reads: the driver is stuck
        let wait = Duration::from_millis(50);
        let queued = futures::future::join_all((0..DRIVER_QUEUE_MAX).map(|_| handle.route(wait)));
        for r in queued.await {
            assert!(matches!(r, Err(RequestError::Timeout { .. })), "queued, unanswered: {r:?}");
        }
        let r = handle.route(wait).await;
        assert!(matches!(r, Err(RequestError::QueueFull { .. })), "{r:?}");
        let status = crate::service::to_status(RequestError::QueueFull { waited: wait });
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("never queued"), "{}", status.message());
    }
}
