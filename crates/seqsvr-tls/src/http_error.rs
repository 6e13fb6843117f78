//! Errors as an HTTP/JSON client sees them (the AllocSvr's HTTP/JSON API, issue 31): the HTTP
//! status for a gRPC code ([`http_status`]), the code's name ([`code_name`]), and the one error
//! body, `{"code": "INVALID_ARGUMENT", "message": "…", "hint": "…"}` ([`json_error`]). Here,
//! below the auth layer, because the layer's refusals of HTTP requests are such errors too
//! ([`is_grpc`] tells the two kinds of request apart); the AllocSvr's handlers make theirs
//! with the same functions, so every error body of the port has one shape.

use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use tonic::Code;

/// The HTTP status of a gRPC code: bad input 400 (OUT_OF_RANGE too: a value past a limit),
/// 403, 404, 409 for what the caller must change first (FAILED_PRECONDITION, ABORTED), 429 for
/// limits, 503 for what a retry can cure, 504 for a deadline, 501 for a method the server does
/// not have, 500 for the rest.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The code's name as gRPC documents it (`INVALID_ARGUMENT`): the `code` of an error body.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// An error answer: `status`, and the body `{"code", "message", "hint"}` (`hint` left out
/// when there is none), `code` a gRPC code's name ([`code_name`]).
pub fn json_error(
    status: StatusCode,
    code: Code,
    message: &str,
    hint: Option<&str>,
) -> Response<tonic::body::Body> {
    let mut body = serde_json::json!({ "code": code_name(code), "message": message });
    if let Some(hint) = hint {
        body["hint"] = serde_json::Value::from(hint);
    }
    json_response(status, &body)
}

/// `value` as a JSON answer with `status`.
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<tonic::body::Body> {
    let mut response = Response::new(tonic::body::Body::new(http_body_util::Full::new(
        bytes::Bytes::from(value.to_string()),
    )));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

/// The content type of every JSON answer.
pub const JSON: &str = "application/json";

/// Whether a request is a gRPC call (`content-type: application/grpc`, `+proto` and the like)
/// rather than an HTTP/JSON one: a refusal is answered in the caller's protocol.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statuses the HTTP/JSON API documents (proto/http-api.yaml).
    #[test]
    fn each_code_has_its_documented_status() {
        for (code, status) in [
            (Code::InvalidArgument, 400),
            (Code::OutOfRange, 400),
            (Code::PermissionDenied, 403),
            (Code::NotFound, 404),
            (Code::FailedPrecondition, 409),
            (Code::ResourceExhausted, 429),
            (Code::Unavailable, 503),
            (Code::DeadlineExceeded, 504),
        ] {
            assert_eq!(http_status(code).as_u16(), status, "{code:?}");
        }
        assert_eq!(code_name(Code::FailedPrecondition), "FAILED_PRECONDITION");
    }

    #[test]
    fn grpc_calls_are_told_from_json_requests_by_their_content_type() {
        let mut headers = HeaderMap::new();
        assert!(!is_grpc(&headers));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert!(!is_grpc(&headers));
        for grpc in ["application/grpc", "application/grpc+proto"] {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(grpc));
            assert!(is_grpc(&headers), "{grpc}");
        }
    }
}
