//! Globally unique, time-ordered ids from the AllocSvrs' `IdService` (issue 10): a client that
//! asks any AllocSvr ([`IdClient`]), a client-side cache that hands ids out of a buffer it
//! refills in the background ([`CachedIds`]), and decoding without a server ([`decode`]).
//!
//! **Which AllocSvr.** Any AllocSvr serves any scheme (each holds worker ids of its own), so the
//! client spreads its calls round-robin over every AllocSvr it knows: the seeds (each set's
//! `allocs` in the cluster config, [`IdClient::from_config`]) and the addresses in the route
//! tables it learns ([`IdClient::learn_routes`] from a [`crate::seq::SeqClient`], or
//! [`IdClient::refresh_routes`], which asks the AllocSvrs themselves).
//!
//! **Retries** follow [`crate::retry`]: an attempt that fails with a retryable code
//! ([`retryable`]: UNAVAILABLE — the AllocSvr is down, has no lease or no worker id yet, or its
//! clock is behind the time already used —, an attempt's own timeout, a broken connection) goes
//! to the next AllocSvr at once. After a round in which every AllocSvr failed, the client backs
//! off by [`RetryPolicy::STANDARD`], asks for fresh route tables and tries another round, never
//! past the caller's deadline. Every other code is the final answer and is returned at once:
//! INVALID_ARGUMENT (a count or business number that does not fit), NOT_FOUND (no scheme of that
//! name in the cluster config), UNIMPLEMENTED (a server without the service),
//! RESOURCE_EXHAUSTED (every worker id of the scheme held, or its time field run out; retrying
//! would only add load), and an answer that breaks the service's promises (INTERNAL).
//!
//! **RongCloud sessions** ([`IdClient::next_session_ids`]) are served only by the owner of the
//! session's section: the client asks it directly once it knows the session's uid (from the
//! cluster config, or an earlier answer) and its route; any other AllocSvr answers NOT_OWNER
//! with the uid (and its route table), which the client follows (every call of this client is
//! marked `seqsvr-no-forward`: an AllocSvr would otherwise forward it to the owner itself).
//!
//! **Ordering.** The ids of one answer strictly increase and carry one worker id; the ids of one
//! worker id (of one `rongcloud` session) strictly increase over all answers, whoever issued them. Ids from different AllocSvrs
//! are unique but not ordered with each other.

use crate::retry::{retryable, RetryPolicy};
use crossbeam_queue::ArrayQueue;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use seqsvr_core::config::{ClusterConfig, IdsConfig};
// The pure decoder lives in seqsvr-core (the AllocSvr's `Decode` answers from it too); the SDK
// offers it as its own.
pub use seqsvr_core::decode::{
    decode, decode_id, layout_of, DecodedId, DecodedView, SchemeLookupError,
};
use seqsvr_core::idscheme::{self, DecodeError, Layout, Scheme};
use seqsvr_proto::v1::id_service_client::IdServiceClient;
use seqsvr_proto::v1::seq_service_client::SeqServiceClient;
use seqsvr_proto::v1::{self as pb};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::Status;

/// One attempt never waits longer than this (an AllocSvr that accepts connections but never
/// answers must not eat the whole deadline). Above the AllocSvrs' default `ids.max_ahead_ms`
/// (2 s), the longest a `NextIds` may wait for the clock.
const ATTEMPT_TIMEOUT_MAX: Duration = Duration::from_secs(3);
/// How long a route table refresh between two rounds may take.
const REFRESH_TIMEOUT_MAX: Duration = Duration::from_millis(500);

/// One id: 64 bits (snowflake, uid-generator, weibo; js53's 53 bits too) or 128 bits (uuidv7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Id {
    U64(u64),
    U128(u128),
}

impl Id {
    /// The id as a number (what [`Layout::decode`] and [`Layout::format`] take).
    pub fn value(self) -> u128 {
        match self {
            Id::U64(id) => u128::from(id),
            Id::U128(id) => id,
        }
    }

    /// Bits of the id's type: 64 or 128.
    pub fn bits(self) -> u32 {
        match self {
            Id::U64(_) => 64,
            Id::U128(_) => 128,
        }
    }

    /// The id's text form in `layout` (decimal; the 8-4-4-4-12 form for uuidv7).
    pub fn text(self, layout: &Layout) -> Result<String, DecodeError> {
        layout.format(self.value())
    }
}

/// The ids of one answer, in the order issued (strictly increasing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdList {
    /// 64-bit schemes.
    U64(Vec<u64>),
    /// uuidv7 and rongcloud, from the answer's 16-byte big-endian ids (`ids128_packed` or `ids128`).
    U128(Vec<u128>),
}

impl IdList {
    pub fn len(&self) -> usize {
        match self {
            IdList::U64(ids) => ids.len(),
            IdList::U128(ids) => ids.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id at `index`.
    pub fn get(&self, index: usize) -> Option<Id> {
        match self {
            IdList::U64(ids) => ids.get(index).copied().map(Id::U64),
            IdList::U128(ids) => ids.get(index).copied().map(Id::U128),
        }
    }

    pub fn first(&self) -> Option<Id> {
        self.get(0)
    }

    /// The ids in order.
    pub fn iter(&self) -> impl Iterator<Item = Id> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }
}

/// One `NextIds` answer: the ids and the worker id every one of them carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ids {
    pub ids: IdList,
    pub worker_id: u64,
}

/// An `IdService` client with the message size limits the crate uses for AllocSvrs.
/// Every call marked [`crate::seq::NoForward`]: this client routes sessions itself.
fn id_client(channel: Channel) -> IdServiceClient<crate::seq::AllocChannel> {
    IdServiceClient::with_interceptor(channel, crate::seq::NoForward)
        .max_encoding_message_size(seqsvr_proto::SEQ_REQUEST_MAX_BYTES)
        .max_decoding_message_size(seqsvr_proto::REPLY_MAX_BYTES)
}

/// A status as one line: its code, message and causes (a transport error's cause, e.g.
/// `tcp connect error: Connection refused`, is only in its sources).
fn describe(status: &Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks a `NextIds` answer against what was asked and what the service promises: `count`
/// ids, all of one width, strictly increasing. Anything else is a server bug (INTERNAL), never
/// handed on: a repeated or reordered id could be handed out twice.
fn ids_of(addr: &str, r: pb::NextIdsResponse, count: u32) -> Result<Ids, Status> {
    let bad = |why: String| Status::internal(format!("{addr} answered NextIds wrongly: {why}"));
    let ids = match (seqsvr_proto::ids64_count(&r) == 0, seqsvr_proto::ids128_count(&r) == 0) {
        (false, true) => IdList::U64(seqsvr_proto::ids64_of(&r).map_err(bad)?),
        (true, false) => IdList::U128(seqsvr_proto::ids128_of(&r).map_err(bad)?),
        (true, true) => return Err(bad(format!("no ids for a count of {count}"))),
        (false, false) => return Err(bad("both 64-bit and 128-bit ids".into())),
    };
    if ids.len() != count as usize {
        return Err(bad(format!("{} ids for a count of {count}", ids.len())));
    }
    check_increasing(&ids).map_err(bad)?;
    Ok(Ids { ids, worker_id: r.worker_id })
}

/// Err(why) unless every id of `ids` is above the one before it.
fn check_increasing(ids: &IdList) -> Result<(), String> {
    let mut previous: Option<Id> = None;
    for (i, id) in ids.iter().enumerate() {
        if let Some(p) = previous.filter(|p| *p >= id) {
            return Err(format!(
                "id #{i} ({}) is not above the one before it ({})",
                id.value(),
                p.value()
            ));
        }
        previous = Some(id);
    }
    Ok(())
}

/// A client of the AllocSvrs' `IdService`: round-robin over every AllocSvr it knows, retrying
/// the next one on a transient failure (see the module doc). Cheap to share (`Arc`); channels
/// are built lazily, over TLS when the process has an identity (`crate::tls`), and rebuilt when
/// that identity rotates.
pub struct IdClient {
    seeds: Vec<String>,
    /// The newest route table learnt per set: the AllocSvrs beyond the seeds.
    tables: RwLock<Vec<pb::RouteTable>>,
    /// Where the next call's round starts (round-robin).
    cursor: AtomicUsize,
    /// Per AllocSvr address: its channel and the TLS identity generation it was built under.
    channels: Mutex<HashMap<String, (Channel, u64)>>,
    /// The cluster's `[ids]` when built from the config: `rongcloud` sessions are then routed
    /// to their owner from the first call.
    ids_config: Option<IdsConfig>,
    /// `rongcloud`: (scheme, session key) → the uid the session is routed by, as AllocSvrs
    /// answered (bounded: cleared when full).
    session_uids: Mutex<HashMap<(String, u64), u64>>,
}

/// The most session uids an [`IdClient`] remembers.
const SESSION_UIDS_MAX: usize = 1 << 16;
/// The most NOT_OWNER redirects one session call follows before it backs off.
const SESSION_REDIRECTS_MAX: u32 = 8;

/// A RongCloud session: its type (0..=15) and its id, as text (hashed as seed 000 says:
/// [`idscheme::session_hash_of`]) or as the 22-bit hash itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub session_type: u32,
    pub id: SessionId,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionId {
    Text(String),
    Hash(u64),
}

impl Session {
    /// The 22-bit session hash.
    pub fn hash(&self) -> u64 {
        match &self.id {
            SessionId::Text(text) => idscheme::session_hash_of(text),
            SessionId::Hash(hash) => *hash,
        }
    }

    /// `type << 22 | hash`, or INVALID_ARGUMENT if a field does not fit.
    pub fn key(&self) -> Result<u64, Status> {
        idscheme::session_key(u64::from(self.session_type), self.hash()).ok_or_else(|| {
            Status::invalid_argument(format!(
                "session type {} and hash {} must be below {} and {}",
                self.session_type,
                self.hash(),
                idscheme::SESSION_TYPES,
                idscheme::SESSION_HASHES
            ))
        })
    }
}

/// The AllocSvr that serves `uid` in `tables`, if known.
fn owner_addr(tables: &[pb::RouteTable], uid: u64) -> Option<String> {
    tables.iter().find_map(|t| t.owner_addr_of_uid(uid)).map(str::to_string)
}

/// A NOT_OWNER answer to a `rongcloud` session call (it issued nothing): the uid the session
/// is routed by, if the answer says.
pub fn session_not_owner_uid(status: &Status) -> Option<Option<u64>> {
    if status.code() != tonic::Code::FailedPrecondition
        || !status.message().starts_with("NOT_OWNER")
    {
        return None;
    }
    Some(
        status
            .metadata()
            .get(seqsvr_proto::SESSION_UID_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok()),
    )
}

impl IdClient {
    /// A client of the AllocSvrs at `seeds` (`host:port`; any AllocSvr of any set). Nothing is
    /// dialled until the first call.
    pub fn new(seeds: &[String]) -> Result<IdClient, Status> {
        let mut unique: Vec<String> = Vec::with_capacity(seeds.len());
        for seed in seeds {
            if !unique.contains(seed) {
                unique.push(seed.clone());
            }
        }
        if unique.is_empty() {
            return Err(Status::invalid_argument(
                "no AllocSvr address: give at least one (any AllocSvr of any set)",
            ));
        }
        // TLS or plaintext is the process's explicit choice (`tls::set_process_tls` /
        // `tls::use_plaintext`): said now, not at the first call.
        crate::tls::process_transport()?;
        Ok(IdClient {
            seeds: unique,
            tables: RwLock::new(Vec::new()),
            cursor: AtomicUsize::new(0),
            channels: Mutex::new(HashMap::new()),
            ids_config: None,
            session_uids: Mutex::new(HashMap::new()),
        })
    }

    /// A client seeded with every set's `allocs` in the cluster config.
    pub fn from_config(config: &ClusterConfig) -> Result<IdClient, Status> {
        let seeds: Vec<String> =
            config.sets.iter().flat_map(|s| s.allocs.iter().cloned()).collect();
        if seeds.is_empty() {
            return Err(Status::invalid_argument(
                "the cluster config lists no AllocSvr (`allocs` of each set): list them there, \
                 or give addresses to IdClient::new (e.g. from a store leader's route table)",
            ));
        }
        let mut client = IdClient::new(&seeds)?;
        client.ids_config = Some(config.ids.clone());
        Ok(client)
    }

    /// Routes `rongcloud` sessions by `ids` (the cluster config's `[ids]`) from the first call,
    /// as [`IdClient::from_config`] does.
    pub fn with_ids_config(mut self, ids: IdsConfig) -> IdClient {
        self.ids_config = Some(ids);
        self
    }

    /// Learns the AllocSvrs named in `tables` (e.g. [`crate::seq::SeqClient::route_tables`]);
    /// a set's table is kept only if it is newer than the one held for it.
    pub fn learn_routes(&self, tables: &[pb::RouteTable]) {
        let mut held = self.tables.write().unwrap_or_else(|e| e.into_inner());
        for table in tables {
            match held.iter_mut().find(|t| t.set_id == table.set_id) {
                Some(t) if t.version >= table.version => {}
                Some(t) => *t = table.clone(),
                None => held.push(table.clone()),
            }
        }
        held.sort_by_key(|t| t.set_id);
    }

    /// Every AllocSvr address known now, in round-robin order: the seeds, then the learnt ones.
    pub fn addresses(&self) -> Vec<String> {
        let mut addrs = self.seeds.clone();
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        for entry in tables.iter().flat_map(|t| t.entries.iter()) {
            if !entry.addr.is_empty() && !addrs.contains(&entry.addr) {
                addrs.push(entry.addr.clone());
            }
        }
        addrs
    }

    /// Asks every known AllocSvr for its route table at once (within `deadline`) and learns
    /// the AllocSvrs they name. Returns the failures (`addr: what went wrong`).
    pub async fn refresh_routes(&self, deadline: Duration) -> Vec<String> {
        let addrs = self.addresses();
        let asks = addrs.iter().map(|addr| async move {
            let ask = async {
                let channel = self.channel(addr)?;
                let mut client = SeqServiceClient::with_interceptor(channel, crate::seq::NoForward)
                    .max_decoding_message_size(seqsvr_proto::REPLY_MAX_BYTES);
                let mut request = tonic::Request::new(pb::GetRouteTableRequest {});
                request.set_timeout(deadline);
                let r = client.get_route_table(request).await?.into_inner();
                r.route_table.ok_or_else(|| Status::internal("an empty route table"))
            };
            match tokio::time::timeout(deadline, ask).await {
                Ok(Ok(table)) => Ok(table),
                Ok(Err(status)) => Err(format!("{addr}: {}", describe(&status))),
                Err(_) => Err(format!("{addr}: no route table within {} ms", deadline.as_millis())),
            }
        });
        let mut errors = Vec::new();
        let mut tables = Vec::new();
        for result in futures::future::join_all(asks).await {
            match result {
                Ok(table) => tables.push(table),
                Err(e) => errors.push(e),
            }
        }
        self.learn_routes(&tables);
        errors
    }

    fn channel(&self, addr: &str) -> Result<Channel, Status> {
        let generation = crate::tls::generation();
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((c, _)) = channels.get(addr).filter(|(_, g)| *g == generation) {
            return Ok(c.clone());
        }
        let c = crate::store::alloc_channel(addr)?;
        channels.insert(addr.to_string(), (c.clone(), generation));
        Ok(c)
    }

    /// `count` new ids of `scheme` (a name from the cluster config's `[ids.schemes]`) from one
    /// AllocSvr, strictly increasing, with the worker id they carry. `business`: weibo's
    /// business number (0..=31), 0 for the other schemes. Retries as the module doc says,
    /// within `deadline`.
    pub async fn next_ids(
        &self,
        scheme: &str,
        count: u32,
        business: u64,
        deadline: Duration,
    ) -> Result<Ids, Status> {
        if count == 0 {
            return Err(Status::invalid_argument("count 0: ask for at least one id"));
        }
        self.call(deadline, |mut client, addr, timeout| {
            let mut request = tonic::Request::new(pb::NextIdsRequest {
                scheme: scheme.to_string(),
                count,
                business,
                packed_ids128: true,
                packed_ids64: true,
                ..Default::default()
            });
            request.set_timeout(timeout);
            async move {
                let r = client.next_ids(request).await?.into_inner();
                ids_of(&addr, r, count)
            }
        })
        .await
    }

    /// `count` new `rongcloud` ids of `session`, strictly increasing (and above every id the
    /// session had before), from the owner of the session's section. Asks the owner directly
    /// when it knows the session's uid (from the cluster config, or an earlier answer) and
    /// that uid's route; otherwise any AllocSvr, which answers NOT_OWNER with the uid and its
    /// route table. Retries as [`IdClient::next_ids`], within `deadline`.
    pub async fn next_session_ids(
        &self,
        scheme: &str,
        count: u32,
        session: &Session,
        deadline: Duration,
    ) -> Result<Ids, Status> {
        if count == 0 {
            return Err(Status::invalid_argument("count 0: ask for at least one id"));
        }
        let key = session.key()?;
        let (session_id, session_hash) = match &session.id {
            SessionId::Text(text) => (text.clone(), None),
            SessionId::Hash(hash) => (String::new(), Some(*hash)),
        };
        let request = pb::NextIdsRequest {
            scheme: scheme.to_string(),
            count,
            business: 0,
            session_type: session.session_type,
            session_id,
            session_hash,
            packed_ids128: true,
            packed_ids64: false,
        };
        let until = Instant::now() + deadline;
        let mut backoff = RetryPolicy::STANDARD.backoff();
        let mut redirects = 0;
        loop {
            let owner = self.session_uid(scheme, key).and_then(|uid| {
                let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
                owner_addr(&tables, uid)
            });
            let addrs = match owner {
                Some(addr) if redirects < SESSION_REDIRECTS_MAX => vec![addr],
                _ => {
                    let mut addrs = self.addresses();
                    let start = self.cursor.fetch_add(1, Ordering::Relaxed) % addrs.len();
                    addrs.rotate_left(start);
                    addrs
                }
            };
            let mut failures: Vec<String> = Vec::new();
            let mut last_code = tonic::Code::Unavailable;
            let mut redirected = false;
            for addr in &addrs {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let mut client = match self.channel(addr) {
                    Ok(channel) => id_client(channel),
                    Err(status) => {
                        failures.push(format!("{addr}: {}", describe(&status)));
                        continue;
                    }
                };
                let timeout = left.min(ATTEMPT_TIMEOUT_MAX);
                let mut call = tonic::Request::new(request.clone());
                call.set_timeout(timeout);
                let status = match tokio::time::timeout(timeout, client.next_ids(call)).await {
                    Ok(Ok(r)) => {
                        let r = r.into_inner();
                        self.remember_session_uid(scheme, key, r.session_uid);
                        return ids_of(addr, r, count);
                    }
                    Ok(Err(status)) => status,
                    Err(_) => Status::deadline_exceeded(format!(
                        "no answer in {} ms",
                        timeout.as_millis()
                    )),
                };
                if let Some(uid) = session_not_owner_uid(&status) {
                    if let Some(uid) = uid {
                        self.remember_session_uid(scheme, key, uid);
                    }
                    if let Some(table) = seqsvr_proto::route_table_of(&status) {
                        self.learn_routes(&[table]);
                    }
                    redirects += 1;
                    redirected = redirects <= SESSION_REDIRECTS_MAX;
                    failures.push(format!("{addr}: {}", describe(&status)));
                    if redirected
                        && self.session_uid(scheme, key).is_some_and(|uid| {
                            let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
                            owner_addr(&tables, uid).is_some_and(|a| a != *addr)
                        })
                    {
                        break; // ask the owner now
                    }
                    continue;
                }
                if !retryable(status.code()) {
                    return Err(status);
                }
                last_code = status.code();
                failures.push(format!("{addr}: {}", describe(&status)));
            }
            if redirected {
                continue;
            }
            if !backoff.wait(until).await {
                return Err(Status::new(
                    last_code,
                    format!(
                        "no owner of the session answered within {} ms; last round: {}",
                        deadline.as_millis(),
                        failures.join("; ")
                    ),
                ));
            }
            redirects = 0;
            let left = until.saturating_duration_since(Instant::now());
            self.refresh_routes(left.min(REFRESH_TIMEOUT_MAX)).await;
        }
    }

    /// The uid `rongcloud` session `key` of `scheme` is routed by, if known.
    /// What the AllocSvrs answered comes first: a config here that differs from theirs must
    /// not send every call to the wrong AllocSvr first.
    fn session_uid(&self, scheme: &str, key: u64) -> Option<u64> {
        let answered = {
            let uids = self.session_uids.lock().unwrap_or_else(|e| e.into_inner());
            uids.get(&(scheme.to_string(), key)).copied()
        };
        answered.or_else(|| {
            let config = self.ids_config.as_ref()?.schemes.get(scheme)?;
            let uids = config.session_uids();
            (config.scheme == Scheme::RongCloud && uids.start < uids.end)
                .then(|| config.session_uid(key))
        })
    }

    fn remember_session_uid(&self, scheme: &str, key: u64, uid: u64) {
        let mut uids = self.session_uids.lock().unwrap_or_else(|e| e.into_inner());
        if uids.len() >= SESSION_UIDS_MAX {
            uids.clear();
        }
        uids.insert((scheme.to_string(), key), uid);
    }

    /// One new id of `scheme` (business number 0; [`IdClient::next_ids`] for weibo's others).
    /// Its worker id is in the id itself ([`decode`]).
    pub async fn next_id(&self, scheme: &str, deadline: Duration) -> Result<Id, Status> {
        let ids = self.next_ids(scheme, 1, 0, deadline).await?;
        ids.ids.first().ok_or_else(|| Status::internal("NextIds answered no id for a count of 1"))
    }

    /// Asks an AllocSvr to decode `text` (the id's text form or, for the 64-bit schemes,
    /// decimal). [`decode`] does the same without a server, given the layout; this is for
    /// callers without the cluster config.
    pub async fn decode_on_server(
        &self,
        scheme: &str,
        text: &str,
        deadline: Duration,
    ) -> Result<pb::DecodeIdResponse, Status> {
        self.call(deadline, |mut client, _, timeout| {
            let mut request = tonic::Request::new(pb::DecodeIdRequest {
                scheme: scheme.to_string(),
                text: text.to_string(),
                id: 0,
            });
            request.set_timeout(timeout);
            async move { Ok(client.decode(request).await?.into_inner()) }
        })
        .await
    }

    /// A [`CachedIds`] of `scheme` (with weibo's `business` number, else 0) filled from this
    /// client. Needs a tokio runtime (its refill task is spawned on it).
    pub fn cached(
        self: &Arc<Self>,
        scheme: &str,
        business: u64,
        options: CachedIdsOptions,
    ) -> Result<CachedIds, Status> {
        let source = ClientSource { client: self.clone(), scheme: scheme.to_string(), business };
        CachedIds::new(source, options)
    }

    /// The retry loop of every call: rounds over the known AllocSvrs, starting one further
    /// each call (round-robin); `attempt(client, addr, timeout)` is one try at one of them.
    async fn call<T, F, Fut>(&self, deadline: Duration, attempt: F) -> Result<T, Status>
    where
        F: Fn(IdServiceClient<crate::seq::AllocChannel>, String, Duration) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let until = Instant::now() + deadline;
        let mut backoff = RetryPolicy::STANDARD.backoff();
        loop {
            let addrs = self.addresses();
            let start = self.cursor.fetch_add(1, Ordering::Relaxed);
            // The failures of this round, `addr: Code: what`; the code of the last one.
            let mut failures: Vec<String> = Vec::new();
            let mut last_code = None;
            let mut unusable = 0;
            for i in 0..addrs.len() {
                let addr = &addrs[(start + i) % addrs.len()];
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let client = match self.channel(addr) {
                    Ok(channel) => id_client(channel),
                    Err(status) => {
                        unusable += 1;
                        failures.push(format!("{addr}: {}", describe(&status)));
                        continue;
                    }
                };
                let timeout = left.min(ATTEMPT_TIMEOUT_MAX);
                let result =
                    tokio::time::timeout(timeout, attempt(client, addr.clone(), timeout)).await;
                let status = match result {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(status)) if retryable(status.code()) => status,
                    Ok(Err(status)) => return Err(status),
                    Err(_) => Status::deadline_exceeded(format!(
                        "no answer in {} ms",
                        timeout.as_millis()
                    )),
                };
                failures.push(format!("{addr}: {}", describe(&status)));
                last_code = Some(status.code());
            }
            if unusable == addrs.len() {
                return Err(Status::invalid_argument(format!(
                    "no usable AllocSvr address: {}",
                    failures.join("; ")
                )));
            }
            let Some(code) = last_code else {
                return Err(Status::deadline_exceeded(format!(
                    "the deadline ({} ms) passed before an AllocSvr could be asked",
                    deadline.as_millis()
                )));
            };
            if !backoff.wait(until).await {
                return Err(Status::new(
                    code,
                    format!(
                        "no AllocSvr answered within {} ms; last round: {}",
                        deadline.as_millis(),
                        failures.join("; ")
                    ),
                ));
            }
            let left = until.saturating_duration_since(Instant::now());
            self.refresh_routes(left.min(REFRESH_TIMEOUT_MAX)).await;
        }
    }
}

/// Where a [`CachedIds`] gets its ids: one `NextIds` call's worth, `count` at most, within
/// `deadline`. Implemented for closures `Fn(count, deadline) -> impl Future<Output =
/// Result<Ids, Status>>` (tests, other transports) and, through [`IdClient::cached`], for an
/// [`IdClient`].
pub trait IdSource: Send + Sync + 'static {
    fn fetch(&self, count: u32, deadline: Duration) -> BoxFuture<'static, Result<Ids, Status>>;
}

impl<F, Fut> IdSource for F
where
    F: Fn(u32, Duration) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Ids, Status>> + Send + 'static,
{
    fn fetch(&self, count: u32, deadline: Duration) -> BoxFuture<'static, Result<Ids, Status>> {
        Box::pin(self(count, deadline))
    }
}

/// An [`IdClient`] asked for one scheme.
struct ClientSource {
    client: Arc<IdClient>,
    scheme: String,
    business: u64,
}

impl IdSource for ClientSource {
    fn fetch(&self, count: u32, deadline: Duration) -> BoxFuture<'static, Result<Ids, Status>> {
        let (client, scheme, business) = (self.client.clone(), self.scheme.clone(), self.business);
        Box::pin(async move { client.next_ids(&scheme, count, business, deadline).await })
    }
}

/// The most `NextIds` calls one refill of a [`CachedIds`] makes at once.
pub const MAX_PARALLEL_FETCHES: u32 = 64;

/// How a [`CachedIds`] buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedIdsOptions {
    /// Most ids held (at least 2). The buffer is refilled when it falls to half of this, by
    /// `parallel_fetches` `NextIds` calls of `capacity / 2` ids in all; each call's count must
    /// be within the AllocSvrs' `ids.max_count` (100 000 by default).
    pub capacity: usize,
    /// How long one refill may take (its `NextIds` retries within it).
    pub fetch_deadline: Duration,
    /// One refill is this many `NextIds` calls at once (round-robin, so to as many AllocSvrs),
    /// splitting its `capacity / 2` ids between them: a refill of many ids then takes about
    /// 1 / `parallel_fetches` of the time one call would. 1 to [`MAX_PARALLEL_FETCHES`]; more
    /// than `capacity / 2` counts as `capacity / 2`. The refill waits for its other calls at
    /// most four times as long as the first answer took (at least 100 ms), then drops them
    /// (their ids are a gap), so one stalled AllocSvr costs little.
    pub parallel_fetches: u32,
}

impl Default for CachedIdsOptions {
    fn default() -> Self {
        CachedIdsOptions {
            capacity: 8192,
            fetch_deadline: Duration::from_secs(3),
            parallel_fetches: 4,
        }
    }
}

/// What a [`CachedIds`] did so far (for an application's metrics, and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachedIdsStats {
    /// Ids in the buffer now.
    pub buffered: usize,
    /// Fetches asked for (`NextIds` calls, or source fetches; a refill is
    /// `parallel_fetches` of them).
    pub fetches: u64,
    /// Fetches that failed or whose answer was refused.
    pub failed_fetches: u64,
    /// Ids handed out.
    pub handed_out: u64,
}

/// A client-side buffer of one scheme's ids, refilled in the background: [`CachedIds::next`]
/// takes the oldest buffered id (no RPC), and waits only when the buffer is empty.
///
/// - **Bounded**: at most `capacity` ids are held. When a take leaves `capacity / 2` or fewer,
///   a tokio task fetches `capacity / 2` more (one refill at a time, so the buffer never holds
///   more than `capacity`), split over `parallel_fetches` concurrent `NextIds` calls.
/// - **In order**: ids are handed out refill by refill. A refill's answers are buffered once
///   all of them arrived (a call still out four times as long as the first answer took, at
///   least 100 ms, is dropped: its ids are a gap), one worker id's answers merged into one
///   sorted run, lowest first id first. So one worker id's ids are handed out in numeric order.
/// - **Never twice**: each buffered id is taken once: the buffer is a bounded lock-free FIFO
///   queue (`crossbeam_queue::ArrayQueue`, whose pop is linearizable), so takers on several
///   threads never wait on one another's lock. Before an answer is
///   buffered it is checked: its ids strictly increase, and the first is above the last id
///   received from the same worker id (whose ids strictly increase over all time; a refill's
///   calls are all sent after the previous refill was buffered, and its answers are buffered
///   lowest first); an answer that fails either check is refused whole (INTERNAL to a waiting
///   caller), never buffered.
/// - **Waiting**: an empty buffer makes `next` wait for the refill until its deadline; a refill
///   that fails with a final code (NOT_FOUND, INVALID_ARGUMENT, ...) ends the wait at once with
///   that error; a retryable one is retried (backing off by [`RetryPolicy::STANDARD`]) while
///   someone asks for ids. After a failure the task tries again only once ids are asked for.
/// - **Dropped**: dropping the cache stops its task (an unfinished refill is abandoned); the
///   ids still buffered are never handed out, which leaves gaps, never duplicates.
///
/// **Cached ids are issued before they are handed out.** An id carries the time the AllocSvr
/// issued it, which for a cached id may be well before [`CachedIds::next`] returns it. So the
/// ids of two processes, or of a cache and a direct call, are not in real-time order of
/// hand-out (an id handed out later may be lower, or carry an earlier time); only uniqueness is
/// promised. Ids from one cache are in the order of the answers it buffered, which for answers
/// from different AllocSvrs (different worker ids) need not be numeric order. Use
/// [`IdClient::next_ids`] directly where ids must follow real time.
pub struct CachedIds {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

struct Shared {
    /// The buffered ids, oldest first. Only the refill task pushes (under `state`, after the
    /// answer's checks); takers pop without a lock.
    queue: ArrayQueue<Id>,
    /// A take woke the refill task since it last looked at the buffer: the takes after it need
    /// not wake it again (one wake, not one per take below half).
    refill_asked: AtomicBool,
    /// The last refill failed: the task waits until ids are asked for before trying again.
    paused: AtomicBool,
    state: Mutex<CacheState>,
    /// Wakes the refill task: a take left the buffer at half or below, or a caller waits.
    wake_task: Notify,
    /// Wakes callers waiting on an empty buffer: ids arrived or a refill failed.
    changed: Notify,
    /// Refill at or below this many buffered ids.
    low_water: usize,
    /// Ids asked for by each `NextIds` of one refill (they sum to `capacity / 2`).
    parts: Vec<u32>,
    capacity: usize,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a take: wakes the refill task if the buffer is at half or below, unless a take did
    /// since the task last looked. The fence pairs with the one in [`refill`]: either this take
    /// sees the task's reset of `refill_asked`, or the task sees this take's pop in the length.
    fn after_take(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.queue.len() <= self.low_water
            && !self.refill_asked.load(Ordering::SeqCst)
            && !self.refill_asked.swap(true, Ordering::SeqCst)
        {
            self.wake_task.notify_one();
        }
    }

    /// A take clears a failed refill's pause (a store only when set: no write per take to the
    /// line every taker reads).
    fn unpause(&self) {
        if self.paused.load(Ordering::Relaxed) {
            self.paused.store(false, Ordering::SeqCst);
        }
    }
}

#[derive(Default)]
struct CacheState {
    /// Per worker id, the last id received from it: its next answer must start above it.
    last_of_worker: HashMap<u64, Id>,
    /// The width (64 or 128) of every id received so far.
    bits: Option<u32>,
    /// The failure of the last refill (None once a refill succeeds).
    last_failure: Option<Status>,
    /// Ids buffered so far, over all refills: `handed_out` is this minus the ids buffered now.
    received: u64,
    stats: CachedIdsStats,
}

impl CacheState {
    /// Buffers an answer in `queue` after checking it (see [`CachedIds`]); Err: refused,
    /// nothing buffered. Only the refill task calls it, under the state lock, so the buffer can
    /// only shrink meanwhile: the capacity checked here holds for every push.
    fn accept(
        &mut self,
        queue: &ArrayQueue<Id>,
        answer: Ids,
        asked: u32,
        capacity: usize,
    ) -> Result<(), Status> {
        let refuse = |why: String| {
            Status::internal(format!(
                "refused a refill of the id cache ({why}), so that no id is handed out twice"
            ))
        };
        let first = answer.ids.first().ok_or_else(|| refuse("it holds no ids".into()))?;
        if answer.ids.len() > asked as usize {
            return Err(refuse(format!("{} ids for {asked} asked", answer.ids.len())));
        }
        if queue.len() + answer.ids.len() > capacity {
            return Err(refuse(format!(
                "{} ids do not fit beside the {} buffered (capacity {capacity})",
                answer.ids.len(),
                queue.len()
            )));
        }
        if self.bits.is_some_and(|bits| bits != first.bits()) {
            return Err(refuse(format!(
                "{}-bit ids after {}-bit ones: did the scheme change?",
                first.bits(),
                self.bits.unwrap_or_default()
            )));
        }
        check_increasing(&answer.ids).map_err(refuse)?;
        let worker = answer.worker_id;
        if let Some(last) = self.last_of_worker.get(&worker).filter(|last| **last >= first) {
            return Err(refuse(format!(
                "worker id {worker} answered id {} after id {}",
                first.value(),
                last.value()
            )));
        }
        self.bits = Some(first.bits());
        if let Some(last) = answer.ids.get(answer.ids.len() - 1) {
            self.last_of_worker.insert(worker, last);
        }
        for id in answer.ids.iter() {
            let pushed = queue.push(id);
            assert!(pushed.is_ok(), "room was checked above and only this task pushes");
        }
        self.received += answer.ids.len() as u64;
        Ok(())
    }
}

/// How long a refill waits for its other calls after the first answered (`first` after it
/// began): four times that, at least 100 ms.
fn straggler_grace(first: Duration) -> Duration {
    (first * 4).max(Duration::from_millis(100))
}

/// The answers of one worker id in one refill, merged: what [`CacheState::accept`] checks.
struct Merged {
    /// Calls whose answers it holds.
    calls: u64,
    /// Ids those calls asked for.
    asked: u32,
    ids: Ids,
}

/// One refill's answers as the answers to check and buffer, lowest first id first: the answers
/// of one worker id merged into one, its ids sorted. A merged answer holding an id twice fails
/// the checks of [`CacheState::accept`] like any answer that could repeat an id; answers of one
/// worker id in two widths stay apart, so that `accept` refuses the second.
fn merge_by_worker(answers: Vec<(u32, Ids)>) -> Vec<Merged> {
    let mut merged: Vec<Merged> = Vec::new();
    for (count, answer) in answers {
        let into = merged.iter_mut().find(|m| {
            m.ids.worker_id == answer.worker_id
                && matches!(
                    (&m.ids.ids, &answer.ids),
                    (IdList::U64(_), IdList::U64(_)) | (IdList::U128(_), IdList::U128(_))
                )
        });
        let Some(into) = into else {
            merged.push(Merged { calls: 1, asked: count, ids: answer });
            continue;
        };
        into.calls += 1;
        into.asked = into.asked.saturating_add(count);
        match (&mut into.ids.ids, answer.ids) {
            (IdList::U64(a), IdList::U64(b)) => {
                a.extend(b);
                a.sort_unstable();
            }
            (IdList::U128(a), IdList::U128(b)) => {
                a.extend(b);
                a.sort_unstable();
            }
            _ => unreachable!("only answers of the same width are merged"),
        }
    }
    merged.sort_by_key(|m| m.ids.ids.first());
    merged
}

/// `batch` ids over `parallel` calls (at most `batch` of them), the first ones one larger when
/// it does not divide evenly.
fn split_batch(batch: u32, parallel: u32) -> Vec<u32> {
    let n = parallel.clamp(1, batch.max(1));
    (0..n).map(|i| batch / n + u32::from(i < batch % n)).collect()
}

impl CachedIds {
    /// A cache filled from `source`; the first refill starts at once. Needs a tokio runtime
    /// (its refill task is spawned on it); INVALID_ARGUMENT without one, or for a capacity
    /// below 2 or whose half does not fit a `NextIds` count (u32).
    pub fn new<S: IdSource>(source: S, options: CachedIdsOptions) -> Result<CachedIds, Status> {
        let batch = u32::try_from(options.capacity / 2).map_err(|_| {
            Status::invalid_argument(format!(
                "capacity {} is too large: one refill of half of it must fit a NextIds count",
                options.capacity
            ))
        })?;
        if batch == 0 {
            return Err(Status::invalid_argument(format!(
                "capacity {} is too small: at least 2 (refills are capacity / 2 ids)",
                options.capacity
            )));
        }
        if options.parallel_fetches == 0 || options.parallel_fetches > MAX_PARALLEL_FETCHES {
            return Err(Status::invalid_argument(format!(
                "parallel_fetches is {}: a refill is 1 to {MAX_PARALLEL_FETCHES} NextIds calls",
                options.parallel_fetches
            )));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Status::invalid_argument(
                "CachedIds needs a tokio runtime: create it from within one (its refill task runs \
                 there)",
            )
        })?;
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(options.capacity),
            refill_asked: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            state: Mutex::new(CacheState::default()),
            wake_task: Notify::new(),
            changed: Notify::new(),
            low_water: options.capacity / 2,
            parts: split_batch(batch, options.parallel_fetches),
            capacity: options.capacity,
        });
        let task = runtime.spawn(refill(shared.clone(), source, options.fetch_deadline));
        Ok(CachedIds { shared, task })
    }

    /// The next id: the oldest buffered one, at once; on an empty buffer, waits for the refill
    /// within `deadline`. Errors: a final error of the last refill (NOT_FOUND, INVALID_ARGUMENT,
    /// a refused answer, ...) at once, also when that refill failed before this call (which
    /// still asks for another refill, so a later call gets ids once the cause is gone); else,
    /// once the deadline passed, the last refill's retryable error (UNAVAILABLE, ...) or
    /// DEADLINE_EXCEEDED.
    pub async fn next(&self, deadline: Duration) -> Result<Id, Status> {
        // The common case: a buffered id, one lock, no clock reading.
        if let Some(id) = self.try_next() {
            return Ok(id);
        }
        let until = Instant::now() + deadline;
        loop {
            // Registered before the buffer is looked at, so a refill in between is not missed.
            let changed = self.shared.changed.notified();
            {
                self.shared.unpause();
                if let Some(id) = self.shared.queue.pop() {
                    self.shared.after_take();
                    return Ok(id);
                }
                self.shared.wake_task.notify_one();
                let state = self.shared.lock();
                if let Some(f) = state.last_failure.as_ref().filter(|f| !retryable(f.code())) {
                    return Err(Status::new(
                        f.code(),
                        format!("the id cache is empty and its refill failed: {}", f.message()),
                    ));
                }
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                let state = self.shared.lock();
                return Err(match &state.last_failure {
                    Some(f) => Status::new(
                        f.code(),
                        format!(
                            "no id within {} ms: the id cache is empty and its refill \
                             failed: {}",
                            deadline.as_millis(),
                            f.message()
                        ),
                    ),
                    None => Status::deadline_exceeded(format!(
                        "no id within {} ms: the id cache is empty and its refill has not \
                         answered yet",
                        deadline.as_millis()
                    )),
                });
            }
        }
    }

    /// The oldest buffered id if there is one, without waiting (a take that leaves the buffer at
    /// half or below starts a refill, as [`CachedIds::next`]).
    pub fn try_next(&self) -> Option<Id> {
        self.shared.unpause();
        let id = self.shared.queue.pop();
        self.shared.after_take();
        id
    }

    /// The counters so far.
    pub fn stats(&self) -> CachedIdsStats {
        let state = self.shared.lock();
        // Under the lock no push runs, so every id received is buffered or handed out.
        let buffered = self.shared.queue.len();
        CachedIdsStats { buffered, handed_out: state.received - buffered as u64, ..state.stats }
    }

    /// The most ids buffered at once.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

impl Drop for CachedIds {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The refill task: whenever the buffer is at half or below (and the last refill did not fail,
/// or ids were asked for since), fetch `capacity / 2` ids (`parts`, concurrently) and buffer
/// the answers together (see inside); after a failed refill, back off.
async fn refill<S: IdSource>(shared: Arc<Shared>, source: S, fetch_deadline: Duration) {
    let mut backoff = RetryPolicy::STANDARD.backoff();
    loop {
        loop {
            let woken = shared.wake_task.notified();
            shared.refill_asked.store(false, Ordering::SeqCst);
            // Pairs with the fence of `Shared::after_take` (see there).
            std::sync::atomic::fence(Ordering::SeqCst);
            if shared.queue.len() <= shared.low_water && !shared.paused.load(Ordering::SeqCst) {
                break;
            }
            woken.await;
        }
        let mut fetches: FuturesUnordered<_> = shared
            .parts
            .iter()
            .map(|&count| {
                let fetch =
                    tokio::time::timeout(fetch_deadline, source.fetch(count, fetch_deadline));
                async move {
                    let fetched = fetch.await.unwrap_or_else(|_| {
                        Err(Status::deadline_exceeded(format!(
                            "the id source did not answer within {} ms",
                            fetch_deadline.as_millis()
                        )))
                    });
                    (count, fetched)
                }
            })
            .collect();
        // The refill's answers are buffered together, once all arrived (or failed): two calls
        // of one refill may reach one worker id (one AllocSvr, or a hand-over), answer in
        // either order, and even interleave (a call that waits for the clock or the store
        // keeps what it issued before), so one worker id's answers are merged into one sorted
        // run, checked as one answer. A call still out `straggler_grace` after the first answer
        // is dropped (its ids become a gap), so one stalled AllocSvr does not hold every refill
        // for the whole fetch deadline.
        let started = Instant::now();
        let mut answers: Vec<(u32, Ids)> = Vec::with_capacity(shared.parts.len());
        let (mut accepted, mut refused, mut failed) = (0, None, None::<Status>);
        // Every call ends by its own timeout before this; the first answer brings it forward.
        let mut give_up_at = started + fetch_deadline + straggler_grace(Duration::ZERO);
        loop {
            let Ok(next) = tokio::time::timeout_at(give_up_at, fetches.next()).await else {
                let late = fetches.len() as u64;
                tracing::warn!(
                    late,
                    waited_ms = give_up_at.duration_since(started).as_millis(),
                    "the id cache's refill dropped calls that answered too late (their ids are \
                     a gap)"
                );
                let mut state = shared.lock();
                state.stats.fetches += late;
                state.stats.failed_fetches += late;
                break;
            };
            let Some((count, fetched)) = next else { break };
            match fetched {
                Ok(ids) => {
                    let grace = straggler_grace(started.elapsed());
                    give_up_at = give_up_at.min(Instant::now() + grace);
                    answers.push((count, ids));
                }
                Err(status) => {
                    tracing::warn!(code = ?status.code(), error = %status.message(),
                        "a NextIds of the id cache's refill failed");
                    let mut state = shared.lock();
                    state.stats.fetches += 1;
                    state.stats.failed_fetches += 1;
                    // A final error is kept over a retryable one: it ends waits at once.
                    if failed.as_ref().is_none_or(|f| retryable(f.code())) {
                        failed = Some(status);
                    }
                }
            }
        }
        drop(fetches);
        {
            let mut state = shared.lock();
            for Merged { calls, asked, ids } in merge_by_worker(answers) {
                state.stats.fetches += calls;
                match state.accept(&shared.queue, ids, asked, shared.capacity) {
                    Ok(()) => accepted += 1,
                    Err(status) => {
                        tracing::warn!(error = %status.message(), "the id cache refused an answer");
                        state.stats.failed_fetches += calls;
                        refused = Some(status);
                    }
                }
            }
        }
        // A refused answer (a server bug) always counts; a failed call only when no call of
        // the refill brought ids.
        let failure = refused.or(if accepted == 0 { failed } else { None });
        let failed = failure.is_some();
        {
            let mut state = shared.lock();
            if failed {
                shared.paused.store(true, Ordering::SeqCst);
            }
            state.last_failure = failure;
        }
        shared.changed.notify_waiters();
        if failed {
            tokio::time::sleep(backoff.next_delay()).await;
        } else {
            backoff.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_alloc::{self, FakeAlloc, TestStream};
    use pb::id_service_server::{IdService, IdServiceServer};
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;
    use tonic::Code;

    const SECOND: Duration = Duration::from_secs(1);

    // ---- an in-process AllocSvr ----

    /// An AllocSvr's `IdService` (and the `GetRouteTable` of its `SeqService`): answers the
    /// scripted results in order, then `always` if set, else `count` consecutive ids from
    /// `next` with its worker id.
    struct Fake {
        worker: u64,
        next: AtomicU64,
        script: Mutex<VecDeque<Result<pb::NextIdsResponse, Status>>>,
        always: Mutex<Option<Status>>,
        table: Mutex<Option<pb::RouteTable>>,
        calls: AtomicU64,
        /// Calls that asked for 128-bit ids packed in one buffer.
        packed_asked: AtomicU64,
        /// Calls that asked for 64-bit ids packed in one buffer (answered so when not scripted).
        packed64_asked: AtomicU64,
    }

    impl Fake {
        fn new(worker: u64) -> Arc<Fake> {
            Arc::new(Fake {
                worker,
                next: AtomicU64::new(worker * 1_000_000 + 1),
                script: Mutex::new(VecDeque::new()),
                always: Mutex::new(None),
                table: Mutex::new(None),
                calls: AtomicU64::new(0),
                packed_asked: AtomicU64::new(0),
                packed64_asked: AtomicU64::new(0),
            })
        }

        fn failing(worker: u64, status: Status) -> Arc<Fake> {
            let fake = Fake::new(worker);
            *fake.always.lock().unwrap() = Some(status);
            fake
        }

        fn calls(&self) -> u64 {
            self.calls.load(Ordering::SeqCst)
        }
    }

    struct Handle(Arc<Fake>);

    #[tonic::async_trait]
    impl IdService for Handle {
        async fn next_ids(
            &self,
            request: tonic::Request<pb::NextIdsRequest>,
        ) -> Result<tonic::Response<pb::NextIdsResponse>, Status> {
            let fake = &self.0;
            fake.calls.fetch_add(1, Ordering::SeqCst);
            if request.get_ref().packed_ids128 {
                fake.packed_asked.fetch_add(1, Ordering::SeqCst);
            }
            if request.get_ref().packed_ids64 {
                fake.packed64_asked.fetch_add(1, Ordering::SeqCst);
            }
            if let Some(scripted) = fake.script.lock().unwrap().pop_front() {
                return scripted.map(tonic::Response::new);
            }
            if let Some(status) = fake.always.lock().unwrap().clone() {
                return Err(status);
            }
            let request = request.into_inner();
            let count = u64::from(request.count);
            let start = fake.next.fetch_add(count, Ordering::SeqCst);
            let mut answer = pb::NextIdsResponse { worker_id: fake.worker, ..Default::default() };
            seqsvr_proto::put_ids64(&mut answer, start..start + count, request.packed_ids64);
            Ok(tonic::Response::new(answer))
        }

        async fn decode(
            &self,
            request: tonic::Request<pb::DecodeIdRequest>,
        ) -> Result<tonic::Response<pb::DecodeIdResponse>, Status> {
            self.0.calls.fetch_add(1, Ordering::SeqCst);
            if let Some(status) = self.0.always.lock().unwrap().clone() {
                return Err(status);
            }
            let r = request.into_inner();
            let text = format!("{}:{}", r.scheme, r.text);
            Ok(tonic::Response::new(pb::DecodeIdResponse { text, ..Default::default() }))
        }
    }

    /// Its `SeqService` serves only `GetRouteTable`.
    #[tonic::async_trait]
    impl FakeAlloc for Fake {
        fn route_table(&self) -> Option<pb::RouteTable> {
            self.table.lock().unwrap().clone()
        }

        fn next_stream(
            self: Arc<Self>,
            _: tonic::Streaming<pb::NextStreamRequest>,
        ) -> Result<TestStream, Status> {
            Err(Status::unimplemented("next_stream"))
        }
    }

    async fn serve(fake: Arc<Fake>) -> String {
        let (listener, addr) = fake_alloc::bind().await;
        let ids = IdServiceServer::new(Handle(fake.clone()));
        fake_alloc::serve_on(listener, fake, |r| r.add_service(ids));
        addr
    }

    /// An address nothing listens on (bound, then closed).
    async fn dead_addr() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().to_string()
    }

    fn u64s(ids: &Ids) -> Vec<u64> {
        match &ids.ids {
            IdList::U64(ids) => ids.clone(),
            IdList::U128(ids) => panic!("128-bit ids {ids:?}"),
        }
    }

    // ---- IdClient ----

    /// Each call starts one AllocSvr further: with two that serve, ten calls go five to each,
    /// alternating.
    #[tokio::test]
    async fn calls_go_round_robin_over_the_allocsvrs() {
        let (a, b) = (Fake::new(1), Fake::new(2));
        let seeds = [serve(a.clone()).await, serve(b.clone()).await];
        let client = IdClient::new(&seeds).unwrap();
        let mut workers = Vec::new();
        for _ in 0..10 {
            let ids = client.next_ids("orders", 3, 0, 2 * SECOND).await.unwrap();
            assert_eq!(ids.ids.len(), 3);
            workers.push(ids.worker_id);
        }
        assert_eq!((a.calls(), b.calls()), (5, 5), "{workers:?}");
        assert!(workers.windows(2).all(|w| w[0] != w[1]), "alternating: {workers:?}");
    }

    /// An address nobody listens on and an AllocSvr answering UNAVAILABLE are skipped: every
    /// call is served by the one that serves, within one round.
    #[tokio::test]
    async fn a_failing_allocsvr_is_skipped_for_the_next_one() {
        let down = Fake::failing(1, Status::unavailable("no worker id yet"));
        let good = Fake::new(3);
        let seeds = [dead_addr().await, serve(down.clone()).await, serve(good.clone()).await];
        let client = IdClient::new(&seeds).unwrap();
        let mut seen = Vec::new();
        for _ in 0..6 {
            let ids = client.next_ids("orders", 2, 0, 2 * SECOND).await.unwrap();
            assert_eq!(ids.worker_id, 3);
            seen.extend(u64s(&ids));
        }
        assert_eq!(good.calls(), 6);
        assert!(down.calls() >= 2, "asked in its turn: {}", down.calls());
        let expected: Vec<u64> = (3_000_001..3_000_013).collect();
        assert_eq!(seen, expected);
    }

    /// The final codes go back at once, from the first AllocSvr asked: no other is tried, no
    /// wait until the deadline.
    #[tokio::test]
    async fn final_codes_are_returned_at_once() {
        for status in [
            Status::invalid_argument("count too large"),
            Status::not_found("no scheme \"x\""),
            Status::unimplemented("rongcloud"),
            Status::resource_exhausted("every worker id is held"),
        ] {
            let (a, b) = (Fake::failing(1, status.clone()), Fake::failing(2, status.clone()));
            let seeds = [serve(a.clone()).await, serve(b.clone()).await];
            let client = IdClient::new(&seeds).unwrap();
            let started = Instant::now();
            let err = client.next_ids("x", 1, 0, 3 * SECOND).await.unwrap_err();
            assert_eq!(err.code(), status.code(), "{err:?}");
            assert!(started.elapsed() < SECOND, "{:?}: {:?}", status.code(), started.elapsed());
            assert_eq!(a.calls() + b.calls(), 1, "{:?}: asked once", status.code());
        }
    }

    /// When every AllocSvr keeps failing, rounds are separated by back-offs and the call ends
    /// within its deadline with the last error, naming every AllocSvr of the last round.
    #[tokio::test]
    async fn when_every_allocsvr_fails_the_call_ends_within_its_deadline() {
        let (a, b) = (
            Fake::failing(1, Status::unavailable("no lease")),
            Fake::failing(2, Status::unavailable("no lease")),
        );
        let seeds = [serve(a.clone()).await, serve(b.clone()).await];
        let client = IdClient::new(&seeds).unwrap();
        let deadline = Duration::from_millis(400);
        let started = Instant::now();
        let err = client.next_ids("orders", 1, 0, deadline).await.unwrap_err();
        let elapsed = started.elapsed();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        assert!(elapsed < deadline + Duration::from_millis(150), "{elapsed:?}");
        for addr in &seeds {
            assert!(err.message().contains(addr.as_str()), "{addr} in {}", err.message());
        }
        let calls = a.calls() + b.calls();
        assert!((4..=16).contains(&calls), "rounds of 2 between back-offs: {calls} calls");
    }

    /// A seed that cannot serve ids but answers its route table teaches the client the other
    /// AllocSvrs, which then serve the call.
    #[tokio::test]
    async fn route_tables_teach_the_client_other_allocsvrs() {
        let seed = Fake::failing(1, Status::unavailable("no worker id yet"));
        let other = Fake::new(4);
        let (seed_addr, other_addr) = (serve(seed.clone()).await, serve(other.clone()).await);
        *seed.table.lock().unwrap() = Some(pb::RouteTable {
            set_id: 0,
            version: 3,
            uid_begin: 0,
            uid_end: 100,
            section_size: 10,
            entries: vec![pb::RouteEntry {
                section_begin: 0,
                section_end: 10,
                alloc_id: 4,
                addr: other_addr.clone(),
            }],
        });
        let client = IdClient::new(std::slice::from_ref(&seed_addr)).unwrap();
        assert_eq!(client.addresses(), std::slice::from_ref(&seed_addr));
        let ids = client.next_ids("orders", 2, 0, 2 * SECOND).await.unwrap();
        assert_eq!(ids.worker_id, 4);
        assert_eq!(client.addresses(), [seed_addr, other_addr]);
        // An older table of the same set does not replace the newer one.
        client.learn_routes(&[pb::RouteTable { set_id: 0, version: 2, ..Default::default() }]);
        assert_eq!(client.addresses().len(), 2);
    }

    /// Seeded from every set's `allocs`; a config without any is refused with what to do.
    #[test]
    fn a_client_from_the_config_is_seeded_with_every_sets_allocs() {
        let set = |id: u64, allocs: &str| {
            format!(
                "[[sets]]\nid = {id}\nuid_begin = {}\nuid_end = {}\n\
                 stores = [{{ id = 1, addr = \"127.0.0.1:710{id}\" }}]\nallocs = [{allocs}]\n",
                id * 100_000,
                (id + 1) * 100_000
            )
        };
        let text = set(0, "\"a:1\", \"b:1\"") + &set(1, "\"c:1\", \"a:1\"");
        let config = ClusterConfig::from_toml_str(&text).unwrap();
        crate::tls::use_plaintext(); // addresses only: nothing is dialled
        let client = IdClient::from_config(&config).unwrap();
        assert_eq!(client.addresses(), ["a:1", "b:1", "c:1"]);
        let config = ClusterConfig::from_toml_str(&set(0, "")).unwrap();
        let err = IdClient::from_config(&config).err().unwrap();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("lists no AllocSvr"), "{err:?}");
    }

    /// An answer that breaks the service's promises (wrong count, not increasing, a 128-bit
    /// id of the wrong size, no ids) is INTERNAL, not retried: nothing of it is handed on.
    #[tokio::test]
    async fn a_malformed_answer_is_internal_and_not_retried() {
        let answer = |ids: Vec<u64>, ids128: Vec<Vec<u8>>| {
            Ok(pb::NextIdsResponse { ids, ids128, worker_id: 1, ..Default::default() })
        };
        let packed = |ids128_packed: Vec<u8>| {
            Ok(pb::NextIdsResponse { ids128_packed, worker_id: 1, ..Default::default() })
        };
        let packed64 = |ids64_packed: Vec<u8>| {
            Ok(pb::NextIdsResponse { ids64_packed, worker_id: 1, ..Default::default() })
        };
        let bad = [
            answer(vec![1, 2], vec![]),
            answer(vec![1, 3, 3], vec![]),
            answer(vec![5, 4, 6], vec![]),
            answer(vec![], vec![vec![0; 16], vec![0; 15], vec![1; 16]]),
            answer(vec![], vec![]),
            answer(vec![1, 2, 3], vec![vec![0; 16]; 3]),
            packed(vec![0; 47]),
            packed((1u128..=3).flat_map(|id| id.to_be_bytes()).take(32).collect()),
            packed([3u128, 2, 1].iter().flat_map(|id| id.to_be_bytes()).collect()),
            packed64(vec![0; 23]),
            packed64([1u64, 2].iter().flat_map(|id| id.to_be_bytes()).collect()),
            packed64([1u64, 3, 3].iter().flat_map(|id| id.to_be_bytes()).collect()),
            packed64([3u64, 2, 1].iter().flat_map(|id| id.to_be_bytes()).collect()),
            Ok(pb::NextIdsResponse {
                ids: vec![1, 2, 3],
                ids64_packed: [4u64, 5, 6].iter().flat_map(|id| id.to_be_bytes()).collect(),
                ..Default::default()
            }),
            Ok(pb::NextIdsResponse {
                ids64_packed: [1u64, 2, 3].iter().flat_map(|id| id.to_be_bytes()).collect(),
                ids128_packed: vec![0; 48],
                ..Default::default()
            }),
        ];
        for scripted in bad {
            let fake = Fake::new(1);
            let what = format!("{scripted:?}");
            fake.script.lock().unwrap().push_back(scripted);
            let client = IdClient::new(&[serve(fake.clone()).await]).unwrap();
            let err = client.next_ids("orders", 3, 0, 2 * SECOND).await.unwrap_err();
            assert_eq!(err.code(), Code::Internal, "{what}: {err:?}");
            assert_eq!(fake.calls(), 1, "{what}");
        }
    }

    /// uuidv7 ids come as 16 big-endian bytes each: packed in one buffer, or one field per id
    /// from an AllocSvr that predates `packed_ids128`.
    #[tokio::test]
    async fn ids128_are_read_big_endian_from_either_field() {
        let (x, y) =
            (0x017f_22e2_79b0_7cc3_98c4_dc0c_0c07_398f_u128, 0x017f_22e2_79b0_7cc4_u128 << 64);
        for packed in [false, true] {
            let fake = Fake::new(9);
            let mut answer = pb::NextIdsResponse { worker_id: 9, ..Default::default() };
            seqsvr_proto::put_ids128(&mut answer, &[x, y], packed);
            fake.script.lock().unwrap().push_back(Ok(answer));
            let client = IdClient::new(&[serve(fake.clone()).await]).unwrap();
            let ids = client.next_ids("events", 2, 0, 2 * SECOND).await.unwrap();
            assert_eq!(fake.packed_asked.load(Ordering::SeqCst), 1, "the SDK asks for packed ids");
            assert_eq!(ids, Ids { ids: IdList::U128(vec![x, y]), worker_id: 9 }, "{packed}");
            assert_eq!(ids.ids.iter().collect::<Vec<_>>(), [Id::U128(x), Id::U128(y)]);
        }
    }

    /// 64-bit ids come as 8 big-endian bytes each in one buffer, or as one varint each from an
    /// AllocSvr that predates `packed_ids64`.
    #[tokio::test]
    async fn ids64_are_read_big_endian_from_either_field() {
        let (x, y) = (0x0102_0304_0506_0708_u64, u64::MAX - 1);
        for packed in [false, true] {
            let fake = Fake::new(9);
            let mut answer = pb::NextIdsResponse { worker_id: 9, ..Default::default() };
            seqsvr_proto::put_ids64(&mut answer, [x, y].into_iter(), packed);
            fake.script.lock().unwrap().push_back(Ok(answer));
            let client = IdClient::new(&[serve(fake.clone()).await]).unwrap();
            let ids = client.next_ids("orders", 2, 0, 2 * SECOND).await.unwrap();
            assert_eq!(
                fake.packed64_asked.load(Ordering::SeqCst),
                1,
                "the SDK asks for packed ids"
            );
            assert_eq!(ids, Ids { ids: IdList::U64(vec![x, y]), worker_id: 9 }, "{packed}");
        }
    }

    #[tokio::test]
    async fn bad_arguments_are_refused_before_anything_is_sent() {
        let fake = Fake::new(1);
        let client = IdClient::new(&[serve(fake.clone()).await]).unwrap();
        let err = client.next_ids("orders", 0, 0, SECOND).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(fake.calls(), 0);
        assert_eq!(IdClient::new(&[]).err().map(|e| e.code()), Some(Code::InvalidArgument));
        let client = IdClient::new(&["not an address\n".to_string()]).unwrap();
        let err = client.next_id("orders", SECOND).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    }

    /// `Decode` goes through the same retry loop: the AllocSvr that cannot answer is skipped.
    #[tokio::test]
    async fn decode_on_server_asks_the_next_allocsvr_that_answers() {
        let down = Fake::failing(1, Status::unavailable("stopping"));
        let up = Fake::new(2);
        let seeds = [serve(down.clone()).await, serve(up.clone()).await];
        let client = IdClient::new(&seeds).unwrap();
        for _ in 0..2 {
            let r = client.decode_on_server("orders", "4202499", 2 * SECOND).await.unwrap();
            assert_eq!(r.text, "orders:4202499");
        }
        assert_eq!((down.calls(), up.calls()), (1, 2));
    }

    /// `IdClient::cached` fills a cache from the AllocSvrs: ids in order, refills of half the
    /// capacity.
    #[tokio::test]
    async fn a_cache_over_the_client_hands_out_the_allocsvr_ids_in_order() {
        let fake = Fake::new(5);
        let client = Arc::new(IdClient::new(&[serve(fake.clone()).await]).unwrap());
        let options = CachedIdsOptions { capacity: 16, ..CachedIdsOptions::default() };
        let cache = client.cached("orders", 0, options).unwrap();
        let mut got = Vec::new();
        for _ in 0..40 {
            got.push(cache.next(2 * SECOND).await.unwrap());
        }
        let expected: Vec<Id> = (5_000_001..5_000_041).map(Id::U64).collect();
        assert_eq!(got, expected);
        assert!(fake.calls() >= 5, "refills of 8: {}", fake.calls());
    }

    // ---- CachedIds ----

    /// A source of consecutive ids from 1 (worker 1) that records the counts asked.
    #[derive(Default)]
    struct Counter {
        next: AtomicU64,
        asked: Mutex<Vec<u32>>,
    }

    fn counting(counter: &Arc<Counter>) -> impl IdSource {
        let counter = counter.clone();
        move |count: u32, _: Duration| {
            let counter = counter.clone();
            async move {
                counter.asked.lock().unwrap().push(count);
                let start = counter.next.fetch_add(u64::from(count), Ordering::SeqCst) + 1;
                Ok(Ids {
                    ids: IdList::U64((start..start + u64::from(count)).collect()),
                    worker_id: 1,
                })
            }
        }
    }

    /// One `NextIds` per refill (the tests of the refill rules); `parallel` for split refills.
    fn with_capacity(capacity: usize) -> CachedIdsOptions {
        parallel(capacity, 1)
    }

    fn parallel(capacity: usize, parallel_fetches: u32) -> CachedIdsOptions {
        CachedIdsOptions { capacity, parallel_fetches, ..CachedIdsOptions::default() }
    }

    /// Polls `check` until it holds (5 s at most).
    async fn eventually(what: &str, check: impl Fn() -> bool) {
        let until = Instant::now() + 5 * SECOND;
        while !check() {
            assert!(Instant::now() < until, "timed out waiting for: {what}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The buffer fills to its capacity by refills of half of it, refills again only once a
    /// take leaves half or less, and never holds more than its capacity.
    #[tokio::test]
    async fn the_cache_refills_by_half_when_it_falls_to_half() {
        let counter = Arc::new(Counter::default());
        let cache = CachedIds::new(counting(&counter), with_capacity(8)).unwrap();
        eventually("filled", || cache.stats().buffered == 8).await;
        assert_eq!(*counter.asked.lock().unwrap(), [4, 4]);
        assert_eq!(cache.try_next(), Some(Id::U64(1)));
        assert_eq!(cache.try_next(), Some(Id::U64(2)));
        assert_eq!(cache.try_next(), Some(Id::U64(3)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(cache.stats().fetches, 2, "5 of 8 left: above half, no refill");
        assert_eq!(cache.stats().buffered, 5);
        assert_eq!(cache.next(SECOND).await.unwrap(), Id::U64(4));
        eventually("refilled at half", || cache.stats().buffered == 8).await;
        assert_eq!(*counter.asked.lock().unwrap(), [4, 4, 4]);
        let rest: Vec<Id> = (0..8).filter_map(|_| cache.try_next()).collect();
        assert_eq!(rest, (5..=12).map(Id::U64).collect::<Vec<_>>());
        let stats = cache.stats();
        assert_eq!(stats.handed_out, 12);
        assert!(stats.buffered <= 8, "{stats:?}");
    }

    /// Many callers at once: every id handed out once, each caller's ids increasing, and all
    /// of them together exactly the first ids the source gave, in its order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_callers_never_get_an_id_twice() {
        let counter = Arc::new(Counter::default());
        let cache = Arc::new(CachedIds::new(counting(&counter), with_capacity(64)).unwrap());
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    for _ in 0..500 {
                        got.push(cache.next(5 * SECOND).await.unwrap());
                    }
                    got
                })
            })
            .collect();
        let mut all = Vec::new();
        for caller in callers {
            let got = caller.await.unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "one caller's ids increase");
            all.extend(got);
        }
        all.sort();
        assert_eq!(all, (1..=4000).map(Id::U64).collect::<Vec<_>>());
        assert!(counter.asked.lock().unwrap().iter().all(|&n| n == 32));
        let stats = cache.stats();
        assert_eq!(stats.handed_out, 4000, "{stats:?}");
        assert_eq!(stats.handed_out + stats.buffered as u64, 32 * stats.fetches, "{stats:?}");
    }

    /// A source that answers only when the test releases it (one answer per permit).
    fn gated(gate: &Arc<tokio::sync::Semaphore>) -> impl IdSource {
        let gate = gate.clone();
        move |count: u32, _: Duration| {
            let gate = gate.clone();
            async move {
                gate.acquire().await.map_err(|_| Status::unavailable("closed"))?.forget();
                Ok(Ids { ids: IdList::U64((1..=u64::from(count)).collect()), worker_id: 1 })
            }
        }
    }

    /// An empty cache waits for its refill, but not past the caller's deadline.
    #[tokio::test]
    async fn an_empty_cache_waits_for_the_refill_within_the_deadline() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let cache = CachedIds::new(gated(&gate), with_capacity(8)).unwrap();
        let started = Instant::now();
        let err = cache.next(Duration::from_millis(100)).await.unwrap_err();
        let elapsed = started.elapsed();
        assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
        assert!(elapsed >= Duration::from_millis(100) && elapsed < SECOND, "{elapsed:?}");
        let release = gate.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            release.add_permits(1);
        });
        let started = Instant::now();
        assert_eq!(cache.next(5 * SECOND).await.unwrap(), Id::U64(1));
        assert!(started.elapsed() < SECOND, "woken by the refill: {:?}", started.elapsed());
    }

    /// A source that fails `failures` times with `status`, then counts like `counting`.
    fn failing_first(failures: u64, status: Status, fetches: &Arc<AtomicU64>) -> impl IdSource {
        let fetches = fetches.clone();
        move |count: u32, _: Duration| {
            let n = fetches.fetch_add(1, Ordering::SeqCst);
            let status = status.clone();
            async move {
                if n < failures {
                    return Err(status);
                }
                let start = (n - failures) * u64::from(count) + 1;
                Ok(Ids {
                    ids: IdList::U64((start..start + u64::from(count)).collect()),
                    worker_id: 1,
                })
            }
        }
    }

    /// A final refill error ends a wait at once; a retryable one is retried while someone
    /// waits (backing off: a few fetches, not a busy loop), and its error is returned at the
    /// deadline.
    #[tokio::test]
    async fn refill_errors_final_at_once_retryable_until_the_deadline() {
        let fetches = Arc::new(AtomicU64::new(0));
        let source = failing_first(u64::MAX, Status::not_found("no scheme \"x\""), &fetches);
        let cache = CachedIds::new(source, with_capacity(8)).unwrap();
        let started = Instant::now();
        let err = cache.next(5 * SECOND).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{err:?}");
        assert!(err.message().contains("no scheme"), "{err:?}");
        assert!(started.elapsed() < SECOND, "{:?}", started.elapsed());

        let fetches = Arc::new(AtomicU64::new(0));
        let cache = CachedIds::new(
            failing_first(2, Status::unavailable("no lease"), &fetches),
            with_capacity(8),
        )
        .unwrap();
        assert_eq!(cache.next(5 * SECOND).await.unwrap(), Id::U64(1));
        assert!(fetches.load(Ordering::SeqCst) >= 3);
        assert_eq!(cache.stats().failed_fetches, 2);

        let fetches = Arc::new(AtomicU64::new(0));
        let source = failing_first(u64::MAX, Status::unavailable("no lease"), &fetches);
        let cache = CachedIds::new(source, with_capacity(8)).unwrap();
        let started = Instant::now();
        let err = cache.next(Duration::from_millis(300)).await.unwrap_err();
        let elapsed = started.elapsed();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        assert!(elapsed >= Duration::from_millis(300) && elapsed < SECOND, "{elapsed:?}");
        let n = fetches.load(Ordering::SeqCst);
        assert!((2..=10).contains(&n), "{n} fetches in 300 ms");
        // Nobody asks now: after its back-off the task waits instead of retrying.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let idle = fetches.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(fetches.load(Ordering::SeqCst), idle, "no fetch without demand");
    }

    /// A source whose answers are scripted, in order (then it never answers).
    fn scripted(answers: Vec<Ids>) -> impl IdSource {
        let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
        move |_: u32, _: Duration| {
            let next = answers.lock().unwrap().pop_front();
            async move {
                match next {
                    Some(ids) => Ok(ids),
                    None => futures::future::pending().await,
                }
            }
        }
    }

    fn answer(worker_id: u64, ids: &[u64]) -> Ids {
        Ids { ids: IdList::U64(ids.to_vec()), worker_id }
    }

    /// An answer that would repeat an id (the same answer twice, an id not above the last one
    /// of its worker id), is not increasing, or holds more than asked is refused whole; the ids
    /// before it are handed out once each, and then the refusal (INTERNAL, final).
    #[tokio::test]
    async fn an_answer_that_could_repeat_an_id_is_refused() {
        let refused = [
            vec![answer(7, &[1, 2, 3, 4]), answer(7, &[1, 2, 3, 4])],
            vec![answer(7, &[1, 2, 3, 4]), answer(7, &[4, 5, 6, 7])],
            vec![answer(7, &[1, 2, 3, 4]), answer(7, &[6, 5])],
            vec![answer(7, &[1, 2, 3, 4]), answer(7, &[5, 6, 7, 8, 9])],
            vec![answer(7, &[1, 2, 3, 4]), Ids { ids: IdList::U128(vec![5, 6]), worker_id: 7 }],
            vec![answer(7, &[1, 2, 3, 4]), answer(7, &[])],
        ];
        for answers in refused {
            let what = format!("{answers:?}");
            let cache = CachedIds::new(scripted(answers), with_capacity(8)).unwrap();
            let mut got = Vec::new();
            for _ in 0..4 {
                got.push(cache.next(SECOND).await.unwrap());
            }
            assert_eq!(got, (1..=4).map(Id::U64).collect::<Vec<_>>(), "{what}");
            let started = Instant::now();
            let err = cache.next(5 * SECOND).await.unwrap_err();
            assert_eq!(err.code(), Code::Internal, "{what}: {err:?}");
            assert!(started.elapsed() < SECOND, "{what}: final, at once");
            assert_eq!(cache.try_next(), None, "{what}");
        }
        // Other worker ids may be lower: their answers are taken, in the order received.
        let answers = vec![answer(1, &[10, 11, 12, 13]), answer(2, &[1, 2, 3]), answer(1, &[14])];
        let cache = CachedIds::new(scripted(answers), with_capacity(8)).unwrap();
        let mut got = Vec::new();
        for _ in 0..8 {
            got.push(cache.next(SECOND).await.unwrap());
        }
        let expected: Vec<Id> = [10, 11, 12, 13, 1, 2, 3, 14].map(Id::U64).into();
        assert_eq!(got, expected);
    }

    /// A refill is split over `parallel_fetches` calls at once; their answers are buffered
    /// lowest first once all arrived, so one worker id's ids come out in numeric order even
    /// when its calls answer in the other order. A refill whose calls partly fail keeps what
    /// the others brought, without an error to anyone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refill_is_split_over_parallel_calls_and_buffered_lowest_first() {
        assert_eq!(split_batch(9, 2), [5, 4]);
        assert_eq!(split_batch(3, 8), [1, 1, 1]);
        assert_eq!(split_batch(4, 1), [4]);
        // The first call of each refill answers only after the second did.
        let next = Arc::new(AtomicU64::new(1));
        let calls = Arc::new(AtomicU64::new(0));
        let second_answered = Arc::new(Notify::new());
        let source = {
            let (next, calls, second_answered) =
                (next.clone(), calls.clone(), second_answered.clone());
            move |count: u32, _: Duration| {
                let start = next.fetch_add(u64::from(count), Ordering::SeqCst);
                let n = calls.fetch_add(1, Ordering::SeqCst);
                let second_answered = second_answered.clone();
                async move {
                    let armed = second_answered.notified();
                    if n.is_multiple_of(2) {
                        armed.await;
                    } else {
                        second_answered.notify_one();
                    }
                    Ok(answer(3, &(start..start + u64::from(count)).collect::<Vec<_>>()))
                }
            }
        };
        let cache = CachedIds::new(source, parallel(16, 2)).unwrap();
        let mut got = Vec::new();
        for _ in 0..40 {
            got.push(cache.next(5 * SECOND).await.unwrap());
        }
        assert_eq!(got, (1..=40).map(Id::U64).collect::<Vec<_>>());
        let counted = || {
            let stats = cache.stats();
            stats.fetches == calls.load(Ordering::SeqCst) && stats.fetches.is_multiple_of(2)
        };
        eventually("the last refill's calls counted", counted).await;
        assert_eq!(cache.stats().failed_fetches, 0, "{:?}", cache.stats());

        // Every other call fails: each refill still brings the other call's ids.
        let fetches = Arc::new(AtomicU64::new(0));
        let counted = fetches.clone();
        let source = move |count: u32, _: Duration| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if !n.is_multiple_of(2) {
                    return Err(Status::unavailable("no lease"));
                }
                let start = n / 2 * u64::from(count) + 1;
                Ok(answer(1, &(start..start + u64::from(count)).collect::<Vec<_>>()))
            }
        };
        let cache = CachedIds::new(source, parallel(8, 2)).unwrap();
        let mut got = Vec::new();
        for _ in 0..12 {
            got.push(cache.next(5 * SECOND).await.unwrap());
        }
        assert_eq!(got, (1..=12).map(Id::U64).collect::<Vec<_>>());
        let halves = || {
            let stats = cache.stats();
            stats.fetches == fetches.load(Ordering::SeqCst)
                && stats.failed_fetches * 2 == stats.fetches
        };
        eventually("every other call failed", halves).await;

        // Two calls of one refill on one worker id whose answers interleave (a call that
        // waited for the clock keeps what it issued before): merged, all handed out in order.
        let answers = vec![answer(7, &[1, 2, 7, 8]), answer(7, &[3, 4, 5, 6])];
        let cache = CachedIds::new(scripted(answers), parallel(16, 2)).unwrap();
        let mut got = Vec::new();
        for _ in 0..8 {
            got.push(cache.next(SECOND).await.unwrap());
        }
        assert_eq!(got, (1..=8).map(Id::U64).collect::<Vec<_>>());
        assert_eq!(cache.stats().failed_fetches, 0);

        // Answers of one worker id holding one id twice: refused whole (INTERNAL, final).
        let answers = vec![answer(7, &[3, 4]), answer(7, &[1, 2, 3])];
        let cache = CachedIds::new(scripted(answers), parallel(12, 2)).unwrap();
        let err = cache.next(5 * SECOND).await.unwrap_err();
        assert_eq!(err.code(), Code::Internal, "{err:?}");
        assert!(err.message().contains("is not above the one before it"), "{err:?}");
        assert_eq!(cache.try_next(), None);
        assert_eq!(cache.stats().failed_fetches, 2);
    }

    /// A call of a refill that does not answer is dropped soon after the others answered (its
    /// ids are a gap), not waited for until the fetch deadline.
    #[tokio::test]
    async fn a_refill_does_not_wait_out_a_stalled_call() {
        // The first call answers; the second never does (the script ends).
        let options = CachedIdsOptions { fetch_deadline: 30 * SECOND, ..parallel(8, 2) };
        let cache = CachedIds::new(scripted(vec![answer(1, &[1, 2])]), options).unwrap();
        let started = Instant::now();
        assert_eq!(cache.next(20 * SECOND).await.unwrap(), Id::U64(1));
        assert!(started.elapsed() < 10 * SECOND, "{:?}", started.elapsed());
        assert_eq!(cache.try_next(), Some(Id::U64(2)));
        let stats = cache.stats();
        assert_eq!((stats.fetches, stats.failed_fetches), (2, 1), "{stats:?}");
        assert_eq!(straggler_grace(Duration::from_millis(1)), Duration::from_millis(100));
        assert_eq!(straggler_grace(SECOND), 4 * SECOND);
    }

    /// Dropping the cache stops its task, also in the middle of a refill: the source (and the
    /// refill's future) are dropped.
    #[tokio::test]
    async fn dropping_the_cache_stops_its_task() {
        let marker = Arc::new(());
        let held = marker.clone();
        let fetches = Arc::new(AtomicU64::new(0));
        let counted = fetches.clone();
        let source = move |count: u32, _: Duration| {
            let held = held.clone();
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n > 0 {
                    // The second refill never ends, holding the marker.
                    futures::future::pending::<()>().await;
                }
                drop(held);
                Ok(Ids { ids: IdList::U64((1..=u64::from(count)).collect()), worker_id: 1 })
            }
        };
        let cache = CachedIds::new(source, with_capacity(8)).unwrap();
        eventually("the second refill started", || fetches.load(Ordering::SeqCst) == 2).await;
        assert!(Arc::strong_count(&marker) >= 3, "source and refill hold it");
        drop(cache);
        eventually("the task let go of the source", || Arc::strong_count(&marker) == 1).await;
    }

    #[test]
    fn cache_options_are_checked() {
        let source = |_: u32, _: Duration| async { Err::<Ids, _>(Status::unavailable("x")) };
        let err = CachedIds::new(source, with_capacity(8)).err().unwrap();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("tokio runtime"), "{err:?}");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            for capacity in [0, 1] {
                let err = CachedIds::new(source, with_capacity(capacity)).err().unwrap();
                assert!(err.message().contains("at least 2"), "{err:?}");
            }
            if let Ok(huge) = usize::try_from(u64::from(u32::MAX) * 2 + 2) {
                let err = CachedIds::new(source, with_capacity(huge)).err().unwrap();
                assert!(err.message().contains("too large"), "{err:?}");
            }
            assert_eq!(CachedIds::new(source, with_capacity(2)).unwrap().capacity(), 2);
            let err = CachedIds::new(source, parallel(8, 0)).err().unwrap();
            assert!(err.message().contains("parallel_fetches is 0"), "{err:?}");
            let err = CachedIds::new(source, parallel(8, 65)).err().unwrap();
            assert!(err.message().contains("1 to 64"), "{err:?}");
        });
    }
}
