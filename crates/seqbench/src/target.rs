//! The targets a workload runs against, each behind the same `next(uids) -> values` call.

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
    Floor,
    Seqsvr,
    SeqsvrBatch,
    Redis,
    Postgres,
    Etcd,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Floor => "floor",
            TargetKind::Seqsvr => "seqsvr",
            TargetKind::SeqsvrBatch => "seqsvr-batch",
            TargetKind::Redis => "redis",
            TargetKind::Postgres => "postgres",
            TargetKind::Etcd => "etcd",
        }
    }
}

pub enum Target {
    /// The in-process floor server's channel (kept alive with the server task).
    Floor(Channel),
    Seqsvr(Arc<SeqClient>),
    Redis(redis::Client),
    Postgres(String),
    /// One channel per etcd member; clients are spread over them.
    Etcd(Vec<Channel>),
}

/// One client's connection.
pub enum Handle {
    Floor(SeqServiceClient<Channel>),
    Seqsvr(Arc<SeqClient>),
    Redis(redis::aio::MultiplexedConnection),
    Postgres(tokio_postgres::Client, tokio_postgres::Statement),
    /// Per client: the last (value, mod_revision) seen of each key, for one-round-trip CAS.
    Etcd(KvClient<Channel>, std::collections::HashMap<u64, (u64, i64)>),
}

impl Target {
    pub async fn connect(w: &Workload) -> anyhow::Result<Target> {
        Ok(match w.target {
            TargetKind::Floor => {
                let addr = crate::floor::start(w.uids).await?;
                Target::Floor(seqsvr_client::store::channel(&addr.to_string())?)
            }
            TargetKind::Seqsvr | TargetKind::SeqsvrBatch => {
                let text = std::fs::read_to_string(&w.config)
                    .with_context(|| format!("reading {}", w.config.display()))?;
                let config = ClusterConfig::from_toml_str(&text)?;
                let (cert, key) = (w.tls_cert.as_deref(), w.tls_key.as_deref());
                seqsvr_client::tls::use_cluster_identity(
                    config.tls.as_ref(),
                    &w.config,
                    cert,
                    key,
                )?;
                let seeds: Vec<String> =
                    config.sets.iter().flat_map(|s| s.allocs.clone()).collect();
                anyhow::ensure!(!seeds.is_empty(), "{} lists no allocs", w.config.display());
                let options = SeqClientOptions {
                    coalesce: !w.no_coalesce,
                    max_in_flight: w.max_in_flight,
                    ..SeqClientOptions::default()
                };
                let client = SeqClient::connect_with(&seeds, Duration::from_secs(30), options);
                Target::Seqsvr(Arc::new(client.await?))
            }
            TargetKind::Redis => Target::Redis(redis::Client::open(w.url.as_str())?),
            TargetKind::Postgres => Target::Postgres(w.url.clone()),
            TargetKind::Etcd => {
                let channels = w
                    .url
                    .split(',')
                    .filter(|a| !a.is_empty())
                    .map(seqsvr_client::store::channel)
                    .collect::<Result<Vec<_>, _>>()?;
                anyhow::ensure!(!channels.is_empty(), "--url: comma-separated etcd host:port list");
                Target::Etcd(channels)
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

    pub async fn handle(&self, client: usize) -> anyhow::Result<Handle> {
        Ok(match self {
            Target::Floor(channel) => Handle::Floor(SeqServiceClient::new(channel.clone())),
            Target::Seqsvr(client) => Handle::Seqsvr(client.clone()),
            Target::Redis(client) => {
                Handle::Redis(client.get_multiplexed_async_connection().await?)
            }
            Target::Postgres(url) => {
                let (client, connection) =
                    tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                let stmt = client
                    .prepare("UPDATE counters SET seq = seq + 1 WHERE uid = $1 RETURNING seq")
                    .await?;
                Handle::Postgres(client, stmt)
            }
            Target::Etcd(channels) => Handle::Etcd(
                KvClient::new(channels[client % channels.len()].clone()),
                std::collections::HashMap::new(),
            ),
        })
    }
}

impl Handle {
    pub async fn next(&mut self, uids: &[u64]) -> anyhow::Result<Vec<u64>> {
        match self {
            Handle::Floor(client) => {
                let r = client.next(pb::NextRequest { uid: uids[0], route_version: 0 }).await?;
                Ok(vec![r.into_inner().seq])
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
            Handle::Postgres(client, stmt) => {
                let row = client.query_one(&*stmt, &[&(uids[0] as i64)]).await?;
                let v: i64 = row.get(0);
                Ok(vec![v as u64])
            }
            Handle::Etcd(client, seen) => Ok(vec![etcd_increment(client, seen, uids[0]).await?]),
        }
    }
}

/// A per-uid counter on etcd: compare-and-swap on the key's mod_revision, retried with the
/// fresh value on conflict (one round trip when this client's view is current).
async fn etcd_increment(
    client: &mut KvClient<Channel>,
    seen: &mut std::collections::HashMap<u64, (u64, i64)>,
    uid: u64,
) -> anyhow::Result<u64> {
    use etcdpb::{
        compare, request_op, response_op, Compare, PutRequest, RangeRequest, RequestOp, TxnRequest,
    };
    let key = format!("seq/{uid}").into_bytes();
    for _ in 0..1000 {
        let (value, mod_revision) = seen.get(&uid).copied().unwrap_or((0, 0));
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
                })),
            }],
        };
        let reply = client.txn(txn).await?.into_inner();
        if reply.succeeded {
            let revision = reply.header.map_or(0, |h| h.revision);
            seen.insert(uid, (next, revision));
            return Ok(next);
        }
        // Someone else moved it: take the current value and try again.
        let kv = reply.responses.into_iter().find_map(|r| match r.response {
            Some(response_op::Response::ResponseRange(range)) => range.kvs.into_iter().next(),
            _ => None,
        });
        match kv {
            Some(kv) => {
                let v: u64 = std::str::from_utf8(&kv.value)?.parse()?;
                seen.insert(uid, (v, kv.mod_revision));
            }
            None => {
                seen.insert(uid, (0, 0));
            }
        }
    }
    anyhow::bail!("uid {uid}: compare-and-swap kept losing")
}

/// Creates `counters(uid bigint primary key, seq bigint)` with one row per uid.
pub async fn pg_setup(url: &str, uids: u64) -> anyhow::Result<()> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(
            "DROP TABLE IF EXISTS counters;
             CREATE TABLE counters (uid bigint PRIMARY KEY, seq bigint NOT NULL);",
        )
        .await?;
    client
        .execute(
            "INSERT INTO counters SELECT g, 0 FROM generate_series(0, $1::bigint - 1) AS g",
            &[&(uids as i64)],
        )
        .await?;
    println!("counters: {uids} rows");
    Ok(())
}
