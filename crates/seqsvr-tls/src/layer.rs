//! The tower layer in front of every service ([`AuthLayer`]): takes the [`PeerIdentity`] the
//! handshake recorded, asks `authz.rs` whether it may make the call, answers
//! `PERMISSION_DENIED` (and an audit line) when not, hands the handler a [`Caller`] when it may,
//! and writes an audit line with the gRPC status of every admin-role call. A refusal is
//! answered in the caller's protocol: a gRPC status to a gRPC call, HTTP 403 with the JSON
//! error body (`http_error.rs`) to an HTTP/JSON request (the AllocSvr's HTTP API).

use crate::accept::TlsSetup;
use crate::authz::authorize;
use crate::identity::PeerIdentity;
use crate::{ServerKind, AUDIT_TARGET};
use http::{Request, Response};
use seqsvr_core::config::{Role, TlsConfig};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The role check for a server: [`AuthLayer::new`] with TLS, [`AuthLayer::plaintext`] without.
pub fn auth_layer(setup: Option<&TlsSetup>) -> AuthLayer {
    match setup {
        Some(s) => AuthLayer::new(s.config.clone(), s.kind),
        None => AuthLayer::plaintext(),
    }
}

/// The tower layer that authorises every call (see [`authorize`]). Add it with
/// `Server::builder().layer(AuthLayer::new(..))`; requests without a [`PeerIdentity`] (a
/// plaintext connection) are refused.
#[derive(Clone)]
pub struct AuthLayer {
    /// None: a plaintext server (no `[tls]`), every call passes.
    rules: Option<(Arc<TlsConfig>, ServerKind)>,
}

impl AuthLayer {
    pub fn new(tls: Arc<TlsConfig>, kind: ServerKind) -> AuthLayer {
        AuthLayer { rules: Some((tls, kind)) }
    }

    /// For a server without `[tls]`: lets every call through (there is no identity to check).
    pub fn plaintext() -> AuthLayer {
        AuthLayer { rules: None }
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Auth<S> {
        Auth { inner, rules: self.rules.clone() }
    }
}

#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    rules: Option<(Arc<TlsConfig>, ServerKind)>,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for Auth<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<tonic::body::Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let Some((tls, kind)) = &self.rules else {
            let future = self.inner.call(req);
            return Box::pin(async move {
                let (parts, body) = future.await?.into_parts();
                Ok(Response::from_parts(parts, tonic::body::Body::new(body)))
            });
        };
        // Borrowed, not cloned: this runs for every RPC.
        let path = req.uri().path().trim_start_matches('/');
        let peer = req.extensions().get::<PeerIdentity>();
        let decision = match peer {
            Some(peer) => {
                let no_forward = req
                    .headers()
                    .get(seqsvr_proto::NO_FORWARD_METADATA)
                    .is_some_and(|v| v.as_bytes() == b"1");
                authorize(tls, *kind, peer, path, no_forward)
            }
            None => Err(format!("may not call {path}: not a verified TLS connection")),
        };
        let remote = peer.and_then(|p| p.remote_addr);
        let caller = match decision {
            Ok(caller) => caller,
            Err(message) => {
                tracing::warn!(target: AUDIT_TARGET, remote = ?remote, "PERMISSION_DENIED: {message}");
                let response = refusal(req.headers(), message);
                return Box::pin(std::future::ready(Ok(response)));
            }
        };
        let audit = caller.as_ref().filter(|c| c.role == Role::Admin).map(|c| Audit {
            who: c.name.clone(),
            what: path.to_string(),
            remote,
            done: false,
        });
        if let Some(c) = caller {
            req.extensions_mut().insert(c);
        }
        let grpc = crate::http_error::is_grpc(req.headers());
        let future = self.inner.call(req);
        Box::pin(async move {
            let response = future.await?;
            let (parts, body) = response.into_parts();
            let body = match audit {
                Some(mut audit) => {
                    if let Some(result) = result_in_headers(grpc, &parts) {
                        audit.log(&result);
                    }
                    tonic::body::Body::new(AuditBody { inner: tonic::body::Body::new(body), audit })
                }
                None => tonic::body::Body::new(body),
            };
            Ok(Response::from_parts(parts, body))
        })
    }
}

/// An answer's result when its headers tell it: a gRPC status in the headers (a trailers-only
/// answer, as most refusals are), or the HTTP status of an HTTP/JSON call's answer, which has
/// no trailers to wait for. None: a gRPC answer whose status comes in its trailers.
fn result_in_headers(grpc_request: bool, parts: &http::response::Parts) -> Option<String> {
    if let Some(code) = parts.headers.get("grpc-status") {
        return Some(code.to_str().unwrap_or("?").to_string());
    }
    (!grpc_request).then(|| format!("HTTP {}", parts.status.as_u16()))
}

/// PERMISSION_DENIED with `message`, in the protocol of the request with `headers`.
fn refusal(headers: &http::HeaderMap, message: String) -> Response<tonic::body::Body> {
    if crate::http_error::is_grpc(headers) {
        return tonic::Status::permission_denied(message).into_http();
    }
    let status = http::StatusCode::FORBIDDEN;
    let hint = "present a certificate whose identity [tls.identities] gives a role this path \
                accepts (client or admin for /v1/...)";
    crate::http_error::json_error(status, tonic::Code::PermissionDenied, &message, Some(hint))
}

/// One admin call's audit line, written once its gRPC status is known (or it is dropped).
struct Audit {
    who: String,
    what: String,
    remote: Option<SocketAddr>,
    done: bool,
}

impl Audit {
    fn log(&mut self, status: &str) {
        if self.done {
            return;
        }
        self.done = true;
        let result = status
            .parse::<i32>()
            .map(|c| format!("{:?}", tonic::Code::from_i32(c)))
            .unwrap_or_else(|_| status.to_string());
        tracing::info!(target: AUDIT_TARGET, who = %self.who, what = %self.what,
            remote = ?self.remote, result = %result, "admin call");
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        self.log("cancelled before its status");
    }
}

/// The response body of an admin call: watches for the trailers that carry its gRPC status.
struct AuditBody {
    inner: tonic::body::Body,
    audit: Audit,
}

impl http_body::Body for AuditBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(code) = frame.trailers_ref().and_then(|t| t.get("grpc-status")) {
                let code = code.to_str().unwrap_or("?").to_string();
                self.audit.log(&code);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Plane;
    use http_body_util::BodyExt as _;
    use tower_service::Service as _;

    fn tls_config() -> Arc<TlsConfig> {
        Arc::new(crate::authz::tests::tls_config())
    }

    /// A request for `path` from `cn`'s verified certificate, as gRPC or as JSON.
    fn request(path: &str, cn: &str, grpc: bool) -> Request<tonic::body::Body> {
        let mut req = Request::builder().uri(path);
        if grpc {
            req = req.header("content-type", "application/grpc");
        }
        let mut req = req.body(tonic::body::Body::empty()).unwrap();
        req.extensions_mut().insert(PeerIdentity {
            remote_addr: None,
            cn: Some(cn.into()),
            dns_sans: vec![],
            planes: vec![Plane::Client],
        });
        req
    }

    /// What the service behind the layer answers (it saw the call): 200, no body.
    #[derive(Clone)]
    struct Served;

    impl tower_service::Service<Request<tonic::body::Body>> for Served {
        type Response = Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<tonic::body::Body>) -> Self::Future {
            std::future::ready(Ok(Response::new(tonic::body::Body::empty())))
        }
    }

    /// An HTTP/JSON request the table refuses gets 403 and the JSON error body; a gRPC call
    /// the same refusal as a gRPC status (HTTP 200, `grpc-status: 7`); an allowed HTTP path
    /// reaches the service. Fails without `refusal` (a JSON client would get a 200).
    #[tokio::test]
    async fn a_refusal_is_answered_in_the_callers_protocol() {
        use tower_layer::Layer as _;
        let mut auth = AuthLayer::new(tls_config(), ServerKind::AllocSvr).layer(Served);
        let json = auth.call(request("/v1/seq/next", "alloc", false)).await.unwrap();
        assert_eq!(json.status(), http::StatusCode::FORBIDDEN);
        assert_eq!(json.headers()["content-type"], "application/json");
        let body = json.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "PERMISSION_DENIED");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("\"alloc\"") && message.contains("needs role client"),
            "{message}"
        );
        let grpc = auth.call(request("/seqsvr.v1.SeqService/Next", "alloc", true)).await.unwrap();
        assert_eq!(grpc.status(), http::StatusCode::OK);
        assert_eq!(grpc.headers()["grpc-status"], "7");
        let served = auth.call(request("/v1/seq/next", "app-1", false)).await.unwrap();
        assert_eq!(served.status(), http::StatusCode::OK);
    }

    /// An admin's HTTP/JSON call is audited with its HTTP status at once (its answer has no
    /// trailers: without this its line said "cancelled before its status"); a gRPC answer's
    /// status is read from its headers when it is there, else left to its trailers.
    #[test]
    fn an_http_answer_is_audited_with_its_status() {
        let answer = |status: u16, grpc_status: Option<&str>| {
            let mut response = Response::builder().status(status);
            if let Some(code) = grpc_status {
                response = response.header("grpc-status", code);
            }
            response.body(()).unwrap().into_parts().0
        };
        assert_eq!(result_in_headers(false, &answer(200, None)).as_deref(), Some("HTTP 200"));
        assert_eq!(result_in_headers(false, &answer(429, None)).as_deref(), Some("HTTP 429"));
        assert_eq!(result_in_headers(true, &answer(200, Some("7"))).as_deref(), Some("7"));
        assert_eq!(result_in_headers(false, &answer(200, Some("8"))).as_deref(), Some("8"));
        assert_eq!(result_in_headers(true, &answer(200, None)), None, "in its trailers");
    }
}
