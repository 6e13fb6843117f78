//! The client SDK of the public API. Give it one seed address per set (any AllocSvr of the set);
//! it learns each set's route table from the seeds and keeps it fresh from the tables that ride
//! on replies (seqsvr's embedded route table). It retries NOT_OWNER at once with the table it
//! came with, and UNAVAILABLE with capped backoff, always within the caller's deadline.
//!
//! A `next_batch` whose uids live on several AllocSvrs is split into one call per AllocSvr; each
//! call is all-or-nothing, the whole batch is not (a failed part only leaves gaps).
//!
//! Concurrent `next` calls bound for the same AllocSvr are coalesced into one `NextBatch` with
//! independent entries (as TiDB's PD client batches timestamp requests): one AllocSvr gets at
//! most `max_in_flight` RPCs from this client at a time, and every call that arrives while they
//! are out rides the next one. An entry the AllocSvr cannot serve at once (hand-over, waiting
//! for an advance) comes back as 0 and is retried alone, so it never holds up the others.

use seqsvr_proto::v1::seq_service_client::SeqServiceClient;
use seqsvr_proto::v1::{self as pb};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::{Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status};

const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(500);
const ATTEMPT_TIMEOUT_MAX: Duration = Duration::from_secs(3);
/// NOT_OWNER redirects followed in a row before backing off (tables can lag a hand-over).
const REDIRECTS_MAX: usize = 4;

/// How the SDK talks to AllocSvrs.
#[derive(Clone, Debug)]
pub struct SeqClientOptions {
    /// Coalesce concurrent `next` calls bound for the same AllocSvr into one RPC. Under load
    /// this multiplies throughput (one RPC's cost is shared by many calls); a lone caller pays
    /// one in-process hop.
    pub coalesce: bool,
    /// Most calls in one coalesced RPC (keep it within the AllocSvrs' `max_batch_uids`).
    pub max_coalesced: usize,
    /// Coalesced RPCs in flight per AllocSvr; calls arriving meanwhile wait for the next one.
    pub max_in_flight: usize,
}

impl Default for SeqClientOptions {
    fn default() -> Self {
        SeqClientOptions { coalesce: true, max_coalesced: 1000, max_in_flight: 2 }
    }
}

pub struct SeqClient {
    seeds: Vec<String>,
    options: SeqClientOptions,
    /// One route table per known set.
    tables: RwLock<Vec<pb::RouteTable>>,
    channels: Mutex<HashMap<String, Channel>>,
    /// Per AllocSvr address: the queue of its coalescing task.
    coalescers: Mutex<HashMap<String, mpsc::UnboundedSender<Pending>>>,
    /// Coalesced RPCs sent (for tests and metrics: calls ÷ RPCs is the coalescing factor).
    coalesced_rpcs: Arc<std::sync::atomic::AtomicU64>,
}

type Served = Result<(u64, Option<pb::RouteTable>), Status>;

/// A `next` call waiting for a coalesced RPC.
struct Pending {
    uid: u64,
    route_version: u64,
    until: Instant,
    reply: oneshot::Sender<Served>,
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

fn owner_entry(table: &pb::RouteTable, uid: u64) -> Option<&pb::RouteEntry> {
    let section = uid / table.section_size.max(1);
    // Entries come sorted by section; a table that is not falls back to a scan.
    let i = table.entries.partition_point(|e| e.section_end <= section);
    let hit = |e: &&pb::RouteEntry| e.section_begin <= section && section < e.section_end;
    table.entries.get(i).filter(hit).or_else(|| table.entries.iter().find(hit))
}

/// One AllocSvr's coalescing task: takes the first waiting call, waits for an in-flight slot
/// (calls pile up meanwhile), then sends everything waiting as one RPC.
async fn coalesce(
    client: SeqServiceClient<Channel>,
    addr: String,
    mut queue: mpsc::UnboundedReceiver<Pending>,
    options: SeqClientOptions,
    rpcs: Arc<std::sync::atomic::AtomicU64>,
) {
    let slots = Arc::new(Semaphore::new(options.max_in_flight));
    while let Some(first) = queue.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
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
        let (client, addr) = (client.clone(), addr.clone());
        tokio::spawn(async move {
            send_coalesced(client, &addr, batch).await;
            drop(slot);
        });
    }
}

/// Sends one coalesced RPC and hands each caller its answer (the route table, if any, to the
/// first: installing it once is enough).
async fn send_coalesced(mut client: SeqServiceClient<Channel>, addr: &str, batch: Vec<Pending>) {
    let until = batch.iter().map(|p| p.until).max().unwrap_or_else(Instant::now);
    let timeout = until.saturating_duration_since(Instant::now()).min(ATTEMPT_TIMEOUT_MAX);
    let route_version = batch.iter().map(|p| p.route_version).min().unwrap_or(0);
    let uids: Vec<u64> = batch.iter().map(|p| p.uid).collect();
    let result = if timeout.is_zero() {
        Err(Status::deadline_exceeded("deadline passed before the batch was sent"))
    } else {
        let mut req =
            tonic::Request::new(pb::NextBatchRequest { uids, route_version, independent: true });
        req.set_timeout(timeout);
        match tokio::time::timeout(timeout, client.next_batch(req)).await {
            Ok(r) => r.map(|r| r.into_inner()),
            Err(_) => Err(Status::unavailable(format!("{addr} did not answer in {timeout:?}"))),
        }
    };
    match result {
        Ok(r) if r.seqs.len() == batch.len() => {
            let mut table = r.route_table;
            for (p, seq) in batch.into_iter().zip(r.seqs) {
                let _ = p.reply.send(Ok((seq, table.take())));
            }
        }
        Ok(r) => {
            let status = Status::internal(format!(
                "{addr} answered {} values for {} uids",
                r.seqs.len(),
                batch.len()
            ));
            for p in batch {
                let _ = p.reply.send(Err(status.clone()));
            }
        }
        Err(status) => {
            for p in batch {
                let _ = p.reply.send(Err(status.clone()));
            }
        }
    }
}

impl SeqClient {
    /// Learns the route tables from the seeds (one per set is enough). Fails only if no seed
    /// answered within `deadline`.
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
        if options.max_coalesced == 0 || options.max_in_flight == 0 {
            return Err(Status::invalid_argument(
                "max_coalesced and max_in_flight must be at least 1",
            ));
        }
        let client = SeqClient {
            seeds: seeds.to_vec(),
            options,
            tables: RwLock::new(Vec::new()),
            channels: Mutex::new(HashMap::new()),
            coalescers: Mutex::new(HashMap::new()),
            coalesced_rpcs: Arc::new(std::sync::atomic::AtomicU64::new(0)),
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

    /// Where `uid` is served and the route version we hold for its set, from one look at the
    /// tables (every call goes through here: no table is copied). None: no set's table has it.
    fn route_of(&self, uid: u64) -> Option<Result<(String, u64), Status>> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        let table = tables.iter().find(|t| t.uid_begin <= uid && uid < t.uid_end)?;
        Some(match owner_entry(table, uid) {
            Some(e) => Ok((e.addr.clone(), table.version)),
            None => Err(Status::unavailable(format!(
                "no AllocSvr serves uid {uid}'s section yet (route table v{} of set {})",
                table.version, table.set_id
            ))),
        })
    }

    /// `route_of`, learning the tables from the seeds first if no table has `uid`.
    async fn locate(&self, uid: u64, until: Instant) -> Result<(String, u64), Status> {
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

    /// The retry loop shared by every call: `attempt(client, addr, route_version, timeout)`.
    async fn call<T, F, Fut>(&self, uid: u64, deadline: Duration, attempt: F) -> Result<T, Status>
    where
        F: Fn(SeqServiceClient<Channel>, String, u64, Duration) -> Fut,
        Fut: Future<Output = Result<(T, Option<pb::RouteTable>), Status>>,
    {
        let until = Instant::now() + deadline;
        let mut backoff = BACKOFF_MIN;
        let mut redirects = 0;
        loop {
            let status = match self.locate(uid, until).await {
                Err(s) if s.code() == Code::InvalidArgument => return Err(s),
                Err(s) => s,
                Ok((addr, version)) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Status::deadline_exceeded("deadline passed"));
                    }
                    let timeout = left.min(ATTEMPT_TIMEOUT_MAX);
                    let client = SeqServiceClient::new(self.channel(&addr)?);
                    let result = match tokio::time::timeout(
                        timeout,
                        attempt(client, addr.clone(), version, timeout),
                    )
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
        self.call(uid, deadline, |mut client, addr, route_version, timeout| async move {
            let started = Instant::now();
            if self.options.coalesce {
                match self.next_coalesced(&addr, uid, route_version, started + timeout).await {
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
            let left = timeout.saturating_sub(started.elapsed());
            let mut req = tonic::Request::new(pb::NextRequest { uid, route_version });
            req.set_timeout(left);
            let r = client.next(req).await?.into_inner();
            Ok((r.seq, r.route_table))
        })
        .await
    }

    /// Coalesced RPCs sent so far (calls ÷ this = how many calls one RPC carried).
    pub fn coalesced_rpcs(&self) -> u64 {
        self.coalesced_rpcs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues `uid` for the next coalesced RPC to `addr`; 0 = not served at once.
    async fn next_coalesced(
        &self,
        addr: &str,
        uid: u64,
        route_version: u64,
        until: Instant,
    ) -> Served {
        let (reply, answer) = oneshot::channel();
        self.coalescer(addr)?
            .send(Pending { uid, route_version, until, reply })
            .map_err(|_| Status::unavailable(format!("the coalescing task for {addr} ended")))?;
        answer
            .await
            .unwrap_or_else(|_| Err(Status::unavailable(format!("no answer from {addr}'s batch"))))
    }

    /// The queue of `addr`'s coalescing task, started on first use; it ends with the client.
    fn coalescer(&self, addr: &str) -> Result<mpsc::UnboundedSender<Pending>, Status> {
        let mut coalescers = self.coalescers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = coalescers.get(addr).filter(|tx| !tx.is_closed()) {
            return Ok(tx.clone());
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let client = SeqServiceClient::new(self.channel(addr)?);
        tokio::spawn(coalesce(
            client,
            addr.to_string(),
            rx,
            self.options.clone(),
            self.coalesced_rpcs.clone(),
        ));
        coalescers.insert(addr.to_string(), tx.clone());
        Ok(tx)
    }

    /// The current sequence of `uid` without allocating.
    pub async fn current(&self, uid: u64, deadline: Duration) -> Result<u64, Status> {
        self.call(uid, deadline, |mut client, _, route_version, timeout| async move {
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
        let unknown = {
            let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
            uids.iter()
                .copied()
                .find(|&u| !tables.iter().any(|t| t.uid_begin <= u && u < t.uid_end))
        };
        if let Some(uid) = unknown {
            self.locate(uid, until).await?; // learns the tables, or says which uid is outside
        }
        // Group by owner as currently known, from one look at the tables; an unrouted uid
        // becomes a group of its own (the retry loop waits for its owner).
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        let mut outside = None;
        {
            let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
            let mut last: Option<usize> = None;
            for (i, &uid) in uids.iter().enumerate() {
                let Some(table) = tables.iter().find(|t| t.uid_begin <= uid && uid < t.uid_end)
                else {
                    outside = Some(uid);
                    break;
                };
                let Some(addr) = owner_entry(table, uid).map(|e| e.addr.as_str()) else {
                    groups.push((format!("unrouted:{i}"), vec![i]));
                    continue;
                };
                match last.filter(|&g| groups[g].0 == addr) {
                    Some(g) => groups[g].1.push(i),
                    None => match groups.iter().position(|(k, _)| k == addr) {
                        Some(g) => {
                            groups[g].1.push(i);
                            last = Some(g);
                        }
                        None => {
                            groups.push((addr.to_string(), vec![i]));
                            last = Some(groups.len() - 1);
                        }
                    },
                }
            }
        }
        if let Some(uid) = outside {
            return Err(self.locate(uid, until).await.err().unwrap_or_else(|| {
                Status::unavailable(format!("uid {uid}: the route tables changed; retry"))
            }));
        }
        let mut out = vec![0u64; uids.len()];
        let calls = groups.iter().map(|(_, idx)| {
            let part: Vec<u64> = idx.iter().map(|&i| uids[i]).collect();
            let left = until.saturating_duration_since(Instant::now());
            async move {
                let first = part[0];
                self.call(first, left, |mut client, _, route_version, timeout| {
                    let uids = part.clone();
                    async move {
                        let mut req = tonic::Request::new(pb::NextBatchRequest {
                            uids,
                            route_version,
                            independent: false,
                        });
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
