//! gRPC services of a StoreSvr member: `StoreService` (leader only), `RaftTransport` (peers) and
//! `StoreAdmin` (every member). Wire types are converted here and nowhere else, and every
//! [`RequestError`] becomes a `tonic::Status` in [`to_status`].

use crate::driver::{
    DriverHandle, MemberView, MembershipChange, MembershipDone, RequestError, RouteView,
};
use protobuf::Message as _;
use seqsvr_core::ids::{AllocId, LeaseEpoch, NodeId, RouteVersion, SectionId, Seq, SetId};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{
    validate_advance, validate_operator_raise, validate_read, SectionAdvance,
};
use seqsvr_proto::v1::{self as pb};
use std::time::Duration;
use tonic::{Request, Response, Status};

/// What every handler needs to know about its member.
#[derive(Clone)]
pub struct ServiceContext {
    pub driver: DriverHandle,
    pub set_id: SetId,
    pub node_id: NodeId,
    pub addr: String,
    pub members: Vec<(NodeId, String)>,
    pub sections: SectionRange,
    pub uid_begin: u64,
    pub uid_end: u64,
    pub section_size: u64,
    pub max_batch_sections: usize,
    pub lease_ms: u64,
    pub lease_margin_ms: u64,
    /// Longest a call waits for commit or read; a shorter `grpc-timeout` from the caller wins.
    pub request_timeout: Duration,
    /// `store.max_operator_raise`: most one unfenced advance may add to a section's `max_seq`.
    pub max_operator_raise: u64,
    /// `[tls] max_registrations_per_identity`: most current registrations one `alloc` identity
    /// may hold (no limit over plaintext, where there are no identities).
    pub max_registrations_per_identity: usize,
}

/// The longest address an AllocSvr may register (bytes): a DNS name (at most 253) and a port
/// fit. It is replicated into the control state, every route table and every NOT_OWNER answer.
pub const ALLOC_ADDR_MAX_BYTES: usize = 255;

/// An address an AllocSvr may register: at most [`ALLOC_ADDR_MAX_BYTES`], `host:port` with a
/// port in 1..=65535 and a host that is an IP address (`[v6]` bracketed) or a host name
/// (letters, digits, '-', '_', '.'), as clients will dial it.
pub fn check_alloc_addr(addr: &str) -> Result<(), String> {
    if addr.len() > ALLOC_ADDR_MAX_BYTES {
        return Err(format!(
            "alloc addr is {} bytes, more than the {ALLOC_ADDR_MAX_BYTES} an address may have \
             (a host name and a port): register the address clients dial",
            addr.len()
        ));
    }
    if addr.parse::<std::net::SocketAddr>().is_ok_and(|a| a.port() != 0) {
        return Ok(());
    }
    let not =
        || format!("alloc addr {addr:?} is not host:port (a host name or IP and a port 1-65535)");
    let (host, port) = addr.rsplit_once(':').ok_or_else(not)?;
    if !matches!(port.parse::<u16>(), Ok(p) if p != 0) {
        return Err(not());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if host.is_empty() || !host.split('.').all(label_ok) {
        return Err(not());
    }
    Ok(())
}

impl ServiceContext {
    pub fn route_table(&self, view: RouteView) -> pb::RouteTable {
        route_table(self.set_id, self.uid_begin, self.uid_end, self.section_size, view)
    }

    fn wait_for<T>(&self, request: &Request<T>) -> Duration {
        let caller = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(seqsvr_proto::parse_grpc_timeout);
        match caller {
            // Answer a little before the caller's deadline, so it sees our UNAVAILABLE rather
            // than its own DEADLINE_EXCEEDED.
            Some(d) => self.request_timeout.min(d.mul_f64(0.9)),
            None => self.request_timeout,
        }
    }
}

/// A route table on the wire.
pub fn route_table(
    set_id: SetId,
    uid_begin: u64,
    uid_end: u64,
    section_size: u64,
    view: RouteView,
) -> pb::RouteTable {
    pb::RouteTable {
        set_id: set_id.0,
        version: view.version.0,
        uid_begin,
        uid_end,
        section_size,
        entries: view
            .entries
            .into_iter()
            .map(|(r, alloc, addr)| pb::RouteEntry {
                section_begin: r.begin().0,
                section_end: r.end().0,
                alloc_id: alloc.0,
                addr,
            })
            .collect(),
    }
}

fn layout_pb(l: seqsvr_core::store::SetLayout) -> pb::SetLayout {
    pb::SetLayout { section_size: l.section_size, uid_begin: l.uid_begin, uid_end: l.uid_end }
}

fn max_seq_pb(sections: &[(SectionId, u64)]) -> Vec<pb::SectionMaxSeq> {
    sections
        .iter()
        .map(|&(s, v)| pb::SectionMaxSeq { section: s.0, max_seq: v, lease_epoch: 0 })
        .collect()
}

fn section_range(begin: u64, end: u64, set: SectionRange) -> Result<SectionRange, Status> {
    match SectionRange::new(SectionId(begin), SectionId(end)) {
        Some(r) if !r.is_empty() && set.contains(r.begin()) && r.end() <= set.end() => Ok(r),
        _ => Err(Status::invalid_argument(format!(
            "sections [{begin}, {end}) are not a non-empty part of this set's [{}, {})",
            set.begin(),
            set.end()
        ))),
    }
}

/// The one place where driver errors become gRPC statuses. Every UNAVAILABLE is retryable.
pub fn to_status(error: RequestError) -> Status {
    match error {
        RequestError::NotLeader { leader: Some((id, addr)) } => {
            let mut status = Status::unavailable(format!(
                "not the leader: the leader of this set is member {id} at {addr}"
            ));
            if let (Ok(id), Ok(addr)) = (id.0.to_string().parse(), addr.parse()) {
                status.metadata_mut().insert(seqsvr_proto::LEADER_ID_METADATA, id);
                status.metadata_mut().insert(seqsvr_proto::LEADER_ADDR_METADATA, addr);
            }
            status
        }
        RequestError::NotLeader { leader: None } => Status::unavailable(
            "no leader known: an election is in progress or a majority of members is down; retry",
        ),
        RequestError::NoQuorum { heard, voters } => Status::unavailable(format!(
            "no quorum: the leader heard from only {heard} of {voters} members within an election \
             timeout; nothing was proposed; retry once a majority is up"
        )),
        RequestError::Dropped(why) => Status::unavailable(format!("not proposed: {why}; retry")),
        RequestError::Superseded => Status::unavailable(
            "leadership changed before the proposal committed; it was not applied; retry",
        ),
        RequestError::Overloaded => {
            Status::unavailable("too many requests in flight on the leader; retry with backoff")
        }
        RequestError::Timeout { waited } => Status::unavailable(format!(
            "not confirmed within {} ms (lost quorum?); the outcome is unknown: retry \
             (AdvanceMaxSeq is idempotent)",
            waited.as_millis()
        )),
        RequestError::Stopped => Status::unavailable("this member is shutting down; retry another"),
        // UNAVAILABLE, not RESOURCE_EXHAUSTED: the store's callers (AllocSvr advances and
        // heartbeats) must keep trying, with back-off, or leases lapse.
        RequestError::QueueFull { waited } => Status::unavailable(format!(
            "this member is saturated: its Raft driver's queue stayed full ({} requests) for {} \
             ms; the request was never queued, nothing was proposed; retry with back-off",
            crate::driver::DRIVER_QUEUE_MAX,
            waited.as_millis()
        )),
        RequestError::Invalid(why) => Status::invalid_argument(why),
        RequestError::ClockAhead(why) => Status::unavailable(why),
        RequestError::CommandsVersion(why) => Status::unavailable(why),
        RequestError::Precondition(why) => Status::failed_precondition(why),
        // As `NoFreeWorker`: the AllocSvr passes it on to its client as it is.
        RequestError::WorkerShare(why) => Status::resource_exhausted(why),
        RequestError::OutcomeUnknown => Status::unavailable(
            "this member caught up by snapshot before the proposal was seen applying: it may or \
             may not have applied; retry (every store command is idempotent or fenced)",
        ),
        RequestError::Rejected(rejected @ seqsvr_core::store::Rejected::NoFreeWorker { .. }) => {
            Status::resource_exhausted(rejected.to_string())
        }
        RequestError::Rejected(rejected @ seqsvr_core::store::Rejected::SchemeChanged { .. }) => {
            tracing::error!(error = %rejected, "id scheme layout mismatch");
            Status::invalid_argument(rejected.to_string())
        }
        RequestError::Rejected(rejected) => Status::failed_precondition(rejected.to_string()),
        RequestError::UnknownAlloc(alloc) => Status::not_found(format!(
            "alloc {alloc} is not registered with this set (forgotten after its lease ran out): \
             register again"
        )),
        RequestError::AllocExpired(alloc) => Status::failed_precondition(format!(
            "alloc {alloc}'s registration expired or was replaced: stop serving and register again"
        )),
        e @ RequestError::TooManyRegistrations { .. } => Status::resource_exhausted(format!(
            "{e}: nothing was proposed. Stop the AllocSvrs of the old registrations (SIGTERM \
             releases one; a dead one's is forgotten once its lease ran out and its sections \
             moved: `seqctl leases` lists them), register again at the same address (which \
             replaces), or raise the limit if that many AllocSvrs share this certificate"
        )),
        RequestError::NotTheHolder(refused) => {
            tracing::warn!(target: seqsvr_tls::AUDIT_TARGET, "PERMISSION_DENIED: {refused}");
            Status::permission_denied(format!(
                "{refused}; an AllocSvr acts only for its own registration"
            ))
        }
    }
}

fn members_pb(members: &[MemberView]) -> Vec<pb::MemberInfo> {
    members
        .iter()
        .map(|m| pb::MemberInfo {
            id: m.id,
            addr: m.addr.clone(),
            learner: m.learner,
            match_index: m.match_index,
            lag: m.lag,
        })
        .collect()
}

fn membership_pb(done: MembershipDone) -> pb::MembershipResponse {
    pb::MembershipResponse { members: members_pb(&done.members), applied_index: done.applied_index }
}

impl ServiceContext {
    async fn change_membership<T>(
        &self,
        request: Request<T>,
        change: impl FnOnce(T) -> Result<MembershipChange, Status>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        let wait = self.wait_for(&request);
        let change = change(request.into_inner())?;
        let done = self.driver.membership(change, wait).await.map_err(to_status)?;
        Ok(Response::new(membership_pb(done)))
    }
}

#[tonic::async_trait]
impl pb::store_service_server::StoreService for ServiceContext {
    async fn advance_max_seq(
        &self,
        request: Request<pb::AdvanceMaxSeqRequest>,
    ) -> Result<Response<pb::AdvanceMaxSeqResponse>, Status> {
        let wait = self.wait_for(&request);
        let identity = if request.get_ref().alloc_id == 0 {
            seqsvr_tls::require_admin(&request, "an unfenced advance (alloc_id 0)")?;
            None
        } else {
            seqsvr_tls::alloc_identity(&request, "a fenced advance")?
        };
        let request_id = seqsvr_proto::request_id_of(request.metadata()).unwrap_or("-").to_string();
        let request = request.into_inner();
        let alloc = (request.alloc_id != 0).then_some(AllocId(request.alloc_id));
        let sections: Vec<SectionAdvance> = request
            .sections
            .iter()
            .map(|s| SectionAdvance {
                section: SectionId(s.section),
                max_seq: Seq(s.max_seq),
                lease_epoch: LeaseEpoch(s.lease_epoch),
            })
            .collect();
        validate_advance(self.sections, self.max_batch_sections, &sections)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if alloc.is_none() {
            // An operator raise: judged against the committed values (a linearizable read).
            let ids = sections.iter().map(|a| a.section).collect();
            let current = self.driver.read(ids, wait).await.map_err(to_status)?;
            validate_operator_raise(&current.sections, &sections, self.max_operator_raise)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
        }
        let n_sections = sections.len();
        let done = self.driver.advance(alloc, sections, identity, wait).await.map_err(|e| {
            tracing::debug!(alloc = ?alloc.map(|a| a.0), n_sections, request_id, error = %e,
                "advance not committed");
            to_status(e)
        })?;
        tracing::debug!(alloc = ?alloc.map(|a| a.0), n_sections, request_id,
            applied_index = done.applied_index, "advance committed");
        Ok(Response::new(pb::AdvanceMaxSeqResponse {
            sections: max_seq_pb(&done.sections),
            applied_index: done.applied_index,
        }))
    }

    async fn load_sections(
        &self,
        request: Request<pb::LoadSectionsRequest>,
    ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
        let wait = self.wait_for(&request);
        let r = request.into_inner();
        let range = section_range(r.section_begin, r.section_end, self.sections)?;
        let done = self.driver.load(range, wait).await.map_err(to_status)?;
        Ok(Response::new(pb::GetMaxSeqResponse {
            sections: max_seq_pb(&done.sections),
            read_index: done.read_index,
        }))
    }

    async fn register_alloc(
        &self,
        request: Request<pb::RegisterAllocRequest>,
    ) -> Result<Response<pb::RegisterAllocResponse>, Status> {
        let wait = self.wait_for(&request);
        let identity = seqsvr_tls::alloc_identity(&request, "an AllocSvr registration")?;
        let addr = request.into_inner().addr;
        if let Err(why) = check_alloc_addr(&addr) {
            tracing::warn!(target: seqsvr_tls::AUDIT_TARGET, identity = ?identity,
                "INVALID_ARGUMENT: registration refused: {why}");
            return Err(Status::invalid_argument(why));
        }
        let most = self.max_registrations_per_identity;
        let id = self.driver.register(addr, identity, most, wait).await.map_err(to_status)?;
        Ok(Response::new(pb::RegisterAllocResponse {
            alloc_id: id.0,
            lease_ms: self.lease_ms,
            lease_margin_ms: self.lease_margin_ms,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let wait = self.wait_for(&request);
        let identity = seqsvr_tls::alloc_identity(&request, "a lease heartbeat")?;
        let r = request.into_inner();
        let grant = self
            .driver
            .heartbeat(AllocId(r.alloc_id), RouteVersion(r.route_version), identity, wait)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::HeartbeatResponse {
            lease_ms: grant.lease.lease_ms,
            lease_margin_ms: grant.lease.margin_ms,
            runs: grant
                .runs
                .iter()
                .map(|&(r, e)| pb::GrantedRun {
                    section_begin: r.begin().0,
                    section_end: r.end().0,
                    lease_epoch: e.0,
                })
                .collect(),
            route_table: grant.route.map(|v| self.route_table(v)),
            workers: grant
                .workers
                .into_iter()
                .map(|(scheme, worker_id, high_water_ms)| pb::HeldWorker {
                    scheme,
                    worker_id,
                    high_water_ms,
                    alloc_id: 0,
                })
                .collect(),
            layout: grant.layout.map(|(l, _)| layout_pb(l)),
            layout_recorded: grant.layout.is_some_and(|(_, recorded)| recorded),
        }))
    }

    async fn acquire_worker(
        &self,
        request: Request<pb::AcquireWorkerRequest>,
    ) -> Result<Response<pb::AcquireWorkerResponse>, Status> {
        let wait = self.wait_for(&request);
        let identity = seqsvr_tls::alloc_identity(&request, "a worker id lease")?;
        let r = request.into_inner();
        if r.alloc_id == 0 {
            return Err(Status::invalid_argument("alloc_id 0 is not an AllocSvr registration"));
        }
        if r.layout.is_empty() {
            return Err(Status::invalid_argument(
                "no layout: the scheme's layout is recorded at its first lease",
            ));
        }
        let lease = self
            .driver
            .acquire_worker(AllocId(r.alloc_id), r.scheme.clone(), r.layout, identity, wait)
            .await
            .map_err(to_status)?;
        tracing::info!(alloc = r.alloc_id, scheme = %r.scheme, worker = lease.worker,
            high_water_ms = lease.high_water_ms, "worker id leased");
        Ok(Response::new(pb::AcquireWorkerResponse {
            worker_id: lease.worker,
            high_water_ms: lease.high_water_ms,
        }))
    }

    async fn reserve_time(
        &self,
        request: Request<pb::ReserveTimeRequest>,
    ) -> Result<Response<pb::ReserveTimeResponse>, Status> {
        let wait = self.wait_for(&request);
        let identity = seqsvr_tls::alloc_identity(&request, "a time reservation")?;
        let r = request.into_inner();
        if r.alloc_id == 0 {
            return Err(Status::invalid_argument("alloc_id 0 is not an AllocSvr registration"));
        }
        if r.layout.is_empty() {
            return Err(Status::invalid_argument(
                "no layout: a reservation names its scheme's layout",
            ));
        }
        let high_water_ms = self
            .driver
            .reserve_time(
                crate::driver::TimeReservation {
                    alloc: AllocId(r.alloc_id),
                    scheme: r.scheme,
                    worker: r.worker_id,
                    up_to_ms: r.up_to_ms,
                    layout: r.layout,
                },
                identity,
                wait,
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::ReserveTimeResponse { high_water_ms }))
    }

    async fn reserve_session_time(
        &self,
        request: Request<pb::ReserveSessionTimeRequest>,
    ) -> Result<Response<pb::ReserveSessionTimeResponse>, Status> {
        let wait = self.wait_for(&request);
        let identity = seqsvr_tls::alloc_identity(&request, "a session time reservation")?;
        let r = request.into_inner();
        if r.alloc_id == 0 {
            return Err(Status::invalid_argument("alloc_id 0 is not an AllocSvr registration"));
        }
        if r.layout.is_empty() || r.scheme.is_empty() {
            return Err(Status::invalid_argument(
                "no scheme or layout: a reservation names its scheme and the scheme's fingerprint",
            ));
        }
        let (before_ms, after_ms) = self
            .driver
            .reserve_session_time(
                crate::driver::SessionReservation {
                    alloc: AllocId(r.alloc_id),
                    scheme: r.scheme,
                    layout: r.layout,
                    section: SectionId(r.section),
                    lease_epoch: LeaseEpoch(r.lease_epoch),
                    up_to_ms: r.up_to_ms,
                },
                identity,
                wait,
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::ReserveSessionTimeResponse { before_ms, after_ms }))
    }

    async fn release_alloc(
        &self,
        request: Request<pb::ReleaseAllocRequest>,
    ) -> Result<Response<pb::ReleaseAllocResponse>, Status> {
        let wait = self.wait_for(&request);
        let identity = seqsvr_tls::alloc_identity(&request, "a release (ReleaseAlloc)")?;
        let alloc = request.into_inner().alloc_id;
        if alloc == 0 {
            return Err(Status::invalid_argument("alloc_id 0 is not an AllocSvr registration"));
        }
        self.driver.release(AllocId(alloc), identity, wait).await.map_err(to_status)?;
        Ok(Response::new(pb::ReleaseAllocResponse {}))
    }

    async fn get_max_seq(
        &self,
        request: Request<pb::GetMaxSeqRequest>,
    ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
        let wait = self.wait_for(&request);
        let sections: Vec<SectionId> =
            request.into_inner().sections.into_iter().map(SectionId).collect();
        validate_read(self.sections, self.max_batch_sections, &sections)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let done = self.driver.read(sections, wait).await.map_err(to_status)?;
        Ok(Response::new(pb::GetMaxSeqResponse {
            sections: max_seq_pb(&done.sections),
            read_index: done.read_index,
        }))
    }
}

#[tonic::async_trait]
impl pb::raft_transport_server::RaftTransport for ServiceContext {
    async fn send(
        &self,
        request: Request<pb::RaftMessageBatch>,
    ) -> Result<Response<pb::RaftSendResponse>, Status> {
        // Before anything of the batch is looked at: the caller must be member `from` itself.
        if let Err(refused) = seqsvr_tls::require_own_node(&request, NodeId(request.get_ref().from))
        {
            metrics::counter!("seqsvr_store_raft_messages_refused_total").increment(1);
            return Err(refused);
        }
        let batch = request.into_inner();
        if batch.set_id != self.set_id.0 {
            return Err(Status::failed_precondition(format!(
                "raft messages for set {} reached member {} of set {}: check the cluster config",
                batch.set_id, self.node_id, self.set_id
            )));
        }
        let mut messages = Vec::with_capacity(batch.messages.len());
        for bytes in &batch.messages {
            // RUSTSEC-2024-0437: protobuf 2.28 sees only bytes that pass the wire pre-check.
            if let Err(e) = seqsvr_core::raft_wire::check_message(bytes) {
                tracing::warn!(from = batch.from, from_addr = %batch.from_addr, error = %e,
                    "raft message refused before parsing");
                metrics::counter!("seqsvr_store_raft_messages_refused_total").increment(1);
                return Err(Status::invalid_argument(format!("malformed raft message: {e}")));
            }
            let m = raft::eraftpb::Message::parse_from_bytes(bytes)
                .map_err(|e| Status::invalid_argument(format!("undecodable raft message: {e}")))?;
            // What the batch says of its sender (address, vote-blocked, commands version) is
            // taken for every message's `from`: one member may not speak for another.
            if m.from != batch.from {
                metrics::counter!("seqsvr_store_raft_messages_refused_total").increment(1);
                return Err(Status::invalid_argument(format!(
                    "a raft message from member {} in a batch from member {}: refused",
                    m.from, batch.from
                )));
            }
            messages.push(m);
        }
        self.driver
            .step(
                batch.from_addr,
                batch.sender_vote_blocked,
                batch.sender_commands_version,
                batch.sender_layout.map(|l| seqsvr_core::store::SetLayout {
                    section_size: l.section_size,
                    uid_begin: l.uid_begin,
                    uid_end: l.uid_end,
                }),
                messages,
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::RaftSendResponse {}))
    }
}

#[tonic::async_trait]
impl pb::store_admin_server::StoreAdmin for ServiceContext {
    async fn status(
        &self,
        _: Request<pb::StoreStatusRequest>,
    ) -> Result<Response<pb::StoreStatusResponse>, Status> {
        let s = self.driver.status().await.map_err(to_status)?;
        let leader_addr = s.leader_addr.clone();
        Ok(Response::new(pb::StoreStatusResponse {
            set_id: self.set_id.0,
            id: self.node_id.0,
            addr: self.addr.clone(),
            role: s.role.as_str().into(),
            term: s.term,
            leader_id: s.leader_id,
            leader_addr,
            commit_index: s.commit_index,
            applied_index: s.applied_index,
            first_index: s.first_index,
            last_index: s.last_index,
            snapshot_index: s.snapshot_index,
            voters: s.voters,
            learners: s.learners,
            section_begin: self.sections.begin().0,
            section_end: self.sections.end().0,
            n_sections_advanced: s.n_sections_advanced,
            members: members_pb(&s.members),
            vote_blocked: s.vote_blocked,
            lease_ms: s.lease.lease_ms,
            lease_margin_ms: s.lease.margin_ms,
            commands_version: s.commands_version,
            build_commands_version: seqsvr_core::store::COMMANDS_VERSION,
            recorded_layout: s.layout.map(layout_pb),
        }))
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        let wait = self.wait_for(&request);
        let target = NodeId(request.into_inner().target_id);
        self.driver.transfer_leader(target, wait).await.map_err(to_status)?;
        Ok(Response::new(pb::TransferLeaderResponse {}))
    }

    async fn local_max_seq(
        &self,
        request: Request<pb::GetMaxSeqRequest>,
    ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
        let sections: Vec<SectionId> =
            request.into_inner().sections.into_iter().map(SectionId).collect();
        validate_read(self.sections, self.max_batch_sections, &sections)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let done = self.driver.local_read(sections).await.map_err(to_status)?;
        Ok(Response::new(pb::GetMaxSeqResponse {
            sections: max_seq_pb(&done.sections),
            read_index: done.read_index,
        }))
    }

    async fn leases(
        &self,
        request: Request<pb::LeasesRequest>,
    ) -> Result<Response<pb::LeasesResponse>, Status> {
        let wait = self.wait_for(&request);
        let v = self.driver.leases(wait).await.map_err(to_status)?;
        Ok(Response::new(pb::LeasesResponse {
            lease_ms: v.lease.lease_ms,
            lease_margin_ms: v.lease.margin_ms,
            allocs: v
                .allocs
                .into_iter()
                .map(|a| pb::AllocLease {
                    alloc_id: a.alloc.0,
                    addr: a.addr,
                    draining: a.draining,
                    replaced: a.replaced,
                    released: a.released,
                    identity: a.identity.clone().unwrap_or_default(),
                    expired: a.expired,
                    ms_since_grant: a.ms_since_grant.map_or(-1, |m| m as i64),
                    lease_left_ms: a.lease_left_ms as i64,
                    n_sections: a.n_sections,
                })
                .collect(),
            runs: v
                .runs
                .into_iter()
                .map(|(r, o)| pb::AssignedRun {
                    section_begin: r.begin().0,
                    section_end: r.end().0,
                    alloc_id: o.alloc.0,
                    lease_epoch: o.lease_epoch.0,
                    settled: o.settled,
                })
                .collect(),
            route_version: v.route_version.0,
            workers: v
                .workers
                .into_iter()
                .map(|(scheme, worker_id, holder, high_water_ms)| pb::HeldWorker {
                    scheme,
                    worker_id,
                    high_water_ms,
                    alloc_id: holder.map_or(0, |a| a.0),
                })
                .collect(),
        }))
    }

    async fn route_table(
        &self,
        request: Request<pb::GetRouteTableRequest>,
    ) -> Result<Response<pb::GetRouteTableResponse>, Status> {
        let wait = self.wait_for(&request);
        let view = self.driver.route(wait).await.map_err(to_status)?;
        Ok(Response::new(pb::GetRouteTableResponse { route_table: Some(self.route_table(view)) }))
    }

    async fn move_sections(
        &self,
        request: Request<pb::MoveSectionsRequest>,
    ) -> Result<Response<pb::MoveSectionsResponse>, Status> {
        let wait = self.wait_for(&request);
        let r = request.into_inner();
        let range = section_range(r.section_begin, r.section_end, self.sections)?;
        let lease_epoch = self
            .driver
            .move_sections(range, AllocId(r.to_alloc_id), wait)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::MoveSectionsResponse { lease_epoch: lease_epoch.0 }))
    }

    async fn add_learner(
        &self,
        request: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.change_membership(request, |r| {
            if r.node_id == 0 {
                return Err(Status::invalid_argument("node id 0 is reserved"));
            }
            if seqsvr_core::config::port_of(&r.addr).is_none() {
                return Err(Status::invalid_argument(format!(
                    "member addr {:?} is not host:port",
                    r.addr
                )));
            }
            Ok(MembershipChange::AddLearner { id: NodeId(r.node_id), addr: r.addr })
        })
        .await
    }

    async fn promote_learner(
        &self,
        request: Request<pb::PromoteLearnerRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.change_membership(request, |r| Ok(MembershipChange::Promote { id: NodeId(r.node_id) }))
            .await
    }

    async fn remove_member(
        &self,
        request: Request<pb::RemoveMemberRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.change_membership(request, |r| Ok(MembershipChange::Remove { id: NodeId(r.node_id) }))
            .await
    }

    async fn set_lease(
        &self,
        request: Request<pb::SetLeaseRequest>,
    ) -> Result<Response<pb::SetLeaseResponse>, Status> {
        let wait = self.wait_for(&request);
        let r = request.into_inner();
        let lease = seqsvr_core::arbiter::LeaseConfig {
            lease_ms: r.lease_ms,
            margin_ms: r.lease_margin_ms,
        };
        seqsvr_core::store::validate_lease(&lease)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let lease = self.driver.set_lease(lease, wait).await.map_err(to_status)?;
        Ok(Response::new(pb::SetLeaseResponse {
            lease_ms: lease.lease_ms,
            lease_margin_ms: lease.margin_ms,
        }))
    }

    async fn drain_alloc(
        &self,
        request: Request<pb::DrainAllocRequest>,
    ) -> Result<Response<pb::DrainAllocResponse>, Status> {
        let wait = self.wait_for(&request);
        let r = request.into_inner();
        self.driver.drain(AllocId(r.alloc_id), r.drain, wait).await.map_err(to_status)?;
        Ok(Response::new(pb::DrainAllocResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registered address is replicated into the control state, every route table and every
    /// NOT_OWNER answer: bounded and well formed, refused before anything is proposed. Fails
    /// without `check_alloc_addr` (the handler checked only that a port parses).
    #[test]
    fn alloc_addresses_are_bounded_and_must_be_host_port() {
        for good in ["10.0.0.5:7201", "[::1]:7201", "alloc-0-1:7201", "seqsvr_alloc_1.svc:1"] {
            assert_eq!(check_alloc_addr(good), Ok(()), "{good}");
        }
        let long = format!("{}:7201", "a".repeat(ALLOC_ADDR_MAX_BYTES));
        let err = check_alloc_addr(&long).unwrap_err();
        assert!(err.contains("260 bytes") && err.contains("255"), "{err}");
        let just = format!("{}:7201", "a".repeat(ALLOC_ADDR_MAX_BYTES - 5));
        assert_eq!(check_alloc_addr(&just), Ok(()), "exactly the most");
        for bad in ["nope", ":7201", "host:0", "host:65536", "ho st:1", "a/b:1", "h..x:1", "-h:1"] {
            let err = check_alloc_addr(bad).unwrap_err();
            assert!(err.contains("not host:port"), "{bad}: {err}");
        }
        let status = to_status(RequestError::TooManyRegistrations {
            identity: "alloc-0-1".into(),
            current: 8,
            max: 8,
            addrs: "a:1, b:1".into(),
        });
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        let m = status.message();
        assert!(m.contains("\"alloc-0-1\" already holds 8") && m.contains("SIGTERM"), "{m}");
    }

    #[test]
    fn not_leader_carries_the_leader_address() {
        let status = to_status(RequestError::NotLeader {
            leader: Some((NodeId(2), "127.0.0.1:7002".into())),
        });
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(
            status.metadata().get(seqsvr_proto::LEADER_ADDR_METADATA).unwrap(),
            "127.0.0.1:7002"
        );
        assert_eq!(status.metadata().get(seqsvr_proto::LEADER_ID_METADATA).unwrap(), "2");
    }
}
