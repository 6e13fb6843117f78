//! A client of one set's StoreSvr Raft group. Callers name the members once; the client keeps a
//! guess of the leader, follows the leader hint a non-leader returns (`seqsvr-leader-addr`) at
//! once, a few times in a row, and retries UNAVAILABLE with jittered, capped exponential backoff
//! until the caller's deadline (the policy of [`crate::retry`]). Every status that is not
//! [`retryable`] is returned at once: it will not get better by retrying.

use crate::retry::{retryable, RetryPolicy};
use seqsvr_core::ids::{AllocId, LeaseEpoch, NodeId, SectionId, Seq, SetId};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::SectionAdvance;
use seqsvr_proto::v1::store_admin_client::StoreAdminClient;
use seqsvr_proto::v1::store_service_client::StoreServiceClient;
use seqsvr_proto::v1::{self as pb};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;
use tonic::Status;

/// One attempt never waits longer than this, so a member that accepts TCP but never answers
/// (SIGSTOP, a hung disk) cannot eat the whole deadline: the next attempt tries another member.
const ATTEMPT_TIMEOUT_MAX: Duration = Duration::from_millis(1500);
/// ... and never less than this, so a slow but healthy leader still gets a fair chance.
const ATTEMPT_TIMEOUT_MIN: Duration = Duration::from_millis(150);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// An HTTP/2 PING this often while calls or streams are open on a channel, and the connection
/// is given up if one is not answered within `KEEPALIVE_TIMEOUT`: a peer that vanished without
/// a reset (host lost, cable cut) is found in well under a minute, not at TCP's ~15, even by a
/// `NextStream` that has nothing to send meanwhile.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection settings of every channel of the crate.
fn lazy(endpoint: tonic::transport::Endpoint) -> Channel {
    endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .connect_lazy()
}

/// Opens a lazy gRPC channel to `addr` (`host:port`); nothing is dialled until the first call.
pub fn channel(addr: &str) -> Result<Channel, Status> {
    channel_on(addr, crate::tls::Plane::Store)
}

/// [`channel`] for `plane`, as the process chose (`tls::set_process_tls` or
/// `tls::use_plaintext`; neither: FAILED_PRECONDITION).
pub fn channel_on(addr: &str, plane: crate::tls::Plane) -> Result<Channel, Status> {
    Ok(lazy(crate::tls::endpoint(addr, plane)?))
}

/// A lazy channel to the AllocSvr at `addr` (the client plane: its certificate must name it an
/// AllocSvr).
pub fn alloc_channel(addr: &str) -> Result<Channel, Status> {
    channel_on(addr, crate::tls::Plane::Client)
}

/// A lazy channel to the StoreSvr at `addr` (of `set` when known) as `identity` (`None`: the
/// process's own).
fn store_channel_as(
    addr: &str,
    set: Option<SetId>,
    identity: Option<&crate::tls::ClientTls>,
) -> Result<Channel, Status> {
    let plane = crate::tls::Plane::Store;
    let endpoint = match identity {
        Some(tls) => crate::tls::endpoint_with(addr, plane, set, Some(tls))?,
        None => crate::tls::endpoint_for(addr, plane, set)?,
    };
    Ok(lazy(endpoint))
}

/// A `StoreService` client with the service's message size limits
/// (`seqsvr_proto::STORE_REQUEST_MAX_BYTES` out, `REPLY_MAX_BYTES` in).
fn store_client(channel: Channel) -> StoreServiceClient<Channel> {
    StoreServiceClient::new(channel)
        .max_encoding_message_size(seqsvr_proto::STORE_REQUEST_MAX_BYTES)
        .max_decoding_message_size(seqsvr_proto::REPLY_MAX_BYTES)
}

/// A `StoreAdmin` client with the same limits as [`store_client`].
pub fn admin_client(channel: Channel) -> StoreAdminClient<Channel> {
    StoreAdminClient::new(channel)
        .max_encoding_message_size(seqsvr_proto::STORE_REQUEST_MAX_BYTES)
        .max_decoding_message_size(seqsvr_proto::REPLY_MAX_BYTES)
}

/// Asks one member for its own Raft status.
pub async fn member_status(
    addr: &str,
    timeout: Duration,
) -> Result<pb::StoreStatusResponse, Status> {
    let mut client = admin_client(channel(addr)?);
    let mut request = tonic::Request::new(pb::StoreStatusRequest {});
    request.set_timeout(timeout);
    match tokio::time::timeout(timeout, client.status(request)).await {
        Ok(result) => result.map(|r| r.into_inner()),
        Err(_) => {
            Err(Status::deadline_exceeded(format!("{addr} did not answer within {timeout:?}")))
        }
    }
}

struct Member {
    id: NodeId,
    addr: String,
    channel: Channel,
}

pub struct StoreClient {
    /// The members named at creation, plus any leader a redirect named that was not among them
    /// (a member added after the cluster file was written). Only grows.
    members: Mutex<Vec<Member>>,
    /// Index into `members` of the presumed leader.
    leader: Mutex<usize>,
    /// The identity every channel presents when not the process's own.
    identity: Option<crate::tls::ClientTls>,
    /// The set when known (only its members' certificates are accepted).
    set: Option<SetId>,
    /// The process identity's generation the channels were built under (`tls::generation`):
    /// a rotated certificate gets new channels.
    tls_generation: std::sync::atomic::AtomicU64,
}

impl StoreClient {
    /// Over TLS, any set's StoreSvr certificate is accepted: prefer [`StoreClient::for_set`].
    pub fn new(members: &[(NodeId, String)]) -> Result<StoreClient, Status> {
        StoreClient::new_as(members, None, None)
    }

    /// A client of set `set`'s members: over TLS only that set's StoreSvr certificates are
    /// accepted (`store-<set>.<server_name>`).
    pub fn for_set(set: SetId, members: &[(NodeId, String)]) -> Result<StoreClient, Status> {
        StoreClient::new_as(members, Some(set), None)
    }

    /// [`StoreClient::for_set`] (or [`StoreClient::new`] without a set) presenting `identity`
    /// instead of the process's identity.
    pub fn new_as(
        members: &[(NodeId, String)],
        set: Option<SetId>,
        identity: Option<crate::tls::ClientTls>,
    ) -> Result<StoreClient, Status> {
        if members.is_empty() {
            return Err(Status::invalid_argument(
                "a store client needs at least one member address",
            ));
        }
        let members = members
            .iter()
            .map(|(id, addr)| {
                let channel = store_channel_as(addr, set, identity.as_ref())?;
                Ok(Member { id: *id, addr: addr.clone(), channel })
            })
            .collect::<Result<Vec<_>, Status>>()?;
        Ok(StoreClient {
            members: Mutex::new(members),
            leader: Mutex::new(0),
            identity,
            set,
            tls_generation: std::sync::atomic::AtomicU64::new(crate::tls::generation()),
        })
    }

    /// The member currently presumed to lead.
    pub fn leader_guess(&self) -> NodeId {
        let index = self.leader_index();
        self.members.lock().unwrap_or_else(|e| e.into_inner())[index].id
    }

    /// `(id, addr, channel)` of member `index` (taken modulo the member count).
    fn member(&self, index: usize) -> (NodeId, String, Channel) {
        self.follow_rotation();
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let m = &members[index % members.len()];
        (m.id, m.addr.clone(), m.channel.clone())
    }

    /// New channels once the process's certificate rotated (calls running on the old ones
    /// finish there). A client with an identity of its own keeps it.
    fn follow_rotation(&self) {
        use std::sync::atomic::Ordering;
        if self.identity.is_some() {
            return;
        }
        let now = crate::tls::generation();
        if self.tls_generation.swap(now, Ordering::Relaxed) == now {
            return;
        }
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        for m in members.iter_mut() {
            if let Ok(channel) = store_channel_as(&m.addr, self.set, None) {
                m.channel = channel;
            }
        }
    }

    fn n_members(&self) -> usize {
        self.members.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The index of the member at `addr`, adding it when a redirect named a leader we did not
    /// know (a member added after the cluster file was written).
    fn member_at(&self, id: Option<NodeId>, addr: &str) -> Option<usize> {
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        // A member we know by id keeps our own address for it (the redirecting member's view
        // may differ: a proxy in tests, another network in production).
        let by_id = id.filter(|i| i.0 != 0).and_then(|i| members.iter().position(|m| m.id == i));
        if let Some(i) = by_id.or_else(|| members.iter().position(|m| m.addr == addr)) {
            return Some(i);
        }
        let channel = store_channel_as(addr, self.set, self.identity.as_ref()).ok()?;
        members.push(Member { id: id.unwrap_or(NodeId(0)), addr: addr.to_string(), channel });
        Some(members.len() - 1)
    }

    fn leader_index(&self) -> usize {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_leader(&self, index: usize) {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = index;
    }

    /// An operator raise of sections' `max_seq` (one Raft proposal, unfenced); returns the
    /// committed values.
    pub async fn advance(
        &self,
        sections: &[(SectionId, u64)],
        deadline: Duration,
    ) -> Result<Vec<(SectionId, u64)>, Status> {
        let sections: Vec<SectionAdvance> = sections
            .iter()
            .map(|&(section, max_seq)| SectionAdvance {
                section,
                max_seq: Seq(max_seq),
                lease_epoch: LeaseEpoch(0),
            })
            .collect();
        self.advance_as(None, &sections, deadline).await
    }

    /// Raises sections' `max_seq` as AllocSvr `alloc` (fenced by the lease epochs when `Some`).
    pub async fn advance_as(
        &self,
        alloc: Option<AllocId>,
        sections: &[SectionAdvance],
        deadline: Duration,
    ) -> Result<Vec<(SectionId, u64)>, Status> {
        self.advance_traced(alloc, sections, deadline, None).await
    }

    /// [`StoreClient::advance_as`], sending `request_id` as `x-request-id` (the call that
    /// waited for this advance), so the store's log lines about it carry the same id.
    pub async fn advance_traced(
        &self,
        alloc: Option<AllocId>,
        sections: &[SectionAdvance],
        deadline: Duration,
        request_id: Option<&str>,
    ) -> Result<Vec<(SectionId, u64)>, Status> {
        let request_id = request_id.and_then(|id| id.parse::<MetadataValue<Ascii>>().ok());
        let request = pb::AdvanceMaxSeqRequest {
            sections: sections
                .iter()
                .map(|a| pb::SectionMaxSeq {
                    section: a.section.0,
                    max_seq: a.max_seq.0,
                    lease_epoch: a.lease_epoch.0,
                })
                .collect(),
            alloc_id: alloc.map_or(0, |a| a.0),
        };
        let reply = self
            .call(deadline, |channel, timeout| {
                let mut req = tonic::Request::new(request.clone());
                req.set_timeout(timeout);
                if let Some(id) = &request_id {
                    req.metadata_mut().insert(seqsvr_proto::REQUEST_ID_METADATA, id.clone());
                }
                async move { store_client(channel).advance_max_seq(req).await }
            })
            .await?;
        Ok(reply.sections.iter().map(|s| (SectionId(s.section), s.max_seq)).collect())
    }

    /// Linearizable read of every advanced section in `range`.
    pub async fn load(
        &self,
        range: SectionRange,
        deadline: Duration,
    ) -> Result<BTreeMap<SectionId, u64>, Status> {
        let request =
            pb::LoadSectionsRequest { section_begin: range.begin().0, section_end: range.end().0 };
        let reply = self
            .call(deadline, |channel, timeout| {
                let mut req = tonic::Request::new(request);
                req.set_timeout(timeout);
                async move { store_client(channel).load_sections(req).await }
            })
            .await?;
        Ok(reply.sections.iter().map(|s| (SectionId(s.section), s.max_seq)).collect())
    }

    /// Registers a new AllocSvr incarnation reachable at `addr`.
    pub async fn register(
        &self,
        addr: &str,
        deadline: Duration,
    ) -> Result<pb::RegisterAllocResponse, Status> {
        let request = pb::RegisterAllocRequest { addr: addr.to_string() };
        self.call(deadline, |channel, timeout| {
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(timeout);
            async move { store_client(channel).register_alloc(req).await }
        })
        .await
    }

    /// Renews AllocSvr `alloc`'s lease. The caller must take the lease as starting when it
    /// called this (the first attempt's send time), never later.
    pub async fn heartbeat(
        &self,
        alloc: AllocId,
        route_version: u64,
        deadline: Duration,
    ) -> Result<pb::HeartbeatResponse, Status> {
        let request = pb::HeartbeatRequest { alloc_id: alloc.0, route_version };
        self.call(deadline, |channel, timeout| {
            let mut req = tonic::Request::new(request);
            req.set_timeout(timeout);
            async move { store_client(channel).heartbeat(req).await }
        })
        .await
    }

    /// Hands `alloc`'s sections back on a graceful shutdown: it must already have stopped
    /// serving (see `StoreService.ReleaseAlloc`).
    pub async fn release(&self, alloc: AllocId, deadline: Duration) -> Result<(), Status> {
        let request = pb::ReleaseAllocRequest { alloc_id: alloc.0 };
        self.call(deadline, |channel, timeout| {
            let mut req = tonic::Request::new(request);
            req.set_timeout(timeout);
            async move { store_client(channel).release_alloc(req).await }
        })
        .await
        .map(|_| ())
    }

    /// Leases a worker id of id scheme `scheme` for the registration `alloc` (the one it holds
    /// already, if any): `(worker id, high-water mark in Unix ms)`.
    pub async fn acquire_worker(
        &self,
        alloc: AllocId,
        scheme: &str,
        layout: &str,
        deadline: Duration,
    ) -> Result<(u64, u64), Status> {
        let request = pb::AcquireWorkerRequest {
            alloc_id: alloc.0,
            scheme: scheme.to_string(),
            layout: layout.to_string(),
        };
        self.call(deadline, |channel, timeout| {
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(timeout);
            async move { store_client(channel).acquire_worker(req).await }
        })
        .await
        .map(|r| (r.worker_id, r.high_water_ms))
    }

    /// Raises the high-water mark of a worker id `alloc` holds to at least `up_to_ms`; answers
    /// the mark now (FAILED_PRECONDITION "NOT_HOLDER" if `alloc` no longer holds it).
    pub async fn reserve_time(
        &self,
        alloc: AllocId,
        scheme: &str,
        worker: u64,
        up_to_ms: u64,
        layout: &str,
        deadline: Duration,
    ) -> Result<u64, Status> {
        let request = pb::ReserveTimeRequest {
            alloc_id: alloc.0,
            scheme: scheme.to_string(),
            worker_id: worker,
            up_to_ms,
            layout: layout.to_string(),
        };
        self.call(deadline, |channel, timeout| {
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(timeout);
            async move { store_client(channel).reserve_time(req).await }
        })
        .await
        .map(|r| r.high_water_ms)
    }

    /// Raises the session time mark of `rongcloud` scheme `scheme` for `section`, as its owner
    /// at `lease_epoch`, to at least `up_to_ms`; answers the mark (before, after). A fenced
    /// reservation (not the owner) is FAILED_PRECONDITION.
    #[allow(clippy::too_many_arguments)]
    pub async fn reserve_session_time(
        &self,
        alloc: AllocId,
        scheme: &str,
        layout: &str,
        section: SectionId,
        lease_epoch: LeaseEpoch,
        up_to_ms: u64,
        deadline: Duration,
    ) -> Result<(u64, u64), Status> {
        let request = pb::ReserveSessionTimeRequest {
            alloc_id: alloc.0,
            scheme: scheme.to_string(),
            layout: layout.to_string(),
            section: section.0,
            lease_epoch: lease_epoch.0,
            up_to_ms,
        };
        self.call(deadline, |channel, timeout| {
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(timeout);
            async move { store_client(channel).reserve_session_time(req).await }
        })
        .await
        .map(|r| (r.before_ms, r.after_ms))
    }

    /// Calls the leader's admin service (leases, route, move, drain), following redirects.
    pub async fn admin<T, F, Fut>(&self, deadline: Duration, attempt: F) -> Result<T, Status>
    where
        F: Fn(StoreAdminClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.call(deadline, |channel, timeout| attempt(admin_client(channel), timeout)).await
    }

    /// Linearizable read of sections' committed `max_seq` (0 = never advanced).
    pub async fn get(
        &self,
        sections: &[SectionId],
        deadline: Duration,
    ) -> Result<Vec<(SectionId, u64)>, Status> {
        let request = pb::GetMaxSeqRequest { sections: sections.iter().map(|s| s.0).collect() };
        let reply = self
            .call(deadline, |channel, timeout| {
                let mut req = tonic::Request::new(request.clone());
                req.set_timeout(timeout);
                async move { store_client(channel).get_max_seq(req).await }
            })
            .await?;
        Ok(reply.sections.iter().map(|s| (SectionId(s.section), s.max_seq)).collect())
    }

    /// Adds member `id` at `addr` as a learner (answered once the change applied).
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: &str,
        deadline: Duration,
    ) -> Result<pb::MembershipResponse, Status> {
        let request = pb::AddLearnerRequest { node_id: id.0, addr: addr.to_string() };
        self.admin(deadline, |mut client, timeout| {
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(timeout);
            async move { client.add_learner(req).await }
        })
        .await
    }

    /// Promotes learner `id` to voter; refused until it has caught up.
    pub async fn promote(
        &self,
        id: NodeId,
        deadline: Duration,
    ) -> Result<pb::MembershipResponse, Status> {
        let request = pb::PromoteLearnerRequest { node_id: id.0 };
        self.admin(deadline, |mut client, timeout| {
            let mut req = tonic::Request::new(request);
            req.set_timeout(timeout);
            async move { client.promote_learner(req).await }
        })
        .await
    }

    /// Removes member `id` (a voter or a learner); the leader hands over leadership first when
    /// it is the one removed.
    pub async fn remove(
        &self,
        id: NodeId,
        deadline: Duration,
    ) -> Result<pb::MembershipResponse, Status> {
        let request = pb::RemoveMemberRequest { node_id: id.0 };
        self.admin(deadline, |mut client, timeout| {
            let mut req = tonic::Request::new(request);
            req.set_timeout(timeout);
            async move { client.remove_member(req).await }
        })
        .await
    }

    /// Asks the leader to hand leadership to voter `target` (returns once asked, not once done).
    pub async fn transfer_leader(&self, target: NodeId, deadline: Duration) -> Result<(), Status> {
        let request = pb::TransferLeaderRequest { target_id: target.0 };
        self.admin(deadline, |mut client, timeout| {
            let mut req = tonic::Request::new(request);
            req.set_timeout(timeout);
            async move { client.transfer_leader(req).await }
        })
        .await
        .map(|_| ())
    }

    /// Changes the replicated lease timing.
    pub async fn set_lease(
        &self,
        lease_ms: u64,
        lease_margin_ms: u64,
        deadline: Duration,
    ) -> Result<pb::SetLeaseResponse, Status> {
        let request = pb::SetLeaseRequest { lease_ms, lease_margin_ms };
        self.admin(deadline, |mut client, timeout| {
            let mut req = tonic::Request::new(request);
            req.set_timeout(timeout);
            async move { client.set_lease(req).await }
        })
        .await
    }

    async fn call<T, F, Fut>(&self, deadline: Duration, attempt: F) -> Result<T, Status>
    where
        F: Fn(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let until = Instant::now() + deadline;
        let mut backoff = RetryPolicy::STANDARD.backoff();
        let mut target = self.leader_index();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Status::deadline_exceeded(
                    "store call deadline passed before any attempt",
                ));
            }
            // Leave room for the other members when this one hangs.
            let n = self.n_members() as u32;
            let timeout =
                (left / n.max(2)).clamp(ATTEMPT_TIMEOUT_MIN, ATTEMPT_TIMEOUT_MAX).min(left);
            let (id, addr, channel) = self.member(target);
            let result = match tokio::time::timeout(timeout, attempt(channel, timeout)).await {
                Ok(r) => r,
                Err(_) => Err(Status::unavailable(format!(
                    "member {id} at {addr} did not answer within {timeout:?}"
                ))),
            };
            let status = match result {
                Ok(response) => {
                    self.set_leader(target);
                    return Ok(response.into_inner());
                }
                Err(status) if retryable(status.code()) => status,
                Err(status) => return Err(status),
            };
            let hinted_id = status
                .metadata()
                .get(seqsvr_proto::LEADER_ID_METADATA)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .map(NodeId);
            let hinted = status
                .metadata()
                .get(seqsvr_proto::LEADER_ADDR_METADATA)
                .and_then(|v| v.to_str().ok())
                .and_then(|addr| self.member_at(hinted_id, addr));
            match hinted {
                Some(next) if next != target => {
                    target = next;
                    // Follow the redirect at once, a few times in a row; then back off before
                    // asking the hinted member (two members naming each other is a loop).
                    if backoff.redirect() {
                        continue;
                    }
                }
                _ => {
                    // Move the guess on too, so later calls do not start at a member that
                    // hangs (a caller whose deadline fits one attempt would never get past it).
                    target = (target + 1) % self.n_members();
                    self.set_leader(target);
                }
            }
            if !backoff.wait(until).await {
                return Err(status);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::store_service_server::{StoreService, StoreServiceServer};
    use tonic::{Request, Response};

    /// A leader that answers reads with section = max_seq; everything else is unimplemented.
    struct Leader;

    #[tonic::async_trait]
    impl StoreService for Leader {
        async fn advance_max_seq(
            &self,
            _: Request<pb::AdvanceMaxSeqRequest>,
        ) -> Result<Response<pb::AdvanceMaxSeqResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn get_max_seq(
            &self,
            request: Request<pb::GetMaxSeqRequest>,
        ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
            let sections = request
                .into_inner()
                .sections
                .into_iter()
                .map(|s| pb::SectionMaxSeq { section: s, max_seq: s, lease_epoch: 0 })
                .collect();
            Ok(Response::new(pb::GetMaxSeqResponse { sections, read_index: 1 }))
        }
        async fn load_sections(
            &self,
            _: Request<pb::LoadSectionsRequest>,
        ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn register_alloc(
            &self,
            _: Request<pb::RegisterAllocRequest>,
        ) -> Result<Response<pb::RegisterAllocResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn heartbeat(
            &self,
            _: Request<pb::HeartbeatRequest>,
        ) -> Result<Response<pb::HeartbeatResponse>, Status> {
            Err(Status::unimplemented("test"))
        }

        async fn release_alloc(
            &self,
            _: Request<pb::ReleaseAllocRequest>,
        ) -> Result<Response<pb::ReleaseAllocResponse>, Status> {
            Err(Status::unimplemented("test"))
        }

        async fn acquire_worker(
            &self,
            _: Request<pb::AcquireWorkerRequest>,
        ) -> Result<Response<pb::AcquireWorkerResponse>, Status> {
            Err(Status::unimplemented("test"))
        }

        async fn reserve_time(
            &self,
            _: Request<pb::ReserveTimeRequest>,
        ) -> Result<Response<pb::ReserveTimeResponse>, Status> {
            Err(Status::unimplemented("test"))
        }

        async fn reserve_session_time(
            &self,
            _: Request<pb::ReserveSessionTimeRequest>,
        ) -> Result<Response<pb::ReserveSessionTimeResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
    }

    /// A member that accepts TCP and reads nothing, as a SIGSTOPped process does.
    async fn hung_member() -> (String, tokio::net::TcpListener) {
        crate::tls::use_plaintext(); // the fakes serve plaintext
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        (listener.local_addr().unwrap().to_string(), listener)
    }

    async fn leader() -> String {
        crate::tls::use_plaintext(); // the fakes serve plaintext
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(StoreServiceServer::new(Leader))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        addr
    }

    /// Seen in review: with member 1 SIGSTOPped and the leader on member 2, a call with a 3 s
    /// deadline spent it all on member 1 and failed although 2 served.
    #[tokio::test]
    async fn a_hung_member_does_not_eat_the_deadline_and_the_leader_is_remembered() {
        let (hung, _keep_open) = hung_member().await;
        let good = leader().await;
        let client = StoreClient::new(&[(NodeId(1), hung), (NodeId(2), good)]).unwrap();
        let got = client.get(&[SectionId(7)], Duration::from_secs(3)).await;
        assert_eq!(got.unwrap(), vec![(SectionId(7), 7)]);
        assert_eq!(client.leader_guess(), NodeId(2), "the member that answered is remembered");
        // The next call goes straight to it: a deadline shorter than one attempt on the hung
        // member still succeeds.
        let got = client.get(&[SectionId(8)], Duration::from_millis(250)).await;
        assert_eq!(got.unwrap(), vec![(SectionId(8), 8)]);
    }

    /// A member that is not the leader and names another one (`leader`) as the leader, the way
    /// `storesvr::service::to_status` does.
    struct NotLeader {
        leader: Mutex<(u64, String)>,
        calls: std::sync::atomic::AtomicU64,
    }

    impl NotLeader {
        fn redirect<T>(&self) -> Result<Response<T>, Status> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (id, addr) = self.leader.lock().unwrap().clone();
            let mut status = Status::unavailable(format!("not the leader: ask {id} at {addr}"));
            status.metadata_mut().insert(seqsvr_proto::LEADER_ID_METADATA, id.into());
            status.metadata_mut().insert(seqsvr_proto::LEADER_ADDR_METADATA, addr.parse().unwrap());
            Err(status)
        }
    }

    struct NotLeaderHandle(std::sync::Arc<NotLeader>);

    #[tonic::async_trait]
    impl StoreService for NotLeaderHandle {
        async fn advance_max_seq(
            &self,
            _: Request<pb::AdvanceMaxSeqRequest>,
        ) -> Result<Response<pb::AdvanceMaxSeqResponse>, Status> {
            self.0.redirect()
        }
        async fn get_max_seq(
            &self,
            _: Request<pb::GetMaxSeqRequest>,
        ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
            self.0.redirect()
        }
        async fn load_sections(
            &self,
            _: Request<pb::LoadSectionsRequest>,
        ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
            self.0.redirect()
        }
        async fn register_alloc(
            &self,
            _: Request<pb::RegisterAllocRequest>,
        ) -> Result<Response<pb::RegisterAllocResponse>, Status> {
            self.0.redirect()
        }
        async fn heartbeat(
            &self,
            _: Request<pb::HeartbeatRequest>,
        ) -> Result<Response<pb::HeartbeatResponse>, Status> {
            self.0.redirect()
        }
        async fn release_alloc(
            &self,
            _: Request<pb::ReleaseAllocRequest>,
        ) -> Result<Response<pb::ReleaseAllocResponse>, Status> {
            self.0.redirect()
        }

        async fn acquire_worker(
            &self,
            _: Request<pb::AcquireWorkerRequest>,
        ) -> Result<Response<pb::AcquireWorkerResponse>, Status> {
            self.0.redirect()
        }

        async fn reserve_time(
            &self,
            _: Request<pb::ReserveTimeRequest>,
        ) -> Result<Response<pb::ReserveTimeResponse>, Status> {
            self.0.redirect()
        }

        async fn reserve_session_time(
            &self,
            _: Request<pb::ReserveSessionTimeRequest>,
        ) -> Result<Response<pb::ReserveSessionTimeResponse>, Status> {
            self.0.redirect()
        }
    }

    /// Two members that each name the other as the leader (stale views during an election).
    /// The client used to follow such redirects at once without a limit: it bounced between
    /// them as fast as the loopback answered until the deadline. Now it follows a few in a
    /// row, backs off, and returns the last NOT_LEADER within the deadline after a bounded
    /// number of RPCs.
    #[tokio::test]
    async fn two_members_naming_each_other_end_within_the_deadline() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let members: Vec<std::sync::Arc<NotLeader>> = (0..2)
            .map(|_| {
                std::sync::Arc::new(NotLeader {
                    leader: Mutex::new((0, String::new())),
                    calls: AtomicU64::new(0),
                })
            })
            .collect();
        let mut addrs = Vec::new();
        crate::tls::use_plaintext(); // the fakes serve plaintext
        for m in &members {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(listener.local_addr().unwrap().to_string());
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(StoreServiceServer::new(NotLeaderHandle(m.clone())))
                    .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
            );
        }
        *members[0].leader.lock().unwrap() = (2, addrs[1].clone());
        *members[1].leader.lock().unwrap() = (1, addrs[0].clone());
        let client =
            StoreClient::new(&[(NodeId(1), addrs[0].clone()), (NodeId(2), addrs[1].clone())])
                .unwrap();
        let deadline = Duration::from_millis(400);
        let started = Instant::now();
        let status = client.get(&[SectionId(1)], deadline).await.unwrap_err();
        let elapsed = started.elapsed();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(status.message().contains("not the leader"), "the last real error: {status:?}");
        assert!(elapsed < deadline + Duration::from_millis(100), "{elapsed:?}");
        let calls: u64 = members.iter().map(|m| m.calls.load(Ordering::SeqCst)).sum();
        // Rounds of one attempt and at most 4 redirects, separated by back-offs of at least
        // 10, 20, 40, 80, 160 ms: at most 6 rounds in 400 ms.
        assert!((5..=30).contains(&calls), "{calls} RPCs in {elapsed:?}");
        assert!(members.iter().all(|m| m.calls.load(Ordering::SeqCst) >= 2), "both were asked");
    }
}
