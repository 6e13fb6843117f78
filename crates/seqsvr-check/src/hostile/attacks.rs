//! The hostile clients of `seqcheck hostile`, one [`Attack`] each (see the module doc of
//! `hostile.rs` for the list). Every attack dials from its own loopback address, so a limit per
//! remote IP meets the attack and not the good client (127.0.0.1), stops at [`Run::until`] (or
//! at once when the run is aborted), and records every answer in its [`Attack`].

use super::{code_name, is_transport, AttackReport, Sample};
use bytes::{Buf, BufMut};
use futures::StreamExt as _;
use seqsvr_client::store::StoreClient;
use seqsvr_client::tls::{ClientTls, Plane};
use seqsvr_core::idscheme::Scheme;
use seqsvr_proto::v1 as pb;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt as _;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

/// Connections carrying the never-read streams, and streams on each.
pub const STREAM_CONNECTIONS: usize = 4;
pub const STREAMS_PER_CONNECTION: usize = 64;
/// Batches one never-read stream sends (of `alloc.max_batch_uids` uids each) before it only
/// holds the stream open: more than any stream may hold in hand. Each of the
/// `STREAM_CONNECTIONS × STREAMS_PER_CONNECTION` tasks opens another such stream every
/// `request_timeout + 1 s` and keeps the old ones open.
pub const BATCHES_PER_STREAM: u64 = 48;
/// Connections that complete TLS and HTTP/2, ask once and idle.
pub const IDLE_CONNECTIONS: usize = 64;
/// Tasks per id scheme asking for `ids.max_count` ids in a loop, over [`ID_CONNECTIONS`].
pub const ID_TASKS_PER_SCHEME: usize = 2;
pub const ID_CONNECTIONS: usize = 2;
/// Raw TCP connections held open without a ClientHello: 1.5 × the servers' cap on handshakes
/// in progress (`AcceptLimits::max_handshakes`, 512).
pub const STALLED_HANDSHAKES: usize = 768;
/// A stalled connection the AllocSvr closed is opened again after this.
pub const STALLED_REOPEN_PAUSE: Duration = Duration::from_millis(250);
/// Registrations tried from [`super::HOSTILE_ALLOC_IDENTITY`] (every tenth from
/// [`super::HOSTILE_MEMBER_IDENTITY`] instead), by [`REGISTRATION_TASKS`] tasks one after the
/// other.
pub const REGISTRATIONS: usize = 1_000;
pub const REGISTRATION_TASKS: usize = 4;
/// The address of the first registration: 10 KiB of host name and a port.
pub const LONG_ADDRESS_BYTES: usize = 10 * 1024;
/// Between two oversized (or malformed) calls.
pub const OVERSIZED_PERIOD: Duration = Duration::from_millis(50);
/// A session id above tonic's default 4 MiB decoding limit (the IdService's).
pub const LONG_SESSION_ID_BYTES: usize = 5 << 20;

/// Where each attack dials from (the good client dials from 127.0.0.1).
const STREAMS_FROM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const IDLE_FROM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const IDS_FROM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);
const OVERSIZED_FROM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 5);
const MALFORMED_FROM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 6);
const STALLED_FROM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 7);

/// Pause after a refusal or a failed connect, so an attack refused at once does not spin.
const REFUSED_PAUSE: Duration = Duration::from_millis(20);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What every attack shares.
pub(crate) struct Run {
    pub alloc_addr: String,
    /// The end of the hostile phase.
    pub until: Instant,
    /// Set when the AllocSvr's RSS passed the abort ceiling: every attack stops.
    pub abort: tokio::sync::watch::Receiver<bool>,
    pub uid_begin: u64,
    pub uid_end: u64,
    pub max_batch_uids: usize,
    pub request_timeout: Duration,
    pub max_count: u32,
    pub schemes: Vec<(String, Scheme)>,
    /// The identity hostile calls present (`None` over plaintext).
    pub client_tls: Option<ClientTls>,
    /// Connections the chosen attacks still have to open (each `connect_from` counts one
    /// down, done or failed): the stalled handshakes start once they are open, so the cap on
    /// handshakes they fill does not refuse the other attacks' own connections.
    pub connecting: tokio::sync::watch::Sender<usize>,
}

impl Run {
    fn over(&self) -> bool {
        *self.abort.borrow() || Instant::now() >= self.until
    }

    /// Sleeps until `t`, or less if the run is aborted.
    async fn sleep_until(&self, t: Instant) {
        let mut abort = self.abort.clone();
        tokio::select! {
            () = tokio::time::sleep_until(t) => {}
            () = async {
                if abort.wait_for(|&a| a).await.is_err() {
                    std::future::pending::<()>().await;
                }
            } => {}
        }
    }

    /// A stream of requests that yields nothing and ends when the run does: the tail of a
    /// request stream that must stay open until then (a request side that never ends keeps
    /// its HTTP/2 stream, and the connection, open even after the reply is dropped).
    fn end_of_requests<T: Send + 'static>(
        &self,
    ) -> impl futures::Stream<Item = T> + Send + 'static {
        let (until, mut abort) = (self.until, self.abort.clone());
        futures::stream::once(async move {
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                () = async {
                    if abort.wait_for(|&a| a).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                } => {}
            }
        })
        .filter_map(|()| async { None })
    }

    async fn pause(&self, d: Duration) {
        self.sleep_until(Instant::now() + d).await;
    }

    fn alloc_socket(&self) -> Result<SocketAddr, String> {
        self.alloc_addr.parse().map_err(|e| format!("AllocSvr address {}: {e}", self.alloc_addr))
    }

    /// A connection (TLS and HTTP/2 done) to the AllocSvr from `source`, as the hostile client.
    async fn connect_from(&self, source: Ipv4Addr) -> Result<Channel, String> {
        let endpoint = seqsvr_client::tls::endpoint_with(
            &self.alloc_addr,
            Plane::Client,
            None,
            self.client_tls.as_ref(),
        )
        .map_err(|s| s.message().to_string())?
        .local_address(Some(IpAddr::V4(source)))
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true);
        let connected = endpoint.connect().await;
        self.connecting.send_modify(|left| *left = left.saturating_sub(1));
        connected.map_err(|e| {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            text
        })
    }
}

fn seq_client(channel: Channel) -> pb::seq_service_client::SeqServiceClient<Channel> {
    pb::seq_service_client::SeqServiceClient::new(channel)
        .max_encoding_message_size(usize::MAX)
        .max_decoding_message_size(seqsvr_proto::REPLY_MAX_BYTES)
}

fn id_client(channel: Channel) -> pb::id_service_client::IdServiceClient<Channel> {
    pb::id_service_client::IdServiceClient::new(channel)
        .max_encoding_message_size(usize::MAX)
        .max_decoding_message_size(seqsvr_proto::REPLY_MAX_BYTES)
}

#[derive(Default)]
struct Stats {
    attempts: u64,
    answered: u64,
    refusals: BTreeMap<String, Sample>,
    transport: BTreeMap<String, Sample>,
    counters: BTreeMap<String, u64>,
}

/// One attack: what it does, the codes its refusals may have, and what it was answered.
pub(crate) struct Attack {
    name: &'static str,
    what: &'static str,
    source: String,
    allowed: &'static [&'static str],
    stats: Mutex<Stats>,
}

impl Attack {
    fn new(
        name: &'static str,
        what: &'static str,
        source: &str,
        allowed: &'static [&'static str],
    ) -> Arc<Attack> {
        Arc::new(Attack {
            name,
            what,
            source: source.to_string(),
            allowed,
            stats: Mutex::new(Stats::default()),
        })
    }

    pub fn name(&self) -> &str {
        self.name
    }

    fn with<T>(&self, f: impl FnOnce(&mut Stats) -> T) -> T {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn attempt(&self) {
        self.with(|s| s.attempts += 1);
    }

    fn answered(&self) {
        self.with(|s| s.answered += 1);
    }

    /// A call's error: a refusal by its code, or a transport-level end.
    fn status(&self, status: &Status) {
        let transport = is_transport(status);
        let code = code_name(status.code()).to_string();
        self.with(|s| {
            let into = if transport { &mut s.transport } else { &mut s.refusals };
            into.entry(code).or_default().add(status.message());
        });
    }

    /// A refusal carried in a `NextStreamReply` (`code`, `message`).
    fn reply_code(&self, code: i32, message: &str) {
        let code = code_name(Code::from(code)).to_string();
        self.with(|s| s.refusals.entry(code).or_default().add(message));
    }

    fn transport(&self, kind: &str, message: &str) {
        self.with(|s| s.transport.entry(kind.to_string()).or_default().add(message));
    }

    fn count(&self, counter: &str, n: u64) {
        self.with(|s| *s.counters.entry(counter.to_string()).or_default() += n);
    }

    fn keep_max(&self, counter: &str, v: u64) {
        self.with(|s| {
            let c = s.counters.entry(counter.to_string()).or_default();
            *c = (*c).max(v);
        });
    }

    fn keep_min(&self, counter: &str, v: u64) {
        self.with(|s| {
            let c = s.counters.entry(counter.to_string()).or_insert(u64::MAX);
            *c = (*c).min(v);
        });
    }

    pub fn report(&self) -> AttackReport {
        self.with(|s| AttackReport {
            name: self.name.to_string(),
            what: self.what.to_string(),
            source: self.source.clone(),
            attempts: s.attempts,
            answered: s.answered,
            refusals: s.refusals.clone(),
            transport: s.transport.clone(),
            allowed: self.allowed.iter().map(|c| c.to_string()).collect(),
            counters: s.counters.clone(),
        })
    }
}

/// The store clients of the registrations attack.
pub(crate) struct StoreClients {
    /// As [`super::HOSTILE_ALLOC_IDENTITY`].
    pub as_alloc: StoreClient,
    /// As [`super::HOSTILE_MEMBER_IDENTITY`]: a verified certificate that is no AllocSvr's.
    pub as_member: StoreClient,
    /// As the harness's admin, for the leases view.
    pub as_admin: StoreClient,
}

/// Every attack's name, in the order they start.
pub const ATTACKS: [&str; 7] = [
    "never-read-streams",
    "idle-connections",
    "huge-id-counts",
    "oversized",
    "malformed",
    "stalled-handshakes",
    "registrations",
];

/// TLS connections to the AllocSvr the attacks for which `runs(name)` holds keep open at once
/// (each dials its own and keeps it; a tonic channel redials one at a time), for the RSS bound.
pub fn tls_connections(runs: impl Fn(&str) -> bool) -> u64 {
    [
        ("never-read-streams", STREAM_CONNECTIONS),
        ("idle-connections", IDLE_CONNECTIONS),
        ("huge-id-counts", ID_CONNECTIONS),
        ("oversized", 1),
        ("malformed", 1),
    ]
    .into_iter()
    .filter(|(name, _)| runs(name))
    .map(|(_, n)| n as u64)
    .sum()
}

/// Starts the attacks named in `only` (every one when empty); each task ends by `run.until`.
pub(crate) fn start_all(
    run: &Arc<Run>,
    stores: StoreClients,
    only: &[String],
) -> Vec<(Arc<Attack>, JoinHandle<()>)> {
    let chosen_name = |name: &str| only.is_empty() || only.iter().any(|n| n == name);
    let chosen = |attack: &Attack| chosen_name(attack.name);
    let connections = [
        ("never-read-streams", STREAM_CONNECTIONS),
        ("idle-connections", IDLE_CONNECTIONS),
        ("huge-id-counts", ID_CONNECTIONS),
        ("oversized", 1),
        ("malformed", 1),
    ];
    let expected = connections.iter().filter(|(name, _)| chosen_name(name)).map(|(_, n)| n).sum();
    run.connecting.send_replace(expected);
    let mut started = Vec::new();
    let streams = Attack::new(
        "never-read-streams",
        "NextStream streams sending batches of max_batch_uids uids, never reading a reply",
        &STREAMS_FROM.to_string(),
        // alloc.max_streams (or the connection's call limit) reached.
        &["RESOURCE_EXHAUSTED"],
    );
    if chosen(&streams) {
        started.push((streams.clone(), tokio::spawn(never_read_streams(run.clone(), streams))));
    }
    let idle = Attack::new(
        "idle-connections",
        "connections that complete TLS and HTTP/2, ask GetRouteTable once, then idle",
        &IDLE_FROM.to_string(),
        &["RESOURCE_EXHAUSTED"],
    );
    if chosen(&idle) {
        started.push((idle.clone(), tokio::spawn(idle_connections(run.clone(), idle))));
    }
    let ids = Attack::new(
        "huge-id-counts",
        "NextIds of ids.max_count ids (every 4th: one more) on every scheme, in a loop",
        &IDS_FROM.to_string(),
        // Past a budget or a wait-slot limit; above max_count or out of reach of the deadline;
        // ids are bound to the clock, so a call may wait for it up to its deadline.
        &["RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED"],
    );
    if chosen(&ids) {
        started.push((ids.clone(), tokio::spawn(huge_id_counts(run.clone(), ids))));
    }
    let oversized = Attack::new(
        "oversized",
        "NextBatch of max_batch_uids + 1 uids; NextBatch and NextStream bodies 4x the request \
         limit; NextIds with a 5 MiB session id",
        &OVERSIZED_FROM.to_string(),
        // OUT_OF_RANGE: tonic's answer to a message over the service's decoding limit, before
        // any handler runs (documented in seq.proto).
        &["INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "OUT_OF_RANGE"],
    );
    if chosen(&oversized) {
        started.push((oversized.clone(), tokio::spawn(oversized_messages(run.clone(), oversized))));
    }
    let malformed = Attack::new(
        "malformed",
        "gRPC frames whose body is no protobuf, to every unary method",
        &MALFORMED_FROM.to_string(),
        // INTERNAL: tonic's (prost's) answer to a body that does not decode, before any
        // handler runs (as gRPC's statuscodes.md prescribes for a request that does not parse).
        &["INVALID_ARGUMENT", "INTERNAL"],
    );
    if chosen(&malformed) {
        started.push((malformed.clone(), tokio::spawn(malformed_messages(run.clone(), malformed))));
    }
    let stalled = Attack::new(
        "stalled-handshakes",
        "raw TCP connections that never send a ClientHello, opened again when closed",
        &STALLED_FROM.to_string(),
        &[],
    );
    if chosen(&stalled) {
        started.push((stalled.clone(), tokio::spawn(stalled_handshakes(run.clone(), stalled))));
    }
    let registrations = Attack::new(
        "registrations",
        "RegisterAlloc to the store: a 10 KiB address, then many from one AllocSvr identity \
         (every tenth from a store member's identity)",
        "127.0.0.1 (store)",
        &["INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "PERMISSION_DENIED"],
    );
    if chosen(&registrations) {
        let task =
            tokio::spawn(register_many(run.clone(), registrations.clone(), Arc::new(stores)));
        started.push((registrations, task));
    }
    started
}

async fn never_read_streams(run: Arc<Run>, attack: Arc<Attack>) {
    let mut tasks = JoinSet::new();
    for c in 0..STREAM_CONNECTIONS {
        let channel = match run.connect_from(STREAMS_FROM).await {
            Ok(channel) => channel,
            Err(e) => {
                attack.transport("connect", &e);
                continue;
            }
        };
        attack.count("connections", 1);
        for s in 0..STREAMS_PER_CONNECTION {
            let k = (c * STREAMS_PER_CONNECTION + s) as u64;
            tasks.spawn(one_never_read_stream(run.clone(), attack.clone(), channel.clone(), k));
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// Every `request_timeout + 1 s` opens another stream that sends its batches and is never
/// read, and keeps every stream it opened open (their request sides end with the run): a client
/// that leaks streams, so the streams open grow by [`STREAM_CONNECTIONS`] ×
/// [`STREAMS_PER_CONNECTION`] a period until the AllocSvr refuses more (its cap per
/// connection, or `alloc.max_streams`). The AllocSvr's stall rule ends their serving tasks,
/// but the streams stay open (and counted) until this client drops them.
async fn one_never_read_stream(run: Arc<Run>, attack: Arc<Attack>, channel: Channel, k: u64) {
    let mut client = seq_client(channel);
    let span = run.uid_end - run.uid_begin;
    let n = run.max_batch_uids as u64;
    let uids: Arc<Vec<u64>> =
        Arc::new((0..n).map(|i| run.uid_begin + (k * n + i) % span).collect());
    let period = run.request_timeout + Duration::from_secs(1);
    let mut open = Vec::new();
    while !run.over() {
        attack.attempt();
        let batch_uids = uids.clone();
        let batches = futures::stream::iter(0..BATCHES_PER_STREAM)
            .map(move |batch_id| pb::NextStreamRequest {
                batch_id,
                uids: batch_uids.to_vec(),
                route_version: 0,
                timeout_ms: 0,
            })
            .chain(run.end_of_requests());
        match tokio::time::timeout(CONNECT_TIMEOUT, client.next_stream(batches)).await {
            Ok(Ok(replies)) => {
                attack.answered();
                open.push(replies);
                run.sleep_until(run.until.min(Instant::now() + period)).await;
            }
            Ok(Err(status)) => {
                attack.status(&status);
                run.pause(period).await;
            }
            Err(_) => attack.transport("NO_ANSWER", "the stream was not opened within 5 s"),
        }
    }
    attack.keep_max("streams one task held open, max", open.len() as u64);
}

async fn idle_connections(run: Arc<Run>, attack: Arc<Attack>) {
    let mut tasks = JoinSet::new();
    for _ in 0..IDLE_CONNECTIONS {
        let (run, attack) = (run.clone(), attack.clone());
        tasks.spawn(async move {
            attack.attempt();
            let channel = match run.connect_from(IDLE_FROM).await {
                Ok(channel) => channel,
                Err(e) => {
                    attack.transport("connect", &e);
                    return;
                }
            };
            let mut client = seq_client(channel);
            let timeout = run.request_timeout;
            match ask_route_table(&mut client, timeout).await {
                Ok(Ok(_)) => attack.answered(),
                Ok(Err(status)) => return attack.status(&status),
                Err(_) => return attack.transport("NO_ANSWER", "no route table within 5 s"),
            }
            run.sleep_until(run.until).await;
            match ask_route_table(&mut client, timeout).await {
                Ok(Ok(_)) => attack.count("still answered at the end", 1),
                Ok(Err(status)) => attack.status(&status),
                Err(_) => attack.transport("NO_ANSWER", "no route table within 5 s at the end"),
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

async fn ask_route_table(
    client: &mut pb::seq_service_client::SeqServiceClient<Channel>,
    timeout: Duration,
) -> Result<Result<(), Status>, tokio::time::error::Elapsed> {
    let mut request = Request::new(pb::GetRouteTableRequest {});
    request.set_timeout(timeout);
    tokio::time::timeout(CONNECT_TIMEOUT, client.get_route_table(request))
        .await
        .map(|r| r.map(|_| ()))
}

async fn huge_id_counts(run: Arc<Run>, attack: Arc<Attack>) {
    let mut channels = Vec::new();
    for _ in 0..ID_CONNECTIONS {
        match run.connect_from(IDS_FROM).await {
            Ok(channel) => channels.push(channel),
            Err(e) => attack.transport("connect", &e),
        }
    }
    if channels.is_empty() {
        return;
    }
    let mut tasks = JoinSet::new();
    let mut t = 0usize;
    for (name, scheme) in run.schemes.clone() {
        for _ in 0..ID_TASKS_PER_SCHEME {
            let mut client = id_client(channels[t % channels.len()].clone());
            let (run, attack, name) = (run.clone(), attack.clone(), name.clone());
            let task = t as u64;
            t += 1;
            tasks.spawn(async move {
                let mut n = 0u64;
                while !run.over() {
                    n += 1;
                    let count = if n.is_multiple_of(4) {
                        run.max_count.saturating_add(1)
                    } else {
                        run.max_count
                    };
                    let mut request = pb::NextIdsRequest {
                        scheme: name.clone(),
                        count,
                        packed_ids128: true,
                        packed_ids64: true,
                        ..Default::default()
                    };
                    if scheme == Scheme::RongCloud {
                        request.session_type = (n % 16) as u32;
                        let hash = (task << 16 | n).wrapping_mul(2_654_435_761);
                        request.session_hash = Some(hash % seqsvr_core::idscheme::SESSION_HASHES);
                    }
                    let mut request = Request::new(request);
                    request.set_timeout(run.request_timeout);
                    attack.attempt();
                    let limit = run.request_timeout + Duration::from_secs(2);
                    match tokio::time::timeout(limit, client.next_ids(request)).await {
                        Ok(Ok(_)) => {
                            attack.answered();
                            attack.count("ids issued", u64::from(count));
                        }
                        Ok(Err(status)) => {
                            attack.status(&status);
                            run.pause(REFUSED_PAUSE).await;
                        }
                        Err(_) => attack.transport(
                            "NO_ANSWER",
                            &format!("no answer within {limit:?} (its deadline + 2 s)"),
                        ),
                    }
                }
            });
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// Uids that take 10 bytes each as varints: `count` of them make a body of `10 × count` bytes.
fn wide_uids(count: usize) -> Vec<u64> {
    vec![u64::MAX; count]
}

async fn oversized_messages(run: Arc<Run>, attack: Arc<Attack>) {
    let channel = match run.connect_from(OVERSIZED_FROM).await {
        Ok(channel) => channel,
        Err(e) => return attack.transport("connect", &e),
    };
    let mut seq = seq_client(channel.clone());
    let mut ids = id_client(channel);
    let limit = seqsvr_proto::seq_request_max_bytes(run.max_batch_uids);
    // A body 4x the AllocSvr's request limit.
    let too_big = wide_uids(4 * limit / 10);
    let one_too_many: Vec<u64> =
        (0..run.max_batch_uids as u64 + 1).map(|i| run.uid_begin + i).collect();
    let rongcloud =
        run.schemes.iter().find(|(_, s)| *s == Scheme::RongCloud).map(|(n, _)| n.clone());
    let call_limit = run.request_timeout + Duration::from_secs(2);
    let mut n = 0u64;
    while !run.over() {
        n += 1;
        attack.attempt();
        let outcome: Result<Result<(), Status>, tokio::time::error::Elapsed> = match n % 4 {
            0 => {
                let mut r = Request::new(pb::NextBatchRequest {
                    uids: one_too_many.clone(),
                    route_version: 0,
                    independent: false,
                });
                r.set_timeout(run.request_timeout);
                tokio::time::timeout(call_limit, seq.next_batch(r)).await.map(|r| r.map(|_| ()))
            }
            1 => {
                let mut r = Request::new(pb::NextBatchRequest {
                    uids: too_big.clone(),
                    route_version: 0,
                    independent: true,
                });
                r.set_timeout(run.request_timeout);
                tokio::time::timeout(call_limit, seq.next_batch(r)).await.map(|r| r.map(|_| ()))
            }
            2 => {
                let batch = pb::NextStreamRequest {
                    batch_id: n,
                    uids: too_big.clone(),
                    route_version: 0,
                    timeout_ms: 0,
                };
                let batches = futures::stream::iter([batch]);
                let call = async {
                    let mut replies = seq.next_stream(batches).await?.into_inner();
                    match replies.message().await? {
                        Some(reply) if reply.code != 0 => {
                            attack.reply_code(reply.code, &reply.message);
                            Ok(())
                        }
                        Some(_) => {
                            attack.count("oversized stream batch answered", 1);
                            Ok(())
                        }
                        None => Err(Status::unavailable(
                            "transport error: the stream ended without an answer",
                        )),
                    }
                };
                tokio::time::timeout(call_limit, call).await
            }
            _ => match &rongcloud {
                Some(scheme) => {
                    let mut r = Request::new(pb::NextIdsRequest {
                        scheme: scheme.clone(),
                        count: 1,
                        session_id: "s".repeat(LONG_SESSION_ID_BYTES),
                        ..Default::default()
                    });
                    r.set_timeout(run.request_timeout);
                    tokio::time::timeout(call_limit, ids.next_ids(r)).await.map(|r| r.map(|_| ()))
                }
                None => Ok(Ok(())),
            },
        };
        match outcome {
            Ok(Ok(())) => attack.answered(),
            Ok(Err(status)) => attack.status(&status),
            Err(_) => attack.transport("NO_ANSWER", &format!("no answer within {call_limit:?}")),
        }
        run.pause(OVERSIZED_PERIOD).await;
    }
}

/// Sends a `Vec<u8>` as the body of a gRPC frame as is, and hands back the answer's bytes.
#[derive(Clone, Copy, Default)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n).to_vec()))
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// The unary methods of the AllocSvr's public services.
const UNARY_METHODS: [&str; 6] = [
    "/seqsvr.v1.SeqService/Next",
    "/seqsvr.v1.SeqService/NextBatch",
    "/seqsvr.v1.SeqService/Current",
    "/seqsvr.v1.SeqService/GetRouteTable",
    "/seqsvr.v1.IdService/NextIds",
    "/seqsvr.v1.IdService/Decode",
];

/// Bodies no protobuf decoder takes: a tag of wire type 7 (there is none), a varint cut short,
/// a length-delimited field that claims 1 GiB, a tag of field number 0.
fn malformed_body(n: u64) -> Vec<u8> {
    let filler = |len: usize| (0..len).map(|i| (i as u64 * 31 + n) as u8).collect::<Vec<u8>>();
    match n % 4 {
        0 => [vec![0x0f], filler(64)].concat(),
        1 => vec![0x08, 0xff, 0xff, 0xff],
        2 => [vec![0x0a, 0x80, 0x80, 0x80, 0x80, 0x04], filler(16)].concat(),
        _ => [vec![0x00], filler(8)].concat(),
    }
}

async fn malformed_messages(run: Arc<Run>, attack: Arc<Attack>) {
    let channel = match run.connect_from(MALFORMED_FROM).await {
        Ok(channel) => channel,
        Err(e) => return attack.transport("connect", &e),
    };
    let call_limit = run.request_timeout + Duration::from_secs(2);
    let mut n = 0u64;
    while !run.over() {
        n += 1;
        let path = UNARY_METHODS[(n as usize / 4) % UNARY_METHODS.len()];
        let body = malformed_body(n);
        attack.attempt();
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        let call = async {
            grpc.ready().await.map_err(|e| Status::unavailable(format!("transport error: {e}")))?;
            let mut request = Request::new(body);
            request.set_timeout(run.request_timeout);
            grpc.unary::<Vec<u8>, Vec<u8>, RawCodec>(
                request,
                PathAndQuery::from_static(path),
                RawCodec,
            )
            .await
        };
        match tokio::time::timeout(call_limit, call).await {
            Ok(Ok(_)) => {
                attack.answered();
                attack.count(&format!("answered on {path}"), 1);
            }
            Ok(Err(status)) => attack.status(&status),
            Err(_) => attack.transport("NO_ANSWER", &format!("no answer within {call_limit:?}")),
        }
        run.pause(OVERSIZED_PERIOD).await;
    }
}

async fn stalled_handshakes(run: Arc<Run>, attack: Arc<Attack>) {
    let addr = match run.alloc_socket() {
        Ok(addr) => addr,
        Err(e) => return attack.transport("connect", &e),
    };
    let mut connecting = run.connecting.subscribe();
    let connected = connecting.wait_for(|&left| left == 0);
    if tokio::time::timeout(CONNECT_TIMEOUT * 2, connected).await.is_err() {
        attack.count("started before the other attacks connected", 1);
    }
    let mut tasks = JoinSet::new();
    for _ in 0..STALLED_HANDSHAKES {
        tasks.spawn(one_stalled_handshake(run.clone(), attack.clone(), addr));
    }
    while tasks.join_next().await.is_some() {}
}

async fn one_stalled_handshake(run: Arc<Run>, attack: Arc<Attack>, addr: SocketAddr) {
    while !run.over() {
        attack.attempt();
        let connect = async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(IpAddr::V4(STALLED_FROM), 0))?;
            socket.connect(addr).await
        };
        let mut stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                attack.transport("connect", &e.to_string());
                run.pause(REFUSED_PAUSE * 5).await;
                continue;
            }
            Err(_) => {
                attack.transport("connect", "TCP connect did not finish within 5 s");
                continue;
            }
        };
        attack.answered();
        let opened = Instant::now();
        let mut buf = [0u8; 256];
        tokio::select! {
            read = stream.read(&mut buf) => {
                let held = opened.elapsed().as_millis() as u64;
                match read {
                    Ok(0) => attack.transport(
                        "CLOSED",
                        &format!("the AllocSvr closed a connection with no ClientHello after {held} ms"),
                    ),
                    Ok(n) => attack.transport(
                        "DATA",
                        &format!("the AllocSvr sent {n} bytes before any ClientHello"),
                    ),
                    Err(e) => attack.transport("RESET", &format!("after {held} ms: {e}")),
                }
                attack.keep_max("held before the AllocSvr closed it, max ms", held);
                attack.keep_min("held before the AllocSvr closed it, min ms", held);
                run.pause(STALLED_REOPEN_PAUSE).await;
            }
            () = run.sleep_until(run.until) => attack.count("still open at the end", 1),
        }
    }
}

async fn register_many(run: Arc<Run>, attack: Arc<Attack>, stores: Arc<StoreClients>) {
    let deadline = run.request_timeout;
    let long = format!("{}:7000", "h".repeat(LONG_ADDRESS_BYTES));
    attack.attempt();
    match stores.as_alloc.register(&long, deadline).await {
        Ok(_) => {
            attack.answered();
            attack.count("long address accepted", 1);
        }
        Err(status) => attack.status(&status),
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..REGISTRATION_TASKS {
        let (run, attack, stores, next) =
            (run.clone(), attack.clone(), stores.clone(), next.clone());
        tasks.spawn(async move {
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= REGISTRATIONS || run.over() {
                    break;
                }
                let addr = format!("127.0.0.9:{}", 20_000 + n);
                let not_alloc = n % 10 == 9;
                let who = if not_alloc { &stores.as_member } else { &stores.as_alloc };
                attack.attempt();
                match who.register(&addr, deadline).await {
                    Ok(_) => {
                        attack.answered();
                        let counter =
                            if not_alloc { "accepted from a member identity" } else { "accepted" };
                        attack.count(counter, 1);
                    }
                    Err(status) => {
                        attack.status(&status);
                        run.pause(REFUSED_PAUSE).await;
                    }
                }
                if n.is_multiple_of(10) {
                    held_registrations(&stores, &attack).await;
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    held_registrations(&stores, &attack).await;
}

/// The counter of the most registrations of [`super::HOSTILE_ALLOC_IDENTITY`] the store's
/// leader listed at once (it drops a registration that never heartbeats after a lease).
pub const HELD_COUNTER: &str = "registrations of the hostile identity held at once, max";

async fn held_registrations(stores: &StoreClients, attack: &Attack) {
    let view = stores
        .as_admin
        .admin(
            Duration::from_secs(2),
            |mut c, _| async move { c.leases(pb::LeasesRequest {}).await },
        )
        .await;
    if let Ok(leases) = view {
        let held =
            leases.allocs.iter().filter(|a| a.identity == super::HOSTILE_ALLOC_IDENTITY).count();
        attack.keep_max(HELD_COUNTER, held as u64);
        let longest = leases.allocs.iter().map(|a| a.addr.len()).max().unwrap_or(0);
        attack.keep_max("longest address listed, bytes", longest as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    /// Every body of the malformed attack is refused by the decoder of every message it is
    /// sent as (else the attack would test the handlers, not the decoding).
    #[test]
    fn malformed_bodies_decode_as_no_request() {
        for n in 0..8 {
            let body = malformed_body(n);
            assert!(pb::NextRequest::decode(body.as_slice()).is_err(), "body {n}: {body:?}");
            assert!(pb::NextBatchRequest::decode(body.as_slice()).is_err(), "body {n}");
            assert!(pb::CurrentRequest::decode(body.as_slice()).is_err(), "body {n}");
            assert!(pb::GetRouteTableRequest::decode(body.as_slice()).is_err(), "body {n}");
            assert!(pb::NextIdsRequest::decode(body.as_slice()).is_err(), "body {n}");
            assert!(pb::DecodeIdRequest::decode(body.as_slice()).is_err(), "body {n}");
        }
    }

    /// The oversized bodies are over the AllocSvr's request limit, the "one too many" batch is
    /// not (it must reach the handler's own check).
    #[test]
    fn oversized_bodies_pass_the_limit_they_aim_at() {
        let max_batch_uids = 10_000;
        let limit = seqsvr_proto::seq_request_max_bytes(max_batch_uids);
        let too_big =
            pb::NextBatchRequest { uids: wide_uids(4 * limit / 10), ..Default::default() };
        assert!(too_big.encoded_len() > 3 * limit);
        let one_too_many = pb::NextBatchRequest {
            uids: (0..max_batch_uids as u64 + 1).collect(),
            ..Default::default()
        };
        assert!(one_too_many.encoded_len() < limit);
        const { assert!(LONG_SESSION_ID_BYTES > 4 << 20, "above tonic's default decoding limit") };
    }
}
