//! The tower layer in front of every service ([`AuthLayer`]): takes the [`PeerIdentity`] the
//! handshake recorded, asks `authz.rs` whether it may make the call, answers
//! `PERMISSION_DENIED` (and an audit line) when not, hands the handler a [`Caller`] when it may,
//! and writes an audit line with the gRPC status of every admin-role call.

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
                let response = tonic::Status::permission_denied(message).into_http();
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
        let future = self.inner.call(req);
        Box::pin(async move {
            let response = future.await?;
            let (parts, body) = response.into_parts();
            let body = match audit {
                Some(mut audit) => {
                    // A trailers-only answer (most refusals) has its status in the headers.
                    if let Some(code) = parts.headers.get("grpc-status") {
                        audit.log(code.to_str().unwrap_or("?"));
                    }
                    tonic::body::Body::new(AuditBody { inner: tonic::body::Body::new(body), audit })
                }
                None => tonic::body::Body::new(body),
            };
            Ok(Response::from_parts(parts, body))
        })
    }
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
