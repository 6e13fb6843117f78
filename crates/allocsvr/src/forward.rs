//! Forwarding: a call for a uid (or a `rongcloud` session) that another AllocSvr owns goes to
//! that owner, and its answer comes back to the caller, so a plain gRPC client (or `curl`) with
//! one address gets every uid of the cluster served.
//!
//! - **One hop.** The hop is made with the SDK ([`seqsvr_client`]), which marks every call
//!   [`seqsvr_proto::NO_FORWARD_METADATA`]: the owner answers it itself, or NOT_OWNER when it no
//!   longer owns the uid. The SDK then installs the newer table and asks the new owner, within
//!   the caller's deadline: each attempt is one hop, never a chain or a loop. A caller that
//!   marks its own call is answered NOT_OWNER here as before (the Rust SDK does: it follows the
//!   tables itself).
//! - **Who may.** The caller's role was checked at this first hop (`seqsvr_tls::authz`); the hop
//!   presents this AllocSvr's own certificate (role `alloc`), which an owner accepts only on a
//!   call marked not to be forwarded, so an application identity gains nothing by it.
//! - **What it holds.** A forwarded call takes a wait slot (`alloc.max_waiting_calls`,
//!   `alloc.max_waiting_id_calls` for ids) for as long as the hop takes: past the limit it is
//!   refused RESOURCE_EXHAUSTED at once, like any waiting call. The SDK's queues are bounded too
//!   (`SeqClientOptions::max_queued`).
//! - **Deadline.** The hop gets what is left of the call's deadline (`rpc::call_deadline`: 90%
//!   of the caller's `grpc-timeout`, at most `alloc.request_timeout_ms`).
//! - **Routes.** The SDK learns each set's table from the AllocSvrs the cluster file lists
//!   (`allocs`) and from replies; this AllocSvr's own table is handed to it whenever it is newer
//!   ([`Forwarder::learn_own`]). The reply to the caller carries the owner's set's table, so a
//!   routing client learns the owner and goes there directly next time.
//! - A batch whose uids have several owners is split: this AllocSvr's part is served here, the
//!   rest goes through the SDK's `next_batch` (one call per owner, in parallel); the values
//!   come back in request order, and the repeats of a uid stay in one part, in order, so they
//!   still strictly increase.
//!
//! The request id of a single `Next` does not travel: the SDK coalesces concurrent ones into
//! one batch to the owner (that is what keeps a forwarded call near the cost of a direct one).
//! Both ends log the call with the owner's address, at debug.

use crate::config::ForwardSetup;
use seqsvr_client::ids::{IdClient, Session, SessionId};
use seqsvr_client::seq::SeqClient;
use seqsvr_core::ids::SetId;
use seqsvr_proto::v1 as pb;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tonic::Status;

/// The SDK clients the hops are made with, built at the first forwarded call (the other
/// AllocSvrs need not be up when this one starts).
pub struct Forwarder {
    setup: ForwardSetup,
    /// This AllocSvr's own address, a seed too (its own table is learnt from it before any
    /// [`Forwarder::learn_own`]).
    own_addr: String,
    own_set: SetId,
    seq: tokio::sync::OnceCell<SeqClient>,
    ids: std::sync::OnceLock<IdClient>,
    /// The version of this AllocSvr's own table the SDK was last given.
    own_version: AtomicU64,
    /// Hops begun (calls handed to the SDK), for tests.
    hops: AtomicU64,
}

/// Why no hop can serve a uid (`rpc.rs` says it to the caller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// In no set of the cluster file: the sets there, as text.
    OutsideCluster { sets: String },
    /// In another set, whose AllocSvrs the cluster file does not list.
    NoSeeds { set: SetId },
}

impl Forwarder {
    pub fn new(setup: ForwardSetup, own_addr: &str, own_set: SetId) -> Forwarder {
        Forwarder {
            setup,
            own_addr: own_addr.to_string(),
            own_set,
            seq: tokio::sync::OnceCell::new(),
            ids: std::sync::OnceLock::new(),
            own_version: AtomicU64::new(0),
            hops: AtomicU64::new(0),
        }
    }

    /// Hops begun so far.
    pub fn hops_made(&self) -> u64 {
        self.hops.load(Ordering::Relaxed)
    }

    fn hop(&self) {
        self.hops.fetch_add(1, Ordering::Relaxed);
    }

    fn seeds(&self) -> Vec<String> {
        let mut seeds = self.setup.seeds();
        if !seeds.contains(&self.own_addr) {
            seeds.push(self.own_addr.clone());
        }
        seeds
    }

    /// INVALID_ARGUMENT for a uid in no set of the cluster file; FAILED_PRECONDITION for one
    /// of another set whose AllocSvrs the file does not list (no hop could find its owner).
    pub fn check_reachable(&self, uid: u64) -> Result<(), Unreachable> {
        match self.setup.set_of(uid) {
            None => {
                let sets: Vec<String> = self
                    .setup
                    .sets
                    .iter()
                    .map(|s| format!("set {} [{}, {})", s.id, s.uids.start, s.uids.end))
                    .collect();
                let sets = if sets.is_empty() { "none listed".into() } else { sets.join(", ") };
                Err(Unreachable::OutsideCluster { sets })
            }
            Some(set) if set.id != self.own_set && set.allocs.is_empty() => {
                Err(Unreachable::NoSeeds { set: set.id })
            }
            Some(_) => Ok(()),
        }
    }

    /// Whether the SDK should be given this AllocSvr's table of `version` (newer than the one it
    /// was given last). Checked under the state lock, so the table is cloned only when it is.
    pub fn wants_own(&self, version: u64) -> bool {
        version > self.own_version.load(Ordering::Relaxed)
    }

    /// Hands this AllocSvr's own table to the SDK (it keeps it only if newer than its own).
    pub fn learn_own(&self, table: pb::RouteTable) {
        self.own_version.fetch_max(table.version, Ordering::Relaxed);
        if let Some(seq) = self.seq.get() {
            seq.learn_routes(&[table]);
        }
    }

    /// The SDK's sequence client, connected (route tables learnt from the seeds) by `until`.
    async fn seq(&self, until: Instant) -> Result<&SeqClient, Status> {
        self.seq
            .get_or_try_init(|| async {
                let seeds = self.seeds();
                let left = left_until(until)?;
                let client = SeqClient::connect(&seeds, left).await.map_err(|status| {
                    Status::unavailable(format!(
                        "cannot forward: no AllocSvr of the cluster file ({}) answered with a \
                         route table: {}",
                        seeds.join(", "),
                        status.message()
                    ))
                })?;
                tracing::info!(seeds = %seeds.join(","), "forwarding: route tables learnt");
                Ok(client)
            })
            .await
    }

    fn ids(&self) -> Result<&IdClient, Status> {
        if let Some(ids) = self.ids.get() {
            return Ok(ids);
        }
        let client = IdClient::new(&self.seeds())?.with_ids_config(self.setup.ids.clone());
        Ok(self.ids.get_or_init(|| client))
    }

    /// The table of the set holding `uid`, when it is newer than the caller's `route_version`.
    fn table_for(seq: &SeqClient, uid: u64, route_version: u64) -> Option<pb::RouteTable> {
        seq.route_table_for(uid).filter(|t| t.version > route_version)
    }

    /// `Next` (`allocate`) or `Current` of `uid` at its owner.
    pub async fn one(
        &self,
        allocate: bool,
        uid: u64,
        route_version: u64,
        until: Instant,
    ) -> Result<(u64, Option<pb::RouteTable>), Status> {
        self.hop();
        let seq = self.seq(until).await?;
        let left = left_until(until)?;
        let seq_value =
            if allocate { seq.next(uid, left).await? } else { seq.current(uid, left).await? };
        Ok((seq_value, Self::table_for(seq, uid, route_version)))
    }

    /// The next value of each of `uids` at their owners, in order (a repeated uid gets
    /// increasing values), with the table of the first uid's set if newer than the caller's.
    pub async fn next_batch(
        &self,
        uids: &[u64],
        route_version: u64,
        until: Instant,
    ) -> Result<(Vec<u64>, Option<pb::RouteTable>), Status> {
        self.hop();
        let seq = self.seq(until).await?;
        let values = seq.next_batch(uids, left_until(until)?).await?;
        Ok((values, Self::table_for(seq, uids[0], route_version)))
    }

    /// `count` ids of `rongcloud` session (`session_type`, `session_hash`) from the owner of
    /// the section of `uid`, the uid it is routed by.
    pub async fn session_ids(
        &self,
        r: &pb::NextIdsRequest,
        uid: u64,
        until: Instant,
    ) -> Result<pb::NextIdsResponse, Status> {
        self.hop();
        let ids = self.ids()?;
        let id = match r.session_hash {
            Some(hash) => SessionId::Hash(hash),
            None => SessionId::Text(r.session_id.clone()),
        };
        let session = Session { session_type: r.session_type, id };
        let got = ids.next_session_ids(&r.scheme, r.count, &session, left_until(until)?).await?;
        let values: Vec<u128> = got.ids.iter().map(|id| id.value()).collect();
        let mut response = pb::NextIdsResponse {
            session_uid: uid,
            worker_id: got.worker_id,
            ..Default::default()
        };
        seqsvr_proto::put_ids128(&mut response, &values, r.packed_ids128);
        Ok(response)
    }
}

/// The SDK's answer to a hop, as the caller of the first hop must read it: the statuses that
/// mean something else to a caller that did not route the call itself are restated.
/// - NOT_OWNER (the owner kept moving until the deadline): retryable UNAVAILABLE, without the
///   table (NOT_OWNER is only for calls marked `seqsvr-no-forward`);
/// - "outside every set" from the SDK (no table of the uid's set learnt yet; the uid was
///   checked against the cluster file before the hop): UNAVAILABLE;
/// - PERMISSION_DENIED: the owner refused this AllocSvr's own identity (an owner of an older
///   build accepts no forwarded call), said as such, not as a refusal of the caller's;
/// - CANCELLED (the owner's gRPC server ended the hop at the deadline it was given, "Timeout
///   expired"): DEADLINE_EXCEEDED, which is what happened to the caller's call (the caller's
///   own cancellation never comes back here: its call is dropped).
pub fn for_caller(status: Status) -> Status {
    match status.code() {
        tonic::Code::Cancelled => Status::deadline_exceeded(format!(
            "the call's deadline passed while it was forwarded to the uid's owner ({})",
            status.message()
        )),
        tonic::Code::FailedPrecondition
            if status.metadata().contains_key(seqsvr_proto::ROUTE_TABLE_METADATA) =>
        {
            Status::unavailable(format!(
                "the uid's owner changed while the call was forwarded to it; retry ({})",
                status.message()
            ))
        }
        tonic::Code::InvalidArgument if status.message().contains("outside every set") => {
            warn_lasting("no AllocSvr of the uid's set answered with a route table", &status);
            Status::unavailable(format!(
                "no AllocSvr of the uid's set answered with a route table yet; retry ({})",
                status.message()
            ))
        }
        tonic::Code::PermissionDenied => {
            warn_lasting("the owner refused this AllocSvr's forwarding identity", &status);
            Status::unavailable(format!(
                "the owner refused this AllocSvr's forwarding identity (an owner of an older \
                 build takes no forwarded call; retry, or call the owner directly): {}",
                status.message()
            ))
        }
        _ => status,
    }
}

/// How often at most [`warn_lasting`] writes a line.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// A hop's failure that is retryable for the caller while an upgrade or a start is under way,
/// but lasting when the configuration is wrong (the owner's set does not list this AllocSvr's
/// identity, or the set's `allocs` in the cluster file answer for no table): a warning, at most
/// one per [`WARN_EVERY`] for the process, so the operator sees why plain callers keep
/// retrying.
fn warn_lasting(what: &str, status: &Status) {
    static LAST: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let now = Instant::now();
    {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| now.duration_since(at) < WARN_EVERY) {
            return;
        }
        *last = Some(now);
    }
    tracing::warn!(status = %status.message(), code = ?status.code(),
        "a forwarded call failed: {what}; plain callers are told to retry. If this lasts, \
         check the owner set's [tls.identities] (this AllocSvr's identity, role alloc) and the \
         cluster file's allocs of that set (at most one line per 10 s)");
}

/// What is left until `until`; DEADLINE_EXCEEDED when nothing is.
fn left_until(until: Instant) -> Result<Duration, Status> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Status::deadline_exceeded(
            "the call's deadline passed before it could be forwarded to its owner",
        ));
    }
    Ok(left)
}

#[cfg(test)]
mod tests;
