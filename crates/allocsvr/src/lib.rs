//! AllocSvr: serves per-uid sequence numbers from memory. It owns sections under a lease from
//! its set's store leader, keeps `cur_seq` per uid and `max_seq` per section in memory, and
//! advances `max_seq` through the store ahead of need.
//!
//! # Layout
//! From the bottom up; each module imports only the ones above it (no import circle:
//! `tests/tests/t00_module_graph.rs` checks it).
//! - [`config`]: flags + env + the cluster config file → [`config::AllocConfig`], with the id
//!   schemes served ([`config::IdSetup`]).
//! - [`metrics`]: the Prometheus series.
//! - [`forward`]: calls for uids (or `rongcloud` sessions) another AllocSvr owns, sent on to
//!   that owner through the SDK, one hop at most.
//! - [`state`]: [`state::Shared`] and the state under its one lock ([`state::Inner`]: table,
//!   lease, registration, route table, id slots), the lease checks and "routed here".
//! - [`rpc`]: what every public call shares: request ids, deadlines, wait slots, NOT_OWNER, and
//!   [`rpc::AllocError`], every error the AllocSvr answers, made a status in [`rpc::to_status`].
//! - [`lease`]: the lease (register/heartbeat/load) loop, the advancer and the hand-back.
//! - [`service`]: the public `SeqService`, the allocation path top to bottom.
//! - [`ids`]: the public `IdService`: worker ids and high-water marks (`ids/workers.rs`), and
//!   `rongcloud` ids issued by the owner of each session's section (`ids/sessions.rs`).
//! - [`observe`]: gauges and gRPC health (SERVING only while the lease is valid), refreshed
//!   every 100 ms.
//! - [`http`]: the HTTP/JSON API beside gRPC on the same port (issue 31): each route calls the
//!   gRPC method of [`service`] or [`ids`] in process.
//! - the allocation table itself is pure logic in `seqsvr_core::alloc`.

pub mod config;
pub mod forward;
pub mod http;
pub mod ids;
pub mod lease;
pub mod metrics;
pub mod observe;
pub mod rpc;
pub mod service;
pub mod state;

use anyhow::Context;
use config::AllocConfig;
use seqsvr_proto::v1::id_service_server::IdServiceServer;
use seqsvr_proto::v1::seq_service_server::SeqServiceServer;
use seqsvr_tls::ServeExt as _;
use std::future::Future;
use tokio::sync::watch;

/// The public service's full name, as health and reflection report it.
pub const SEQ_SERVICE: &str =
    <SeqServiceServer<service::SeqServer> as tonic::server::NamedService>::NAME;

/// The id service's full name.
pub const ID_SERVICE: &str = <IdServiceServer<ids::IdServer> as tonic::server::NamedService>::NAME;

/// The public service with its message size limits: requests up to
/// [`seqsvr_proto::seq_request_max_bytes`] of `max_batch_uids` (a larger one is refused with
/// OUT_OF_RANGE before it is decoded into memory), replies up to
/// [`seqsvr_proto::REPLY_MAX_BYTES`].
/// Its `NextBatch` replies hold their bytes of `alloc.max_stream_bytes` until the transport has
/// taken them ([`rpc::HoldReplies`]).
pub fn seq_service(
    shared: std::sync::Arc<state::Shared>,
) -> rpc::HoldReplies<SeqServiceServer<service::SeqServer>> {
    let request_max = seqsvr_proto::seq_request_max_bytes(shared.config.tuning.max_batch_uids);
    let service = SeqServiceServer::new(service::SeqServer { shared })
        .max_decoding_message_size(request_max)
        .max_encoding_message_size(seqsvr_proto::REPLY_MAX_BYTES);
    rpc::HoldReplies(service)
}

/// The id service, replies up to [`seqsvr_proto::REPLY_MAX_BYTES`]; a `NextIds` reply holds its
/// ids of `alloc.max_ids_in_flight` until the transport has taken it ([`rpc::HoldReplies`]).
pub fn id_service(
    shared: std::sync::Arc<state::Shared>,
) -> rpc::HoldReplies<IdServiceServer<ids::IdServer>> {
    let service = IdServiceServer::new(ids::IdServer { shared })
        .max_encoding_message_size(seqsvr_proto::REPLY_MAX_BYTES);
    rpc::HoldReplies(service)
}

/// Runs an AllocSvr until `shutdown` resolves (SIGTERM in the binary).
pub async fn run(config: AllocConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let listen = config.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    if let Some(addr) = config.metrics {
        // Before anything registers a series: handles made earlier would record nothing.
        seqsvr_server::metrics::install(addr, &[("set", config.set_id.0.to_string())])?;
    }
    // Its channels to the store present this AllocSvr's certificate (set before any is opened),
    // or are plaintext when it serves plaintext (--insecure): said, never a default.
    match &config.tls {
        Some(setup) => {
            let f = &setup.files;
            let tls = seqsvr_tls::ClientTls::read(
                &f.server_name,
                &f.cert,
                &f.key,
                &f.client_ca,
                &f.store_ca,
            )
            .map_err(anyhow::Error::msg)?;
            seqsvr_tls::set_process_tls(tls);
        }
        None => seqsvr_tls::use_plaintext(),
    }
    let tls = config.tls.clone();
    let shared = state::Shared::new(config)?;
    tracing::info!(set = %shared.config.set_id, addr = %shared.config.addr, %listen,
        step = shared.config.tuning.step, "allocsvr starting");

    let (stop, stop_rx) = watch::channel(false);
    let stop = std::sync::Arc::new(stop);
    let lease_task = tokio::spawn(lease::lease_loop(shared.clone(), stop_rx.clone()));
    // Health and gauges stay live until the server is done (they report the shutdown).
    let (stop_observe, stop_rx_observe) = watch::channel(false);
    let advancer_task = tokio::spawn(lease::advancer(shared.clone(), stop_rx));

    let services = [SEQ_SERVICE, ID_SERVICE];
    let (health, health_service) = seqsvr_server::grpc::Health::new(&services).await;
    let http_health = health.clone();
    let probe_task = match shared.config.probes {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on --probe-addr {addr}"))?;
            tracing::info!(%addr, "answering GET /healthz and /readyz without a client \
                certificate at http://{addr} (--probe-addr)");
            let serve = http::serve_probes(listener, health.clone(), stop_rx_observe.clone());
            Some(tokio::spawn(serve))
        }
        None => None,
    };
    let observe_task = tokio::spawn(observe::observe(shared.clone(), health, stop_rx_observe));
    let (reflection_v1, reflection_v1alpha) = seqsvr_server::grpc::reflection(&services)?;
    // Once shutdown began: the hand-back (within request_timeout_ms), then the calls still open
    // get as long again, plus a second, to be answered. A client that reads no replies (its
    // HTTP/2 window full) would otherwise hold the drain open for ever.
    let drain_limit =
        std::time::Duration::from_millis(2 * shared.config.tuning.request_timeout_ms + 1_000);
    let mut shutdown_began = stop.subscribe();
    let drain_deadline = async move {
        let _ = shutdown_began.wait_for(|&stopped| stopped).await;
        tokio::time::sleep(drain_limit).await;
    };
    let grpc = tonic::service::Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(seq_service(shared.clone()))
        .add_service(id_service(shared.clone()));
    let server = seqsvr_server::grpc::ConnectionLimits::SERVER
        .apply(tonic::transport::Server::builder())
        .tcp_nodelay(true)
        // The HTTP/JSON API (http/) speaks HTTP/1.1 too; each connection's first bytes tell.
        .accept_http1(true)
        .layer(seqsvr_tls::auth_layer(tls.as_ref()))
        .add_routes(http::beside(grpc, shared.clone(), http_health))
        .serve_maybe_tls(listener, tls.as_ref(), {
            let (shared, stop) = (shared.clone(), stop.clone());
            let mut fatal = shared.fatal.subscribe();
            async move {
                tokio::select! {
                    () = shutdown => {}
                    _ = fatal.wait_for(Option::is_some) => {}
                }
                tracing::info!("shutting down: handing sections back, then draining calls");
                let _ = stop.send(true);
                let within =
                    std::time::Duration::from_millis(shared.config.tuning.request_timeout_ms);
                lease::hand_back(&shared, within).await;
            }
        });
    let result = tokio::select! {
        result = server => result,
        () = drain_deadline => {
            tracing::warn!(waited_ms = drain_limit.as_millis() as u64,
                "calls still open after the drain limit: closing their connections");
            Ok(())
        }
    };
    let _ = stop.send(true);
    let _ = lease_task.await;
    let _ = advancer_task.await;
    let _ = stop_observe.send(true);
    let _ = observe_task.await;
    if let Some(probes) = probe_task {
        let _ = probes.await;
    }
    if let Some(why) = shared.fatal.borrow().clone() {
        anyhow::bail!("{why}");
    }
    result.context("gRPC server failed")
}
