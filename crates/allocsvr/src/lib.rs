//! AllocSvr: serves per-uid sequence numbers from memory. It owns sections under a lease from
//! its set's store leader, keeps `cur_seq` per uid and `max_seq` per section in memory, and
//! advances `max_seq` through the store ahead of need.
//!
//! # Layout
//! - [`config`]: flags + env + the cluster config file → [`config::AllocConfig`].
//! - [`lease`]: shared state, the lease (register/heartbeat/load) loop and the advancer.
//! - [`service`]: the public `SeqService`, the allocation path top to bottom.
//! - the allocation table itself is pure logic in `seqsvr_core::alloc`.

pub mod config;
pub mod lease;
pub mod service;

use anyhow::Context;
use config::AllocConfig;
use seqsvr_proto::v1::seq_service_server::SeqServiceServer;
use std::future::Future;
use tokio::sync::watch;

/// Runs an AllocSvr until `shutdown` resolves (SIGTERM in the binary).
pub async fn run(config: AllocConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let listen = config.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let shared = lease::Shared::new(config)?;
    tracing::info!(set = %shared.config.set_id, addr = %shared.config.addr, %listen,
        step = shared.config.tuning.step, "allocsvr starting");

    let (stop, stop_rx) = watch::channel(false);
    let lease_task = tokio::spawn(lease::lease_loop(shared.clone(), stop_rx.clone()));
    let advancer_task = tokio::spawn(lease::advancer(shared.clone(), stop_rx));

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<SeqServiceServer<service::SeqServer>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(seqsvr_proto::v1::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let result = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(health_service)
        .add_service(reflection)
        .add_service(SeqServiceServer::new(service::SeqServer { shared: shared.clone() }))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            async {
                shutdown.await;
                tracing::info!("shutting down");
            },
        )
        .await;
    let _ = stop.send(true);
    let _ = lease_task.await;
    let _ = advancer_task.await;
    result.context("gRPC server failed")
}
