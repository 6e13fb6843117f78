//! The client SDK of the public API. Give it one seed address per set (any AllocSvr of the set);
//! it learns each set's route table from the seeds and keeps it fresh from the tables that ride
//! on replies (seqsvr's embedded route table). It retries NOT_OWNER at once with the table it
//! came with, and UNAVAILABLE with capped backoff, always within the caller's deadline.
//!
//! A `next_batch` whose uids live on several AllocSvrs is split into one call per AllocSvr; each
//! call is all-or-nothing, the whole batch is not (a failed part only leaves gaps).

use seqsvr_proto::v1::seq_service_client::SeqServiceClient;
use seqsvr_proto::v1::{self as pb};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, RwLock};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status};

const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(500);
const ATTEMPT_TIMEOUT_MAX: Duration = Duration::from_secs(3);
/// NOT_OWNER redirects followed in a row before backing off (tables can lag a hand-over).
const REDIRECTS_MAX: usize = 4;

pub struct SeqClient {
    seeds: Vec<String>,
    /// One route table per known set.
    tables: RwLock<Vec<pb::RouteTable>>,
    channels: Mutex<HashMap<String, Channel>>,
}

/// Decodes the route table a NOT_OWNER answer carries.
pub fn route_table_of(status: &Status) -> Option<pb::RouteTable> {
    use prost::Message as _;
    let bytes = status.metadata().get_bin(seqsvr_proto::ROUTE_TABLE_METADATA)?.to_bytes().ok()?;
    pb::RouteTable::decode(bytes.as_ref()).ok()
}

fn retryable(code: Code) -> bool {
    matches!(code, Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled)
}

fn owner_addr(table: &pb::RouteTable, uid: u64) -> Option<String> {
    let section = uid / table.section_size.max(1);
    table
        .entries
        .iter()
        .find(|e| e.section_begin <= section && section < e.section_end)
        .map(|e| e.addr.clone())
}

impl SeqClient {
    /// Learns the route tables from the seeds (one per set is enough). Fails only if no seed
    /// answered within `deadline`.
    pub async fn connect(seeds: &[String], deadline: Duration) -> Result<SeqClient, Status> {
        if seeds.is_empty() {
            return Err(Status::invalid_argument("no seed addresses: give one AllocSvr per set"));
        }
        let client = SeqClient {
            seeds: seeds.to_vec(),
            tables: RwLock::new(Vec::new()),
            channels: Mutex::new(HashMap::new()),
        };
        let until = Instant::now() + deadline;
        let mut backoff = BACKOFF_MIN;
        loop {
            let errors = client.refresh_from(&client.seeds, until).await;
            if !client.tables.read().unwrap_or_else(|e| e.into_inner()).is_empty() {
                return Ok(client);
            }
            if Instant::now() + backoff >= until {
                return Err(Status::unavailable(format!(
                    "no seed answered with a route table: {}",
                    errors.join("; ")
                )));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// The route tables known now, one per set.
    pub fn route_tables(&self) -> Vec<pb::RouteTable> {
        self.tables.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn channel(&self, addr: &str) -> Result<Channel, Status> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let c = crate::store::channel(addr)?;
        channels.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Keeps `table` if it is newer than what we have for its set.
    fn install(&self, table: pb::RouteTable) {
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        match tables.iter_mut().find(|t| t.set_id == table.set_id) {
            Some(t) if t.version >= table.version => {}
            Some(t) => *t = table,
            None => {
                tables.push(table);
                tables.sort_by_key(|t| t.uid_begin);
            }
        }
    }

    /// Asks each address for its route table; returns the errors of those that failed.
    async fn refresh_from(&self, addrs: &[String], until: Instant) -> Vec<String> {
        let mut errors = Vec::new();
        for addr in addrs {
            let left = until.saturating_duration_since(Instant::now()).min(ATTEMPT_TIMEOUT_MAX);
            if left.is_zero() {
                break;
            }
            let result = async {
                let mut client = SeqServiceClient::new(self.channel(addr)?);
                let mut req = tonic::Request::new(pb::GetRouteTableRequest {});
                req.set_timeout(left);
                match tokio::time::timeout(left, client.get_route_table(req)).await {
                    Ok(r) => r.map(|r| r.into_inner().route_table),
                    Err(_) => Err(Status::deadline_exceeded(format!("{addr} did not answer"))),
                }
            }
            .await;
            match result {
                Ok(Some(table)) => self.install(table),
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
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables.iter().find(|t| t.uid_begin <= uid && uid < t.uid_end).cloned()
    }

    /// Where `uid` is served and the route version we hold for its set.
    async fn locate(&self, uid: u64, until: Instant) -> Result<(String, u64), Status> {
        if self.table_for(uid).is_none() {
            self.refresh_from(&self.seeds, until).await;
        }
        let Some(table) = self.table_for(uid) else {
            let sets: Vec<String> = self
                .route_tables()
                .iter()
                .map(|t| format!("set {} [{}, {})", t.set_id, t.uid_begin, t.uid_end))
                .collect();
            return Err(Status::invalid_argument(format!(
                "uid {uid} is outside every set of the cluster ({})",
                sets.join(", ")
            )));
        };
        match owner_addr(&table, uid) {
            Some(addr) => Ok((addr, table.version)),
            None => Err(Status::unavailable(format!(
                "no AllocSvr serves uid {uid}'s section yet (route table v{} of set {})",
                table.version, table.set_id
            ))),
        }
    }

    /// The retry loop shared by every call: `attempt(client, route_version, timeout)`.
    async fn call<T, F, Fut>(&self, uid: u64, deadline: Duration, attempt: F) -> Result<T, Status>
    where
        F: Fn(SeqServiceClient<Channel>, u64, Duration) -> Fut,
        Fut: Future<Output = Result<(T, Option<pb::RouteTable>), Status>>,
    {
        let until = Instant::now() + deadline;
        let mut backoff = BACKOFF_MIN;
        let mut redirects = 0;
        loop {
            let status =
                match self.locate(uid, until).await {
                    Err(s) if s.code() == Code::InvalidArgument => return Err(s),
                    Err(s) => s,
                    Ok((addr, version)) => {
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Err(Status::deadline_exceeded("deadline passed"));
                        }
                        let timeout = left.min(ATTEMPT_TIMEOUT_MAX);
                        let client = SeqServiceClient::new(self.channel(&addr)?);
                        let result =
                            match tokio::time::timeout(timeout, attempt(client, version, timeout))
                                .await
                            {
                                Ok(r) => r,
                                Err(_) => Err(Status::unavailable(format!(
                                    "{addr} did not answer in {timeout:?}"
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
                                if let Some(t) = route_table_of(&s) {
                                    self.install(t);
                                    redirects += 1;
                                    if redirects <= REDIRECTS_MAX {
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
            if until.saturating_duration_since(Instant::now()) <= backoff {
                return Err(status);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            redirects = 0;
            self.refresh_for(uid, until).await;
        }
    }

    /// The next sequence of `uid`.
    pub async fn next(&self, uid: u64, deadline: Duration) -> Result<u64, Status> {
        self.call(uid, deadline, |mut client, route_version, timeout| async move {
            let mut req = tonic::Request::new(pb::NextRequest { uid, route_version });
            req.set_timeout(timeout);
            let r = client.next(req).await?.into_inner();
            Ok((r.seq, r.route_table))
        })
        .await
    }

    /// The current sequence of `uid` without allocating.
    pub async fn current(&self, uid: u64, deadline: Duration) -> Result<u64, Status> {
        self.call(uid, deadline, |mut client, route_version, timeout| async move {
            let mut req = tonic::Request::new(pb::CurrentRequest { uid, route_version });
            req.set_timeout(timeout);
            let r = client.current(req).await?.into_inner();
            Ok((r.seq, r.route_table))
        })
        .await
    }

    /// The next sequence of each uid, in order (a repeated uid gets increasing values). One
    /// call per AllocSvr involved, each all-or-nothing.
    pub async fn next_batch(&self, uids: &[u64], deadline: Duration) -> Result<Vec<u64>, Status> {
        if uids.is_empty() {
            return Err(Status::invalid_argument("empty batch: give at least one uid"));
        }
        let until = Instant::now() + deadline;
        // Group by owner as currently known; a group is keyed by its first uid for routing.
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, &uid) in uids.iter().enumerate() {
            let key = match self.locate(uid, until).await {
                Ok((addr, _)) => addr,
                Err(s) if s.code() == Code::InvalidArgument => return Err(s),
                Err(_) => format!("unrouted:{i}"),
            };
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        let mut out = vec![0u64; uids.len()];
        let calls = groups.iter().map(|(_, idx)| {
            let part: Vec<u64> = idx.iter().map(|&i| uids[i]).collect();
            let left = until.saturating_duration_since(Instant::now());
            async move {
                let first = part[0];
                self.call(first, left, |mut client, route_version, timeout| {
                    let uids = part.clone();
                    async move {
                        let mut req =
                            tonic::Request::new(pb::NextBatchRequest { uids, route_version });
                        req.set_timeout(timeout);
                        let r = client.next_batch(req).await?.into_inner();
                        Ok((r.seqs, r.route_table))
                    }
                })
                .await
            }
        });
        let results = futures::future::join_all(calls).await;
        for ((_, idx), result) in groups.iter().zip(results) {
            let seqs = result?;
            if seqs.len() != idx.len() {
                return Err(Status::internal("NextBatch answered a different number of values"));
            }
            for (&i, v) in idx.iter().zip(seqs) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}
