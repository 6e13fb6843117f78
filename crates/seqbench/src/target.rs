//! The targets a workload runs against, each behind the same `next(uids) -> values` call, each
//! driven the way its users would drive it at its best (see the module docs of `main.rs`).

use crate::http::{Caller, HttpTarget};
use crate::Workload;
use anyhow::Context;
use seqsvr_client::seq::{SeqClient, SeqClientOptions};
use seqsvr_core::config::ClusterConfig;
use seqsvr_proto::v1 as pb;
use seqsvr_proto::v1::seq_service_client::SeqServiceClient;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;

const CALL_DEADLINE: Duration = Duration::from_secs(5);

#[allow(clippy::all)]
pub mod etcdpb {
    tonic::include_proto!("etcdserverpb");
}
use etcdpb::kv_client::KvClient;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    /// One `Next` RPC per call, straight on a `SeqServiceClient` (one shared channel).
    Floor,
    /// The SDK (`SeqClient`, coalescing as shipped) against the floor server.
    FloorCoalesced,
    /// The SDK's `next_batch` (`--batch` uids per call) against the floor server.
    FloorBatch,
    /// The SDK (coalescing unless --no-coalesce) against the cluster in --config.
    Seqsvr,
    /// The SDK's `next_batch` (`--batch` uids per call) against the cluster.
    SeqsvrBatch,
    /// A plain gRPC client of the cluster with one address (`--url`, default set 0's first
    /// AllocSvr): one `Next` RPC per call on one shared channel, no `seqsvr-no-forward`, so a
    /// call for a uid that AllocSvr does not own is forwarded to the owner (one hop).
    SeqsvrPlain,
    /// HTTP/JSON to one address (`--url`, default set 0's first AllocSvr): `POST
    /// /v1/seq/next` with one uid, keep-alive (`--http h1|h2`, module `http`); forwarded by
    /// that AllocSvr like `seqsvr-plain`.
    SeqsvrHttp,
    /// `INCR seq:{uid}` (--redis-conn: shared or per-caller).
    Redis,
    /// `UPDATE … RETURNING` through a pool of --pg-pool connections.
    Postgres,
    /// Compare-and-swap `Txn` per uid, one channel per member in --url.
    Etcd,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Floor => "floor",
            TargetKind::FloorCoalesced => "floor-coalesced",
            TargetKind::FloorBatch => "floor-batch",
            TargetKind::Seqsvr => "seqsvr",
            TargetKind::SeqsvrBatch => "seqsvr-batch",
            TargetKind::SeqsvrPlain => "seqsvr-plain",
            TargetKind::SeqsvrHttp => "seqsvr-http",
            TargetKind::Redis => "redis",
            TargetKind::Postgres => "postgres",
            TargetKind::Etcd => "etcd",
        }
    }

    /// Calls carry `--batch` uids (else one).
    pub fn batched(self) -> bool {
        matches!(self, TargetKind::SeqsvrBatch | TargetKind::FloorBatch)
    }
}

/// How the Redis target connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisConn {
    /// One `MultiplexedConnection` shared (cloned) by every caller: redis-rs pipelines the
    /// concurrent commands on it, which is how redis-rs is meant to be used.
    Shared,
    /// A `MultiplexedConnection` of its own per caller: no pipelining across callers.
    PerCaller,
}

/// One pooled PostgreSQL connection and its prepared statement.
pub struct PgConn {
    client: tokio_postgres::Client,
    stmt: tokio_postgres::Statement,
}

const PG_INCREMENT: &str = "UPDATE counters SET seq = seq + 1 WHERE uid = $1 RETURNING seq";

/// Per uid, the last (value, mod_revision) any etcd caller saw: one-round-trip CAS whenever it
/// is current.
type EtcdView = Arc<std::sync::Mutex<std::collections::HashMap<u64, (u64, i64)>>>;

pub enum Target {
    /// The floor's channel: one RPC per call. With the in-process server (no `--url`), the
    /// server task lives as long as the runtime.
    Floor(Channel),
    /// One AllocSvr's channel, one `Next` RPC per call, and what that AllocSvr owns.
    Plain(Channel, Arc<Ownership>),
    /// One AllocSvr over HTTP/JSON, and what it owns.
    Http(Arc<HttpTarget>, Arc<Ownership>),
    /// The SDK: seqsvr, or the floor server behind the same SDK.
    Seqsvr(Arc<SeqClient>),
    /// One connection for every caller.
    RedisShared(redis::aio::MultiplexedConnection),
    /// A connection per caller, made by `handle`.
    RedisPerCaller(redis::Client),
    /// A fixed pool of connections shared by the callers (caller c uses `c % len`).
    PostgresPool(Vec<Arc<PgConn>>),
    /// A connection per caller, made by `handle` (`--pg-pool 0`).
    PostgresPerCaller(String),
    /// One channel per etcd member (callers spread over them) and the shared view of values.
    Etcd(Vec<Channel>, EtcdView),
}

/// One client's connection.
pub enum Handle {
    Floor(SeqServiceClient<Channel>),
    /// `forwarded`: calls so far for a uid the address does not own.
    Plain {
        client: SeqServiceClient<Channel>,
        owner: Arc<Ownership>,
        forwarded: u64,
    },
    Http {
        target: Arc<HttpTarget>,
        caller: Caller,
        owner: Arc<Ownership>,
        forwarded: u64,
    },
    Seqsvr(Arc<SeqClient>),
    Redis(redis::aio::MultiplexedConnection),
    Postgres(Arc<PgConn>),
    Etcd(KvClient<Channel>, EtcdView),
}

/// Which uids one AllocSvr owns (its set's route table, read once before the timed window):
/// a call to it for any other uid is forwarded to the owner.
pub struct Ownership {
    addr: String,
    table: pb::RouteTable,
}

impl Ownership {
    /// The route table `addr` serves now (`GetRouteTable`, on `channel` to it).
    async fn of(addr: &str, channel: Channel) -> anyhow::Result<Ownership> {
        let reply = SeqServiceClient::new(channel)
            .get_route_table(pb::GetRouteTableRequest {})
            .await
            .with_context(|| format!("GetRouteTable from {addr}"))?;
        let table = reply.into_inner().route_table.unwrap_or_default();
        anyhow::ensure!(!table.entries.is_empty(), "{addr} serves an empty route table");
        Ok(Ownership { addr: addr.to_string(), table })
    }

    /// Whether a call to this address for `uid` is forwarded (the address does not own it).
    pub fn forwards(&self, uid: u64) -> bool {
        let t = &self.table;
        let in_set = t.uid_begin <= uid && uid < t.uid_end;
        !(in_set && t.owner_of_uid(uid).is_some_and(|e| e.addr == self.addr))
    }
}

/// The one address of the plain and HTTP targets: `--url`, or set 0's first AllocSvr.
fn one_address(w: &Workload, config: &ClusterConfig) -> anyhow::Result<String> {
    let addr = match w.url.as_str() {
        "" => config.sets.iter().find_map(|s| s.allocs.first().cloned()),
        url => Some(url.to_string()),
    };
    addr.with_context(|| format!("{} lists no allocs (or give --url)", w.config.display()))
}

/// Reads the cluster file and takes this process's identity from it (`[tls]`: --tls-cert and
/// --tls-key are required), as every seqsvr client tool does.
fn use_identity(w: &Workload, whose: &str) -> anyhow::Result<ClusterConfig> {
    let text = std::fs::read_to_string(&w.config)
        .with_context(|| format!("reading {} ({whose})", w.config.display()))?;
    let config = ClusterConfig::from_toml_str(&text)
        .with_context(|| format!("in {}", w.config.display()))?;
    let (cert, key) = (w.tls_cert.as_deref(), w.tls_key.as_deref());
    seqsvr_client::tls::use_cluster_identity(config.tls.as_ref(), &w.config, cert, key)
        .with_context(|| format!("the client identity for {}", w.config.display()))?;
    Ok(config)
}

/// The SDK on `seeds`, with `--no-coalesce`, `--no-stream` and `--max-in-flight`.
async fn sdk(w: &Workload, seeds: &[String]) -> anyhow::Result<Target> {
    let options = SeqClientOptions {
        coalesce: !w.no_coalesce,
        stream: !w.no_stream,
        max_in_flight: w.max_in_flight,
        ..SeqClientOptions::default()
    };
    let client = SeqClient::connect_with(seeds, Duration::from_secs(30), options)
        .await
        .with_context(|| format!("no route table from {}", seeds.join(", ")))?;
    Ok(Target::Seqsvr(Arc::new(client)))
}

/// A plaintext channel to an etcd member (never the process's seqsvr identity).
fn etcd_channel(addr: &str) -> anyhow::Result<Channel> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .with_context(|| format!("bad etcd address {addr:?}"))?;
    Ok(endpoint.tcp_nodelay(true).connect_timeout(Duration::from_secs(2)).connect_lazy())
}

async fn pg_connect(url: &str) -> anyhow::Result<PgConn> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to PostgreSQL at {url:?}"))?;
    tokio::spawn(connection);
    let stmt = client
        .prepare(PG_INCREMENT)
        .await
        .context("preparing the UPDATE (run `seqbench pg-setup` first)")?;
    Ok(PgConn { client, stmt })
}

impl Target {
    pub async fn connect(w: &Workload) -> anyhow::Result<Target> {
        Ok(match w.target {
            TargetKind::Floor | TargetKind::FloorCoalesced | TargetKind::FloorBatch => {
                // The floor server (`seqbench floor-serve`) at --url, over the cluster file's
                // TLS like seqsvr; without --url, a plaintext one inside this process.
                let addr = if w.url.is_empty() {
                    seqsvr_client::tls::use_plaintext();
                    crate::floor::start(w.uids).await?.to_string()
                } else {
                    use_identity(w, "the floor server's cluster file: its [tls]")?;
                    w.url.clone()
                };
                if w.target == TargetKind::Floor {
                    Target::Floor(seqsvr_client::store::alloc_channel(&addr)?)
                } else {
                    sdk(w, &[addr]).await?
                }
            }
            TargetKind::Seqsvr | TargetKind::SeqsvrBatch => {
                let config = use_identity(w, "seqsvr's cluster file")?;
                let seeds: Vec<String> =
                    config.sets.iter().flat_map(|s| s.allocs.clone()).collect();
                anyhow::ensure!(!seeds.is_empty(), "{} lists no allocs", w.config.display());
                sdk(w, &seeds).await?
            }
            TargetKind::SeqsvrPlain => {
                let config = use_identity(w, "seqsvr's cluster file")?;
                let addr = one_address(w, &config)?;
                let channel = seqsvr_client::store::alloc_channel(&addr)?;
                let owner = Ownership::of(&addr, channel.clone()).await?;
                Target::Plain(channel, Arc::new(owner))
            }
            TargetKind::SeqsvrHttp => {
                let config = use_identity(w, "seqsvr's cluster file")?;
                let addr = one_address(w, &config)?;
                let channel = seqsvr_client::store::alloc_channel(&addr)?;
                let owner = Ownership::of(&addr, channel).await?;
                let target = HttpTarget::connect(&addr, w.http, w.http_conns).await?;
                Target::Http(Arc::new(target), Arc::new(owner))
            }
            TargetKind::Redis => {
                let client = redis::Client::open(w.url.as_str())
                    .with_context(|| format!("--url {:?}: not a redis:// URL", w.url))?;
                match w.redis_conn {
                    RedisConn::Shared => Target::RedisShared(
                        client
                            .get_multiplexed_async_connection()
                            .await
                            .with_context(|| format!("connecting to Redis at {}", w.url))?,
                    ),
                    RedisConn::PerCaller => Target::RedisPerCaller(client),
                }
            }
            TargetKind::Postgres if w.pg_pool == 0 => Target::PostgresPerCaller(w.url.clone()),
            TargetKind::Postgres => {
                let conns =
                    futures::future::try_join_all((0..w.pg_pool).map(|_| pg_connect(&w.url)));
                Target::PostgresPool(conns.await?.into_iter().map(Arc::new).collect())
            }
            TargetKind::Etcd => {
                let channels = w
                    .url
                    .split(',')
                    .filter(|a| !a.is_empty())
                    .map(etcd_channel)
                    .collect::<anyhow::Result<Vec<_>>>()?;
                anyhow::ensure!(!channels.is_empty(), "--url: comma-separated etcd host:port list");
                let view = etcd_warm_view(channels[0].clone(), w.uids).await?;
                Target::Etcd(channels, Arc::new(std::sync::Mutex::new(view)))
            }
        })
    }

    /// seqsvr: coalesced RPCs the SDK sent so far.
    pub fn coalesced_rpcs(&self) -> u64 {
        match self {
            Target::Seqsvr(client) => client.coalesced_rpcs(),
            _ => 0,
        }
    }

    /// Caller `client`'s handle (a connection of its own only for the per-caller modes).
    pub async fn handle(&self, client: usize) -> anyhow::Result<Handle> {
        // The SDK's message size limits (`seq.rs::seq_client`).
        let seq_client = |channel: &Channel| {
            SeqServiceClient::new(channel.clone())
                .max_encoding_message_size(seqsvr_proto::SEQ_REQUEST_MAX_BYTES)
                .max_decoding_message_size(seqsvr_proto::REPLY_MAX_BYTES)
        };
        Ok(match self {
            Target::Floor(channel) => Handle::Floor(seq_client(channel)),
            Target::Plain(channel, owner) => {
                Handle::Plain { client: seq_client(channel), owner: owner.clone(), forwarded: 0 }
            }
            Target::Http(target, owner) => Handle::Http {
                target: target.clone(),
                caller: target.caller(client).await?,
                owner: owner.clone(),
                forwarded: 0,
            },
            Target::Seqsvr(client) => Handle::Seqsvr(client.clone()),
            Target::RedisShared(conn) => Handle::Redis(conn.clone()),
            Target::RedisPerCaller(client) => Handle::Redis(
                client.get_multiplexed_async_connection().await.context("connecting to Redis")?,
            ),
            Target::PostgresPool(pool) => Handle::Postgres(pool[client % pool.len()].clone()),
            Target::PostgresPerCaller(url) => Handle::Postgres(Arc::new(pg_connect(url).await?)),
            Target::Etcd(channels, view) => {
                Handle::Etcd(KvClient::new(channels[client % channels.len()].clone()), view.clone())
            }
        })
    }
}

impl Handle {
    /// Calls so far for a uid the one address does not own (the plain and HTTP targets).
    pub fn forwarded_calls(&self) -> u64 {
        match self {
            Handle::Plain { forwarded, .. } | Handle::Http { forwarded, .. } => *forwarded,
            _ => 0,
        }
    }

    pub async fn next(&mut self, uids: &[u64]) -> anyhow::Result<Vec<u64>> {
        match self {
            Handle::Floor(client) => {
                let r = client.next(pb::NextRequest { uid: uids[0], route_version: 0 }).await?;
                Ok(vec![r.into_inner().seq])
            }
            Handle::Plain { client, owner, forwarded } => {
                *forwarded += owner.forwards(uids[0]) as u64;
                let r = client.next(pb::NextRequest { uid: uids[0], route_version: 0 }).await?;
                Ok(vec![r.into_inner().seq])
            }
            Handle::Http { target, caller, owner, forwarded } => {
                *forwarded += owner.forwards(uids[0]) as u64;
                Ok(vec![target.next(caller, uids[0]).await?])
            }
            Handle::Seqsvr(client) => {
                if uids.len() == 1 {
                    Ok(vec![client.next(uids[0], CALL_DEADLINE).await?])
                } else {
                    Ok(client.next_batch(uids, CALL_DEADLINE).await?)
                }
            }
            Handle::Redis(conn) => {
                let v: u64 =
                    redis::cmd("INCR").arg(format!("seq:{}", uids[0])).query_async(conn).await?;
                Ok(vec![v])
            }
            Handle::Postgres(pg) => {
                let row = pg.client.query_one(&pg.stmt, &[&(uids[0] as i64)]).await?;
                let v: i64 = row.try_get(0)?;
                Ok(vec![v as u64])
            }
            Handle::Etcd(client, view) => Ok(vec![etcd_increment(client, view, uids[0]).await?]),
        }
    }
}

/// Keys of the etcd counters: `seq/{uid}`.
const ETCD_PREFIX: &[u8] = b"seq/";

/// Remembers (value, mod_revision) for `uid` unless a newer one is known already.
fn etcd_saw(view: &EtcdView, uid: u64, value: u64, mod_revision: i64) {
    let mut view = view.lock().unwrap_or_else(|e| e.into_inner());
    let e = view.entry(uid).or_insert((0, 0));
    if mod_revision >= e.1 {
        *e = (value, mod_revision);
    }
}

/// The current value and mod_revision of every counter key (uid < `uids`), read in pages
/// before the timed window: the CAS of a key's first call is then one round trip, as for a
/// long-running application's warm cache.
async fn etcd_warm_view(
    channel: Channel,
    uids: u64,
) -> anyhow::Result<std::collections::HashMap<u64, (u64, i64)>> {
    const PAGE: i64 = 10_000;
    let mut client = KvClient::new(channel).max_decoding_message_size(64 << 20);
    let mut view = std::collections::HashMap::new();
    let mut end = ETCD_PREFIX.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1; // "seq0": every key under "seq/"
    }
    let mut from = ETCD_PREFIX.to_vec();
    loop {
        let request =
            etcdpb::RangeRequest { key: from.clone(), range_end: end.clone(), limit: PAGE };
        let page = client.range(request).await.context("etcd: reading the counters")?.into_inner();
        for kv in &page.kvs {
            let uid = std::str::from_utf8(&kv.key[ETCD_PREFIX.len()..])
                .ok()
                .and_then(|u| u.parse::<u64>().ok());
            let value = std::str::from_utf8(&kv.value).ok().and_then(|v| v.parse::<u64>().ok());
            if let (Some(uid), Some(value)) = (uid, value) {
                if uid < uids {
                    view.insert(uid, (value, kv.mod_revision));
                }
            }
        }
        match page.kvs.last() {
            Some(kv) if page.more => {
                from = kv.key.clone();
                from.push(0); // the next key after it
            }
            _ => return Ok(view),
        }
    }
}

/// A per-uid counter on etcd: compare-and-swap on the key's mod_revision, retried with the
/// fresh value on conflict (one round trip when the shared view is current).
async fn etcd_increment(
    client: &mut KvClient<Channel>,
    view: &EtcdView,
    uid: u64,
) -> anyhow::Result<u64> {
    use etcdpb::{
        compare, request_op, response_op, Compare, PutRequest, RangeRequest, RequestOp, TxnRequest,
    };
    let key = format!("seq/{uid}").into_bytes();
    for _ in 0..1000 {
        let seen = view.lock().unwrap_or_else(|e| e.into_inner()).get(&uid).copied();
        let (value, mod_revision) = seen.unwrap_or((0, 0));
        let next = value + 1;
        let txn = TxnRequest {
            compare: vec![Compare {
                result: compare::CompareResult::Equal as i32,
                target: compare::CompareTarget::Mod as i32,
                key: key.clone(),
                target_union: Some(compare::TargetUnion::ModRevision(mod_revision)),
            }],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: key.clone(),
                    value: next.to_string().into_bytes(),
                })),
            }],
            failure: vec![RequestOp {
                request: Some(request_op::Request::RequestRange(RangeRequest {
                    key: key.clone(),
                    range_end: Vec::new(),
                    limit: 0,
                })),
            }],
        };
        let reply = client.txn(txn).await?.into_inner();
        if reply.succeeded {
            let revision = reply.header.map_or(0, |h| h.revision);
            etcd_saw(view, uid, next, revision);
            return Ok(next);
        }
        // Someone else moved it: take the current value and try again.
        let kv = reply.responses.into_iter().find_map(|r| match r.response {
            Some(response_op::Response::ResponseRange(range)) => range.kvs.into_iter().next(),
            _ => None,
        });
        match kv {
            Some(kv) => {
                let v: u64 = std::str::from_utf8(&kv.value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .with_context(|| format!("etcd key seq/{uid} does not hold a number"))?;
                etcd_saw(view, uid, v, kv.mod_revision);
            }
            None => {
                view.lock().unwrap_or_else(|e| e.into_inner()).insert(uid, (0, 0));
            }
        }
    }
    anyhow::bail!("uid {uid}: compare-and-swap kept losing")
}

/// Creates `counters(uid bigint primary key, seq bigint)` with one row per uid.
pub async fn pg_setup(url: &str, uids: u64) -> anyhow::Result<()> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to PostgreSQL at {url:?}"))?;
    tokio::spawn(connection);
    client
        .batch_execute(
            "DROP TABLE IF EXISTS counters;
             CREATE TABLE counters (uid bigint PRIMARY KEY, seq bigint NOT NULL);",
        )
        .await
        .context("creating the counters table")?;
    client
        .execute(
            "INSERT INTO counters SELECT g, 0 FROM generate_series(0, $1::bigint - 1) AS g",
            &[&(uids as i64)],
        )
        .await
        .context("filling the counters table")?;
    println!("counters: {uids} rows");
    Ok(())
}
