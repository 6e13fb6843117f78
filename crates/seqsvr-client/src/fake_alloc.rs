//! One fake AllocSvr for the SDK's tests: a test says only what its AllocSvr answers
//! ([`FakeAlloc`]: every call it leaves alone answers UNIMPLEMENTED, `GetRouteTable` its
//! [`FakeAlloc::route_table`], `NextStream` each batch as a `NextBatch`), and [`serve`] puts it
//! on a loopback port.

use pb::seq_service_server::{SeqService, SeqServiceServer};
use seqsvr_proto::route_table_of;
use seqsvr_proto::v1 as pb;
use std::sync::Arc;
use tokio::sync::mpsc;
use tonic::transport::server::{Router, TcpIncoming};
use tonic::Status;

/// The replies of a fake's `NextStream`.
pub(crate) type TestStream =
    tokio_stream::wrappers::ReceiverStream<Result<pb::NextStreamReply, Status>>;

/// What a fake AllocSvr answers on its `SeqService`.
#[tonic::async_trait]
pub(crate) trait FakeAlloc: Send + Sync + Sized + 'static {
    /// What `GetRouteTable` answers.
    fn route_table(&self) -> Option<pb::RouteTable>;

    async fn next(&self, _: pb::NextRequest) -> Result<pb::NextResponse, Status> {
        Err(Status::unimplemented("next"))
    }

    async fn next_batch(&self, _: pb::NextBatchRequest) -> Result<pb::NextBatchResponse, Status> {
        Err(Status::unimplemented("next_batch"))
    }

    /// By default each batch of the stream answered as a `NextBatch` ([`stream_by_next_batch`]).
    fn next_stream(
        self: Arc<Self>,
        request: tonic::Streaming<pb::NextStreamRequest>,
    ) -> Result<TestStream, Status> {
        Ok(stream_by_next_batch(self, request))
    }

    async fn current(&self, _: pb::CurrentRequest) -> Result<pb::CurrentResponse, Status> {
        Err(Status::unimplemented("current"))
    }
}

/// A `NextStream` answered by `fake`'s `next_batch`, one batch at a time, with the
/// `independent` set (a failed batch is answered with its code, message and route table).
pub(crate) fn stream_by_next_batch<F: FakeAlloc>(
    fake: Arc<F>,
    mut incoming: tonic::Streaming<pb::NextStreamRequest>,
) -> TestStream {
    let (replies, out) = mpsc::channel(16);
    tokio::spawn(async move {
        while let Ok(Some(b)) = incoming.message().await {
            let batch = pb::NextBatchRequest {
                uids: b.uids,
                route_version: b.route_version,
                independent: true,
            };
            let reply = match fake.next_batch(batch).await {
                Ok(r) => pb::NextStreamReply {
                    batch_id: b.batch_id,
                    seqs: r.seqs,
                    route_table: r.route_table,
                    code: 0,
                    message: String::new(),
                },
                Err(status) => pb::NextStreamReply {
                    batch_id: b.batch_id,
                    seqs: Vec::new(),
                    route_table: route_table_of(&status),
                    code: status.code() as i32,
                    message: status.message().to_string(),
                },
            };
            if replies.send(Ok(reply)).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(out)
}

/// The `SeqService` of a [`FakeAlloc`] (the test keeps its own `Arc` to change its state).
struct Served<F>(Arc<F>);

#[tonic::async_trait]
impl<F: FakeAlloc> SeqService for Served<F> {
    async fn next(
        &self,
        request: tonic::Request<pb::NextRequest>,
    ) -> Result<tonic::Response<pb::NextResponse>, Status> {
        self.0.next(request.into_inner()).await.map(tonic::Response::new)
    }

    async fn next_batch(
        &self,
        request: tonic::Request<pb::NextBatchRequest>,
    ) -> Result<tonic::Response<pb::NextBatchResponse>, Status> {
        self.0.next_batch(request.into_inner()).await.map(tonic::Response::new)
    }

    type NextStreamStream = TestStream;

    async fn next_stream(
        &self,
        request: tonic::Request<tonic::Streaming<pb::NextStreamRequest>>,
    ) -> Result<tonic::Response<TestStream>, Status> {
        self.0.clone().next_stream(request.into_inner()).map(tonic::Response::new)
    }

    async fn current(
        &self,
        request: tonic::Request<pb::CurrentRequest>,
    ) -> Result<tonic::Response<pb::CurrentResponse>, Status> {
        self.0.current(request.into_inner()).await.map(tonic::Response::new)
    }

    async fn get_route_table(
        &self,
        _: tonic::Request<pb::GetRouteTableRequest>,
    ) -> Result<tonic::Response<pb::GetRouteTableResponse>, Status> {
        let route_table = self.0.route_table();
        Ok(tonic::Response::new(pb::GetRouteTableResponse { route_table }))
    }
}

/// A loopback port and its address, for a fake that names itself in its route table before
/// it serves ([`serve_on`]).
pub(crate) async fn bind() -> (tokio::net::TcpListener, String) {
    // The fakes serve plaintext, so the clients of a test dial plaintext: said, as every
    // process must (`tls::use_plaintext`).
    crate::tls::use_plaintext();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// Serves `fake` on `listener`, with the services `more` adds (another service of the same
/// AllocSvr, such as its `IdService`).
pub(crate) fn serve_on<F: FakeAlloc>(
    listener: tokio::net::TcpListener,
    fake: Arc<F>,
    more: impl FnOnce(Router) -> Router,
) {
    let router =
        tonic::transport::Server::builder().add_service(SeqServiceServer::new(Served(fake)));
    tokio::spawn(more(router).serve_with_incoming(TcpIncoming::from(listener)));
}

/// Serves `fake` on a new loopback port; its address.
pub(crate) async fn serve<F: FakeAlloc>(fake: Arc<F>) -> String {
    let (listener, addr) = bind().await;
    serve_on(listener, fake, |r| r);
    addr
}
