//! `--probe-addr`: `GET /healthz` and `GET /readyz`, and nothing else, in plaintext HTTP on an
//! address of their own, for probes that present no client certificate (Kubernetes `httpGet`,
//! a cloud load balancer's health check). The API's port asks every caller for a certificate
//! in the TLS handshake, so such a probe could only ever fail there; this listener answers it
//! without weakening that port. It is off unless the operator names an address.
//!
//! What it can tell a stranger is what a probe must: whether the process is up and whether it
//! is serving. Its connections are bounded like the servers' (`AcceptGate`, per remote IP) and
//! each lives at most [`PROBE_CONNECTION_MAX`], so holding them open costs a prober its own
//! sockets, not ours.

use super::{healthz_handler, readyz, HttpError};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use std::time::Duration;
use tokio::sync::watch;

/// How long one probe connection may stay open: a probe asks and leaves (kubelet and load
/// balancers open a connection per check, or keep one alive across a few); one that lingers
/// is closed here and may reconnect.
pub const PROBE_CONNECTION_MAX: Duration = Duration::from_secs(30);

/// Connections open at once from one remote IP: a node's kubelet or a load balancer's few
/// checkers need a handful.
pub const PROBE_CONNECTIONS_PER_IP: usize = 64;

/// The probes' router: `/healthz`, `/readyz`, and 404 for every other path.
fn router(health: seqsvr_server::grpc::Health) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/healthz", get(healthz_handler))
        .route("/readyz", get(ready))
        .fallback(not_here)
        .with_state(health)
}

async fn ready(State(health): State<seqsvr_server::grpc::Health>) -> Result<Response, HttpError> {
    readyz(&health)
}

async fn not_here(request: Request) -> Response {
    let message = format!(
        "no route {} {} on the probe address: it answers only GET /healthz and GET /readyz",
        request.method(),
        request.uri().path()
    );
    HttpError::new(StatusCode::NOT_FOUND, tonic::Code::NotFound, message)
        .hint("the API is served on the AllocSvr's own address, over mutual TLS")
        .into_response()
}

/// Serves the probes on `listener` until `stop` turns true.
pub async fn serve_probes(
    listener: tokio::net::TcpListener,
    health: seqsvr_server::grpc::Health,
    mut stop: watch::Receiver<bool>,
) {
    let limits = seqsvr_tls::AcceptLimits {
        max_connections_per_ip: PROBE_CONNECTIONS_PER_IP,
        ..seqsvr_tls::AcceptLimits::DEFAULT
    };
    let mut incoming = seqsvr_tls::plain_incoming(listener, seqsvr_tls::AcceptGate::new(limits));
    let router = router(health);
    loop {
        let conn = tokio::select! {
            _ = stop.wait_for(|&stopped| stopped) => return,
            conn = incoming.next() => conn,
        };
        let conn = match conn {
            Some(Ok(conn)) => conn,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "probe connection not accepted");
                continue;
            }
            None => return,
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let io = hyper_util::rt::TokioIo::new(conn);
            let served = builder.serve_connection(io, service);
            if tokio::time::timeout(PROBE_CONNECTION_MAX, served).await.is_err() {
                tracing::debug!("probe connection closed after {PROBE_CONNECTION_MAX:?}");
            }
        });
    }
}
