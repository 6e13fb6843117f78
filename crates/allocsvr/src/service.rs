//! The public `SeqService`: the allocation path, top to bottom.
//!
//! uid → validate → lock → lease still valid? → `AllocTable::next_batch` → answer; or, when the
//! section is loading or waits for an advance, wake the advancer and wait (outside the lock)
//! until something changes or the deadline passes. Errors become gRPC statuses in `to_status`.

use crate::lease::{Inner, Shared};
use seqsvr_core::alloc::SeqError;
use seqsvr_core::ids::SectionId;
use seqsvr_proto::v1::{self as pb};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub struct SeqServer {
    pub shared: Arc<Shared>,
}

impl SeqServer {
    fn check_uids(&self, uids: &[u64]) -> Result<(), Status> {
        let c = &self.shared.config;
        if uids.is_empty() {
            return Err(Status::invalid_argument("empty batch: give at least one uid"));
        }
        if uids.len() > c.tuning.max_batch_uids {
            return Err(Status::invalid_argument(format!(
                "batch of {} uids exceeds the limit of {}",
                uids.len(),
                c.tuning.max_batch_uids
            )));
        }
        if let Some(uid) = uids.iter().find(|&&u| u < c.uid_begin || u >= c.uid_end) {
            return Err(Status::invalid_argument(format!(
                "uid {uid} is outside set {}'s uids [{}, {}): route it to its own set",
                c.set_id, c.uid_begin, c.uid_end
            )));
        }
        Ok(())
    }

    fn deadline<T>(&self, request: &Request<T>) -> Instant {
        let ours = Duration::from_millis(self.shared.config.tuning.request_timeout_ms);
        let theirs = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(seqsvr_proto::parse_grpc_timeout)
            .map(|d| d.mul_f64(0.9));
        Instant::now() + theirs.map_or(ours, |t| t.min(ours))
    }

    /// Runs `op` under the lock until it succeeds, fails for good, or the deadline passes. The
    /// common case answers on the first try and registers for no notification.
    async fn serve<T>(
        &self,
        deadline: Instant,
        route_version: u64,
        op: impl Fn(&mut Inner) -> Result<T, SeqError>,
    ) -> Result<(T, Option<pb::RouteTable>), Status> {
        if let Attempt::Done(result) = self.attempt(route_version, &op) {
            return result;
        }
        loop {
            // Register interest before looking again, so a change between the look and the
            // wait cannot be missed.
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let status = match self.attempt(route_version, &op) {
                Attempt::Done(result) => return result,
                Attempt::Wait(status) => status,
            };
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(status);
            }
        }
    }

    /// One look under the lock: an answer (value or final error), or why it has to wait.
    fn attempt<T>(
        &self,
        route_version: u64,
        op: &impl Fn(&mut Inner) -> Result<T, SeqError>,
    ) -> Attempt<T> {
        let mut inner = self.shared.lock();
        if !inner.lease_valid(Instant::now()) {
            return Attempt::Wait(Status::unavailable(
                "this AllocSvr holds no valid lease (store unreachable, or its registration is \
                 being renewed); retry, possibly at another AllocSvr",
            ));
        }
        match op(&mut inner) {
            Ok(v) => {
                if inner.table.has_wanted() {
                    // Prefetch: start the advance now, not at the advancer's next poll.
                    self.shared.wake_advancer.notify_one();
                }
                let route = (route_version < inner.route.version).then(|| inner.route.clone());
                Attempt::Done(Ok((v, route)))
            }
            Err(SeqError::NotOwned(section)) => {
                if inner.routed_here(section, inner.alloc_id) {
                    Attempt::Wait(Status::unavailable(format!(
                        "section {section} is being handed over to this AllocSvr; it serves once \
                         the previous owner's lease has run out"
                    )))
                } else {
                    Attempt::Done(Err(not_owner(section, &inner.route)))
                }
            }
            Err(SeqError::Loading(section)) => Attempt::Wait(Status::unavailable(format!(
                "section {section} is loading its max_seq from the store"
            ))),
            Err(SeqError::Exhausted(section)) => {
                self.shared.wake_advancer.notify_one();
                Attempt::Wait(Status::unavailable(format!(
                    "section {section} waits for the store to commit a higher max_seq (store \
                     slow or without quorum?)"
                )))
            }
        }
    }
}

/// What one look under the lock decided.
enum Attempt<T> {
    Done(Result<(T, Option<pb::RouteTable>), Status>),
    Wait(Status),
}

/// NOT_OWNER: FAILED_PRECONDITION with the current route table in binary metadata.
fn not_owner(section: SectionId, route: &pb::RouteTable) -> Status {
    use prost::Message as _;
    let owner = route
        .entries
        .iter()
        .find(|e| e.section_begin <= section.0 && section.0 < e.section_end)
        .map(|e| format!("alloc {} at {}", e.alloc_id, e.addr))
        .unwrap_or_else(|| "not assigned yet".into());
    let mut status = Status::failed_precondition(format!(
        "NOT_OWNER: section {section} is not served here (owner: {owner}, route table v{})",
        route.version
    ));
    let bytes = route.encode_to_vec();
    status.metadata_mut().insert_bin(
        seqsvr_proto::ROUTE_TABLE_METADATA,
        tonic::metadata::MetadataValue::from_bytes(&bytes),
    );
    status
}

#[tonic::async_trait]
impl pb::seq_service_server::SeqService for SeqServer {
    async fn next(
        &self,
        request: Request<pb::NextRequest>,
    ) -> Result<Response<pb::NextResponse>, Status> {
        let deadline = self.deadline(&request);
        let r = request.into_inner();
        self.check_uids(&[r.uid])?;
        let (seq, route_table) =
            self.serve(deadline, r.route_version, |inner| inner.table.next(r.uid)).await?;
        Ok(Response::new(pb::NextResponse { seq, route_table }))
    }

    async fn next_batch(
        &self,
        request: Request<pb::NextBatchRequest>,
    ) -> Result<Response<pb::NextBatchResponse>, Status> {
        let deadline = self.deadline(&request);
        let r = request.into_inner();
        self.check_uids(&r.uids)?;
        let (seqs, route_table) = if r.independent {
            self.serve(deadline, r.route_version, |inner| Ok(inner.table.next_each(&r.uids)))
                .await?
        } else {
            self.serve(deadline, r.route_version, |inner| inner.table.next_batch(&r.uids)).await?
        };
        Ok(Response::new(pb::NextBatchResponse { seqs, route_table }))
    }

    async fn current(
        &self,
        request: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentResponse>, Status> {
        let deadline = self.deadline(&request);
        let r = request.into_inner();
        self.check_uids(&[r.uid])?;
        let (seq, route_table) =
            self.serve(deadline, r.route_version, |inner| inner.table.current(r.uid)).await?;
        Ok(Response::new(pb::CurrentResponse { seq, route_table }))
    }

    async fn get_route_table(
        &self,
        _: Request<pb::GetRouteTableRequest>,
    ) -> Result<Response<pb::GetRouteTableResponse>, Status> {
        let route = self.shared.lock().route.clone();
        Ok(Response::new(pb::GetRouteTableResponse { route_table: Some(route) }))
    }
}
