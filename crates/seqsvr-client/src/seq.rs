//! The client SDK of the public API. Give it one seed address per set (any AllocSvr of the set);
//! it learns each set's route table from the seeds and keeps it fresh from the tables that ride
//! on replies (seqsvr's embedded route table). It retries NOT_OWNER at once with the table it
//! came with (a few in a row, then it backs off), and UNAVAILABLE with jittered, capped backoff,
//! always within the caller's deadline: the policy of [`crate::retry`].
//!
//! A `next_batch` whose uids live on several AllocSvrs is split into one call per AllocSvr; each
//! call is all-or-nothing, the whole batch is not (a failed part only leaves gaps). Every retry
//! regroups the uids not answered yet by their owners in the current tables, so a hand-over
//! that splits a group sends each part to its new owner.
//!
//! Route tables never go back: a table is installed only if its version is higher than the one
//! held for its set, whoever sent it (an AllocSvr may answer with a table older than ours).
//!
//! Concurrent `next` calls bound for the same AllocSvr are coalesced into one `NextBatch` with
//! independent entries (as TiDB's PD client batches timestamp requests): one AllocSvr gets at
//! most `max_in_flight` RPCs from this client at a time, and every call that arrives while they
//! are out rides the next one. An entry the AllocSvr cannot serve at once (hand-over, waiting
//! for an advance) comes back as 0 and is retried alone, so it never holds up the others.

use crate::retry::{retryable, RetryPolicy};
use seqsvr_proto::v1::seq_service_client::SeqServiceClient;
use seqsvr_proto::v1::{self as pb};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status};

const ATTEMPT_TIMEOUT_MAX: Duration = Duration::from_secs(3);
/// When refreshing route tables from several AllocSvrs at once: how long the others may still
/// answer after the first table arrived.
const SEED_GRACE: Duration = Duration::from_millis(200);

/// How the SDK talks to AllocSvrs.
#[derive(Clone, Debug)]
pub struct SeqClientOptions {
    /// Coalesce concurrent `next` calls bound for the same AllocSvr into one RPC. Under load
    /// this multiplies throughput (one RPC's cost is shared by many calls); a lone caller pays
    /// one in-process hop.
    pub coalesce: bool,
    /// Send coalesced batches as messages on one long-lived `NextStream` per AllocSvr (one
    /// message each way per batch). False: one `NextBatch` RPC per batch, for a proxy between
    /// clients and AllocSvrs that does not pass bidirectional streams. An AllocSvr built before
    /// `NextStream` gets RPCs either way.
    pub stream: bool,
    /// Most calls in one coalesced RPC (keep it within the AllocSvrs' `max_batch_uids`).
    pub max_coalesced: usize,
    /// Coalesced RPCs in flight per AllocSvr; calls arriving meanwhile wait for the next one.
    pub max_in_flight: usize,
    /// Most calls queued for one AllocSvr's coalesced RPCs (besides those the RPCs carry); one
    /// more fails at once with RESOURCE_EXHAUSTED instead of piling up in memory while the
    /// AllocSvr is slower than the calls arrive.
    pub max_queued: usize,
}

impl Default for SeqClientOptions {
    fn default() -> Self {
        SeqClientOptions {
            coalesce: true,
            stream: true,
            max_coalesced: 1000,
            max_in_flight: 2,
            max_queued: 100_000,
        }
    }
}

pub struct SeqClient {
    seeds: Vec<String>,
    options: SeqClientOptions,
    /// One route table per known set, each entry resolved to its AllocSvr's [`Peer`].
    routes: RwLock<Routes>,
    /// Every AllocSvr met so far (in a table or as a seed), by address: looked up when a table
    /// is installed or an address is asked directly, never on a call's path.
    peers: Mutex<HashMap<String, Arc<Peer>>>,
    /// Coalesced RPCs sent (for tests and metrics: calls ÷ RPCs is the coalescing factor).
    coalesced_rpcs: Arc<std::sync::atomic::AtomicU64>,
    counters: Counters,
}

/// What the SDK did so far, for an application's own metrics ([`SeqClient::stats`]): the
/// client side of the servers' `seqsvr_alloc_*` series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Public calls made (`next`, `current`, `next_batch`).
    pub calls: u64,
    /// Calls that ended in an error.
    pub failed: u64,
    /// Attempts repeated at once after a NOT_OWNER answer named the owner (a redirect).
    pub redirects: u64,
    /// Attempts repeated after a back-off (UNAVAILABLE, a timeout, no owner yet).
    pub retries: u64,
    /// Route tables asked for (`GetRouteTable` RPCs).
    pub route_refreshes: u64,
    /// Newer route tables installed (from a refresh, an answer, or a NOT_OWNER).
    pub route_tables_installed: u64,
    /// RPCs that carried coalesced `next` calls.
    pub coalesced_rpcs: u64,
}

/// The route tables and, for each entry of each, the AllocSvr it names (so a call finds its
/// AllocSvr's channel and coalescing queue from one look, without hashing an address).
#[derive(Default)]
struct Routes {
    tables: Vec<pb::RouteTable>,
    /// `peers[t][e]`: the AllocSvr of `tables[t].entries[e]`.
    peers: Vec<Vec<Arc<Peer>>>,
}

/// One AllocSvr as this client talks to it.
struct Peer {
    addr: String,
    /// Its channel and coalescing queue, built under one generation of the process's TLS
    /// identity (`tls::generation`: a rotated certificate gets a new channel and coalescing
    /// task on the next call; calls already on the old ones finish there).
    conn: Mutex<Option<Conn>>,
}

struct Conn {
    generation: u64,
    channel: Channel,
    /// The queue of its coalescing task, started on first use; it ends with the `Conn`.
    queue: Option<mpsc::Sender<Pending>>,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    failed: AtomicU64,
    redirects: AtomicU64,
    retries: AtomicU64,
    route_refreshes: AtomicU64,
    route_tables_installed: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

type Served = Result<(u64, Option<pb::RouteTable>), Status>;

/// A `next` call waiting for a coalesced RPC.
struct Pending {
    uid: u64,
    route_version: u64,
    until: Instant,
    reply: oneshot::Sender<Served>,
}

/// Adds [`seqsvr_proto::NO_FORWARD_METADATA`] to every call the SDK makes to an AllocSvr: the
/// SDK follows the route tables itself, so an AllocSvr that does not own a uid answers NOT_OWNER
/// with its table (one hop, no server-side forwarding behind the SDK's back).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoForward;

impl tonic::service::Interceptor for NoForward {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        request.metadata_mut().insert(
            seqsvr_proto::NO_FORWARD_METADATA,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        Ok(request)
    }
}

/// A channel to an AllocSvr whose every call carries [`NoForward`].
pub type AllocChannel = tonic::service::interceptor::InterceptedService<Channel, NoForward>;

/// A `SeqService` client with the message size limits of the service
/// (`seqsvr_proto::SEQ_REQUEST_MAX_BYTES` out, `REPLY_MAX_BYTES` in), every call marked
/// [`NoForward`].
fn seq_client(channel: Channel) -> SeqServiceClient<AllocChannel> {
    SeqServiceClient::with_interceptor(channel, NoForward)
        .max_encoding_message_size(seqsvr_proto::SEQ_REQUEST_MAX_BYTES)
        .max_decoding_message_size(seqsvr_proto::REPLY_MAX_BYTES)
}

/// One AllocSvr's coalescing task: once an in-flight slot is free, takes every call waiting (up
/// to `max_coalesced`) and sends them as one batch; calls pile up in the queue meanwhile.
///
/// Batches go as messages on one long-lived `NextStream` stream to the AllocSvr (opened on the
/// first batch, and again after it broke): a batch costs one message each way, not a whole RPC.
/// An AllocSvr that takes no stream (UNIMPLEMENTED: built before `NextStream`; RESOURCE_EXHAUSTED:
/// at its `alloc.max_streams`) gets each batch as a `NextBatch` RPC, driven here too (no task
/// per RPC); streams are tried again after
/// `STREAM_RETRY_AFTER`, in case it was upgraded. A batch not answered within its timeout fails
/// with UNAVAILABLE; if no reply at all came on its stream since it was sent, the stream is
/// stuck and is dropped (its other batches fail with it; the next batch opens a new one).
/// Everything in flight finishes, or fails, even after the queue closed.
async fn coalesce(
    mut client: SeqServiceClient<AllocChannel>,
    addr: String,
    mut queue: mpsc::Receiver<Pending>,
    options: SeqClientOptions,
    rpcs: Arc<std::sync::atomic::AtomicU64>,
) {
    use futures::StreamExt as _;
    let addr: Arc<str> = addr.into();
    let mut unary = futures::stream::FuturesUnordered::new();
    let mut stream: Option<BatchStream> = None;
    // When the AllocSvr last answered UNIMPLEMENTED to a stream (None: streams are used).
    let mut streams_refused: Option<Instant> = None;
    let mut next_batch_id = 0u64;
    let mut expiry = tokio::time::interval(STREAM_EXPIRY_CHECK);
    expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut open = true;
    loop {
        let sent = stream.as_ref().map_or(0, |s| s.sent.len());
        if !open && unary.is_empty() && sent == 0 {
            break;
        }
        tokio::select! {
            biased;
            Some(()) = unary.next(), if !unary.is_empty() => {}
            reply = next_reply(&mut stream), if stream.is_some() => match reply {
                Some(Ok(reply)) => {
                    let batch = stream.as_mut().and_then(|s| {
                        s.last_reply = Instant::now();
                        s.sent.remove(&reply.batch_id)
                    });
                    // Unknown: a batch that already timed out here.
                    if let Some(batch) = batch {
                        answer_stream_batch(&addr, batch.calls, reply);
                    }
                }
                ended => {
                    let status = match ended {
                        // The code as an RPC would have ended with it (OUT_OF_RANGE for a batch
                        // over the AllocSvr's limit, UNAVAILABLE for a broken connection, ...).
                        Some(Err(status)) => Status::new(status.code(), format!(
                            "the stream to {addr} ended: {}", status.message()
                        )),
                        _ => Status::unavailable(format!("{addr} ended its stream (shutting down?)")),
                    };
                    drop_stream(&mut stream, &status);
                }
            },
            _ = expiry.tick(), if sent > 0 => {
                if let Some(s) = stream.as_mut() {
                    if s.expire(&addr) {
                        let status = Status::unavailable(format!(
                            "{addr} answered nothing on its stream for too long: stream dropped"
                        ));
                        drop_stream(&mut stream, &status);
                    }
                }
            }
            first = queue.recv(), if open && unary.len() + sent < options.max_in_flight => {
                let Some(first) = first else {
                    open = false;
                    continue;
                };
                let mut batch = vec![first];
                while batch.len() < options.max_coalesced {
                    match queue.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
                batch.retain(|p| !p.reply.is_closed()); // callers that gave up
                if batch.is_empty() {
                    continue;
                }
                rpcs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let timeout = batch_timeout(&batch);
                if timeout.is_zero() {
                    let status = Status::deadline_exceeded("deadline passed before the batch was sent");
                    answer_all(batch, &status);
                    continue;
                }
                let try_stream = options.stream
                    && streams_refused.is_none_or(|at| at.elapsed() >= STREAM_RETRY_AFTER);
                if try_stream && stream.is_none() {
                    match open_stream(&mut client, options.max_in_flight, timeout).await {
                        Ok(s) => {
                            stream = Some(s);
                            streams_refused = None;
                        }
                        // An AllocSvr built before streams, or at its `alloc.max_streams`.
                        Err(status)
                            if matches!(status.code(), Code::Unimplemented | Code::ResourceExhausted) =>
                        {
                            if streams_refused.is_none() {
                                tracing::info!(%addr, reason = %status.message(), "the AllocSvr \
                                    takes no stream: coalesced calls go as NextBatch RPCs");
                            }
                            streams_refused = Some(Instant::now());
                        }
                        Err(status) => {
                            answer_all(batch, &Status::new(status.code(), format!(
                                "cannot open a stream to {addr}: {}", status.message()
                            )));
                            continue;
                        }
                    }
                }
                match stream.as_mut() {
                    Some(s) => {
                        next_batch_id += 1;
                        if let Err(batch) = s.send(next_batch_id, batch, timeout) {
                            let status = Status::unavailable(format!("the stream to {addr} closed"));
                            answer_all(batch, &status);
                            drop_stream(&mut stream, &status);
                        }
                    }
                    None => unary.push(send_coalesced(client.clone(), addr.clone(), batch, timeout)),
                }
            }
        }
    }
}

/// How often the coalescing task looks for stream batches past their timeout.
const STREAM_EXPIRY_CHECK: Duration = Duration::from_millis(100);

/// How long an AllocSvr that refused `NextStream` (UNIMPLEMENTED) gets RPCs before a stream is
/// tried again (it may have been upgraded meanwhile).
const STREAM_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A batch sent on a stream, waiting for its reply.
struct SentBatch {
    calls: Vec<Pending>,
    sent_at: Instant,
    until: Instant,
}

/// One AllocSvr's `NextStream`, as the coalescing task holds it.
struct BatchStream {
    requests: mpsc::Sender<pb::NextStreamRequest>,
    replies: tonic::Streaming<pb::NextStreamReply>,
    /// At most `max_in_flight`, by batch id.
    sent: HashMap<u64, SentBatch>,
    /// When the last reply arrived (when the stream opened, before the first).
    last_reply: Instant,
}

impl BatchStream {
    /// Sends `calls` as batch `batch_id`; gives them back if the stream is closed.
    fn send(
        &mut self,
        batch_id: u64,
        calls: Vec<Pending>,
        timeout: Duration,
    ) -> Result<(), Vec<Pending>> {
        let request = pb::NextStreamRequest {
            batch_id,
            uids: calls.iter().map(|p| p.uid).collect(),
            route_version: calls.iter().map(|p| p.route_version).min().unwrap_or(0),
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1),
        };
        // The channel holds `max_in_flight` requests, and no more batches are ever in flight.
        if self.requests.try_send(request).is_err() {
            return Err(calls);
        }
        let now = Instant::now();
        self.sent.insert(batch_id, SentBatch { calls, sent_at: now, until: now + timeout });
        Ok(())
    }

    /// Fails the batches past their timeout (UNAVAILABLE; a late reply to one is ignored).
    /// True if the stream looks stuck: no reply came since the earliest of them was sent.
    fn expire(&mut self, addr: &str) -> bool {
        let now = Instant::now();
        let late: Vec<u64> =
            self.sent.iter().filter(|(_, b)| b.until <= now).map(|(&id, _)| id).collect();
        let mut stuck = false;
        for id in late {
            let batch = self.sent.remove(&id).expect("listed just now");
            stuck |= self.last_reply <= batch.sent_at;
            let status = Status::unavailable(format!("{addr} did not answer a batch in time"));
            answer_all(batch.calls, &status);
        }
        stuck
    }
}

/// Opens a `NextStream` to the AllocSvr (waits for its response headers, at most `timeout`).
async fn open_stream(
    client: &mut SeqServiceClient<AllocChannel>,
    max_in_flight: usize,
    timeout: Duration,
) -> Result<BatchStream, Status> {
    let (requests, outgoing) = mpsc::channel(max_in_flight);
    let opened = client.next_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing));
    match tokio::time::timeout(timeout, opened).await {
        Ok(Ok(replies)) => {
            let replies = replies.into_inner();
            let last_reply = Instant::now();
            Ok(BatchStream { requests, replies, sent: HashMap::new(), last_reply })
        }
        Ok(Err(status)) => Err(status),
        Err(_) => Err(Status::unavailable(format!("no answer in {timeout:?}"))),
    }
}

/// The next reply on `stream` (None: it ended). Only polled while a stream is held.
async fn next_reply(
    stream: &mut Option<BatchStream>,
) -> Option<Result<pb::NextStreamReply, Status>> {
    use futures::StreamExt as _;
    match stream {
        Some(s) => s.replies.next().await,
        None => std::future::pending().await,
    }
}

/// Fails every batch still waiting on the stream with `status`, and lets the stream go.
fn drop_stream(stream: &mut Option<BatchStream>, status: &Status) {
    if let Some(s) = stream.take() {
        if !s.sent.is_empty() {
            tracing::debug!(batches = s.sent.len(), error = %status.message(), "stream dropped");
        }
        for (_, batch) in s.sent {
            answer_all(batch.calls, status);
        }
    }
}

fn answer_all(calls: Vec<Pending>, status: &Status) {
    for p in calls {
        let _ = p.reply.send(Err(status.clone()));
    }
}

/// How long the batch may take: until the latest of its callers' deadlines, at most
/// `ATTEMPT_TIMEOUT_MAX`.
fn batch_timeout(batch: &[Pending]) -> Duration {
    let until = batch.iter().map(|p| p.until).max().unwrap_or_else(Instant::now);
    until.saturating_duration_since(Instant::now()).min(ATTEMPT_TIMEOUT_MAX)
}

/// Hands each caller of a stream batch its answer, as [`send_coalesced`] does for an RPC.
fn answer_stream_batch(addr: &str, calls: Vec<Pending>, reply: pb::NextStreamReply) {
    if reply.code != 0 {
        let status = Status::new(Code::from_i32(reply.code), reply.message);
        // As a NOT_OWNER of an RPC carries it, so the retry finds it where it looks.
        let status = match &reply.route_table {
            Some(table) => seqsvr_proto::with_route_table(status, table),
            None => status,
        };
        return answer_all(calls, &status);
    }
    answer_values(addr, calls, reply.seqs, reply.route_table);
}

/// Hands each caller its value (the route table, if any, to the first: installing it once is
/// enough); all of them fail if the AllocSvr answered a different number of values.
fn answer_values(
    addr: &str,
    calls: Vec<Pending>,
    seqs: Vec<u64>,
    mut table: Option<pb::RouteTable>,
) {
    if seqs.len() != calls.len() {
        let status = Status::internal(format!(
            "{addr} answered {} values for {} uids",
            seqs.len(),
            calls.len()
        ));
        return answer_all(calls, &status);
    }
    for (p, seq) in calls.into_iter().zip(seqs) {
        let _ = p.reply.send(Ok((seq, table.take())));
    }
}

/// Sends one coalesced RPC (to an AllocSvr without `NextStream`) and hands each caller its
/// answer.
async fn send_coalesced(
    mut client: SeqServiceClient<AllocChannel>,
    addr: Arc<str>,
    batch: Vec<Pending>,
    timeout: Duration,
) {
    let route_version = batch.iter().map(|p| p.route_version).min().unwrap_or(0);
    let uids: Vec<u64> = batch.iter().map(|p| p.uid).collect();
    let mut req =
        tonic::Request::new(pb::NextBatchRequest { uids, route_version, independent: true });
    req.set_timeout(timeout);
    let result = match tokio::time::timeout(timeout, client.next_batch(req)).await {
        Ok(r) => r.map(|r| r.into_inner()),
        Err(_) => Err(Status::unavailable(format!("{addr} did not answer in {timeout:?}"))),
    };
    match result {
        Ok(r) => answer_values(&addr, batch, r.seqs, r.route_table),
        Err(status) => answer_all(batch, &status),
    }
}

impl SeqClient {
    /// Learns the route tables from the seeds (one per set is enough). Fails if no seed
    /// answered within `deadline`, and at once (FAILED_PRECONDITION) if the process chose no
    /// transport: call `tls::set_process_tls` (mutual TLS) or `tls::use_plaintext` first.
    pub async fn connect(seeds: &[String], deadline: Duration) -> Result<SeqClient, Status> {
        SeqClient::connect_with(seeds, deadline, SeqClientOptions::default()).await
    }

    /// `connect` with options other than the defaults.
    pub async fn connect_with(
        seeds: &[String],
        deadline: Duration,
        options: SeqClientOptions,
    ) -> Result<SeqClient, Status> {
        if seeds.is_empty() {
            return Err(Status::invalid_argument("no seed addresses: give one AllocSvr per set"));
        }
        // At once, not after the deadline spent retrying: TLS or plaintext is the process's
        // explicit choice (`tls::set_process_tls` / `tls::use_plaintext`).
        crate::tls::process_transport()?;
        if options.max_coalesced == 0 || options.max_in_flight == 0 || options.max_queued == 0 {
            return Err(Status::invalid_argument(
                "max_coalesced, max_in_flight and max_queued must be at least 1",
            ));
        }
        let client = SeqClient {
            seeds: seeds.to_vec(),
            options,
            routes: RwLock::new(Routes::default()),
            peers: Mutex::new(HashMap::new()),
            coalesced_rpcs: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            counters: Counters::default(),
        };
        let until = Instant::now() + deadline;
        let mut backoff = RetryPolicy::STANDARD.backoff();
        loop {
            let errors = client.refresh_from(&client.seeds, until).await;
            if !client.routes().tables.is_empty() {
                return Ok(client);
            }
            if !backoff.wait(until).await {
                return Err(Status::unavailable(format!(
                    "no seed answered with a route table: {}",
                    errors.join("; ")
                )));
            }
        }
    }

    /// The SDK's counters so far (cheap: relaxed atomic loads).
    pub fn stats(&self) -> ClientStats {
        let c = &self.counters;
        ClientStats {
            calls: c.calls.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            redirects: c.redirects.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            route_refreshes: c.route_refreshes.load(Ordering::Relaxed),
            route_tables_installed: c.route_tables_installed.load(Ordering::Relaxed),
            coalesced_rpcs: self.coalesced_rpcs(),
        }
    }

    /// The route tables known now, one per set.
    pub fn route_tables(&self) -> Vec<pb::RouteTable> {
        self.routes().tables.clone()
    }

    /// The route table known now for the set that holds `uid`, if any.
    pub fn route_table_for(&self, uid: u64) -> Option<pb::RouteTable> {
        self.table_for(uid)
    }

    /// Keeps each of `tables` that is newer than the one held for its set (a table learnt
    /// elsewhere, e.g. an AllocSvr's own from its store); a table never goes back.
    pub fn learn_routes(&self, tables: &[pb::RouteTable]) {
        for table in tables {
            self.install(table.clone());
        }
    }

    fn routes(&self) -> std::sync::RwLockReadGuard<'_, Routes> {
        self.routes.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The AllocSvr at `addr` (the same one for every table and call that names it).
    fn peer(&self, addr: &str) -> Arc<Peer> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = peers.get(addr) {
            return p.clone();
        }
        let p = Arc::new(Peer { addr: addr.to_string(), conn: Mutex::new(None) });
        peers.insert(addr.to_string(), p.clone());
        p
    }

    fn channel(&self, addr: &str) -> Result<Channel, Status> {
        self.peer(addr).channel()
    }

    /// Keeps `table` if it is newer than what we have for its set: a table never goes back.
    fn install(&self, table: pb::RouteTable) {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        let Routes { tables, peers } = &mut *routes;
        let at = match tables.iter().position(|t| t.set_id == table.set_id) {
            Some(i) if tables[i].version >= table.version => return,
            Some(i) => i,
            None => tables.len(),
        };
        let resolved: Vec<Arc<Peer>> = table.entries.iter().map(|e| self.peer(&e.addr)).collect();
        if at == tables.len() {
            tables.push(table);
            peers.push(resolved);
            // Sorted by uid range, the peers in step with their tables.
            let mut both: Vec<_> =
                std::mem::take(tables).into_iter().zip(std::mem::take(peers)).collect();
            both.sort_by_key(|(t, _)| t.uid_begin);
            (*tables, *peers) = both.into_iter().unzip();
        } else {
            tables[at] = table;
            peers[at] = resolved;
        }
        bump(&self.counters.route_tables_installed);
    }

    /// Asks each address for its route table; returns the errors of those that failed.
    async fn refresh_from(&self, addrs: &[String], until: Instant) -> Vec<String> {
        use futures::StreamExt;
        let left = until.saturating_duration_since(Instant::now()).min(ATTEMPT_TIMEOUT_MAX);
        if left.is_zero() {
            return Vec::new();
        }
        // Every address at once: one hung AllocSvr (a paused container, a half-open connection)
        // must not take the whole deadline before the others are asked.
        let mut asks: futures::stream::FuturesUnordered<_> = addrs
            .iter()
            .map(|addr| async move {
                bump(&self.counters.route_refreshes);
                let result = async {
                    let mut client = seq_client(self.channel(addr)?);
                    let mut req = tonic::Request::new(pb::GetRouteTableRequest {});
                    req.set_timeout(left);
                    match tokio::time::timeout(left, client.get_route_table(req)).await {
                        Ok(r) => r.map(|r| r.into_inner().route_table),
                        Err(_) => Err(Status::deadline_exceeded(format!("{addr} did not answer"))),
                    }
                }
                .await;
                (addr, result)
            })
            .collect();
        let mut errors = Vec::new();
        // Once one table arrived, the others get SEED_GRACE more (tables of other sets come
        // from their own AllocSvrs; a set still unknown is asked again on its first call).
        let mut grace_until: Option<Instant> = None;
        loop {
            let next = match grace_until {
                Some(at) => match tokio::time::timeout_at(at, asks.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        errors.push(format!("{} more did not answer in time", asks.len()));
                        break;
                    }
                },
                None => asks.next().await,
            };
            let Some((addr, result)) = next else { break };
            match result {
                Ok(Some(table)) => {
                    self.install(table);
                    grace_until.get_or_insert_with(|| Instant::now() + SEED_GRACE);
                }
                Ok(None) => errors.push(format!("{addr}: empty route table")),
                Err(status) => errors.push(format!("{addr}: {}", status.message())),
            }
        }
        errors
    }

    /// Refreshes the table of the set owning `uid` (or every set if none owns it) from every
    /// AllocSvr in it and the seeds.
    async fn refresh_for(&self, uid: u64, until: Instant) {
        let mut addrs: Vec<String> = match self.table_for(uid) {
            Some(t) => t.entries.iter().map(|e| e.addr.clone()).collect(),
            None => Vec::new(),
        };
        addrs.sort();
        addrs.dedup();
        addrs.extend(self.seeds.iter().cloned());
        self.refresh_from(&addrs, until).await;
    }

    fn table_for(&self, uid: u64) -> Option<pb::RouteTable> {
        self.routes().tables.iter().find(|t| t.uid_begin <= uid && uid < t.uid_end).cloned()
    }

    /// Where `uid` is served and the route version we hold for its set, from one look at the
    /// tables (every call goes through here: no table or address is copied). None: no set's
    /// table has it.
    fn route_of(&self, uid: u64) -> Option<Result<(Arc<Peer>, u64), Status>> {
        let routes = self.routes();
        let t = routes.tables.iter().position(|t| t.uid_begin <= uid && uid < t.uid_end)?;
        let table = &routes.tables[t];
        Some(match table.owner_index_of_section(table.section_of(uid)) {
            Some(e) => Ok((routes.peers[t][e].clone(), table.version)),
            None => Err(Status::unavailable(format!(
                "no AllocSvr serves uid {uid}'s section yet (route table v{} of set {})",
                table.version, table.set_id
            ))),
        })
    }

    /// `route_of`, learning the tables from the seeds first if no table has `uid`.
    async fn locate(&self, uid: u64, until: Instant) -> Result<(Arc<Peer>, u64), Status> {
        if let Some(route) = self.route_of(uid) {
            return route;
        }
        self.refresh_from(&self.seeds, until).await;
        self.route_of(uid).unwrap_or_else(|| {
            let sets: Vec<String> = self
                .route_tables()
                .iter()
                .map(|t| format!("set {} [{}, {})", t.set_id, t.uid_begin, t.uid_end))
                .collect();
            Err(Status::invalid_argument(format!(
                "uid {uid} is outside every set of the cluster ({})",
                sets.join(", ")
            )))
        })
    }

    /// The retry loop shared by every call: `attempt(allocsvr, route_version, until)`.
    async fn call<T, F, Fut>(&self, uid: u64, deadline: Duration, attempt: F) -> Result<T, Status>
    where
        F: Fn(Arc<Peer>, u64, Instant) -> Fut,
        Fut: Future<Output = Result<(T, Option<pb::RouteTable>), Status>>,
    {
        bump(&self.counters.calls);
        let result = self.call_attempts(uid, deadline, attempt).await;
        if result.is_err() {
            bump(&self.counters.failed);
        }
        result
    }

    async fn call_attempts<T, F, Fut>(
        &self,
        uid: u64,
        deadline: Duration,
        attempt: F,
    ) -> Result<T, Status>
    where
        F: Fn(Arc<Peer>, u64, Instant) -> Fut,
        Fut: Future<Output = Result<(T, Option<pb::RouteTable>), Status>>,
    {
        let until = Instant::now() + deadline;
        let mut backoff = RetryPolicy::STANDARD.backoff();
        loop {
            let status = match self.locate(uid, until).await {
                Err(s) if s.code() == Code::InvalidArgument => return Err(s),
                Err(s) => s,
                Ok((peer, version)) => {
                    let now = Instant::now();
                    let left = until.saturating_duration_since(now);
                    if left.is_zero() {
                        return Err(Status::deadline_exceeded("deadline passed"));
                    }
                    let timeout = left.min(ATTEMPT_TIMEOUT_MAX);
                    let result = match tokio::time::timeout(
                        timeout,
                        attempt(peer.clone(), version, now + timeout),
                    )
                    .await
                    {
                        Ok(r) => r,
                        Err(_) => Err(Status::unavailable(format!(
                            "{} did not answer in {timeout:?}",
                            peer.addr
                        ))),
                    };
                    match result {
                        Ok((value, table)) => {
                            if let Some(t) = table {
                                self.install(t);
                            }
                            return Ok(value);
                        }
                        Err(s) if s.code() == Code::FailedPrecondition => {
                            if let Some(t) = seqsvr_proto::route_table_of(&s) {
                                self.install(t);
                                // At once, a few times in a row; then back off like any retry.
                                if backoff.redirect() {
                                    bump(&self.counters.redirects);
                                    continue;
                                }
                            } else {
                                return Err(s);
                            }
                            s
                        }
                        Err(s) if retryable(s.code()) => s,
                        Err(s) => return Err(s),
                    }
                }
            };
            if !backoff.wait(until).await {
                return Err(status);
            }
            bump(&self.counters.retries);
            self.refresh_for(uid, until).await;
        }
    }

    /// The next sequence of `uid`.
    pub async fn next(&self, uid: u64, deadline: Duration) -> Result<u64, Status> {
        self.call(uid, deadline, |peer, route_version, until| async move {
            if self.options.coalesce {
                match self.next_coalesced(&peer, uid, route_version, until).await {
                    Ok((seq, table)) if seq > 0 => return Ok((seq, table)),
                    // Not servable at once (hand-over, waiting for an advance): ask alone, and
                    // let the AllocSvr wait for it.
                    Ok((_, table)) => {
                        if let Some(t) = table {
                            self.install(t);
                        }
                    }
                    // E.g. more calls than the AllocSvr takes in one batch: ask alone.
                    Err(s) if s.code() == Code::InvalidArgument => {}
                    Err(s) => return Err(s),
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            let mut req = tonic::Request::new(pb::NextRequest { uid, route_version });
            req.set_timeout(left);
            let r = seq_client(peer.channel()?).next(req).await?.into_inner();
            Ok((r.seq, r.route_table))
        })
        .await
    }

    /// Coalesced RPCs sent so far (calls ÷ this = how many calls one RPC carried).
    pub fn coalesced_rpcs(&self) -> u64 {
        self.coalesced_rpcs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues `uid` for the next coalesced RPC to `peer`; 0 = not served at once.
    async fn next_coalesced(
        &self,
        peer: &Peer,
        uid: u64,
        route_version: u64,
        until: Instant,
    ) -> Served {
        let addr = &peer.addr;
        let (reply, answer) = oneshot::channel();
        let queued = self.queue(peer, Pending { uid, route_version, until, reply })?;
        match queued {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Err(Status::resource_exhausted(format!(
                    "{} calls already wait for a coalesced RPC to {addr} (SeqClientOptions::\
                     max_queued): the AllocSvr answers slower than calls arrive; back off before \
                     retrying, or raise max_queued or max_in_flight",
                    self.options.max_queued
                )))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(Status::unavailable(format!("the coalescing task for {addr} ended")))
            }
        }
        answer
            .await
            .unwrap_or_else(|_| Err(Status::unavailable(format!("no answer from {addr}'s batch"))))
    }

    /// Puts `call` on the queue of `peer`'s coalescing task (started on first use, and again
    /// for a new TLS generation; it ends with its `Conn`, so with the client).
    fn queue(
        &self,
        peer: &Peer,
        call: Pending,
    ) -> Result<Result<(), mpsc::error::TrySendError<Pending>>, Status> {
        let mut conn = peer.conn()?;
        let conn = conn.as_mut().expect("Peer::conn fills it");
        let queue = match &conn.queue {
            Some(tx) if !tx.is_closed() => tx,
            _ => {
                let (tx, rx) = mpsc::channel(self.options.max_queued);
                tokio::spawn(coalesce(
                    seq_client(conn.channel.clone()),
                    peer.addr.clone(),
                    rx,
                    self.options.clone(),
                    self.coalesced_rpcs.clone(),
                ));
                conn.queue.insert(tx)
            }
        };
        Ok(queue.try_send(call))
    }

    /// The current sequence of `uid` without allocating.
    pub async fn current(&self, uid: u64, deadline: Duration) -> Result<u64, Status> {
        self.call(uid, deadline, |peer, route_version, until| async move {
            let mut req = tonic::Request::new(pb::CurrentRequest { uid, route_version });
            req.set_timeout(until.saturating_duration_since(Instant::now()));
            let r = seq_client(peer.channel()?).current(req).await?.into_inner();
            Ok((r.seq, r.route_table))
        })
        .await
    }

    /// The next sequence of each uid, in order (a repeated uid gets increasing values). One
    /// call per AllocSvr involved, each all-or-nothing. Each retry regroups the uids not yet
    /// answered by their owners in the (possibly refreshed) route tables.
    pub async fn next_batch(&self, uids: &[u64], deadline: Duration) -> Result<Vec<u64>, Status> {
        bump(&self.counters.calls);
        let result = self.next_batch_attempts(uids, deadline).await;
        if result.is_err() {
            bump(&self.counters.failed);
        }
        result
    }

    async fn next_batch_attempts(
        &self,
        uids: &[u64],
        deadline: Duration,
    ) -> Result<Vec<u64>, Status> {
        if uids.is_empty() {
            return Err(Status::invalid_argument("empty batch: give at least one uid"));
        }
        let until = Instant::now() + deadline;
        let mut out = vec![0u64; uids.len()];
        let mut pending: Vec<usize> = (0..uids.len()).collect();
        let mut backoff = RetryPolicy::STANDARD.backoff();
        loop {
            let groups = match self.groups_of(uids, &pending) {
                Ok(groups) => groups,
                Err(uid) => {
                    self.locate(uid, until).await?; // learns the tables, or says it is outside
                    self.groups_of(uids, &pending).map_err(|uid| {
                        Status::unavailable(format!("uid {uid}: the route tables changed; retry"))
                    })?
                }
            };
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Status::deadline_exceeded("deadline passed"));
            }
            let timeout = left.min(ATTEMPT_TIMEOUT_MAX);
            let calls = groups.routed.iter().map(|g| {
                let part: Vec<u64> = g.idx.iter().map(|&i| uids[i]).collect();
                self.send_batch(&g.addr, part, g.route_version, timeout)
            });
            let results = futures::future::join_all(calls).await;
            // Why the uids still pending must wait (retryable), if anything must.
            let mut wait = groups.unrouted.first().map(|&i| {
                Status::unavailable(format!("no AllocSvr serves uid {}'s section yet", uids[i]))
            });
            let mut redirected = None;
            let mut answered = vec![false; uids.len()];
            for (g, result) in groups.routed.iter().zip(results) {
                match result {
                    Ok((seqs, table)) => {
                        if seqs.len() != g.idx.len() {
                            return Err(Status::internal(format!(
                                "{} answered {} values for {} uids",
                                g.addr,
                                seqs.len(),
                                g.idx.len()
                            )));
                        }
                        if let Some(t) = table {
                            self.install(t);
                        }
                        for (&i, v) in g.idx.iter().zip(seqs) {
                            out[i] = v;
                            answered[i] = true;
                        }
                    }
                    Err(s) if s.code() == Code::FailedPrecondition => {
                        match seqsvr_proto::route_table_of(&s) {
                            Some(t) => {
                                self.install(t);
                                redirected = Some(s);
                            }
                            None => return Err(s),
                        }
                    }
                    Err(s) if retryable(s.code()) => wait = Some(s),
                    Err(s) => return Err(s),
                }
            }
            pending.retain(|&i| !answered[i]);
            if pending.is_empty() {
                return Ok(out);
            }
            if wait.is_none() && redirected.is_some() && backoff.redirect() {
                bump(&self.counters.redirects);
                continue; // regroup at once by the tables the redirects brought
            }
            let status = wait.or(redirected).unwrap_or_else(|| Status::unavailable("retry"));
            if !backoff.wait(until).await {
                return Err(status);
            }
            bump(&self.counters.retries);
            for uid in self.one_uid_per_set(pending.iter().map(|&i| uids[i])) {
                self.refresh_for(uid, until).await;
            }
        }
    }

    /// Groups `pending` (indices into `uids`) by owner in the current tables, from one look.
    /// `Err(uid)`: no table has `uid`'s set.
    fn groups_of(&self, uids: &[u64], pending: &[usize]) -> Result<Groups, u64> {
        group_by_owner(&self.routes().tables, uids, pending)
    }

    /// One uid of each set among `uids` (for refreshing every set involved).
    fn one_uid_per_set(&self, uids: impl Iterator<Item = u64>) -> Vec<u64> {
        let routes = self.routes();
        let tables = &routes.tables;
        let mut seen: Vec<u64> = Vec::new();
        let mut out = Vec::new();
        for uid in uids {
            let set =
                tables.iter().find(|t| t.uid_begin <= uid && uid < t.uid_end).map(|t| t.set_id);
            let set = set.unwrap_or(u64::MAX);
            if !seen.contains(&set) {
                seen.push(set);
                out.push(uid);
            }
        }
        out
    }

    /// One all-or-nothing `NextBatch` attempt at `addr`.
    async fn send_batch(
        &self,
        addr: &str,
        uids: Vec<u64>,
        route_version: u64,
        timeout: Duration,
    ) -> Result<(Vec<u64>, Option<pb::RouteTable>), Status> {
        let mut client = seq_client(self.channel(addr)?);
        let mut req =
            tonic::Request::new(pb::NextBatchRequest { uids, route_version, independent: false });
        req.set_timeout(timeout);
        match tokio::time::timeout(timeout, client.next_batch(req)).await {
            Ok(r) => r.map(|r| {
                let r = r.into_inner();
                (r.seqs, r.route_table)
            }),
            Err(_) => Err(Status::unavailable(format!("{addr} did not answer in {timeout:?}"))),
        }
    }
}

impl Peer {
    /// Its connection under the process's current TLS generation (a new channel, without a
    /// coalescing task yet, if the generation moved); always `Some` on return.
    fn conn(&self) -> Result<std::sync::MutexGuard<'_, Option<Conn>>, Status> {
        let generation = crate::tls::generation();
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if conn.as_ref().is_none_or(|c| c.generation != generation) {
            let channel = crate::store::channel_on(&self.addr, crate::tls::Plane::Client)?;
            *conn = Some(Conn { generation, channel, queue: None });
        }
        Ok(conn)
    }

    fn channel(&self) -> Result<Channel, Status> {
        Ok(self.conn()?.as_ref().expect("Peer::conn fills it").channel.clone())
    }
}

/// The uids of a batch still to be answered, by where they go now.
#[derive(Debug, Default, PartialEq, Eq)]
struct Groups {
    /// One group per AllocSvr, in order of first appearance; indices in batch order.
    routed: Vec<Group>,
    /// Indices of uids whose section no AllocSvr serves yet (they wait and retry).
    unrouted: Vec<usize>,
}

#[derive(Debug, PartialEq, Eq)]
struct Group {
    addr: String,
    /// The version of the table that routed them (sent along: a newer table comes back).
    route_version: u64,
    idx: Vec<usize>,
}

/// Groups `pending` (indices into `uids`, ascending) by the owner of each uid's section in
/// `tables`. `Err(uid)`: no table covers `uid`.
fn group_by_owner(
    tables: &[pb::RouteTable],
    uids: &[u64],
    pending: &[usize],
) -> Result<Groups, u64> {
    let mut groups = Groups::default();
    let mut last: Option<usize> = None;
    for &i in pending {
        let uid = uids[i];
        let Some(table) = tables.iter().find(|t| t.uid_begin <= uid && uid < t.uid_end) else {
            return Err(uid);
        };
        let Some(addr) = table.owner_of_uid(uid).map(|e| e.addr.as_str()) else {
            groups.unrouted.push(i);
            continue;
        };
        let g = match last.filter(|&g| groups.routed[g].addr == addr) {
            Some(g) => g,
            None => match groups.routed.iter().position(|g| g.addr == addr) {
                Some(g) => g,
                None => {
                    groups.routed.push(Group {
                        addr: addr.to_string(),
                        route_version: table.version,
                        idx: Vec::new(),
                    });
                    groups.routed.len() - 1
                }
            },
        };
        let group = &mut groups.routed[g];
        group.route_version = group.route_version.min(table.version);
        group.idx.push(i);
        last = Some(g);
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_alloc::{self, FakeAlloc, TestStream};
    use std::sync::atomic::{AtomicU64, Ordering};

    const SECTION_SIZE: u64 = 10;

    fn entry(begin: u64, end: u64, alloc: u64, addr: &str) -> pb::RouteEntry {
        pb::RouteEntry {
            section_begin: begin,
            section_end: end,
            alloc_id: alloc,
            addr: addr.into(),
        }
    }

    fn table(
        set: u64,
        version: u64,
        uids: (u64, u64),
        entries: Vec<pb::RouteEntry>,
    ) -> pb::RouteTable {
        pb::RouteTable {
            set_id: set,
            version,
            uid_begin: uids.0,
            uid_end: uids.1,
            section_size: SECTION_SIZE,
            entries,
        }
    }

    fn client(seeds: &[String]) -> SeqClient {
        SeqClient {
            seeds: seeds.to_vec(),
            options: SeqClientOptions::default(),
            routes: RwLock::new(Routes::default()),
            peers: Mutex::new(HashMap::new()),
            coalesced_rpcs: Arc::new(AtomicU64::new(0)),
            counters: Counters::default(),
        }
    }

    #[test]
    fn grouping_follows_the_current_table() {
        let v1 = table(1, 1, (0, 100), vec![entry(0, 10, 1, "a")]);
        let uids = [1, 15, 2, 15, 33];
        let all: Vec<usize> = (0..uids.len()).collect();
        let g = group_by_owner(std::slice::from_ref(&v1), &uids, &all).unwrap();
        assert_eq!(g.routed, vec![Group { addr: "a".into(), route_version: 1, idx: all.clone() }]);
        // Section 1 moved to b, section 3 is unassigned for now: the uids not answered yet
        // (here: all but the first) go to their new owners.
        let v2 = table(1, 2, (0, 100), vec![entry(0, 1, 1, "a"), entry(1, 2, 2, "b")]);
        let g = group_by_owner(&[v2], &uids, &[1, 2, 3, 4]).unwrap();
        assert_eq!(
            g.routed,
            vec![
                Group { addr: "b".into(), route_version: 2, idx: vec![1, 3] },
                Group { addr: "a".into(), route_version: 2, idx: vec![2] },
            ]
        );
        assert_eq!(g.unrouted, vec![4]);
        assert_eq!(group_by_owner(&[v1], &[1, 100], &[0, 1]), Err(100), "no table has uid 100");
    }

    #[test]
    fn an_older_route_table_is_never_installed() {
        let c = client(&[]);
        let t = |version, addr: &str| table(1, version, (0, 100), vec![entry(0, 10, 1, addr)]);
        c.install(t(5, "new"));
        c.install(t(3, "old"));
        c.install(t(5, "same version"));
        c.install(table(2, 1, (100, 200), vec![]));
        let tables = c.route_tables();
        assert_eq!(tables.len(), 2);
        assert_eq!((tables[0].version, tables[0].entries[0].addr.as_str()), (5, "new"));
        c.install(t(6, "newer"));
        assert_eq!(c.route_tables()[0].entries[0].addr, "newer");
    }

    /// Each call finds its AllocSvr from the entry of the current table that owns its uid: the
    /// per-entry peers stay in step with their tables when sets arrive out of order, a set's
    /// table is replaced, or an older table is offered (and refused).
    #[test]
    fn a_uid_is_routed_to_the_allocsvr_of_its_current_table_entry() {
        let c = client(&[]);
        c.install(table(2, 1, (100, 200), vec![entry(10, 20, 1, "b")]));
        c.install(table(3, 1, (200, 300), vec![entry(20, 25, 1, "c1"), entry(25, 30, 2, "c2")]));
        c.install(table(1, 1, (0, 100), vec![entry(5, 10, 2, "a2"), entry(0, 5, 1, "a1")]));
        let check = |c: &SeqClient| {
            for uid in 0..300u64 {
                let t = c.table_for(uid).expect("every uid has a set");
                let want = t.owner_of_uid(uid).map(|e| e.addr.clone());
                let got = c.route_of(uid).expect("a table").ok().map(|(p, v)| {
                    assert_eq!(v, t.version, "uid {uid}");
                    p.addr.clone()
                });
                assert_eq!(got, want, "uid {uid}");
            }
        };
        check(&c);
        c.install(table(2, 2, (100, 200), vec![entry(10, 15, 1, "b1"), entry(15, 20, 2, "b2")]));
        check(&c);
        c.install(table(2, 1, (100, 200), vec![entry(10, 20, 1, "old")]));
        check(&c);
        assert_eq!(c.route_of(140).expect("a table").expect("owned").0.addr, "b1");
    }

    /// An in-process AllocSvr: serves `next_batch` for the sections it owns (all or nothing),
    /// answers NOT_OWNER with its table otherwise.
    struct Fake {
        owned: Mutex<Vec<u64>>,
        table: Mutex<pb::RouteTable>,
        next: AtomicU64,
        calls: AtomicU64,
        /// While true, `next_batch` holds its answer.
        stall: tokio::sync::watch::Sender<bool>,
        /// Answers `NextStream` UNIMPLEMENTED, as an AllocSvr built before it.
        no_streams: std::sync::atomic::AtomicBool,
        /// `NextStream` streams opened.
        streams: AtomicU64,
    }

    impl Fake {
        fn new() -> Arc<Fake> {
            Arc::new(Fake {
                owned: Mutex::new(Vec::new()),
                table: Mutex::new(pb::RouteTable::default()),
                next: AtomicU64::new(1),
                calls: AtomicU64::new(0),
                stall: tokio::sync::watch::Sender::new(false),
                no_streams: std::sync::atomic::AtomicBool::new(false),
                streams: AtomicU64::new(0),
            })
        }

        fn set(&self, owned: Vec<u64>, table: pb::RouteTable) {
            *self.owned.lock().unwrap() = owned;
            *self.table.lock().unwrap() = table;
        }
    }

    #[tonic::async_trait]
    impl FakeAlloc for Fake {
        fn route_table(&self) -> Option<pb::RouteTable> {
            Some(self.table.lock().unwrap().clone())
        }

        async fn next_batch(
            &self,
            r: pb::NextBatchRequest,
        ) -> Result<pb::NextBatchResponse, Status> {
            use prost::Message as _;
            self.calls.fetch_add(1, Ordering::SeqCst);
            let _ = self.stall.subscribe().wait_for(|stalled| !stalled).await;
            let table = self.table.lock().unwrap().clone();
            let owned = self.owned.lock().unwrap().clone();
            if let Some(uid) = r.uids.iter().find(|&&u| !owned.contains(&(u / SECTION_SIZE))) {
                let mut status = Status::failed_precondition(format!("NOT_OWNER: uid {uid}"));
                status.metadata_mut().insert_bin(
                    seqsvr_proto::ROUTE_TABLE_METADATA,
                    tonic::metadata::MetadataValue::from_bytes(&table.encode_to_vec()),
                );
                return Err(status);
            }
            let seqs = r.uids.iter().map(|_| self.next.fetch_add(1, Ordering::SeqCst)).collect();
            let route_table = (r.route_version < table.version).then_some(table);
            Ok(pb::NextBatchResponse { seqs, route_table })
        }

        fn next_stream(
            self: Arc<Self>,
            request: tonic::Streaming<pb::NextStreamRequest>,
        ) -> Result<TestStream, Status> {
            if self.no_streams.load(Ordering::SeqCst) {
                return Err(Status::unimplemented("NextStream"));
            }
            self.streams.fetch_add(1, Ordering::SeqCst);
            Ok(fake_alloc::stream_by_next_batch(self, request))
        }
    }

    async fn serve(fake: Arc<Fake>) -> String {
        fake_alloc::serve(fake).await
    }

    /// The coalescing queue of one AllocSvr holds at most `max_queued` calls: while the
    /// AllocSvr holds its answers, the calls past it fail at once with RESOURCE_EXHAUSTED (not
    /// retried: retrying would only add load), and the queued ones are served once it answers.
    #[tokio::test]
    async fn a_full_coalescing_queue_refuses_calls_at_once() {
        let fake = Fake::new();
        let addr = serve(fake.clone()).await;
        fake.set(vec![0], table(1, 1, (0, 100), vec![entry(0, 1, 1, &addr)]));
        let options = SeqClientOptions {
            max_queued: 4,
            max_in_flight: 1,
            max_coalesced: 1,
            ..Default::default()
        };
        let c = SeqClient::connect_with(&[addr], Duration::from_secs(5), options).await;
        let c = Arc::new(c.expect("connected"));
        fake.stall.send_replace(true);
        let calls: Vec<_> = (0..20u64)
            .map(|uid| {
                let c = c.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    (c.next(uid % 10, Duration::from_secs(5)).await, started.elapsed())
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        fake.stall.send_replace(false);
        let (mut refused, mut served) = (0, 0);
        for call in calls {
            match call.await.unwrap() {
                (Ok(_), _) => served += 1,
                (Err(e), took) => {
                    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                    assert!(e.message().contains("max_queued"), "{}", e.message());
                    assert!(took < Duration::from_millis(250), "refused at once, took {took:?}");
                    refused += 1;
                }
            }
        }
        // At most 4 queued + 1 in flight (the coalescing task takes a call only once a slot is
        // free); one more is allowed for a call taken just as the slot freed.
        assert!(refused >= 20 - 6, "{refused} refused, {served} served");
        assert_eq!(refused + served, 20);
        assert!(served >= 1);
    }

    /// Coalesced calls ride one `NextStream` per AllocSvr, opened once and kept; to an AllocSvr
    /// that does not know `NextStream` (UNIMPLEMENTED: built before it) they go as `NextBatch`
    /// RPCs, and every call is still answered.
    #[tokio::test]
    async fn coalesced_calls_ride_one_stream_or_rpcs_to_an_allocsvr_without_streams() {
        for no_streams in [false, true] {
            let fake = Fake::new();
            fake.no_streams.store(no_streams, Ordering::SeqCst);
            let addr = serve(fake.clone()).await;
            fake.set(vec![0], table(1, 1, (0, 100), vec![entry(0, 1, 1, &addr)]));
            let c = Arc::new(SeqClient::connect(&[addr], Duration::from_secs(5)).await.unwrap());
            let calls: Vec<_> = (0..200u64)
                .map(|i| {
                    let c = c.clone();
                    tokio::spawn(async move { c.next(i % 10, Duration::from_secs(5)).await })
                })
                .collect();
            let mut values = Vec::new();
            for call in calls {
                values.push(call.await.unwrap().expect("served"));
            }
            values.sort_unstable();
            assert_eq!(values, (1..=200).collect::<Vec<_>>(), "no_streams {no_streams}");
            let streams = fake.streams.load(Ordering::SeqCst);
            assert_eq!(streams, if no_streams { 0 } else { 1 }, "no_streams {no_streams}");
            assert!(fake.calls.load(Ordering::SeqCst) >= 1);
        }
    }

    /// A batch its AllocSvr does not answer in time fails (UNAVAILABLE, then the caller's
    /// deadline), and the stream it went on is let go: the next batch opens a new stream and is
    /// answered, instead of queueing behind a stream that may never answer again.
    #[tokio::test]
    async fn a_stream_that_does_not_answer_in_time_is_replaced() {
        let fake = Fake::new();
        let addr = serve(fake.clone()).await;
        fake.set(vec![0], table(1, 1, (0, 100), vec![entry(0, 1, 1, &addr)]));
        // One batch in flight at a time: the late one holds the only slot until it is let go.
        let options = SeqClientOptions { max_in_flight: 1, ..SeqClientOptions::default() };
        let c = SeqClient::connect_with(&[addr], Duration::from_secs(5), options).await.unwrap();
        let c = Arc::new(c);
        assert_eq!(c.next(1, Duration::from_secs(5)).await.unwrap(), 1);
        assert_eq!(fake.streams.load(Ordering::SeqCst), 1);
        fake.stall.send_replace(true);
        let status = c.next(1, Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded), "{status:?}");
        let later = tokio::spawn({
            let c = c.clone();
            async move { c.next(1, Duration::from_secs(10)).await }
        });
        // Kept, the stalled stream would hold the slot until the fake answers: no second
        // stream would ever open while it is stalled.
        let until = Instant::now() + Duration::from_secs(8);
        while fake.streams.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < until, "the late stream was never replaced");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        fake.stall.send_replace(false);
        let value = later.await.unwrap().expect("served on the new stream");
        assert!(value >= 2, "{value}");
        assert_eq!(fake.streams.load(Ordering::SeqCst), 2);
    }

    /// An AllocSvr whose `NextStream` holds the first batch until a second arrives and answers
    /// the second first (the real one answers a batch that waits after later ones). Its value
    /// for uid `u` is `u * 1000 + n`, `n` counting the batches it answered.
    struct Reorder {
        table: pb::RouteTable,
    }

    #[tonic::async_trait]
    impl FakeAlloc for Reorder {
        fn route_table(&self) -> Option<pb::RouteTable> {
            Some(self.table.clone())
        }

        fn next_stream(
            self: Arc<Self>,
            mut incoming: tonic::Streaming<pb::NextStreamRequest>,
        ) -> Result<TestStream, Status> {
            let (replies, out) = mpsc::channel(16);
            tokio::spawn(async move {
                let mut held = Vec::new();
                let mut answered = 0u64;
                while let Ok(Some(b)) = incoming.message().await {
                    held.push(b);
                    if held.len() < 2 {
                        continue;
                    }
                    while let Some(b) = held.pop() {
                        answered += 1;
                        let seqs = b.uids.iter().map(|u| u * 1000 + answered).collect();
                        let reply = pb::NextStreamReply {
                            batch_id: b.batch_id,
                            seqs,
                            ..Default::default()
                        };
                        if replies.send(Ok(reply)).await.is_err() {
                            return;
                        }
                    }
                }
            });
            Ok(tokio_stream::wrappers::ReceiverStream::new(out))
        }
    }

    /// Replies on a stream are matched to their batches by id, not by order: answered out of
    /// order, each caller still gets the value given to its own uid (taking the replies in
    /// order would hand uid 1's value to uid 2's caller and back).
    #[tokio::test]
    async fn stream_replies_out_of_order_reach_their_own_callers() {
        let (listener, addr) = fake_alloc::bind().await;
        let fake = Reorder { table: table(1, 1, (0, 100), vec![entry(0, 10, 1, &addr)]) };
        fake_alloc::serve_on(listener, Arc::new(fake), |r| r);
        let c = Arc::new(SeqClient::connect(&[addr], Duration::from_secs(5)).await.unwrap());
        let first = tokio::spawn({
            let c = c.clone();
            async move { c.next(1, Duration::from_secs(5)).await }
        });
        // The first call's batch is out (held) once the coalescing task took it off the queue.
        let until = Instant::now() + Duration::from_secs(5);
        while c.coalesced_rpcs() < 1 {
            assert!(Instant::now() < until, "the first batch was never sent");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let second = c.next(2, Duration::from_secs(5)).await.expect("served");
        let first = first.await.unwrap().expect("served");
        assert_eq!((first / 1000, second / 1000), (1, 2), "first {first}, second {second}");
        assert_eq!((second % 1000, first % 1000), (1, 2), "the second batch was answered first");
    }

    /// A seed that accepts connections but never answers (a paused AllocSvr behind a port
    /// proxy) listed first must not use up the deadline: the seeds are asked at once. Asked one
    /// after the other, the hung seed takes the whole 2 s and `connect` fails.
    #[tokio::test]
    async fn a_hung_seed_does_not_use_up_the_deadline() {
        let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hung_addr = hung.local_addr().unwrap().to_string();
        // Accepts and holds connections, answers nothing.
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = hung.accept().await {
                held.push(conn);
            }
        });
        let good = Fake::new();
        let good_addr = serve(good.clone()).await;
        good.set(vec![0], table(1, 1, (0, 100), vec![entry(0, 1, 1, &good_addr)]));
        let c = SeqClient::connect(&[hung_addr, good_addr], Duration::from_secs(2))
            .await
            .expect("the answering seed's table");
        assert_eq!(c.route_tables().len(), 1);
        assert_eq!(c.next(1, Duration::from_secs(2)).await.unwrap(), 1);
    }

    /// A hand-over splits a group after the client grouped a batch: A (owner of sections 0 and
    /// 1 in v1) gives section 1 to B (v2). The batch must reach both, not retry the whole
    /// group at A until the deadline.
    #[tokio::test]
    async fn next_batch_regroups_after_a_hand_over_splits_a_group() {
        let (a, b) = (Fake::new(), Fake::new());
        let (addr_a, addr_b) = (serve(a.clone()).await, serve(b.clone()).await);
        a.set(vec![0, 1], table(1, 1, (0, 100), vec![entry(0, 2, 1, &addr_a)]));
        let c = SeqClient::connect(std::slice::from_ref(&addr_a), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(c.next_batch(&[1, 12], Duration::from_secs(5)).await.unwrap(), vec![1, 2]);
        // The hand-over: A keeps section 0 and knows v2; B owns section 1.
        let v2 = table(1, 2, (0, 100), vec![entry(0, 1, 1, &addr_a), entry(1, 2, 2, &addr_b)]);
        a.set(vec![0], v2.clone());
        b.set(vec![1], v2);
        let calls_before = a.calls.load(Ordering::SeqCst);
        let values = c.next_batch(&[1, 12, 2, 12], Duration::from_secs(2)).await.unwrap();
        assert_eq!(values[0] + 1, values[2], "A served uids 1 and 2 in batch order: {values:?}");
        assert_eq!(values[1] + 1, values[3], "B served uid 12 twice in order: {values:?}");
        assert_eq!(c.route_tables()[0].version, 2);
        assert_eq!(a.calls.load(Ordering::SeqCst) - calls_before, 2, "one NOT_OWNER, one served");
        // An AllocSvr that lags (v1) never takes the client's table back.
        b.set(vec![], table(1, 1, (0, 100), vec![entry(0, 2, 1, &addr_a)]));
        let err = c.next_batch(&[12], Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(err.code(), Code::FailedPrecondition | Code::DeadlineExceeded), "{err:?}");
        assert_eq!(c.route_tables()[0].version, 2, "the older table from B was not installed");
        // The SDK's counters tell what happened: three calls, the last failed; the v2 table
        // came with a redirect; v1 was installed at connect.
        let stats = c.stats();
        assert_eq!((stats.calls, stats.failed), (3, 1), "{stats:?}");
        assert!(stats.redirects >= 1, "{stats:?}");
        assert_eq!(stats.route_tables_installed, 2, "v1, then v2: {stats:?}");
        assert!(stats.route_refreshes >= 1, "{stats:?}");
    }

    // Tests written for survivors of the mutation run (docs/reliability/mutants.md).

    /// An AllocSvr whose answers the test scripts, one per call in order; once a script is
    /// used up it serves every uid the next value of a counter (starting at 1000).
    struct Scripted {
        table: Mutex<pb::RouteTable>,
        batches: Mutex<std::collections::VecDeque<Result<Vec<u64>, Status>>>,
        nexts: Mutex<std::collections::VecDeque<Result<u64, Status>>>,
        next: AtomicU64,
        calls: AtomicU64,
    }

    #[tonic::async_trait]
    impl FakeAlloc for Scripted {
        fn route_table(&self) -> Option<pb::RouteTable> {
            Some(self.table.lock().unwrap().clone())
        }

        async fn next(&self, _: pb::NextRequest) -> Result<pb::NextResponse, Status> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let scripted = self.nexts.lock().unwrap().pop_front();
            let seq = scripted.unwrap_or_else(|| Ok(self.next.fetch_add(1, Ordering::SeqCst)))?;
            Ok(pb::NextResponse { seq, route_table: None })
        }

        async fn next_batch(
            &self,
            r: pb::NextBatchRequest,
        ) -> Result<pb::NextBatchResponse, Status> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let seqs = match self.batches.lock().unwrap().pop_front() {
                Some(scripted) => scripted?,
                None => r.uids.iter().map(|_| self.next.fetch_add(1, Ordering::SeqCst)).collect(),
            };
            Ok(pb::NextBatchResponse { seqs, route_table: None })
        }
    }

    /// A client (coalescing, the default) connected to a `Scripted` AllocSvr that owns every
    /// section of set 1, with these scripts.
    async fn scripted(
        batches: Vec<Result<Vec<u64>, Status>>,
        nexts: Vec<Result<u64, Status>>,
    ) -> (SeqClient, Arc<Scripted>) {
        let fake = Arc::new(Scripted {
            table: Mutex::new(pb::RouteTable::default()),
            batches: Mutex::new(batches.into()),
            nexts: Mutex::new(nexts.into()),
            next: AtomicU64::new(1000),
            calls: AtomicU64::new(0),
        });
        let (listener, addr) = fake_alloc::bind().await;
        *fake.table.lock().unwrap() = table(1, 1, (0, 100), vec![entry(0, 10, 1, &addr)]);
        fake_alloc::serve_on(listener, fake.clone(), |r| r);
        let c = SeqClient::connect(&[addr], Duration::from_secs(5)).await.unwrap();
        (c, fake)
    }

    /// A coalesced `next` answers with the value its entry got; an entry answered 0 (not
    /// servable at once) is never a value: the call asks again alone and returns that answer.
    #[tokio::test]
    async fn a_coalesced_next_returns_its_value_and_never_a_zero() {
        let (c, fake) =
            scripted(vec![Ok(vec![9])], vec![Err(Status::unimplemented("alone"))]).await;
        assert_eq!(c.next(5, Duration::from_secs(2)).await.unwrap(), 9, "the coalesced answer");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
        let (c, _) = scripted(vec![Ok(vec![0])], vec![Ok(7)]).await;
        assert_eq!(c.next(5, Duration::from_secs(2)).await.unwrap(), 7, "asked again alone");
    }

    /// A coalesced answer with a different number of values than calls is a server bug: every
    /// call in it fails (INTERNAL), none takes a value that may belong to another.
    #[tokio::test]
    async fn a_coalesced_answer_of_the_wrong_length_fails_every_call_in_it() {
        for wrong in [vec![], vec![11, 12]] {
            let (c, _) = scripted(vec![Ok(wrong.clone())], vec![]).await;
            let status = c.next(5, Duration::from_secs(2)).await.unwrap_err();
            assert_eq!(status.code(), Code::Internal, "answer {wrong:?}: {status:?}");
        }
    }

    /// UNAVAILABLE (a hand-over, an advance in progress) is retried within the deadline; a
    /// final error (here RESOURCE_EXHAUSTED: the section reached the ceiling) is returned at
    /// once, without retrying until the deadline.
    #[tokio::test]
    async fn unavailable_is_retried_and_a_final_error_is_not() {
        let (c, _) = scripted(vec![Err(Status::unavailable("hand-over"))], vec![]).await;
        assert_eq!(c.next(5, Duration::from_secs(2)).await.unwrap(), 1000);
        let ceiling = Status::resource_exhausted("ceiling");
        let (c, fake) = scripted(vec![Err(ceiling.clone()), Err(ceiling)], vec![]).await;
        let started = Instant::now();
        let status = c.next(5, Duration::from_secs(2)).await.unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(started.elapsed() < Duration::from_secs(1), "not retried until the deadline");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1, "asked once");
        // The same for a batch.
        let (c, _) = scripted(vec![Err(Status::unavailable("hand-over"))], vec![]).await;
        assert_eq!(c.next_batch(&[5, 6], Duration::from_secs(2)).await.unwrap(), [1000, 1001]);
        let ceiling = Status::resource_exhausted("ceiling");
        let (c, fake) = scripted(vec![Err(ceiling.clone()), Err(ceiling)], vec![]).await;
        let started = Instant::now();
        let status = c.next_batch(&[5, 6], Duration::from_secs(2)).await.unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(started.elapsed() < Duration::from_secs(1), "not retried until the deadline");
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1, "asked once");
        // Retries back off (doubling from 20 ms, jittered): a hand-over that lasts longer than
        // the deadline costs a handful of attempts, not a busy loop against the AllocSvr. (The
        // codes retried are tabled in retry.rs.)
        let unavailable: Vec<_> = (0..1000).map(|_| Err(Status::unavailable("busy"))).collect();
        let (c, fake) = scripted(unavailable, vec![]).await;
        let status = c.next_batch(&[5], Duration::from_millis(400)).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        let calls = fake.calls.load(Ordering::SeqCst);
        assert!((2..=8).contains(&calls), "{calls} attempts in 400 ms");
    }

    /// An AllocSvr that answers every call NOT_OWNER with an ever newer route table naming
    /// `other` as the owner of everything.
    struct PingPong {
        other: Mutex<String>,
        /// Shared by both: every table either sends is newer than the last.
        version: Arc<AtomicU64>,
        calls: AtomicU64,
    }

    impl PingPong {
        fn table(&self) -> pb::RouteTable {
            let version = self.version.fetch_add(1, Ordering::SeqCst);
            table(1, version, (0, 100), vec![entry(0, 10, 1, &self.other.lock().unwrap())])
        }

        fn not_owner(&self) -> Status {
            use prost::Message as _;
            self.calls.fetch_add(1, Ordering::SeqCst);
            let mut status = Status::failed_precondition("NOT_OWNER: ask the other one");
            status.metadata_mut().insert_bin(
                seqsvr_proto::ROUTE_TABLE_METADATA,
                tonic::metadata::MetadataValue::from_bytes(&self.table().encode_to_vec()),
            );
            status
        }
    }

    #[tonic::async_trait]
    impl FakeAlloc for PingPong {
        fn route_table(&self) -> Option<pb::RouteTable> {
            Some(self.table())
        }

        async fn next(&self, _: pb::NextRequest) -> Result<pb::NextResponse, Status> {
            Err(self.not_owner())
        }

        async fn next_batch(
            &self,
            _: pb::NextBatchRequest,
        ) -> Result<pb::NextBatchResponse, Status> {
            Err(self.not_owner())
        }

        async fn current(&self, _: pb::CurrentRequest) -> Result<pb::CurrentResponse, Status> {
            Err(self.not_owner())
        }
    }

    /// Two AllocSvrs that each answer NOT_OWNER with an ever newer route table naming the
    /// other: every table is installed, so each answer is a redirect. The client follows a few
    /// in a row, then backs off, and fails within its deadline with the last NOT_OWNER, after
    /// a bounded number of RPCs (without the redirect budget it would bounce between them as
    /// fast as the loopback answers, until the deadline).
    #[tokio::test]
    async fn a_not_owner_loop_between_two_allocsvrs_ends_within_the_deadline() {
        let version = Arc::new(AtomicU64::new(1));
        let fakes: Vec<Arc<PingPong>> = (0..2)
            .map(|_| {
                Arc::new(PingPong {
                    other: Mutex::new(String::new()),
                    version: version.clone(),
                    calls: AtomicU64::new(0),
                })
            })
            .collect();
        let mut addrs = Vec::new();
        for fake in &fakes {
            addrs.push(fake_alloc::serve(fake.clone()).await);
        }
        *fakes[0].other.lock().unwrap() = addrs[1].clone();
        *fakes[1].other.lock().unwrap() = addrs[0].clone();
        let c = SeqClient::connect(&addrs[..1], Duration::from_secs(5)).await.unwrap();
        let deadline = Duration::from_millis(400);
        for batch in [false, true] {
            let calls_before: u64 = fakes.iter().map(|f| f.calls.load(Ordering::SeqCst)).sum();
            let stats_before = c.stats();
            let started = Instant::now();
            let status = if batch {
                c.next_batch(&[5, 6], deadline).await.unwrap_err()
            } else {
                c.next(5, deadline).await.unwrap_err()
            };
            let elapsed = started.elapsed();
            assert_eq!(status.code(), Code::FailedPrecondition, "batch {batch}: {status:?}");
            assert!(elapsed < deadline + Duration::from_millis(100), "batch {batch}: {elapsed:?}");
            let calls =
                fakes.iter().map(|f| f.calls.load(Ordering::SeqCst)).sum::<u64>() - calls_before;
            let stats = c.stats();
            let redirects = stats.redirects - stats_before.redirects;
            let retries = stats.retries - stats_before.retries;
            // Rounds of one attempt and at most 4 redirects, separated by back-offs of at least
            // 10, 20, 40, 80, 160 ms: at most 6 rounds in 400 ms.
            assert!((5..=30).contains(&calls), "batch {batch}: {calls} RPCs in {elapsed:?}");
            assert!(redirects <= 4 * (retries + 1), "batch {batch}: {stats:?}");
            assert!(retries >= 1, "batch {batch}: backed off at least once: {stats:?}");
        }
    }
}
