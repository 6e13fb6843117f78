//! StoreSvr: one member of a set's Raft group. It persists per-section `max_seq` in RocksDB and
//! serves it to AllocSvrs; its leader is the one place a set's durable state changes.
//!
//! # Layout
//! - [`config`]: flags + env + the cluster config file → a validated [`config::NodeConfig`].
//! - [`storage`]: RocksDB-backed raft-rs `Storage` that also owns the state machine.
//! - [`driver`]: the Ready loop; the only owner of the `RawNode`.
//! - [`transport`]: Raft messages to peers over gRPC, one bounded queue per peer.
//! - [`outbox`]: what the driver needs of a transport (so neither imports the other).
//! - [`service`]: the gRPC services and the mapping of errors to status codes.
//! - [`metrics`]: the Prometheus series the driver publishes; health (SERVING only while this
//!   member knows a leader with a quorum in sight) follows [`driver::Driver::serving`].
//! - `raft_log`: raft-rs's slog records into `tracing`.

pub mod config;
pub mod driver;
pub mod leader_state;
pub mod metrics;
pub mod outbox;
mod raft_log;
pub mod service;
pub mod storage;
pub mod transport;

use anyhow::Context;
use config::{InitialClusterState, NodeConfig};
use seqsvr_core::ids::NodeId;
use seqsvr_core::teeth::Tooth;
use seqsvr_proto::v1::raft_transport_server::RaftTransportServer;
use seqsvr_proto::v1::store_admin_server::StoreAdminServer;
use seqsvr_proto::v1::store_service_server::StoreServiceServer;
use seqsvr_proto::{RAFT_MESSAGE_MAX_BYTES, REPLY_MAX_BYTES, STORE_REQUEST_MAX_BYTES};
use seqsvr_tls::ServeExt as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use storage::{Bootstrap, Identity, NodeStorage};
use tokio::sync::{oneshot, watch};

/// Runs a member until `shutdown` resolves (SIGTERM in the binary) or its storage fails.
/// The same code runs in production and in tests.
pub async fn run(config: NodeConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let identity = Identity { set_id: config.set_id, node_id: config.node_id };
    let fresh = NodeStorage::is_fresh(&config.data_dir)?;
    let bootstrap = if Tooth::BootstrapEmptyVoter.on()
        || config.initial_cluster_state == InitialClusterState::New
    {
        Bootstrap::NewSet(config.members.clone())
    } else {
        Bootstrap::Join
    };
    if config.new_overridden_by_marker {
        tracing::info!(
            marker = ?config.created_marker,
            "--initial-cluster-state new, but the created marker exists: the set was created \
             before, so this member starts as `existing` (an empty data dir comes back non-voting)"
        );
    }
    if fresh && config.initial_cluster_state == InitialClusterState::New {
        refuse_new_if_the_set_exists(&config).await?;
    }
    let storage = NodeStorage::open(&config.data_dir, identity, &bootstrap)?;
    if let Some(addr) = config.metrics {
        // Before the driver registers its series: handles made earlier would record nothing.
        let labels = [("set", config.set_id.0.to_string()), ("node", config.node_id.0.to_string())];
        seqsvr_server::metrics::install(addr, &labels)?;
    }
    tracing::info!(
        set = %config.set_id, node = %config.node_id, data_dir = %config.data_dir.display(),
        fresh, bootstrap = ?(fresh.then_some(&bootstrap)),
        applied = storage.applied_index(), term = storage.hard_state().term,
        voters = ?storage.conf_state().voters, learners = ?storage.conf_state().learners,
        vote_blocked = storage.vote_blocked(),
        sections_advanced = storage.state().n_sections_advanced(), "store opened"
    );

    let (handle, driver_tx, driver_rx) = driver::channel();
    let layout = seqsvr_core::store::SetLayout {
        section_size: config.section_size,
        uid_begin: config.uid_begin,
        uid_end: config.uid_end,
    };
    let peer_tls = peer_tls(&config)?;
    let transport = transport::Transport::start(
        config.set_id,
        config.node_id,
        config.addr.clone(),
        &config.members,
        driver::peer_reports(driver_tx),
        peer_tls,
        Some(layout),
    )?;
    let driver = driver::Driver::new(
        storage,
        driver::DriverConfig {
            set_id: config.set_id,
            node_id: config.node_id,
            addr: config.addr.clone(),
            members: config.members.clone(),
            tick: Duration::from_millis(config.tuning.tick_ms),
            election_ticks: config.tuning.election_ticks,
            heartbeat_ticks: config.tuning.heartbeat_ticks,
            compact_log_entries: config.tuning.compact_log_entries,
            sections: config.sections,
            lease: seqsvr_core::arbiter::LeaseConfig {
                lease_ms: config.lease.lease_ms,
                margin_ms: config.lease.lease_margin_ms,
            },
            scheme_records: config.scheme_records.clone(),
            max_reserve_ahead_ms: config.max_reserve_ahead_ms,
            layout: Some(layout),
            // What the transport reports: never anything else in a StoreSvr.
            commands_version: seqsvr_core::store::COMMANDS_VERSION,
        },
        transport,
    )?;

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;

    let mut serving = driver.serving();
    let (stop_driver, stop_rx) = watch::channel(false);
    let (driver_done_tx, driver_done) = oneshot::channel();
    let driver_thread =
        std::thread::Builder::new().name("raft-driver".into()).spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    rt.block_on(driver.run(driver_rx, stop_rx)).map_err(anyhow::Error::from)
                });
            let _ = driver_done_tx.send(result);
        })?;

    let context = service::ServiceContext {
        driver: handle,
        set_id: config.set_id,
        node_id: config.node_id,
        addr: config.addr.clone(),
        members: config.members.clone(),
        sections: config.sections,
        uid_begin: config.uid_begin,
        uid_end: config.uid_end,
        section_size: config.section_size,
        lease_ms: config.lease.lease_ms,
        lease_margin_ms: config.lease.lease_margin_ms,
        max_batch_sections: config.tuning.max_batch_sections,
        request_timeout: Duration::from_millis(config.tuning.request_timeout_ms),
        max_operator_raise: config.tuning.max_operator_raise,
        max_registrations_per_identity: config
            .tls
            .as_ref()
            .map_or(usize::MAX, |t| t.config.max_registrations_per_identity as usize),
    };
    let services = [
        <StoreServiceServer<service::ServiceContext> as tonic::server::NamedService>::NAME,
        <RaftTransportServer<service::ServiceContext> as tonic::server::NamedService>::NAME,
        <StoreAdminServer<service::ServiceContext> as tonic::server::NamedService>::NAME,
    ];
    let (health, health_service) = seqsvr_server::grpc::Health::new(&services).await;
    let (reflection_v1, reflection_v1alpha) = seqsvr_server::grpc::reflection(&services)?;
    // Health follows the driver: SERVING only while this member knows a leader with a quorum.
    let mut created_marker = config.created_marker.clone();
    let set_id = config.set_id;
    tokio::spawn(async move {
        loop {
            let now = serving.borrow_and_update().clone();
            health.set(now.serving, now.reason).await;
            // Only a leader that saw every voter past the bootstrap records the set: a member
            // whose first start is still to come must not find the marker and join empty.
            if now.established {
                if let Some(marker) = created_marker.take() {
                    write_created_marker(&marker, set_id);
                }
            }
            if serving.changed().await.is_err() {
                health.set(false, "raft driver stopped").await;
                return;
            }
        }
    });

    tracing::info!(listen = %config.listen, addr = %config.addr, "storesvr serving");
    let mut driver_done = Some(driver_done);
    let mut driver_result = None;
    let handle_for_exit = context.driver.clone();
    let election_timeout = Duration::from_millis(config.tuning.tick_ms)
        .saturating_mul(config.tuning.election_ticks as u32);
    let node_id = config.node_id;
    let stop = async {
        tokio::select! {
            _ = shutdown => {
                tracing::info!("shutting down");
                hand_off_leadership(&handle_for_exit, node_id, election_timeout * 2).await;
            }
            result = driver_done.as_mut().expect("set above") => {
                driver_result = Some(result.unwrap_or_else(|_| Err(anyhow::anyhow!("raft driver thread died"))));
            }
        }
    };
    // Message sizes per service: only Raft (snapshots) gets the large limit.
    seqsvr_server::grpc::ConnectionLimits::SERVER
        .apply(tonic::transport::Server::builder())
        .tcp_nodelay(true)
        .layer(seqsvr_tls::auth_layer(config.tls.as_ref()))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            StoreServiceServer::new(context.clone())
                .max_decoding_message_size(STORE_REQUEST_MAX_BYTES)
                .max_encoding_message_size(REPLY_MAX_BYTES),
        )
        .add_service(
            RaftTransportServer::new(context.clone())
                .max_decoding_message_size(RAFT_MESSAGE_MAX_BYTES)
                .max_encoding_message_size(RAFT_MESSAGE_MAX_BYTES),
        )
        .add_service(
            StoreAdminServer::new(context)
                .max_decoding_message_size(STORE_REQUEST_MAX_BYTES)
                .max_encoding_message_size(REPLY_MAX_BYTES),
        )
        .serve_maybe_tls(listener, config.tls.as_ref(), stop)
        .await?;

    let _ = stop_driver.send(true);
    let result = match (driver_result, driver_done) {
        (Some(r), _) => r,
        (None, Some(rx)) => {
            rx.await.unwrap_or_else(|_| Err(anyhow::anyhow!("raft driver thread died")))
        }
        (None, None) => Ok(()),
    };
    let _ = driver_thread.join();
    result.context("raft driver stopped on a storage fault; refusing to serve")
}

/// A leader about to exit hands leadership to the most up-to-date voter and waits (up to
/// `within`) until another member leads, so the set does not wait an election timeout for it.
async fn hand_off_leadership(driver: &driver::DriverHandle, node: NodeId, within: Duration) {
    let target = match driver.step_down(within).await {
        Ok(Some(target)) => target,
        Ok(None) => return, // not the leader, or nobody able to take over
        Err(e) => {
            tracing::warn!(error = %e, "could not hand leadership over before exiting");
            return;
        }
    };
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        match driver.status().await {
            Ok(s) if s.leader_id != node.0 && s.leader_id != 0 => {
                tracing::info!(leader = s.leader_id, "leadership handed over; exiting");
                return;
            }
            Ok(_) => {}
            Err(_) => return,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::warn!(to = %target, ?within,
        "leadership transfer did not finish in time: exiting anyway (the others elect a leader)");
}

/// Records that the set exists (see `Args::created_marker`), durably (file and directory
/// synced). A failure is logged, not fatal: the member serves either way, and `new` on an empty
/// dir still asks the peers first.
fn write_created_marker(marker: &std::path::Path, set_id: seqsvr_core::ids::SetId) {
    if marker.exists() {
        return;
    }
    let text = format!(
        "set {set_id} was created and served; with this file present, `--initial-cluster-state \
         new` is taken as `existing`\n"
    );
    let written = (|| -> std::io::Result<()> {
        let dir = marker.parent().unwrap_or(std::path::Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut file = std::fs::File::create(marker)?;
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        file.sync_all()?;
        std::fs::File::open(dir)?.sync_all()
    })();
    match written {
        Ok(()) => tracing::info!(marker = %marker.display(), "wrote the set's created marker"),
        Err(e) => tracing::warn!(
            marker = %marker.display(), error = %e,
            "cannot write the set's created marker: a member restarted on an empty data dir with \
             `new` will rely on asking its peers"
        ),
    }
}

/// The peer plane's client TLS (the peer CA bundle, this member's certificate, re-read when
/// they change), if configured.
fn peer_tls(config: &NodeConfig) -> anyhow::Result<Option<Arc<seqsvr_tls::ReloadingClientTls>>> {
    let Some(setup) = &config.tls else { return Ok(None) };
    setup.check_member_identity(config.set_id, config.node_id)?;
    let plane = seqsvr_tls::Plane::Peer;
    // Only members of this set may answer: the name of this set's StoreSvrs.
    let set = Some(config.set_id);
    let files = setup.files.clone();
    Ok(Some(seqsvr_tls::ReloadingClientTls::new(files, plane, set)?))
}

/// `--initial-cluster-state new` on an empty data dir creates the set: refuse when another
/// member already reports one (a leader, or a log past the bootstrap point). Such a member was wiped or is new: it
/// must join with `existing` and be added as a learner, or it would vote with an empty log and
/// could elect a leader that lacks committed entries. Members that do not answer say nothing
/// (at creation, the others may not be up yet).
async fn refuse_new_if_the_set_exists(config: &NodeConfig) -> anyhow::Result<()> {
    use seqsvr_proto::v1::store_admin_client::StoreAdminClient;
    let tls = &peer_tls(config)?.map(|t| t.current().1);
    let peers = config.members.iter().filter(|(id, _)| *id != config.node_id);
    let asks = peers.map(|(id, addr)| async move {
        let endpoint = seqsvr_tls::endpoint_with_config(addr, tls.as_ref()).ok()?;
        let endpoint = endpoint.connect_timeout(Duration::from_millis(500));
        let ask = async {
            let mut client = StoreAdminClient::new(endpoint.connect().await.ok()?);
            client.status(seqsvr_proto::v1::StoreStatusRequest {}).await.ok()
        };
        let status = tokio::time::timeout(Duration::from_secs(2), ask).await.ok()??.into_inner();
        Some((*id, addr.clone(), status))
    });
    for (id, addr, status) in futures::future::join_all(asks).await.into_iter().flatten() {
        // A peer still at the bootstrap point (created with `new` a moment ago, or started empty)
        // is part of the same creation; one with a leader or entries past it is a live set.
        let past_bootstrap = status.last_index > storage::BOOTSTRAP_LOG_INDEX
            || status.commit_index > storage::BOOTSTRAP_LOG_INDEX;
        if status.leader_id != 0 || past_bootstrap {
            anyhow::bail!(
                "--initial-cluster-state new, but set {} already exists: member {id} at {addr} \
                 reports term {}, leader {}, last log index {}. This member's data dir {} is \
                 empty, so it must NOT rejoin as a voter (its vote could elect a leader that lacks \
                 committed entries). Start it with --initial-cluster-state existing, then add it: \
                 `seqctl store remove --set {} {}` (if it is still a member), `seqctl store \
                 add-learner --set {} {} {}`, and `seqctl store promote --set {} {}` once it caught up",
                config.set_id,
                status.term,
                status.leader_id,
                status.last_index,
                config.data_dir.display(),
                config.set_id,
                config.node_id,
                config.set_id,
                config.node_id,
                config.addr,
                config.set_id,
                config.node_id
            );
        }
    }
    Ok(())
}
