//! The clients of the recorded seq load (the nemesis's and `seqcheck load`'s), and their mix:
//! the SDK (its own route table, one hop per call), a plain gRPC client of one AllocSvr (no
//! `seqsvr-no-forward`: its calls for uids that AllocSvr does not own are forwarded), and an
//! HTTP/JSON client of one AllocSvr (`POST /v1/seq/next` over the cluster's mutual TLS, HTTP/1.1
//! or HTTP/2, forwarded like the plain one; issue 31). [`client_kind`] picks the kind of each
//! client index, [`outcome_of`] turns a call's result into the history's outcome, and
//! [`calls_by_kind`] counts each kind's calls for the report.

use crate::history::{Operation, Outcome, Violation};
use crate::http::{HttpConn, HttpTarget, HttpVersion};
use seqsvr_client::seq::SeqClient;
use seqsvr_core::config::SetConfig;
use seqsvr_proto::v1 as pb;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::{Code, Status};

/// The HTTP API's deadline header (`allocsvr/src/http/json.rs::TIMEOUT_HEADER`): the call is
/// answered within 90% of it, as a gRPC call within its `grpc-timeout`.
const TIMEOUT_HEADER: &str = "seqsvr-timeout-ms";

/// The route of `SeqService.NextBatch` (`proto/http-api.yaml`).
const NEXT_PATH: &str = "/v1/seq/next";

/// Which kind of client a load client is; its name in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum ClientKind {
    #[serde(rename = "sdk")]
    Sdk,
    #[serde(rename = "grpc-plain")]
    Plain,
    #[serde(rename = "http1")]
    Http1,
    #[serde(rename = "http2")]
    Http2,
}

impl ClientKind {
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Sdk => "sdk",
            ClientKind::Plain => "grpc-plain",
            ClientKind::Http1 => "http1",
            ClientKind::Http2 => "http2",
        }
    }
}

/// The kind of client `c` of `n`: of every four, two SDK clients (index 0 and 2), one plain gRPC
/// client (1) and one HTTP client (3), the HTTP ones HTTP/1.1 and HTTP/2 in turn. Three clients
/// are one of each (the third is HTTP, not SDK); one or two have no HTTP client.
pub fn client_kind(c: usize, n: usize) -> ClientKind {
    let http = |k: usize| if k.is_multiple_of(2) { ClientKind::Http1 } else { ClientKind::Http2 };
    match c % 4 {
        1 => ClientKind::Plain,
        3 => http(c / 4),
        2 if n == 3 => http(0),
        _ => ClientKind::Sdk,
    }
}

/// The AllocSvr a non-SDK client `c` calls: the sets' AllocSvrs in turn, the plain and the HTTP
/// client of each group of four on different ones, so that with two sets of two AllocSvrs and
/// eight clients or more each AllocSvr has one of them. `None` when `sets` list no AllocSvr.
fn alloc_for(c: usize, sets: &[SetConfig]) -> Option<&str> {
    let all: Vec<&str> = sets.iter().flat_map(|s| s.allocs.iter().map(String::as_str)).collect();
    let http = usize::from(c % 4 != 1);
    (!all.is_empty()).then(|| all[(2 * (c / 4) + http) % all.len()])
}

/// `n` clients of the mix [`client_kind`] gives: SDK clients connect to `seeds` (waiting up to
/// `wait`), the others to one AllocSvr of `sets` each. Prints the mix.
pub async fn connect_clients(
    n: usize,
    sets: &[SetConfig],
    seeds: &[String],
    wait: Duration,
) -> anyhow::Result<Vec<LoadClient>> {
    let mut clients = Vec::with_capacity(n);
    let mut mix: BTreeMap<ClientKind, Vec<String>> = BTreeMap::new();
    for c in 0..n {
        let kind = client_kind(c, n);
        let alloc =
            || alloc_for(c, sets).ok_or_else(|| anyhow::anyhow!("the sets list no AllocSvr"));
        let client = match kind {
            ClientKind::Sdk => LoadClient::Sdk(Arc::new(SeqClient::connect(seeds, wait).await?)),
            ClientKind::Plain => LoadClient::plain(alloc()?)?,
            ClientKind::Http1 => LoadClient::http(alloc()?, HttpVersion::Http1)?,
            ClientKind::Http2 => LoadClient::http(alloc()?, HttpVersion::Http2)?,
        };
        let at = match kind {
            ClientKind::Sdk => format!("{c}"),
            _ => format!("{c}→{}", alloc()?),
        };
        mix.entry(kind).or_default().push(at);
        clients.push(client);
    }
    let parts: Vec<String> = mix
        .iter()
        .map(|(kind, at)| format!("{} {} (clients {})", at.len(), kind.name(), at.join(", ")))
        .collect();
    eprintln!("load: {n} clients: {}", parts.join("; "));
    Ok(clients)
}

/// Why a call gave no values.
#[derive(Debug)]
pub(crate) enum CallError {
    /// Its status: [`outcome_of`] decides what it says about the outcome.
    Status(Status),
    /// An answer that breaks the API's promise: a violation ([`Outcome::Malformed`]).
    Malformed(String),
}

impl From<Status> for CallError {
    fn from(status: Status) -> CallError {
        CallError::Status(status)
    }
}

/// The history's outcome of a call's result: INVALID_ARGUMENT was refused before anything
/// happened; any other status (a transport error, no answer in time, UNAVAILABLE...) may have
/// allocated a value whose answer was lost, so it is unknown; a malformed answer is malformed.
pub(crate) fn outcome_of(result: Result<Vec<u64>, CallError>) -> Outcome {
    match result {
        Ok(values) => Outcome::Ok { values },
        Err(CallError::Status(s)) if s.code() == Code::InvalidArgument => {
            Outcome::Fail { code: format!("{:?}", s.code()) }
        }
        Err(CallError::Status(s)) => {
            Outcome::Unknown { reason: format!("{:?}: {}", s.code(), s.message()) }
        }
        Err(CallError::Malformed(reason)) => Outcome::Malformed { reason },
    }
}

/// One client of the load.
#[derive(Clone)]
pub(crate) enum LoadClient {
    Sdk(Arc<SeqClient>),
    /// A plain gRPC client with one AllocSvr's address that sends no `seqsvr-no-forward`.
    Plain(pb::seq_service_client::SeqServiceClient<tonic::transport::Channel>),
    /// An HTTP/JSON client of one AllocSvr.
    Http(Arc<HttpClient>),
}

impl LoadClient {
    /// A plain client of the AllocSvr at `addr` (over the process's TLS identity).
    pub(crate) fn plain(addr: &str) -> anyhow::Result<LoadClient> {
        let channel = seqsvr_client::store::alloc_channel(addr)?;
        Ok(LoadClient::Plain(pb::seq_service_client::SeqServiceClient::new(channel)))
    }

    /// An HTTP client of the AllocSvr at `addr` speaking `version` (over the process's TLS
    /// identity, or plaintext when the process chose plaintext).
    pub(crate) fn http(addr: &str, version: HttpVersion) -> anyhow::Result<LoadClient> {
        Ok(LoadClient::Http(Arc::new(HttpClient::new(addr, version)?)))
    }

    pub(crate) fn kind(&self) -> ClientKind {
        match self {
            LoadClient::Sdk(_) => ClientKind::Sdk,
            LoadClient::Plain(_) => ClientKind::Plain,
            LoadClient::Http(c) => match c.version {
                HttpVersion::Http1 => ClientKind::Http1,
                HttpVersion::Http2 => ClientKind::Http2,
            },
        }
    }

    /// One value for `uid`.
    pub(crate) async fn next(&self, uid: u64, deadline: Duration) -> Result<Vec<u64>, CallError> {
        match self {
            LoadClient::Sdk(c) => Ok(vec![c.next(uid, deadline).await?]),
            LoadClient::Plain(c) => {
                let mut r = tonic::Request::new(pb::NextRequest { uid, route_version: 0 });
                r.set_timeout(deadline);
                Ok(vec![c.clone().next(r).await?.into_inner().seq])
            }
            LoadClient::Http(c) => c.next_batch(&[uid], deadline).await,
        }
    }

    /// One value per uid of `uids`, in order; all or nothing.
    pub(crate) async fn next_batch(
        &self,
        uids: &[u64],
        deadline: Duration,
    ) -> Result<Vec<u64>, CallError> {
        match self {
            LoadClient::Sdk(c) => Ok(c.next_batch(uids, deadline).await?),
            LoadClient::Plain(c) => {
                let batch = pb::NextBatchRequest {
                    uids: uids.to_vec(),
                    route_version: 0,
                    independent: false,
                };
                let mut r = tonic::Request::new(batch);
                r.set_timeout(deadline);
                let seqs = c.clone().next_batch(r).await?.into_inner().seqs;
                if seqs.len() != uids.len() {
                    let why = format!("{} values for {} uids", seqs.len(), uids.len());
                    return Err(CallError::Malformed(why));
                }
                Ok(seqs)
            }
            LoadClient::Http(c) => c.next_batch(uids, deadline).await,
        }
    }
}

/// An HTTP/JSON client of one AllocSvr: `POST /v1/seq/next` with the call's deadline in
/// `seqsvr-timeout-ms`. Connections are kept open between calls: a call takes an idle one (or
/// opens one) and puts it back once it has read a whole answer, so concurrent callers each have
/// a connection of their own (an HTTP/1.1 connection carries one call at a time) and there are
/// never more connections than callers at once. A connection that failed, or whose call ran
/// out of time, is dropped; the next call opens a new one.
pub(crate) struct HttpClient {
    target: HttpTarget,
    version: HttpVersion,
    idle: Mutex<Vec<HttpConn>>,
}

impl HttpClient {
    pub(crate) fn new(addr: &str, version: HttpVersion) -> anyhow::Result<HttpClient> {
        let target = match seqsvr_client::tls::process_transport()? {
            Some(tls) => HttpTarget::with_identity(addr, &tls)
                .map_err(|e| anyhow::anyhow!("TLS configuration for {addr}: {e}"))?,
            None => HttpTarget::plaintext(addr),
        };
        Ok(HttpClient::with_target(target, version))
    }

    fn with_target(target: HttpTarget, version: HttpVersion) -> HttpClient {
        HttpClient { target, version, idle: Mutex::new(Vec::new()) }
    }

    /// An idle connection the server has not closed, if any.
    fn take_idle(&self) -> Option<HttpConn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(conn) = idle.pop() {
            if !conn.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    fn put_back(&self, conn: HttpConn) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
    }

    /// `POST /v1/seq/next` of `uids`, answered within `deadline` or DEADLINE_EXCEEDED. A
    /// transport error is UNAVAILABLE, an error answer its body's code, an answer that is not
    /// one value per uid asked, in order, malformed.
    pub(crate) async fn next_batch(
        &self,
        uids: &[u64],
        deadline: Duration,
    ) -> Result<Vec<u64>, CallError> {
        let uid_texts: Vec<String> = uids.iter().map(u64::to_string).collect();
        let body = serde_json::json!({ "uids": uid_texts }).to_string();
        let ms = deadline.as_millis().to_string();
        let headers = [("content-type", "application/json"), (TIMEOUT_HEADER, ms.as_str())];
        let call = async {
            let mut conn = match self.take_idle() {
                Some(conn) => conn,
                None => HttpConn::connect(&self.target, self.version)
                    .await
                    .map_err(|e| Status::unavailable(format!("HTTP connect: {e}")))?,
            };
            let reply = conn
                .send("POST", NEXT_PATH, &headers, body)
                .await
                .map_err(|e| Status::unavailable(format!("HTTP: {e}")))?;
            self.put_back(conn);
            Ok::<_, Status>(reply)
        };
        let reply = tokio::time::timeout(deadline, call).await.map_err(|_| {
            Status::deadline_exceeded(format!("HTTP: no answer within {} ms", deadline.as_millis()))
        })??;
        values_of(uids, reply.status, &reply.body)
    }
}

/// The values of an answer to `POST /v1/seq/next` of `uids`: a 200's `{"values": [{"uid":
/// "42", "seq": "13"}, ...]}` must hold one value per uid, each for the uid asked at its place,
/// every number a decimal string; any other status is its error body's code.
pub(crate) fn values_of(uids: &[u64], status: u16, body: &[u8]) -> Result<Vec<u64>, CallError> {
    if status != 200 {
        return Err(CallError::Status(status_of(status, body)));
    }
    let malformed = |why: String| CallError::Malformed(format!("HTTP 200: {why}"));
    let json: Value = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("the body is not JSON: {e}")))?;
    let values = json
        .get("values")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed(format!("no \"values\" array in {}", clip(&json.to_string()))))?;
    if values.len() != uids.len() {
        return Err(malformed(format!("{} values for {} uids", values.len(), uids.len())));
    }
    let mut seqs = Vec::with_capacity(uids.len());
    for (i, (value, &uid)) in values.iter().zip(uids).enumerate() {
        let field = |name: &str| {
            decimal(&value[name]).ok_or_else(|| {
                malformed(format!("values[{i}].{name} is not a decimal string: {value}"))
            })
        };
        let got = field("uid")?;
        if got != uid {
            return Err(malformed(format!("values[{i}] is for uid {got}, uid {uid} was asked")));
        }
        seqs.push(field("seq")?);
    }
    Ok(seqs)
}

/// A u64 the API's way: a decimal string.
fn decimal(value: &Value) -> Option<u64> {
    let text = value.as_str()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The status an error answer stands for: its body `{"code", "message", "hint"}` with the code's
/// gRPC name; UNKNOWN (which the history takes as an unknown outcome) when the body is not
/// such an error.
pub(crate) fn status_of(http: u16, body: &[u8]) -> Status {
    let error = serde_json::from_slice::<Value>(body).ok().and_then(|json| {
        let code = code_of_name(json.get("code")?.as_str()?)?;
        let message = json.get("message")?.as_str()?.to_string();
        let hint = json.get("hint").and_then(Value::as_str).map(str::to_string);
        Some((code, message, hint))
    });
    match error {
        Some((code, message, hint)) if code != Code::Ok => {
            let hint = hint.map(|h| format!(" (hint: {h})")).unwrap_or_default();
            Status::new(code, format!("HTTP {http}: {message}{hint}"))
        }
        _ => Status::unknown(format!(
            "HTTP {http} without an error body: {}",
            clip(&String::from_utf8_lossy(body))
        )),
    }
}

/// The gRPC code named `name` (`UNAVAILABLE`), as the API's error bodies name it
/// (`seqsvr_tls::http_error::code_name`).
fn code_of_name(name: &str) -> Option<Code> {
    (0..=16).map(Code::from_i32).find(|&c| seqsvr_tls::http_error::code_name(c) == name)
}

/// At most 200 characters of `text`, for messages.
fn clip(text: &str) -> String {
    text.chars().take(200).collect()
}

/// The calls of one kind of client, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindCalls {
    pub clients: u64,
    pub ok: u64,
    pub fail: u64,
    pub unknown: u64,
    pub malformed: u64,
    /// Violations one of whose operations is this kind's.
    pub violations: u64,
}

/// Per kind of client (`kinds[c]` is client `c`'s): its clients and their calls in `ops`, and
/// the violations its operations are in. Operations of no load client (a fault's own) count
/// nowhere.
pub fn calls_by_kind(
    ops: &[Operation],
    kinds: &[ClientKind],
    violations: &[Violation],
) -> BTreeMap<ClientKind, KindCalls> {
    let mut by: BTreeMap<ClientKind, KindCalls> = BTreeMap::new();
    for &kind in kinds {
        by.entry(kind).or_default().clients += 1;
    }
    let kind_of = |op: &Operation| kinds.get(op.client as usize).copied();
    for op in ops {
        let Some(t) = kind_of(op).and_then(|k| by.get_mut(&k)) else { continue };
        match op.outcome {
            Outcome::Ok { .. } => t.ok += 1,
            Outcome::Fail { .. } => t.fail += 1,
            Outcome::Unknown { .. } => t.unknown += 1,
            Outcome::Malformed { .. } => t.malformed += 1,
        }
    }
    for v in violations {
        let (a, b) = (kind_of(&v.earlier), kind_of(&v.later));
        for kind in [a, b.filter(|&b| Some(b) != a)].into_iter().flatten() {
            if let Some(t) = by.get_mut(&kind) {
                t.violations += 1;
            }
        }
    }
    by
}

/// Table rows of [`calls_by_kind`]: one per kind.
pub fn table_rows(by: &BTreeMap<ClientKind, KindCalls>) -> String {
    let mut t = String::new();
    for (kind, n) in by {
        t.push_str(&format!(
            "| calls of {} clients ({}) | {} ok, {} failed, {} unknown, {} malformed; in {} violations |\n",
            kind.name(),
            n.clients,
            n.ok,
            n.fail,
            n.unknown,
            n.malformed,
            n.violations
        ));
    }
    t
}

/// The kinds of client that ran but never got a value: that part of the load checked nothing.
pub fn silent_kinds(by: &BTreeMap<ClientKind, KindCalls>) -> Option<anyhow::Error> {
    let silent: Vec<&str> =
        by.iter().filter(|(_, n)| n.clients > 0 && n.ok == 0).map(|(k, _)| k.name()).collect();
    (!silent.is_empty())
        .then(|| anyhow::anyhow!("client kinds without one successful call: {}", silent.join(", ")))
}

#[cfg(test)]
mod tests;
