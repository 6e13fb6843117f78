//! Globally unique, time-ordered ids (issue 10): the AllocSvr's `IdService`.
//!
//! Each id scheme with worker ids (`snowflake`, `uid-generator`, `weibo`, `uuidv7`) is served
//! under a **worker id leased from the set's store** (`AcquireWorker`) for as long as this
//! AllocSvr's registration holds its lease: heartbeats list the worker ids held, and the store's
//! arbiter frees one only once its holder's lease must be over. The per-worker state machine is
//! pure (`seqsvr_core::idscheme::Generator`); `workers.rs` feeds it the wall clock and keeps the
//! worker's **high-water mark** in the store ahead of what it issues (`ReserveTime`), so:
//!
//! - a new holder of a worker id (after a restart, a failover, with the clock set back) starts
//!   strictly above every time an earlier holder may have used: no id is issued twice;
//! - while running, a clock that steps back never makes the issued time go back: the generator
//!   keeps issuing in the last unit, borrows later units up to `ids.max_ahead_ms` ahead of the
//!   clock and never above the reserved mark, then waits (counted, logged);
//! - ids are issued only under the same lease check as sequence numbers (`Inner::lease_valid`),
//!   so one worker id's ids strictly increase in real time across holders.
//!
//! Everything that issues runs under the AllocSvr's one state lock (`state::Inner`), so the
//! graceful stop (`lease::hand_back` sets `stopping` under it) ends issuing before the
//! registration is released.
//!
//! # Layout
//! - this file: the [`IdServer`] and its RPCs: `NextIds` (the checks of every request, then
//!   the issuer of the scheme) and `Decode`;
//! - `workers.rs`: issuing under a leased worker id (lease, high-water reservations, the
//!   generator fed the wall clock);
//! - `sessions.rs`: `rongcloud` ids, issued by the owner of each session's section under a time
//!   mark reserved per section;
//! - `clock.rs`: what both issuers share: waiting for the clock, clock-back events, a layout run
//!   out, the back-off after a failed reservation.
//!
//! The slots they issue from (the worker id per scheme, the section slots of `rongcloud`) are
//! state under the lock: `state/id_slots.rs`. Errors are `rpc::AllocError`s, made statuses by
//! `rpc::to_status` in the RPCs here.

mod clock;
mod sessions;
mod workers;

use crate::config::SchemeSetup;
use crate::rpc::{call_deadline, to_status, AllocError};
use crate::state::Shared;
use seqsvr_core::idscheme::Scheme;
use seqsvr_proto::v1 as pb;
use std::sync::Arc;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

/// The `IdService` of one AllocSvr.
pub struct IdServer {
    pub shared: Arc<Shared>,
}

impl IdServer {
    fn setup(&self, name: &str) -> Result<&SchemeSetup, AllocError> {
        let ids = &self.shared.ids;
        ids.schemes.get(name).ok_or_else(|| {
            let known = ids.schemes.keys().cloned().collect();
            AllocError::UnknownScheme { name: name.to_string(), known }
        })
    }
}

impl IdServer {
    /// `NextIds` up to its answer: the request's checks, then the scheme's issuer.
    async fn answer_next_ids(
        &self,
        request: Request<pb::NextIdsRequest>,
    ) -> Result<pb::NextIdsResponse, AllocError> {
        let deadline = call_deadline(&request, self.shared.config.tuning.request_timeout_ms);
        let r = request.into_inner();
        let setup = self.setup(&r.scheme)?;
        let layout = &setup.layout;
        let max = self.shared.ids.max_count;
        if r.count == 0 || r.count > max {
            return Err(AllocError::BadCount { count: r.count, max });
        }
        layout
            .usable_at(seqsvr_server::clock::unix_ms_now())
            .map_err(|error| AllocError::SchemeUnusable { name: r.scheme.clone(), error })?;
        let left_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64;
        let reachable = setup.ids_within(left_ms);
        if u64::from(r.count) > reachable {
            return Err(AllocError::CountUnreachable {
                count: r.count,
                name: r.scheme.clone(),
                left_ms,
                reachable,
                per_unit: layout.max_sequence().saturating_add(1),
            });
        }
        if layout.scheme() == Scheme::RongCloud {
            let (session_uid, out) = sessions::next_ids(&self.shared, &r, setup, deadline).await?;
            self.shared.metrics.ids_issued.increment(out.len() as u64);
            let mut response = pb::NextIdsResponse { session_uid, ..Default::default() };
            seqsvr_proto::put_ids128(&mut response, &out, r.packed_ids128);
            return Ok(response);
        }
        if r.session_type != 0 || !r.session_id.is_empty() || r.session_hash.is_some() {
            return Err(AllocError::NoSessionFields { name: r.scheme.clone() });
        }
        let business_max = layout.max_value(seqsvr_core::idscheme::Part::Business);
        if r.business > business_max {
            return Err(if business_max == 0 {
                AllocError::NoBusiness { name: r.scheme.clone() }
            } else {
                AllocError::BusinessTooLarge { business: r.business, max: business_max }
            });
        }
        let want = r.count as usize;
        let (worker_id, out) =
            workers::next_ids(&self.shared, &r.scheme, setup, r.business, want, deadline).await?;
        self.shared.metrics.ids_issued.increment(out.len() as u64);
        let mut response = pb::NextIdsResponse { worker_id, ..Default::default() };
        if layout.scheme().id_bits() <= 64 {
            seqsvr_proto::put_ids64(&mut response, out.iter().map(|&id| id as u64), r.packed_ids64);
        } else {
            seqsvr_proto::put_ids128(&mut response, &out, r.packed_ids128);
        }
        Ok(response)
    }

    /// `Decode`: the fields of an id (or of its text) of a scheme.
    fn answer_decode(&self, r: pb::DecodeIdRequest) -> Result<pb::DecodeIdResponse, AllocError> {
        let layout = &self.setup(&r.scheme)?.layout;
        let invalid = |e: &dyn std::fmt::Display| AllocError::InvalidId(e.to_string());
        let id = if r.text.is_empty() {
            u128::from(r.id)
        } else {
            layout.parse(&r.text).map_err(|e| invalid(&e))?
        };
        // The same fields and text the SDK's pure decode gives, so both answers agree.
        let decoded = seqsvr_client::ids::decode_id(layout, id).map_err(|e| invalid(&e))?;
        Ok(decoded.to_response())
    }
}

#[tonic::async_trait]
impl pb::id_service_server::IdService for IdServer {
    async fn next_ids(
        &self,
        request: Request<pb::NextIdsRequest>,
    ) -> Result<Response<pb::NextIdsResponse>, Status> {
        self.answer_next_ids(request).await.map(Response::new).map_err(to_status)
    }

    async fn decode(
        &self,
        request: Request<pb::DecodeIdRequest>,
    ) -> Result<Response<pb::DecodeIdResponse>, Status> {
        self.answer_decode(request.into_inner()).map(Response::new).map_err(to_status)
    }
}
