//! What every call of the AllocSvr's public services shares, and what clients see of its errors.
//!
//! - [`RequestId`]: a call's request id (the caller's `x-request-id`, or one of ours);
//! - [`call_deadline`], [`batch_deadline`]: when a call (a stream's batch) must be answered;
//! - [`WaitSlot`]: a place among the calls waiting at once (`alloc.max_waiting_calls`, and
//!   `alloc.max_waiting_id_calls` for `NextIds`);
//! - [`HeldUntilSent`], [`HoldReplies`]: a unary reply holds its budget until the transport
//!   has taken it, not only until its handler returns;
//! - [`NotOwner`]: NOT_OWNER, with the route table the client needs to go elsewhere;
//! - [`AllocError`]: every error the AllocSvr answers, typed where it is decided (`service.rs`,
//!   `ids/`), and [`to_status`], the one place an error becomes a `tonic::Status`: its code
//!   and metadata here, its message the error's `Display`.

use crate::metrics::Budget;
use crate::state::Shared;
use seqsvr_core::alloc::SeqError;
use seqsvr_core::ids::{SectionId, SetId};
use seqsvr_core::idscheme::{FieldError, GenError, LayoutError, SESSION_HASHES, SESSION_TYPES};
use seqsvr_proto::v1 as pb;
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Code, Request, Status};

/// A call's request id: the caller's `x-request-id`, or one of ours (`<process>-<n>`), shown
/// in every log line about the call (at debug: nothing per call is logged above it).
pub enum RequestId {
    Given(String),
    Ours { prefix: u32, n: u64 },
}

impl RequestId {
    /// The id of `request`: its `x-request-id`, else the next of ours.
    pub fn of<T>(shared: &Shared, request: &Request<T>) -> RequestId {
        match seqsvr_proto::request_id_of(request.metadata()) {
            Some(id) => RequestId::Given(id.to_string()),
            None => RequestId::next_ours(shared),
        }
    }

    /// The next of this process's request ids.
    pub fn next_ours(shared: &Shared) -> RequestId {
        RequestId::Ours {
            prefix: shared.request_id_prefix,
            n: shared.next_request_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Given(id) => f.write_str(id),
            RequestId::Ours { prefix, n } => write!(f, "{prefix:08x}-{n}"),
        }
    }
}

/// When a public call must be answered: within 90% of the caller's `grpc-timeout` (so the
/// answer arrives before the caller gives up), at most `request_timeout_ms`.
pub fn call_deadline<T>(request: &Request<T>, request_timeout_ms: u64) -> Instant {
    let ours = Duration::from_millis(request_timeout_ms);
    let theirs = request
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(seqsvr_proto::parse_grpc_timeout)
        .map(|d| d.mul_f64(0.9));
    Instant::now() + theirs.map_or(ours, |t| t.min(ours))
}

/// When a stream's batch must be answered: within 90% of the client's wait for it (as
/// [`call_deadline`] for a call's `grpc-timeout`), at most `request_timeout_ms`.
pub fn batch_deadline(timeout_ms: u64, request_timeout_ms: u64) -> Instant {
    let ours = Duration::from_millis(request_timeout_ms);
    let theirs = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms).mul_f64(0.9));
    Instant::now() + theirs.map_or(ours, |t| t.min(ours))
}

/// A place among the calls waiting at once, given back when the call stops waiting (answered,
/// timed out, or dropped by its caller). With every place of its pool taken, a call that would
/// wait is refused at once: RESOURCE_EXHAUSTED, not one more task and request in memory. Every
/// public call that waits takes one, from one of two pools, so id calls waiting for the clock
/// never take the places of sequence calls: `SeqService` calls (for an advance, a load, a
/// hand-over or a lease) from `alloc.max_waiting_calls` ([`WaitSlot::take`]), `NextIds` calls
/// (for the clock, a worker id, a time reservation in the store) from
/// `alloc.max_waiting_id_calls` ([`WaitSlot::take_for_ids`]).
pub struct WaitSlot<'a> {
    waiting: &'a std::sync::atomic::AtomicUsize,
}

impl<'a> WaitSlot<'a> {
    /// A place for a `SeqService` call (`alloc.max_waiting_calls`).
    pub fn take(shared: &'a Shared) -> Result<WaitSlot<'a>, AllocError> {
        let max = shared.config.tuning.max_waiting_calls;
        Self::take_from(shared, &shared.waiting_calls, max, Budget::WaitingCalls)
            .map_err(|()| AllocError::Saturated { max })
    }

    /// A place for a `NextIds` call (`alloc.max_waiting_id_calls`).
    pub fn take_for_ids(shared: &'a Shared) -> Result<WaitSlot<'a>, AllocError> {
        let max = shared.config.tuning.max_waiting_id_calls;
        Self::take_from(shared, &shared.waiting_id_calls, max, Budget::WaitingIdCalls)
            .map_err(|()| AllocError::IdsSaturated { max })
    }

    fn take_from(
        shared: &Shared,
        waiting: &'a std::sync::atomic::AtomicUsize,
        max: usize,
        budget: Budget,
    ) -> Result<WaitSlot<'a>, ()> {
        use std::sync::atomic::Ordering;
        let taken = waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        match taken {
            Ok(_) => Ok(WaitSlot { waiting }),
            Err(_) => {
                shared.metrics.budget(budget).full.increment(1);
                Err(())
            }
        }
    }
}

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What a unary reply holds of a budget (the ids of a `NextIds` call, the bytes of a
/// `NextBatch` call) until the transport has taken all of it, not only until the handler
/// returns: a client that reads no replies would otherwise park up to a connection's stream
/// limit of them, counted nowhere. The handler puts it in the `tonic::Response`'s extensions;
/// [`HoldReplies`] moves it into the reply's body, which the transport drops once it has
/// taken the last byte (or the client reset the call, or its connection closed).
#[derive(Clone)]
pub struct HeldUntilSent {
    /// Given back when the last clone is dropped.
    _held: std::sync::Arc<dyn std::any::Any + Send + Sync>,
}

impl HeldUntilSent {
    pub fn new(held: impl std::any::Any + Send + Sync) -> HeldUntilSent {
        HeldUntilSent { _held: std::sync::Arc::new(held) }
    }

    /// `response` holding `held` until it is sent (once served through [`HoldReplies`]).
    pub fn on<T>(
        mut response: tonic::Response<T>,
        held: Option<HeldUntilSent>,
    ) -> tonic::Response<T> {
        if let Some(held) = held {
            response.extensions_mut().insert(held);
        }
        response
    }
}

/// A service (`IdService`, `SeqService`) whose replies hold their [`HeldUntilSent`] until the
/// transport has taken them. Such a body is handed to the transport in pieces of at most
/// [`HELD_PIECE_BYTES`]: the transport asks for the next piece only once the client's HTTP/2
/// window has room for the last, so what a client that reads nothing parks beyond its window
/// is a piece per call, and the rest stays counted.
#[derive(Clone)]
pub struct HoldReplies<S>(pub S);

/// The most of a held reply the transport takes at once (one HTTP/2 DATA frame by default).
pub const HELD_PIECE_BYTES: usize = 16 * 1024;

impl<S: tonic::server::NamedService> tonic::server::NamedService for HoldReplies<S> {
    const NAME: &'static str = S::NAME;
}

type HttpResponse = tonic::codegen::http::Response<tonic::body::Body>;

impl<S, B> tonic::codegen::Service<tonic::codegen::http::Request<B>> for HoldReplies<S>
where
    S: tonic::codegen::Service<tonic::codegen::http::Request<B>, Response = HttpResponse>,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = S::Error;
    type Future = tonic::codegen::BoxFuture<HttpResponse, S::Error>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        let reply = self.0.call(request);
        Box::pin(async move {
            let mut response = reply.await?;
            Ok(match response.extensions_mut().remove::<HeldUntilSent>() {
                None => response,
                Some(held) => response.map(|body| {
                    let body = HeldBody { body, piece: None, _held: held };
                    tonic::body::Body::new(body)
                }),
            })
        })
    }
}

/// A reply's body holding its [`HeldUntilSent`] until it is dropped, yielding its data in
/// pieces of at most [`HELD_PIECE_BYTES`].
struct HeldBody {
    body: tonic::body::Body,
    /// The rest of the data frame read last.
    piece: Option<tonic::codegen::Bytes>,
    _held: HeldUntilSent,
}

impl tonic::codegen::Body for HeldBody {
    type Data = tonic::codegen::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Status>>> {
        use std::task::Poll;
        let this = &mut *self;
        let mut data = match this.piece.take() {
            Some(rest) => rest,
            None => match std::pin::Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return other,
            },
        };
        if data.len() > HELD_PIECE_BYTES {
            this.piece = Some(data.split_off(HELD_PIECE_BYTES));
        }
        Poll::Ready(Some(Ok(http_body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.piece.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let mut hint = self.body.size_hint();
        let rest = self.piece.as_ref().map_or(0, |p| p.len() as u64);
        hint.set_lower(hint.lower().saturating_add(rest));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

/// NOT_OWNER: the section is not served here; the answer carries the current route table (in
/// binary metadata, where `seqsvr_proto::route_table_of` finds it).
#[derive(Debug, thiserror::Error)]
#[error(
    "NOT_OWNER: section {section} is not served here (owner: {owner}, route table v{})",
    .route.version
)]
pub struct NotOwner {
    pub section: SectionId,
    /// The owner the route table names, as shown to the client.
    pub owner: String,
    pub route: pb::RouteTable,
}

impl NotOwner {
    /// NOT_OWNER of `section` under `route`.
    pub fn of(section: SectionId, route: &pb::RouteTable) -> Box<NotOwner> {
        let owner = route
            .owner_of_section(section.0)
            .map(|e| format!("alloc {} at {}", e.alloc_id, e.addr))
            .unwrap_or_else(|| "not assigned yet".into());
        Box::new(NotOwner { section, owner, route: route.clone() })
    }
}

/// Every error the AllocSvr answers. The message is the `Display`; the code is
/// [`AllocError::code`]; [`to_status`] makes the status.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    // ---- Any call: the state of this AllocSvr ----
    #[error(
        "this AllocSvr is shutting down and has handed its sections back: retry at the AllocSvr \
         the route table names (ask any AllocSvr for it)"
    )]
    Stopping,
    #[error("this AllocSvr is shutting down: ask another AllocSvr for ids")]
    StoppingIds,
    #[error("this AllocSvr is shutting down: ask the AllocSvr the route table names")]
    StoppingSessions,
    #[error(
        "this AllocSvr holds no valid lease (store unreachable, or its registration is being \
         renewed); retry, possibly at another AllocSvr"
    )]
    NoLease,
    #[error(
        "this AllocSvr holds no valid lease, so no worker id: retry, possibly at another AllocSvr"
    )]
    NoLeaseNoWorker,
    #[error("this AllocSvr is not registered with its store yet")]
    NotRegistered,
    #[error(
        "this AllocSvr is saturated: {max} SeqService calls already wait (for an advance, a \
         load, a hand-over or a lease; alloc.max_waiting_calls); back off before retrying, \
         spread the load, or raise alloc.step so fewer calls wait"
    )]
    Saturated { max: usize },
    #[error(
        "this AllocSvr is saturated: {max} NextIds calls already wait (for the clock, a worker \
         id or an id reservation in the store; alloc.max_waiting_id_calls); back off before \
         retrying, spread the load, or raise ids.max_ahead_ms so fewer calls wait"
    )]
    IdsSaturated { max: usize },
    #[error(
        "this AllocSvr holds {max} bytes of NextStream batches already (alloc.max_stream_bytes) \
         and found no room for this batch before its deadline: back off, spread the load over \
         more AllocSvrs, or raise the limit"
    )]
    StreamBytesFull { max: usize },
    #[error(
        "this AllocSvr holds {in_use} of its {max} bytes of batches whose replies are not sent \
         yet (alloc.max_stream_bytes): a NextBatch of {bytes} bytes does not fit now; back off \
         before retrying, read replies as they come, or send smaller batches"
    )]
    BatchBytesFull { bytes: usize, in_use: usize, max: usize },
    #[error(
        "this NextStream stream holds {max} bytes of batches whose replies its client has not \
         read (alloc.max_bytes_per_stream): read the replies before sending more"
    )]
    StreamFull { max: usize },
    #[error(
        "this AllocSvr serves {max} NextStream streams already (alloc.max_streams): send \
         NextBatch RPCs (the SDK does so by itself), or raise the limit"
    )]
    TooManyStreams { max: usize },
    #[error(
        "this connection holds {max} NextStream streams open already (the most one connection \
         may): a client needs one; close the streams it no longer reads (a stream whose replies \
         nobody reads stays open until its client resets it)"
    )]
    TooManyStreamsOnConnection { max: usize },

    // ---- SeqService: input ----
    #[error("empty batch: give at least one uid")]
    EmptyBatch,
    #[error("batch of {n} uids exceeds the limit of {max}")]
    BatchTooLarge { n: usize, max: usize },
    #[error("uid {uid} is outside set {set}'s uids [{begin}, {end}): route it to its own set")]
    UidOutsideSet { uid: u64, set: SetId, begin: u64, end: u64 },
    #[error(
        "uid {uid} is outside set {set}'s uids [{begin}, {end}) and every other set of the \
         cluster file ({sets})"
    )]
    UidOutsideCluster { uid: u64, set: SetId, begin: u64, end: u64, sets: String },

    // ---- Forwarding (`forward.rs`) ----
    /// The owner's answer to a forwarded call (or the SDK's, when no owner answered in time),
    /// passed on as it came.
    #[error("{}", .0.message())]
    Forwarded(Box<Status>),
    #[error(
        "uid {uid} belongs to set {set}, whose AllocSvrs this AllocSvr does not know: list them \
         as `allocs` of set {set} in its cluster file (or call an AllocSvr of set {set})"
    )]
    NoSeedsFor { uid: u64, set: SetId },

    // ---- SeqService: a section not (yet) served ----
    #[error(transparent)]
    NotOwner(Box<NotOwner>),
    #[error(
        "section {0} is being handed over to this AllocSvr; it serves once the previous owner's \
         lease has run out"
    )]
    HandOver(SectionId),
    #[error(
        "section {section} is not served here under route table v{ours}, but the client has \
         v{theirs}: this AllocSvr is catching up with the store"
    )]
    CatchingUp { section: SectionId, ours: u64, theirs: u64 },
    #[error("section {0} is loading its max_seq from the store")]
    Loading(SectionId),
    #[error(
        "section {0} waits for the store to commit a higher max_seq (store slow or without \
         quorum?)"
    )]
    WaitsForAdvance(SectionId),
    /// Final: no advance can help, so the caller must not wait or retry.
    #[error("{0}")]
    Ceiling(SeqError),

    // ---- IdService: input ----
    #[error(
        "no id scheme named {name:?} in the cluster config's [ids.schemes] (configured: \
         {known:?})"
    )]
    UnknownScheme { name: String, known: Vec<String> },
    #[error("count {count} must be within [1, {max}] (ids.max_count)")]
    BadCount { count: u32, max: u32 },
    #[error(
        "this AllocSvr holds {in_use} of its {max} ids in flight (alloc.max_ids_in_flight): a \
         call of {count} does not fit now; back off before retrying, ask for fewer per call, or \
         raise the limit"
    )]
    IdsInFlight { count: u32, in_use: usize, max: usize },
    #[error(
        "calls of more than 4096 ids hold {in_use} of the {max} ids they may hold together (half \
         of alloc.max_ids_in_flight): a call of {count} does not fit now; ask for at most 4096 \
         per call (those have the other half), or back off before retrying"
    )]
    BigIdsInFlight { count: u32, in_use: usize, max: usize },
    #[error(
        "id scheme {name:?} cannot issue ids now: {error} (fix the scheme's layout in the \
         cluster config, or this host's clock)"
    )]
    SchemeUnusable { name: String, error: LayoutError },
    #[error(
        "count {count} is more than one worker id (or rongcloud section) of {name:?} can issue \
         within this call's deadline ({left_ms} ms): at most {reachable} ({per_unit} per time \
         unit, up to ids.max_ahead_ms ahead of the clock, half of it for a call of more \
         than 4096; a call waits at most alloc.request_timeout_ms); ask for fewer per call"
    )]
    CountUnreachable { count: u32, name: String, left_ms: u64, reachable: u64, per_unit: u64 },
    #[error(
        "id scheme {name:?} has no session fields: send session_type 0, no session_id and \
         session_hash 0"
    )]
    NoSessionFields { name: String },
    #[error("id scheme {name:?} has no business number: send 0")]
    NoBusiness { name: String },
    #[error("business {business} does not fit: at most {max}")]
    BusinessTooLarge { business: u64, max: u64 },
    /// `Decode`: the id (or its text) is not one of the scheme's.
    #[error("{0}")]
    InvalidId(String),

    // ---- IdService: issuing under a worker id ----
    #[error("{0}")]
    Pack(FieldError),
    #[error("id scheme {name:?}: {error}; its layout has run out of time ({range})")]
    RanOut { name: String, error: GenError, range: String },
    #[error("timed out waiting for a worker id lease")]
    WorkerLeaseTimeout,
    /// The store's own RESOURCE_EXHAUSTED (no worker id free), passed on as it is.
    #[error("{}", .0.message())]
    NoWorkerFree(Box<Status>),
    #[error("the store refuses to lease a worker id of {name:?}: {message}")]
    WorkerRefused { name: String, message: String },
    #[error("could not lease a worker id of {name:?} from the store: {message}")]
    WorkerUnreachable { name: String, message: String },
    #[error("id scheme {name:?}, worker id {worker}: {error}")]
    WorkerRanOut { name: String, worker: u64, error: GenError },
    #[error("the registration changed while leasing a worker id; retry")]
    RegistrationChanged,
    #[error("could not reserve time for worker id {worker} of {name:?} in the store: {message}")]
    ReserveFailed { worker: u64, name: String, message: String },
    #[error(
        "id scheme {scheme:?}: the clock is {wait_ms} ms behind the time already used (clock set \
         back, or the sequence of every unit up to ids.max_ahead_ms ahead is used): waiting \
         would pass this call's deadline; retry later or at another AllocSvr"
    )]
    ClockBehind { scheme: String, wait_ms: u64 },

    // ---- IdService: rongcloud sessions ----
    #[error("give the session as session_id or as session_hash, not both")]
    SessionTwice,
    #[error(
        "id scheme {name:?} is rongcloud: its ids belong to a session; give session_type and \
         session_id (or session_hash)"
    )]
    NoSession { name: String },
    #[error(
        "session type {session_type} and hash {session_hash} must be below {types} and {hashes}",
        types = SESSION_TYPES,
        hashes = SESSION_HASHES
    )]
    BadSession { session_type: u64, session_hash: u64 },
    /// NOT_OWNER for a session of a uid of another set; it carries the session's uid.
    #[error(
        "NOT_OWNER: the session is routed by uid {uid}, which another set owns: ask an AllocSvr \
         of that set"
    )]
    SessionOtherSet { uid: u64 },
    /// NOT_OWNER for a session of this set (with its route table); it carries the session's uid.
    #[error("{not_owner}")]
    SessionNotOwner { uid: u64, not_owner: Box<NotOwner> },
    #[error(
        "section {0} is being handed over to this AllocSvr; it serves once the previous owner's \
         lease has run out: retry"
    )]
    SessionHandOver(SectionId),
    #[error("{0}: retry")]
    SectionNotReady(SeqError),
    #[error("the first session reservation failed: {0}")]
    InstallFailed(String),
    #[error(
        "the sessions of this section of {name:?} still wait for their first time reservation \
         in the store (slow, or without quorum?): retry"
    )]
    InstallSlow { name: String },
    #[error("id scheme {name:?}, section {section}: {error}")]
    SessionRanOut { name: String, section: SectionId, error: GenError },
    #[error("section {section} is no longer served here ({message}); retry at its owner")]
    SectionLost { section: SectionId, message: String },
    #[error("the store refuses time reservations for the sessions of {name:?}: {message}")]
    SessionsRefused { name: String, message: String },
    #[error(
        "could not reserve time for the sessions of section {section} of {name:?} in the store: \
         {message}"
    )]
    SessionReserveFailed { section: SectionId, name: String, message: String },
}

impl AllocError {
    /// The gRPC code the client sees: INVALID_ARGUMENT and NOT_FOUND for bad input, UNAVAILABLE
    /// for what a retry (here or elsewhere) can cure, FAILED_PRECONDITION for NOT_OWNER and for
    /// what only an operator can cure, RESOURCE_EXHAUSTED for limits and run-out layouts.
    pub fn code(&self) -> Code {
        use AllocError as E;
        match self {
            E::EmptyBatch
            | E::BatchTooLarge { .. }
            | E::UidOutsideSet { .. }
            | E::UidOutsideCluster { .. }
            | E::BadCount { .. }
            | E::CountUnreachable { .. }
            | E::NoSessionFields { .. }
            | E::NoBusiness { .. }
            | E::BusinessTooLarge { .. }
            | E::InvalidId(_)
            | E::SessionTwice
            | E::NoSession { .. }
            | E::BadSession { .. } => Code::InvalidArgument,
            E::UnknownScheme { .. } => Code::NotFound,
            E::Stopping
            | E::StoppingIds
            | E::StoppingSessions
            | E::NoLease
            | E::NoLeaseNoWorker
            | E::NotRegistered
            | E::HandOver(_)
            | E::CatchingUp { .. }
            | E::Loading(_)
            | E::WaitsForAdvance(_)
            | E::WorkerLeaseTimeout
            | E::WorkerUnreachable { .. }
            | E::RegistrationChanged
            | E::ReserveFailed { .. }
            | E::ClockBehind { .. }
            | E::SessionHandOver(_)
            | E::SectionNotReady(_)
            | E::InstallSlow { .. }
            | E::SectionLost { .. }
            | E::SessionReserveFailed { .. } => Code::Unavailable,
            E::NotOwner(_)
            | E::SessionOtherSet { .. }
            | E::SessionNotOwner { .. }
            | E::SchemeUnusable { .. }
            | E::WorkerRefused { .. }
            | E::SessionsRefused { .. }
            | E::NoSeedsFor { .. } => Code::FailedPrecondition,
            E::Saturated { .. }
            | E::IdsSaturated { .. }
            | E::StreamBytesFull { .. }
            | E::BatchBytesFull { .. }
            | E::StreamFull { .. }
            | E::IdsInFlight { .. }
            | E::BigIdsInFlight { .. }
            | E::TooManyStreams { .. }
            | E::TooManyStreamsOnConnection { .. }
            | E::Ceiling(_)
            | E::RanOut { .. }
            | E::WorkerRanOut { .. }
            | E::SessionRanOut { .. } => Code::ResourceExhausted,
            E::NoWorkerFree(status) | E::Forwarded(status) => status.code(),
            E::Pack(_) | E::InstallFailed(_) => Code::Internal,
        }
    }
}

/// The status a client sees for `error`: its code, its message, and the metadata NOT_OWNER
/// carries (the route table; for a session, the uid it is routed by).
pub fn to_status(error: AllocError) -> Status {
    let code = error.code();
    match error {
        AllocError::NoWorkerFree(status) | AllocError::Forwarded(status) => *status,
        AllocError::NotOwner(not_owner) => not_owner_status(&not_owner),
        AllocError::SessionNotOwner { uid, not_owner } => {
            with_session_uid(not_owner_status(&not_owner), uid)
        }
        AllocError::SessionOtherSet { uid } => {
            with_session_uid(Status::new(code, error.to_string()), uid)
        }
        error => Status::new(code, error.to_string()),
    }
}

fn not_owner_status(not_owner: &NotOwner) -> Status {
    let status = Status::failed_precondition(not_owner.to_string());
    seqsvr_proto::with_route_table(status, &not_owner.route)
}

/// `status` with the uid a session is routed by, so the client routes it.
fn with_session_uid(mut status: Status, uid: u64) -> Status {
    status.metadata_mut().insert(
        seqsvr_proto::SESSION_UID_METADATA,
        uid.to_string().parse().expect("digits are valid metadata"),
    );
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> pb::RouteTable {
        let entry = pb::RouteEntry {
            section_begin: 0,
            section_end: 2,
            alloc_id: 2,
            addr: "alloc-2:1".into(),
        };
        pb::RouteTable { set_id: 1, version: 3, entries: vec![entry], ..Default::default() }
    }

    /// NOT_OWNER is FAILED_PRECONDITION naming the owner, with the route table in its
    /// metadata; for a session, with the session's uid as well.
    #[test]
    fn not_owner_carries_the_route_table_and_a_session_its_uid() {
        let status = to_status(AllocError::NotOwner(NotOwner::of(SectionId(1), &route())));
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(
            status.message(),
            "NOT_OWNER: section 1 is not served here (owner: alloc 2 at alloc-2:1, route table v3)"
        );
        let table = seqsvr_proto::route_table_of(&status).expect("a table");
        assert_eq!(table.version, 3);
        let not_owner = NotOwner::of(SectionId(7), &route());
        let status = to_status(AllocError::SessionNotOwner { uid: 75, not_owner });
        assert!(status.message().contains("owner: not assigned yet"), "{}", status.message());
        assert!(seqsvr_proto::route_table_of(&status).is_some());
        let uid = |s: &Status| s.metadata().get(seqsvr_proto::SESSION_UID_METADATA).cloned();
        assert_eq!(uid(&status).expect("the uid").to_str().ok(), Some("75"));
        let other = to_status(AllocError::SessionOtherSet { uid: 500 });
        assert_eq!(other.code(), Code::FailedPrecondition);
        assert!(seqsvr_proto::route_table_of(&other).is_none());
        assert_eq!(uid(&other).expect("the uid").to_str().ok(), Some("500"));
    }

    /// The store's own answer is passed on as it is.
    #[test]
    fn the_stores_no_worker_free_is_passed_on() {
        let store = Status::resource_exhausted("no worker id free");
        let status = to_status(AllocError::NoWorkerFree(Box::new(store)));
        assert_eq!(
            (status.code(), status.message()),
            (Code::ResourceExhausted, "no worker id free")
        );
    }
}

/// What the tests of the services share: a client that reads nothing, and waiting on a
/// condition.
#[cfg(test)]
pub(crate) mod test_support {
    use std::time::Duration;
    use tokio::time::Instant;
    use tonic::transport::Channel;

    /// A channel to `url` whose HTTP/2 windows (stream and connection) are 64 KiB: the replies
    /// it does not read soon stop the transport from taking more.
    pub async fn silent_channel(url: &str) -> Channel {
        tonic::transport::Endpoint::from_shared(url.to_string())
            .expect("a URL")
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .connect()
            .await
            .expect("connected")
    }

    /// Calls the unary method at `path` on `channel` and answers once its reply's headers
    /// arrived (so its handler has returned), the reply's body unread.
    pub async fn call_unread<Req, Reply>(
        channel: Channel,
        path: &str,
        request: Req,
    ) -> tonic::Streaming<Reply>
    where
        Req: prost::Message + Send + Sync + 'static,
        Reply: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("ready");
        let path = path.parse().expect("a path");
        let codec = tonic_prost::ProstCodec::<Req, Reply>::default();
        let request = tonic::Request::new(request);
        grpc.server_streaming(request, path, codec).await.expect("answered").into_inner()
    }

    /// Waits (a hang guard, not a timing) until `done` holds.
    pub async fn until(what: &str, done: impl Fn() -> bool) {
        let guard = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < guard, "never: {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Serves `router` on a local port; answers its URL.
    pub async fn serve(router: tonic::transport::server::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("an address");
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(router.serve_with_incoming(incoming));
        format!("http://{addr}")
    }
}
