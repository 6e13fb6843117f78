//! The floor: a gRPC server with seqsvr's `SeqService` shape whose `Next` and `NextBatch` only
//! bump an in-memory counter per uid. Its throughput is what the RPC stack alone allows on this
//! machine; seqsvr's own numbers divided by the floor's say what the allocation tier costs.
//!
//! `seqbench floor-serve` runs it as a process of its own, served exactly as an AllocSvr serves
//! `SeqService` (`allocsvr/src/lib.rs::run`): the same connection limits
//! (`seqsvr_server::grpc::ConnectionLimits::SERVER`), the same role check
//! (`seqsvr_tls::auth_layer`), the same message size limits and, when the cluster file
//! has `[tls]`, the same mutual TLS (`seqsvr_tls::ServeExt::serve_maybe_tls` with an
//! AllocSvr's certificate), so it pays the crypto and the per-request checks seqsvr pays.
//! `GetRouteTable` answers one table that sends every uid to the floor itself, so the SDK
//! (`SeqClient`, coalescing or not) runs against it exactly as against a cluster.

use anyhow::Context;
use seqsvr_core::config::ClusterConfig;
use seqsvr_proto::v1::seq_service_server::{SeqService, SeqServiceServer};
use seqsvr_proto::v1::{self as pb};
use seqsvr_tls::ServeExt as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The route table version the floor serves: callers that hold it get no table back.
const ROUTE_VERSION: u64 = 1;
/// Used when no cluster file says otherwise (the local cluster's `section_size`).
const DEFAULT_SECTION_SIZE: u64 = 100_000;
/// Used when no cluster file says otherwise (the AllocSvr's default `max_batch_uids`).
const DEFAULT_MAX_BATCH_UIDS: usize = 10_000;

/// `seqbench floor-serve`: the floor as a process of its own.
#[derive(Clone, Debug, clap::Args)]
pub struct FloorServeArgs {
    /// host:port to listen on; also the address the route table gives (the SDK's seed).
    #[arg(long)]
    addr: String,
    /// Counters for uids [0, uids) (a larger uid wraps around).
    #[arg(long, default_value_t = 100_000)]
    uids: u64,
    /// The cluster file whose `[tls]`, `section_size` and `max_batch_uids` to serve with. With
    /// `[tls]`, --tls-cert/--tls-key are required (an AllocSvr's identity, e.g.
    /// data/local/certs/alloc-0-1.pem). Without a file, or a file without `[tls]` (then no
    /// certificate may be given): plaintext.
    #[arg(long)]
    config: Option<PathBuf>,
    /// This server's certificate (an AllocSvr's, from the cluster's PKI).
    #[arg(long, env = "SEQSVR_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert.
    #[arg(long, env = "SEQSVR_TLS_KEY")]
    tls_key: Option<PathBuf>,
}

#[derive(Clone)]
struct Floor {
    counters: Arc<Vec<AtomicU64>>,
    table: pb::RouteTable,
    /// Set when `floor-serve` is told to stop: its streams end (as an AllocSvr's do), so the
    /// graceful shutdown does not wait for clients to close them.
    stop: tokio::sync::watch::Sender<bool>,
}

impl Floor {
    fn new(uids: u64, table: pb::RouteTable) -> Floor {
        let counters = Arc::new((0..uids.max(1)).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        Floor { counters, table, stop: tokio::sync::watch::Sender::new(false) }
    }

    fn bump(&self, uid: u64) -> u64 {
        self.counters[(uid % self.counters.len() as u64) as usize].fetch_add(1, Ordering::Relaxed)
            + 1
    }

    /// The table rides on a reply only to a caller holding an older one, as an AllocSvr does.
    fn table_for(&self, route_version: u64) -> Option<pb::RouteTable> {
        (route_version < self.table.version).then(|| self.table.clone())
    }
}

/// One set (id 0) covering every uid, all of it served at `addr`.
pub fn route_table(addr: &str, section_size: u64) -> pb::RouteTable {
    let section_size = section_size.max(1);
    pb::RouteTable {
        set_id: 0,
        version: ROUTE_VERSION,
        uid_begin: 0,
        uid_end: u64::MAX,
        section_size,
        entries: vec![pb::RouteEntry {
            section_begin: 0,
            section_end: u64::MAX / section_size + 1,
            alloc_id: 1,
            addr: addr.to_string(),
        }],
    }
}

#[tonic::async_trait]
impl SeqService for Floor {
    async fn next(
        &self,
        r: Request<pb::NextRequest>,
    ) -> Result<Response<pb::NextResponse>, Status> {
        let r = r.into_inner();
        let seq = self.bump(r.uid);
        Ok(Response::new(pb::NextResponse { seq, route_table: self.table_for(r.route_version) }))
    }

    async fn next_batch(
        &self,
        r: Request<pb::NextBatchRequest>,
    ) -> Result<Response<pb::NextBatchResponse>, Status> {
        let r = r.into_inner();
        let seqs = r.uids.iter().map(|&u| self.bump(u)).collect();
        Ok(Response::new(pb::NextBatchResponse {
            seqs,
            route_table: self.table_for(r.route_version),
        }))
    }

    type NextStreamStream =
        tokio_stream::wrappers::ReceiverStream<Result<pb::NextStreamReply, Status>>;

    /// As the AllocSvr's: a task per stream reads batches and answers each (the floor never
    /// waits, so in order, with no batches in hand).
    async fn next_stream(
        &self,
        r: Request<tonic::Streaming<pb::NextStreamRequest>>,
    ) -> Result<Response<Self::NextStreamStream>, Status> {
        let mut incoming = r.into_inner();
        let (replies, out) = tokio::sync::mpsc::channel(16);
        let floor = self.clone();
        let mut stop = self.stop.subscribe();
        tokio::spawn(async move {
            let stopped = async move {
                let _ = stop.wait_for(|&stop| stop).await;
            };
            tokio::pin!(stopped);
            loop {
                let batch = tokio::select! {
                    () = &mut stopped => return,
                    message = incoming.message() => match message {
                        Ok(Some(batch)) => batch,
                        _ => return,
                    },
                };
                let reply = pb::NextStreamReply {
                    batch_id: batch.batch_id,
                    seqs: batch.uids.iter().map(|&u| floor.bump(u)).collect(),
                    route_table: floor.table_for(batch.route_version),
                    code: 0,
                    message: String::new(),
                };
                if replies.send(Ok(reply)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(out)))
    }

    async fn current(
        &self,
        r: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentResponse>, Status> {
        let r = r.into_inner();
        let seq =
            self.counters[(r.uid % self.counters.len() as u64) as usize].load(Ordering::Relaxed);
        Ok(Response::new(pb::CurrentResponse { seq, route_table: self.table_for(r.route_version) }))
    }

    async fn get_route_table(
        &self,
        _: Request<pb::GetRouteTableRequest>,
    ) -> Result<Response<pb::GetRouteTableResponse>, Status> {
        Ok(Response::new(pb::GetRouteTableResponse { route_table: Some(self.table.clone()) }))
    }
}

/// The service with the AllocSvr's message size limits (`allocsvr::seq_service`).
fn service(floor: Floor, max_batch_uids: usize) -> SeqServiceServer<Floor> {
    SeqServiceServer::new(floor)
        .max_decoding_message_size(seqsvr_proto::seq_request_max_bytes(max_batch_uids))
        .max_encoding_message_size(seqsvr_proto::REPLY_MAX_BYTES)
}

/// Starts a plaintext floor server on 127.0.0.1 (a free port) inside this process (`seqbench
/// run --target floor*` without `--url`, and the tests). Its CPU counts as the client's.
pub async fn start(uids: u64) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let floor = Floor::new(uids, route_table(&addr.to_string(), DEFAULT_SECTION_SIZE));
    tokio::spawn(
        seqsvr_server::grpc::ConnectionLimits::SERVER
            .apply(tonic::transport::Server::builder())
            .tcp_nodelay(true)
            .add_service(service(floor, DEFAULT_MAX_BATCH_UIDS))
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            ),
    );
    Ok(addr)
}

/// `seqbench floor-serve`: serves until SIGTERM or Ctrl-C.
pub async fn serve(args: FloorServeArgs) -> anyhow::Result<()> {
    let cluster = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading cluster config {}", path.display()))?;
            Some(
                ClusterConfig::from_toml_str(&text)
                    .with_context(|| format!("in {}", path.display()))?,
            )
        }
        None => None,
    };
    let tls = match (&cluster, &args.config) {
        (Some(cluster), Some(path)) => seqsvr_tls::TlsSetup::from_cluster(
            cluster.tls.as_ref(),
            path,
            args.tls_cert.as_deref(),
            args.tls_key.as_deref(),
            seqsvr_tls::ServerKind::AllocSvr,
            cluster.tls.is_none(),
        )?,
        // Without a cluster file: plaintext (a client identity in SEQSVR_TLS_* is not ours).
        _ => None,
    };
    let section_size = cluster.as_ref().map_or(DEFAULT_SECTION_SIZE, |c| c.section_size);
    let max_batch_uids =
        cluster.as_ref().map_or(DEFAULT_MAX_BATCH_UIDS, |c| c.alloc.max_batch_uids);
    let listener = tokio::net::TcpListener::bind(&args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let floor = Floor::new(args.uids, route_table(&args.addr, section_size));
    println!(
        "floor serving SeqService on {} ({} uids, {}), pid {}",
        args.addr,
        args.uids,
        match &tls {
            Some(t) => format!("mutual TLS as {}", t.files.cert.display()),
            None => "plaintext".to_string(),
        },
        std::process::id()
    );
    seqsvr_server::grpc::ConnectionLimits::SERVER
        .apply(tonic::transport::Server::builder())
        .tcp_nodelay(true)
        .layer(seqsvr_tls::auth_layer(tls.as_ref()))
        .add_service(service(floor.clone(), max_batch_uids))
        .serve_maybe_tls(listener, tls.as_ref(), async move {
            seqsvr_server::shutdown_signal().await;
            floor.stop.send_replace(true);
        })
        .await
        .context("floor server failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_table_sends_every_uid_to_the_floor() {
        let t = route_table("127.0.0.1:7490", 100_000);
        for uid in [0, 99_999, 100_000, 4_294_900_000, u64::MAX - 1] {
            assert!(t.uid_begin <= uid && uid < t.uid_end);
            let e = t.owner_of_uid(uid).unwrap_or_else(|| panic!("uid {uid} has no owner"));
            assert_eq!(e.addr, "127.0.0.1:7490");
        }
    }

    #[test]
    fn counters_count_per_uid_and_the_table_goes_only_to_older_holders() {
        let f = Floor::new(10, route_table("a:1", 100));
        assert_eq!((f.bump(3), f.bump(3), f.bump(13), f.bump(4)), (1, 2, 3, 1));
        assert!(f.table_for(0).is_some());
        assert!(f.table_for(ROUTE_VERSION).is_none());
    }
}
