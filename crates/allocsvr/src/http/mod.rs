//! The HTTP/JSON API (issue 31, item 2): sequences and ids for callers without gRPC (`curl`, a
//! browser's back end, a language without stubs), on the AllocSvr's own port, over the same
//! mutual TLS, behind the same auth layer (`seqsvr_tls::authz::need_for_http`: the paths under
//! `/v1/` need a client or an admin, the probes any verified certificate).
//!
//! Both protocols share one listener: tonic serves HTTP/1.1 beside HTTP/2
//! (`Server::accept_http1`), the TLS handshake offers `http/1.1` beside `h2`, and the routes
//! here sit in the same router as the gRPC services ([`beside`]). Each handler turns its JSON
//! into the gRPC request (the caller, the request id, the deadline: `json.rs::grpc_request`)
//! and calls the **gRPC method itself** in process (`SeqService::next_batch`, `current`,
//! `IdService::next_ids`, `decode`), so an HTTP call is checked, limited, forwarded, counted
//! and logged exactly as a gRPC one; its answer or status becomes JSON here. Every u64 is a
//! decimal string in JSON (JavaScript numbers are exact only up to 2^53 − 1); input numbers are
//! taken as strings, or as JSON numbers up to 2^53 − 1. Errors are
//! `{"code", "message", "hint"}` with the HTTP status of the gRPC code
//! (`seqsvr_tls::http_error`). The routes are [`ROUTES`]; `proto/http-api.yaml` documents them
//! (a test holds the two together).
//!
//! - this file: the routes and their handlers, the probes;
//! - `json.rs`: reading requests (content type, size, JSON, numbers) and writing answers
//!   (errors, replies that hold their budget until sent);
//! - `probes.rs`: the probes alone on a plaintext address of their own (`--probe-addr`), for
//!   probes that present no client certificate.

mod json;
mod probes;
#[cfg(test)]
mod tests;

pub use probes::serve_probes;

use crate::ids::IdServer;
use crate::service::SeqServer;
use crate::state::Shared;
use axum::extract::{Path, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use json::{grpc_request, held_of, read_json, reply, u64_of, BodyLimits, HttpError};
use seqsvr_proto::v1 as pb;
use seqsvr_proto::v1::id_service_server::IdService as _;
use seqsvr_proto::v1::seq_service_server::SeqService as _;
use serde::Serialize;
use std::sync::Arc;

/// Every route the API serves, as `proto/http-api.yaml` lists them (method, path template).
pub const ROUTES: [(Method, &str); 6] = [
    (Method::POST, "/v1/seq/next"),
    (Method::GET, "/v1/seq/{uid}"),
    (Method::POST, "/v1/ids/{scheme}/next"),
    (Method::GET, "/v1/ids/{scheme}/decode/{id}"),
    (Method::GET, "/healthz"),
    (Method::GET, "/readyz"),
];

/// What the handlers share: the two gRPC services, health, the body limit.
struct Api {
    seq: SeqServer,
    ids: IdServer,
    /// Readiness is gRPC health's SERVING (`observe.rs` decides it), so the two never disagree.
    health: seqsvr_server::grpc::Health,
    /// How a request body is read: at most [`json_request_max_bytes`], within
    /// `alloc.request_timeout_ms`.
    body: BodyLimits,
}

impl Api {
    /// The layout of `scheme`, once the id service has answered for it (so it is configured).
    fn layout(&self, scheme: &str) -> Result<&seqsvr_core::idscheme::Layout, HttpError> {
        let setup = self.ids.shared.ids.schemes.get(scheme);
        setup.map(|s| &s.layout).ok_or_else(|| HttpError::internal("the scheme is not configured"))
    }
}

/// Most bytes of one JSON request body: a `POST /v1/seq/next` of `max_batch_uids` uids, each at
/// most 22 bytes (`"18446744073709551615",`), 24 with room for spaces, plus 64 KiB for the rest:
/// the JSON counterpart of [`seqsvr_proto::seq_request_max_bytes`]. A larger body is refused
/// (413) before it is read into memory.
pub fn json_request_max_bytes(max_batch_uids: usize) -> usize {
    max_batch_uids.saturating_mul(24).saturating_add(64 * 1024)
}

/// `grpc` (the AllocSvr's gRPC services) with the HTTP/JSON API beside them: one router, so
/// one listener, one connection gate and one auth layer serve both. A request no route takes
/// is answered in its own protocol: UNIMPLEMENTED to a gRPC call (as tonic's router does), 404
/// with a JSON error otherwise.
pub fn beside(
    grpc: tonic::service::Routes,
    shared: Arc<Shared>,
    health: seqsvr_server::grpc::Health,
) -> tonic::service::Routes {
    let max_body_bytes = json_request_max_bytes(shared.config.tuning.max_batch_uids);
    let within = std::time::Duration::from_millis(shared.config.tuning.request_timeout_ms);
    let api = Arc::new(Api {
        seq: SeqServer { shared: shared.clone() },
        ids: IdServer { shared },
        health,
        body: BodyLimits { max_bytes: max_body_bytes, within },
    });
    use axum::routing::{get, post};
    let [next, current, ids_next, decode, healthz, readyz] = ROUTES.map(|(_, path)| path);
    let http = axum::Router::new()
        .route(next, post(seq_next))
        .route(current, get(seq_current))
        .route(ids_next, post(ids_next_handler))
        .route(decode, get(ids_decode))
        .route(healthz, get(healthz_handler))
        .route(readyz, get(readyz_handler))
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(api);
    let router = grpc.into_axum_router().merge(http).fallback(no_route);
    tonic::service::Routes::from(router)
}

/// A request for a path no route serves.
async fn no_route(request: Request) -> Response {
    if seqsvr_tls::http_error::is_grpc(request.headers()) {
        let (parts, ()) = tonic::Status::unimplemented("").into_http::<()>().into_parts();
        return Response::from_parts(parts, axum::body::Body::empty());
    }
    let message = format!("no route {} {}", request.method(), request.uri().path());
    HttpError::new(StatusCode::NOT_FOUND, tonic::Code::NotFound, message)
        .hint("the routes are listed in proto/http-api.yaml")
        .into_response()
}

/// A request for a served path with a method it does not take.
async fn method_not_allowed(request: Request) -> Response {
    let message = format!("{} is not served at {}", request.method(), request.uri().path());
    HttpError::new(StatusCode::METHOD_NOT_ALLOWED, tonic::Code::Unimplemented, message)
        .hint("the routes and their methods are listed in proto/http-api.yaml")
        .into_response()
}

/// A u64 as JSON shows it: a decimal string.
fn as_text<S: serde::Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// One value of a `POST /v1/seq/next` answer, or the answer of `GET /v1/seq/{uid}`.
#[derive(Serialize)]
struct UidSeq {
    #[serde(serialize_with = "as_text")]
    uid: u64,
    #[serde(serialize_with = "as_text")]
    seq: u64,
}

/// `POST /v1/seq/next`'s body.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NextBody {
    uids: Vec<serde_json::Value>,
}

/// `POST /v1/seq/next` `{"uids": ["42", "42", "7"]}`: `NextBatch` (all or nothing; a repeated
/// uid gets increasing values) → `{"values": [{"uid": "42", "seq": "13"}, …]}` in request
/// order.
async fn seq_next(State(api): State<Arc<Api>>, request: Request) -> Result<Response, HttpError> {
    let example = r#"{"uids": ["42", "7"]}"#;
    let (parts, body): (_, NextBody) = read_json(request, api.body, example).await?;
    let uids = body
        .uids
        .into_iter()
        .enumerate()
        .map(|(i, v)| u64_of(&format!("uids[{i}]"), &v))
        .collect::<Result<Vec<u64>, _>>()?;
    // No route table on this side: version 0 (the reply's table, if any, is not passed on).
    let message = pb::NextBatchRequest { uids: uids.clone(), route_version: 0, independent: false };
    // Only the uids (16 bytes each, as the batch is charged) stay while the call waits: the
    // parsed JSON is gone, and so are the headers (an HTTP/1.1 request may carry hundreds of KiB).
    let request = grpc_request(&parts, message)?;
    drop(parts);
    let answer = api.seq.next_batch(request).await?;
    let (held, answer) = held_of(answer);
    if answer.seqs.len() != uids.len() {
        return Err(HttpError::internal("NextBatch answered a different number of values"));
    }
    #[derive(Serialize)]
    struct Values {
        values: Vec<UidSeq>,
    }
    let values = uids.into_iter().zip(answer.seqs).map(|(uid, seq)| UidSeq { uid, seq }).collect();
    reply(&Values { values }, held)
}

/// `GET /v1/seq/{uid}`: `Current` (allocates nothing) → `{"uid": "42", "seq": "14"}`.
async fn seq_current(
    State(api): State<Arc<Api>>,
    uid: Result<Path<String>, axum::extract::rejection::PathRejection>,
    request: Request,
) -> Result<Response, HttpError> {
    let Path(text) = uid.map_err(HttpError::path)?;
    let uid = u64_of("uid", &serde_json::Value::String(text))?;
    let (parts, _) = request.into_parts();
    let message = pb::CurrentRequest { uid, route_version: 0 };
    let answer = api.seq.current(grpc_request(&parts, message)?).await?.into_inner();
    reply(&UidSeq { uid, seq: answer.seq }, None)
}

/// `POST /v1/ids/{scheme}/next`'s body: `count`, and the fields of the schemes that have them.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NextIdsBody {
    count: serde_json::Value,
    /// weibo.
    business: Option<serde_json::Value>,
    /// rongcloud: the session type and the session id (or its hash).
    session_type: Option<serde_json::Value>,
    session: Option<String>,
    session_hash: Option<serde_json::Value>,
}

/// `POST /v1/ids/{scheme}/next` `{"count": 3}` (rongcloud: with `session_type` and `session`
/// or `session_hash`): `NextIds` → `{"scheme", "worker_id", "ids": [text, …]}` (rongcloud: and
/// `session_uid`), each id in its scheme's text form.
async fn ids_next_handler(
    State(api): State<Arc<Api>>,
    scheme: Result<Path<String>, axum::extract::rejection::PathRejection>,
    request: Request,
) -> Result<Response, HttpError> {
    let Path(scheme) = scheme.map_err(HttpError::path)?;
    let example = r#"{"count": 3}"#;
    let (parts, body): (_, NextIdsBody) = read_json(request, api.body, example).await?;
    let number = |field: &str, value: &Option<serde_json::Value>| match value {
        Some(v) => u64_of(field, v),
        None => Ok(0),
    };
    let max_count = api.ids.shared.ids.max_count;
    let count = u64_of("count", &body.count)?;
    let count = u32::try_from(count).map_err(|_| {
        let message = format!("count {count} must be within [1, {max_count}] (ids.max_count)");
        HttpError::invalid(message)
    })?;
    let session_type = number("session_type", &body.session_type)?;
    let session_type = u32::try_from(session_type).map_err(|_| {
        let types = seqsvr_core::idscheme::SESSION_TYPES;
        HttpError::invalid(format!("session_type {session_type} must be below {types}"))
    })?;
    let session_hash = match &body.session_hash {
        Some(v) => Some(u64_of("session_hash", v)?),
        None => None,
    };
    let message = pb::NextIdsRequest {
        scheme: scheme.clone(),
        count,
        business: number("business", &body.business)?,
        session_type,
        session_id: body.session.unwrap_or_default(),
        session_hash,
        // 128-bit ids in one buffer; 64-bit ones as numbers (no buffer to copy them through).
        packed_ids128: true,
        packed_ids64: false,
    };
    let request = grpc_request(&parts, message)?;
    drop(parts); // not held while the call waits for the clock
    let answer = api.ids.next_ids(request).await?;
    let (held, answer) = held_of(answer);
    let layout = api.layout(&scheme)?;
    let ids = if layout.scheme().id_bits() <= 64 {
        seqsvr_proto::ids64_of(&answer).map(|ids| ids.into_iter().map(u128::from).collect())
    } else {
        seqsvr_proto::ids128_of(&answer)
    };
    let ids: Vec<u128> =
        ids.map_err(|e| HttpError::internal(&format!("NextIds answered unreadable ids: {e}")))?;
    // The answer's own copies go before the JSON is written.
    drop((answer.ids, answer.ids128, answer.ids64_packed, answer.ids128_packed));
    // Each id is formatted as it is written (no string per id beside the JSON).
    let ids = IdTexts { layout, ids };
    #[derive(Serialize)]
    struct Ids<'a> {
        scheme: String,
        worker_id: u64,
        ids: IdTexts<'a>,
        /// rongcloud: the uid the session is routed by.
        #[serde(skip_serializing_if = "Option::is_none")]
        session_uid: Option<String>,
    }
    let rongcloud = layout.scheme() == seqsvr_core::idscheme::Scheme::RongCloud;
    let session_uid = rongcloud.then(|| answer.session_uid.to_string());
    reply(&Ids { scheme, worker_id: answer.worker_id, ids, session_uid }, held)
}

/// Ids as JSON strings in their scheme's text form, formatted one by one as they are written.
struct IdTexts<'a> {
    layout: &'a seqsvr_core::idscheme::Layout,
    ids: Vec<u128>,
}

impl Serialize for IdTexts<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeSeq as _};
        let mut seq = serializer.serialize_seq(Some(self.ids.len()))?;
        for &id in &self.ids {
            let text = self
                .layout
                .format(id)
                .map_err(|e| S::Error::custom(format!("an id issued is not of its layout: {e}")))?;
            seq.serialize_element(&text)?;
        }
        seq.end()
    }
}

/// `GET /v1/ids/{scheme}/decode/{id}`: `Decode` (its checks and errors), answered with the
/// fields as `seqctl id decode --json` prints them (`seqsvr_core::decode::DecodedView`).
async fn ids_decode(
    State(api): State<Arc<Api>>,
    params: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
    request: Request,
) -> Result<Response, HttpError> {
    let Path((scheme, id)) = params.map_err(HttpError::path)?;
    let (parts, _) = request.into_parts();
    let message = pb::DecodeIdRequest { scheme: scheme.clone(), text: id, id: 0 };
    let answer = api.ids.decode(grpc_request(&parts, message)?).await?.into_inner();
    let layout = api.layout(&scheme)?;
    let decoded = seqsvr_core::decode::decode(layout, &answer.text)
        .map_err(|e| HttpError::internal(&format!("the canonical text does not decode: {e}")))?;
    reply(&seqsvr_core::decode::DecodedView::new(&scheme, &decoded), None)
}

/// `GET /healthz`: the process is up and answering.
async fn healthz_handler() -> Result<Response, HttpError> {
    reply(&serde_json::json!({ "status": "UP" }), None)
}

/// `GET /readyz` on the API's port.
async fn readyz_handler(State(api): State<Arc<Api>>) -> Result<Response, HttpError> {
    readyz(&api.health)
}

/// `GET /readyz`: 200 while gRPC health says SERVING (a valid lease, so the store answers its
/// heartbeats), else 503: where a load balancer or Kubernetes should send traffic.
fn readyz(health: &seqsvr_server::grpc::Health) -> Result<Response, HttpError> {
    if !health.serving() {
        let message = "this AllocSvr is not serving: it holds no valid lease (starting, its \
                       store unreachable, or shutting down)";
        return Err(HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            tonic::Code::Unavailable,
            message,
        )
        .hint("send calls to an AllocSvr whose /readyz answers 200"));
    }
    reply(&serde_json::json!({ "status": "SERVING" }), None)
}
