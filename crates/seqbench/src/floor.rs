//! The floor: a gRPC server with seqsvr's `SeqService` shape whose `Next` only bumps an
//! in-memory counter. Its throughput is what the RPC stack alone allows on this machine.

use seqsvr_proto::v1::seq_service_server::{SeqService, SeqServiceServer};
use seqsvr_proto::v1::{self as pb};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::{Request, Response, Status};

struct Floor {
    counters: Arc<Vec<AtomicU64>>,
}

#[tonic::async_trait]
impl SeqService for Floor {
    async fn next(
        &self,
        r: Request<pb::NextRequest>,
    ) -> Result<Response<pb::NextResponse>, Status> {
        let uid = r.into_inner().uid as usize % self.counters.len();
        let seq = self.counters[uid].fetch_add(1, Ordering::Relaxed) + 1;
        Ok(Response::new(pb::NextResponse { seq, route_table: None }))
    }

    async fn next_batch(
        &self,
        r: Request<pb::NextBatchRequest>,
    ) -> Result<Response<pb::NextBatchResponse>, Status> {
        let seqs = r
            .into_inner()
            .uids
            .iter()
            .map(|&u| {
                self.counters[u as usize % self.counters.len()].fetch_add(1, Ordering::Relaxed) + 1
            })
            .collect();
        Ok(Response::new(pb::NextBatchResponse { seqs, route_table: None }))
    }

    async fn current(
        &self,
        r: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentResponse>, Status> {
        let uid = r.into_inner().uid as usize % self.counters.len();
        Ok(Response::new(pb::CurrentResponse {
            seq: self.counters[uid].load(Ordering::Relaxed),
            route_table: None,
        }))
    }

    async fn get_route_table(
        &self,
        _: Request<pb::GetRouteTableRequest>,
    ) -> Result<Response<pb::GetRouteTableResponse>, Status> {
        Ok(Response::new(pb::GetRouteTableResponse { route_table: None }))
    }
}

/// Starts the floor server on 127.0.0.1 (a free port) in this process.
pub async fn start(uids: u64) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let counters = Arc::new((0..uids.max(1)).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    tokio::spawn(
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(SeqServiceServer::new(Floor { counters }))
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            ),
    );
    Ok(addr)
}
