//! gRPC services of a StoreSvr member: `StoreService` (leader only), `RaftTransport` (peers) and
//! `StoreAdmin` (every member). Wire types are converted here and nowhere else, and every
//! [`RequestError`] becomes a `tonic::Status` in [`to_status`].

use crate::driver::{DriverHandle, RequestError};
use protobuf::Message as _;
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{validate_advance, validate_read};
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
    pub max_batch_sections: usize,
    /// Longest a call waits for commit or read; a shorter `grpc-timeout` from the caller wins.
    pub request_timeout: Duration,
}

impl ServiceContext {
    fn wait_for<T>(&self, request: &Request<T>) -> Duration {
        let caller = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        match caller {
            // Answer a little before the caller's deadline, so it sees our UNAVAILABLE rather
            // than its own DEADLINE_EXCEEDED.
            Some(d) => self.request_timeout.min(d.mul_f64(0.9)),
            None => self.request_timeout,
        }
    }
}

/// Parses the gRPC wire format of a timeout: up to 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
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
        RequestError::Invalid(why) => Status::invalid_argument(why),
    }
}

#[tonic::async_trait]
impl pb::store_service_server::StoreService for ServiceContext {
    async fn advance_max_seq(
        &self,
        request: Request<pb::AdvanceMaxSeqRequest>,
    ) -> Result<Response<pb::AdvanceMaxSeqResponse>, Status> {
        let wait = self.wait_for(&request);
        let sections: Vec<(SectionId, u64)> = request
            .into_inner()
            .sections
            .iter()
            .map(|s| (SectionId(s.section), s.max_seq))
            .collect();
        validate_advance(self.sections, self.max_batch_sections, &sections)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let done = self.driver.advance(sections, wait).await.map_err(to_status)?;
        Ok(Response::new(pb::AdvanceMaxSeqResponse {
            sections: done
                .sections
                .iter()
                .map(|&(s, v)| pb::SectionMaxSeq { section: s.0, max_seq: v })
                .collect(),
            applied_index: done.applied_index,
        }))
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
            sections: done
                .sections
                .iter()
                .map(|&(s, v)| pb::SectionMaxSeq { section: s.0, max_seq: v })
                .collect(),
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
        let batch = request.into_inner();
        if batch.set_id != self.set_id.0 {
            return Err(Status::failed_precondition(format!(
                "raft messages for set {} reached member {} of set {}: check the cluster config",
                batch.set_id, self.node_id, self.set_id
            )));
        }
        let mut messages = Vec::with_capacity(batch.messages.len());
        for bytes in &batch.messages {
            let m = raft::eraftpb::Message::parse_from_bytes(bytes)
                .map_err(|e| Status::invalid_argument(format!("undecodable raft message: {e}")))?;
            messages.push(m);
        }
        self.driver.step(messages).await.map_err(to_status)?;
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
        let leader_addr = self
            .members
            .iter()
            .find(|(id, _)| id.0 == s.leader_id)
            .map(|(_, a)| a.clone())
            .unwrap_or_default();
        Ok(Response::new(pb::StoreStatusResponse {
            set_id: self.set_id.0,
            id: self.node_id.0,
            addr: self.addr.clone(),
            role: s.role,
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
            sections: done
                .sections
                .iter()
                .map(|&(s, v)| pb::SectionMaxSeq { section: s.0, max_seq: v })
                .collect(),
            read_index: done.read_index,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(parse_grpc_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout(""), None);
        assert_eq!(parse_grpc_timeout("10x"), None);
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
