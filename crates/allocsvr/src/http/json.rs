//! Reading HTTP/JSON requests and writing their answers: the content type, the size limit and
//! the JSON of a body ([`read_json`]), the numbers in it ([`u64_of`]), the gRPC request a
//! handler builds from an HTTP one ([`grpc_request`]), the error answer ([`HttpError`]) and
//! a reply holding its budget until sent ([`reply`]).

use crate::rpc::HeldUntilSent;
use axum::extract::Request;
use axum::http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use serde_json::Value;
use std::time::Duration;
use tonic::Code;

/// The header a caller gives its deadline in, in milliseconds (gRPC's `grpc-timeout`): the
/// call is answered within 90% of it, at most `alloc.request_timeout_ms`
/// (`rpc::call_deadline`).
pub const TIMEOUT_HEADER: &str = "seqsvr-timeout-ms";

/// The largest integer a JSON number may carry here: 2^53 − 1, JavaScript's largest exact
/// integer (`Number.MAX_SAFE_INTEGER`). A larger one must be sent as a string.
pub const JSON_SAFE_MAX: u64 = (1 << 53) - 1;

/// A deadline longer than this is taken as this (the call's own limit is far lower): keeps the
/// `grpc-timeout` text within its 8 digits.
const TIMEOUT_MAX: Duration = Duration::from_secs(3600);

/// An error answer: an HTTP status, the gRPC code it stands for, the message, maybe a hint.
#[derive(Debug)]
pub struct HttpError {
    status: StatusCode,
    code: Code,
    message: String,
    hint: Option<String>,
}

impl HttpError {
    pub fn new(status: StatusCode, code: Code, message: impl Into<String>) -> HttpError {
        HttpError { status, code, message: message.into(), hint: None }
    }

    /// Bad input: 400 INVALID_ARGUMENT.
    pub fn invalid(message: impl Into<String>) -> HttpError {
        HttpError::new(StatusCode::BAD_REQUEST, Code::InvalidArgument, message)
    }

    /// A bug of ours: 500 INTERNAL.
    pub fn internal(message: &str) -> HttpError {
        HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, message)
    }

    /// A path parameter that is not text (bad percent-encoding): 400.
    pub fn path(rejection: axum::extract::rejection::PathRejection) -> HttpError {
        HttpError::invalid(format!("the path does not read: {}", rejection.body_text()))
    }

    pub fn hint(mut self, hint: impl Into<String>) -> HttpError {
        self.hint = Some(hint.into());
        self
    }
}

/// A gRPC method's refusal: the same code and words, with the code's HTTP status.
impl From<tonic::Status> for HttpError {
    fn from(status: tonic::Status) -> HttpError {
        let code = status.code();
        let http = seqsvr_tls::http_error::http_status(code);
        HttpError::new(http, code, status.message())
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let hint = self.hint.as_deref();
        seqsvr_tls::http_error::json_error(self.status, self.code, &self.message, hint)
            .map(axum::body::Body::new)
    }
}

/// A u64 of a request, named `field` in messages: a decimal string (`"42"`), or a JSON number
/// up to [`JSON_SAFE_MAX`]; anything else (negative, fractional, too large, not a number) is
/// refused, saying which.
pub fn u64_of(field: &str, value: &Value) -> Result<u64, HttpError> {
    let hint = |e: HttpError| e.hint(format!("give {field} as a decimal string, e.g. \"42\""));
    match value {
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s
            .parse::<u64>()
            .map_err(|_| hint(HttpError::invalid(format!("{field}: {s:?} is above 2^64 − 1")))),
        Value::String(s) if s.starts_with('-') => {
            Err(hint(HttpError::invalid(format!("{field}: {s:?} is negative"))))
        }
        Value::String(s) => {
            Err(hint(HttpError::invalid(format!("{field}: {s:?} is not a decimal number"))))
        }
        Value::Number(n) => match n.as_u64() {
            Some(v) if v <= JSON_SAFE_MAX => Ok(v),
            Some(v) => Err(HttpError::invalid(format!(
                "{field}: {v} is above 2^53 − 1, where JSON readers round numbers"
            ))
            .hint(format!("send it as a string: \"{v}\""))),
            None if n.is_i64() => {
                Err(hint(HttpError::invalid(format!("{field}: {n} is negative"))))
            }
            None => Err(hint(HttpError::invalid(format!("{field}: {n} is not an integer")))),
        },
        other => Err(hint(HttpError::invalid(format!("{field}: {other} is not a number")))),
    }
}

/// Whether `headers` say the body is JSON (`application/json`, any parameters, or a
/// `+json` type).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    media == "application/json" || (media.starts_with("application/") && media.ends_with("+json"))
}

/// How a request body is read: at most `max_bytes`, all of it within `within` (the calls'
/// `alloc.request_timeout_ms`): a body that trickles in, or never ends, holds its buffer and a
/// call of the connection's limit no longer than a call may wait.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub within: Duration,
}

/// The request's parts and its body as `T`: refused with 415 unless its content type is JSON,
/// 413 past `limits.max_bytes` (before more is read, from `Content-Length` when given), 408
/// when the body has not all arrived within `limits.within`, 400 when it is not the JSON of
/// `T` (the message says where; the hint shows `example`).
pub async fn read_json<T: serde::de::DeserializeOwned>(
    request: Request,
    limits: BodyLimits,
    example: &str,
) -> Result<(Parts, T), HttpError> {
    let BodyLimits { max_bytes, within } = limits;
    let (parts, body) = request.into_parts();
    let too_large = || {
        let message = format!(
            "the request body is over this AllocSvr's limit of {max_bytes} bytes (a batch of \
             alloc.max_batch_uids uids)"
        );
        HttpError::new(StatusCode::PAYLOAD_TOO_LARGE, Code::OutOfRange, message)
            .hint("send fewer uids per call")
    };
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok());
    if declared.and_then(|v| v.parse::<u64>().ok()).is_some_and(|n| n > max_bytes as u64) {
        return Err(too_large());
    }
    let collect = http_body_util::Limited::new(body, max_bytes).collect();
    let Ok(collected) = tokio::time::timeout(within, collect).await else {
        let message = format!(
            "the request body did not all arrive within {} ms (alloc.request_timeout_ms)",
            within.as_millis()
        );
        return Err(HttpError::new(StatusCode::REQUEST_TIMEOUT, Code::DeadlineExceeded, message)
            .hint("send the whole body at once"));
    };
    let bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return Err(too_large())
        }
        Err(e) => return Err(HttpError::invalid(format!("the request body did not arrive: {e}"))),
    };
    // The content type is judged once the body is in: an HTTP/2 answer sent while the client
    // still uploads ends the stream under it, and some clients (curl 7.88) then drop the
    // answer and report a framing error instead of the 415.
    if !is_json(&parts.headers) {
        let given = parts.headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("?"));
        let message = match given {
            Some(t) => format!("the body's Content-Type {t:?} is not JSON"),
            None => "the request has no Content-Type: its body must be JSON".into(),
        };
        return Err(HttpError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::InvalidArgument,
            message,
        )
        .hint("send Content-Type: application/json"));
    }
    let value = serde_json::from_slice::<T>(&bytes).map_err(|e| {
        HttpError::invalid(format!("the body is not this route's JSON: {e}"))
            .hint(format!("send e.g. {example}"))
    })?;
    Ok((parts, value))
}

/// The gRPC request an HTTP request with `parts` makes of `message`: the caller the auth layer
/// found (so the method checks the same role), the caller's `x-request-id`, and its deadline
/// from [`TIMEOUT_HEADER`] as the request's `grpc-timeout` (so `rpc::call_deadline` clamps it
/// as it clamps a gRPC caller's). A deadline that is not a number of milliseconds is refused.
pub fn grpc_request<T>(parts: &Parts, message: T) -> Result<tonic::Request<T>, HttpError> {
    let mut request = tonic::Request::new(message);
    if let Some(caller) = parts.extensions.get::<seqsvr_tls::Caller>() {
        request.extensions_mut().insert(caller.clone());
    }
    let id = seqsvr_proto::REQUEST_ID_METADATA;
    let given = parts.headers.get(id).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if let Some(value) = given {
        request.metadata_mut().insert(id, value);
    }
    if let Some(value) = parts.headers.get(TIMEOUT_HEADER) {
        let text = value.to_str().unwrap_or("?");
        let ms = Some(text)
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| {
                HttpError::invalid(format!(
                    "Seqsvr-Timeout-Ms {text:?} is not a number of milliseconds"
                ))
                .hint("e.g. Seqsvr-Timeout-Ms: 500")
            })?;
        request.set_timeout(Duration::from_millis(ms).min(TIMEOUT_MAX));
    }
    Ok(request)
}

/// A gRPC method's answer and what it holds until sent (`rpc::HeldUntilSent`), if anything.
pub fn held_of<T>(response: tonic::Response<T>) -> (Option<HeldUntilSent>, T) {
    let (_, message, mut extensions) = response.into_parts();
    (extensions.remove::<HeldUntilSent>(), message)
}

/// 200 with `value` as JSON; the body holds `held` until the transport has taken it, as the
/// gRPC reply it stands for would (`rpc::HoldReplies`).
pub fn reply<T: serde::Serialize>(
    value: &T,
    held: Option<HeldUntilSent>,
) -> Result<Response, HttpError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| HttpError::internal(&format!("the answer does not serialise: {e}")))?;
    let body = HeldBody { rest: bytes.into(), _held: held };
    let mut response = Response::new(axum::body::Body::new(body));
    let json = HeaderValue::from_static(seqsvr_tls::http_error::JSON);
    response.headers_mut().insert(header::CONTENT_TYPE, json);
    Ok(response)
}

/// A reply's body and the budget it holds until dropped (once sent, or its call reset),
/// handed to the transport in pieces of at most [`crate::rpc::HELD_PIECE_BYTES`]: HTTP/2 asks
/// for the next piece only once the client's window has room, so an answer the client does not
/// read keeps most of its bytes here, counted, and its budget held (one piece of all would be
/// taken at once into the transport's buffer, and the body dropped).
struct HeldBody {
    rest: bytes::Bytes,
    _held: Option<HeldUntilSent>,
}

impl http_body::Body for HeldBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        if self.rest.is_empty() {
            return std::task::Poll::Ready(None);
        }
        let n = self.rest.len().min(crate::rpc::HELD_PIECE_BYTES);
        let piece = self.rest.split_to(n);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.rest.len() as u64)
    }
}
