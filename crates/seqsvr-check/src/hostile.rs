//! `seqcheck hostile` (issue 30): one AllocSvr of a fresh local cluster (mutual TLS, the
//! production `[alloc]` limits) serves a well-behaved client while hostile clients try to make
//! it run out of memory, crash, or starve the good client.
//!
//! Two phases with the same good-client workload ([`good_client`]): a baseline (the good client
//! alone, a third of `--seconds`), then the hostile phase (the rest), in which every attack of
//! `hostile/attacks.rs` runs in its own task, each from its own loopback source address
//! (127.0.0.2 and up; the good client dials from 127.0.0.1), all bounded by the phase's end:
//!
//! - `never-read-streams`: a few TLS connections carrying hundreds of `NextStream` streams that
//!   send batches of `alloc.max_batch_uids` uids and never read a reply; every
//!   `request_timeout_ms` + 1 s each task opens one more and keeps the old ones (a client that
//!   leaks streams), so the streams open grow until the AllocSvr refuses more (16 per
//!   connection, `alloc.max_streams` in all);
//! - `idle-connections`: many connections that complete TLS and HTTP/2, ask once, then idle;
//! - `huge-id-counts`: `NextIds` of `ids.max_count` ids (and one more than it) on every scheme,
//!   `rongcloud` sessions included, from several tasks in a loop;
//! - `oversized`: a `NextBatch` of `max_batch_uids + 1` uids, a `NextBatch` and a `NextStream`
//!   batch above the AllocSvr's request size limit, a `NextIds` whose session id is 5 MiB;
//! - `malformed`: bytes that are no protobuf, framed as gRPC, to every unary method;
//! - `stalled-handshakes`: raw TCP connections that never send a ClientHello, more than the
//!   servers' cap on handshakes in progress (opened again when the AllocSvr closes them);
//! - `registrations`: `RegisterAlloc` to the set's store with a 10 KiB address, then many
//!   registrations from one AllocSvr identity of the test PKI (not the running AllocSvr's), and
//!   some from the `client` identity.
//!
//! Measured: the AllocSvr's RSS (`VmRSS` of `/proc/<pid>/status`, every 200 ms; the store
//! members' too, reported only), the good client's calls (count, errors, p50/p99/max latency,
//! every error), and per attack every answer: refusals by gRPC code with a sample message, and
//! transport-level ends (a connection closed, no answer) apart from them.
//!
//! Asserted ([`HostileReport::violations`], exit 1): the AllocSvr is alive and logged no panic;
//! its largest RSS in the hostile phase stays under [`RssBound`] (the baseline's largest plus a
//! margin made of its configured memory budgets); the good client's error rate in the hostile
//! phase is below [`GOOD_ERROR_RATE_MAX`] per series ([`PROBE_ERROR_RATE_MAX`] for the
//! single-attempt fresh connections): a refusal of the good client because of the hostile load
//! counts against it; every refusal a hostile call got has a code its attack allows
//! ([`attacks::Attack::allowed`]) and a message; the 10 KiB address is refused; the store holds
//! at most [`HELD_REGISTRATIONS_MAX`] registrations of the hostile identity; the good client
//! gets answers again once the load is gone. Latencies are reported, never asserted.

pub mod attacks;

use crate::cluster::{Cluster, ClusterOptions, ProcKey, WAIT_MAX};
use seqsvr_client::ids::{IdClient, Session, SessionId};
use seqsvr_client::seq::SeqClient;
use seqsvr_core::config::AllocTuning;
use seqsvr_core::ids::SetId;
use seqsvr_core::idscheme::Scheme;
use seqsvr_proto::v1 as pb;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Code, Status};

/// The good client's error rate per series (sequence calls, id calls) in the hostile phase
/// must stay below this: 1 %. Every failed call counts, whatever its code.
pub const GOOD_ERROR_RATE_MAX: f64 = 0.01;
/// The same for the good client's fresh connections (a new TLS connection and one `Next`, no
/// retry: a single attempt, so one unlucky probe weighs 1/20 of a short run's): 5 %.
pub const PROBE_ERROR_RATE_MAX: f64 = 0.05;
/// Registrations of the hostile AllocSvr identity the store may hold at the end, of the
/// [`attacks::REGISTRATIONS`] it tried: an AllocSvr needs one at a time, a restart loop a few;
/// all of them held means the store takes any number.
pub const HELD_REGISTRATIONS_MAX: usize = 64;
/// What one `NextStream` body the transport holds may pin besides its decoded batch: tonic's
/// encoding buffer, which the chunk hyper and h2 hold for the client shares (its first
/// allocation still pinned by a chunk h2 has not sent while the buffer grows a second: two),
/// each grown by doubling to at most twice what tonic encodes before it yields (its 32 KiB
/// yield threshold plus one reply: [`ENCODED_SEQ_MAX_BYTES`] a uid and 512 B of batch id,
/// code, message and a one-set route table).
pub fn stream_transport_bytes(max_batch_uids: u64) -> u64 {
    2 * 2 * (TONIC_YIELD_THRESHOLD_BYTES + ENCODED_SEQ_MAX_BYTES * max_batch_uids + 512)
}
/// tonic's `DEFAULT_YIELD_THRESHOLD` (`codec/mod.rs`): its encoder hands the transport what it
/// encoded once it holds this much, or when the source has nothing more ready.
pub const TONIC_YIELD_THRESHOLD_BYTES: u64 = 32 << 10;
/// A sequence value encoded (a `u64` varint) takes at most this.
pub const ENCODED_SEQ_MAX_BYTES: u64 = 10;
/// A TLS connection's request bytes the server may hold unread: hyper's default HTTP/2
/// connection window (1 MiB, which tonic keeps), plus 64 KiB of rustls' record buffers in and
/// out and the connection's HTTP/2 and TLS state.
pub const BYTES_PER_CONNECTION: u64 = (1 << 20) + (64 << 10);
/// A stalled socket (no ClientHello) held until the AllocSvr closes it: its task, its socket's
/// buffers in user space and the handshake gate's entry.
pub const BYTES_PER_STALLED_SOCKET: u64 = 16 << 10;
/// The good client's TLS connections to the AllocSvr at once: the SDK's sequence channel, its
/// id channel (one per AllocSvr each; up to two of each while one is being replaced) and the
/// probe's fresh connection.
pub const GOOD_CONNECTIONS: u64 = 5;
/// glibc malloc keeps memory freed in its arenas (one per Tokio worker) for reuse: measured at
/// 21 % of the heap in use at the peak of the long run before the fix (`malloc_stats`:
/// 357 MB from the system for 282 MB in use); the bound allows a quarter of everything else.
pub const ALLOCATOR_KEPT_NUM: u64 = 1;
pub const ALLOCATOR_KEPT_DEN: u64 = 4;
/// Bytes an id in flight costs at most: 16 B as issued (`u128`) and 16 B in its encoded answer.
pub const BYTES_PER_ID_IN_FLIGHT: u64 = 32;
/// Above this RSS (the bound plus 1 GiB) the hostile load is stopped at once: the machine is
/// shared, and the bound is broken anyway.
pub const ABORT_ABOVE_BOUND_BYTES: u64 = 1 << 30;
/// The good client keeps calling this long after the hostile load ended (the `after` phase):
/// it must get answers again.
pub const AFTER_PHASE: Duration = Duration::from_secs(3);

/// The AllocSvr identity of the test PKI the registrations attack uses: not the running
/// AllocSvr's (`alloc-0-1`), so its registration is not touched.
pub const HOSTILE_ALLOC_IDENTITY: &str = "alloc-0-2";
/// The identity of every hostile call to the AllocSvr (the application role).
pub const HOSTILE_CLIENT_IDENTITY: &str = "client";
/// A verified identity of the store's plane that is no AllocSvr's (a member the test cluster
/// does not run): its registrations must be refused PERMISSION_DENIED.
pub const HOSTILE_MEMBER_IDENTITY: &str = "store-0-12";

#[derive(Clone, Debug)]
pub struct HostileConfig {
    /// Both phases together: the baseline is a third, the hostile phase the rest.
    pub seconds: u64,
    /// Where report.json, summary.md and rss.csv go.
    pub out_dir: PathBuf,
    /// Keep the cluster's data and logs (always kept on a violation or a failed run).
    pub keep: bool,
    /// Only these attacks ([`attacks::ATTACKS`]; every one when empty): to tell what costs what.
    pub attacks: Vec<String>,
}

/// The memory budgets the RSS bound is made of (from the AllocSvr's `[alloc]` and `[ids]`).
#[derive(Clone, Debug, Serialize)]
pub struct RssBound {
    pub baseline_max_kib: u64,
    /// `alloc.max_stream_bytes`: every `NextStream` batch read but not yet answered.
    pub stream_budget_bytes: u64,
    /// `alloc.max_ids_in_flight` × [`BYTES_PER_ID_IN_FLIGHT`].
    pub ids_budget_bytes: u64,
    /// The most `NextStream` streams open at once in the hostile phase (the AllocSvr's gauge).
    pub streams_open_max: u64,
    /// Per open stream (open until the transport drops its body), what the budgets do not
    /// count (docs/ARCHITECTURE.md, "Limits"): one decoded batch waiting for room,
    /// `AllocTuning::stream_batch_bytes(max_batch_uids)`, and [`stream_transport_bytes`].
    pub per_stream_bytes: u64,
    /// TLS connections to the AllocSvr the run holds at once ([`attacks::TLS_CONNECTIONS`] +
    /// [`GOOD_CONNECTIONS`]), [`BYTES_PER_CONNECTION`] each.
    pub connections: u64,
    pub connections_bytes: u64,
    /// Stalled sockets ([`attacks::STALLED_HANDSHAKES`] when that attack runs), at
    /// [`BYTES_PER_STALLED_SOCKET`] each.
    pub stalled_bytes: u64,
    /// What the allocator may keep: [`ALLOCATOR_KEPT_NUM`] / [`ALLOCATOR_KEPT_DEN`] of the rest.
    pub allocator_bytes: u64,
    pub bound_kib: u64,
    pub formula: String,
    /// The same terms with `alloc.max_streams` streams open: the most the configuration allows.
    pub at_max_streams_kib: u64,
}

impl RssBound {
    fn new(
        baseline_max_kib: u64,
        budgets: &Budgets,
        streams_open_max: u64,
        load: &Load,
    ) -> RssBound {
        let ids_budget_bytes = budgets.ids_in_flight * BYTES_PER_ID_IN_FLIGHT;
        let connections_bytes = load.connections * BYTES_PER_CONNECTION;
        let stalled_bytes = load.stalled_sockets * BYTES_PER_STALLED_SOCKET;
        let fixed = budgets.stream_bytes + ids_budget_bytes + connections_bytes + stalled_bytes;
        let with_allocator = |bytes: u64| bytes + bytes * ALLOCATOR_KEPT_NUM / ALLOCATOR_KEPT_DEN;
        let streams_bytes = streams_open_max * budgets.per_stream;
        let held = fixed + streams_bytes;
        let allocator_bytes = with_allocator(held) - held;
        let bound_kib = baseline_max_kib + with_allocator(held) / 1024;
        let at_max_streams_kib = baseline_max_kib
            + with_allocator(fixed + budgets.max_streams * budgets.per_stream) / 1024;
        RssBound {
            baseline_max_kib,
            stream_budget_bytes: budgets.stream_bytes,
            ids_budget_bytes,
            streams_open_max,
            per_stream_bytes: budgets.per_stream,
            connections: load.connections,
            connections_bytes,
            stalled_bytes,
            allocator_bytes,
            bound_kib,
            formula: format!(
                "baseline max {} MiB + alloc.max_stream_bytes {} MiB + alloc.max_ids_in_flight {} \
                 x {BYTES_PER_ID_IN_FLIGHT} B = {} MiB + {streams_open_max} streams open x {} KiB \
                 (a decoded batch and the transport's buffers each) = {} MiB + {} connections x \
                 {} KiB = {} MiB + {} stalled sockets x {} KiB = {} MiB + allocator {}/{} = {} \
                 MiB: {} MiB",
                baseline_max_kib / 1024,
                budgets.stream_bytes >> 20,
                budgets.ids_in_flight,
                ids_budget_bytes >> 20,
                budgets.per_stream >> 10,
                streams_bytes >> 20,
                load.connections,
                BYTES_PER_CONNECTION >> 10,
                connections_bytes >> 20,
                load.stalled_sockets,
                BYTES_PER_STALLED_SOCKET >> 10,
                stalled_bytes >> 20,
                ALLOCATOR_KEPT_NUM,
                ALLOCATOR_KEPT_DEN,
                allocator_bytes >> 20,
                bound_kib / 1024
            ),
            at_max_streams_kib,
        }
    }
}

/// What the run's clients hold open on the AllocSvr at most, for the bound.
#[derive(Clone, Debug)]
struct Load {
    connections: u64,
    stalled_sockets: u64,
}

impl Load {
    fn of(chosen: &[String]) -> Load {
        let runs = |name: &str| chosen.is_empty() || chosen.iter().any(|a| a == name);
        Load {
            connections: GOOD_CONNECTIONS + attacks::tls_connections(runs),
            stalled_sockets: if runs("stalled-handshakes") {
                attacks::STALLED_HANDSHAKES as u64
            } else {
                0
            },
        }
    }
}

/// The AllocSvr's memory budgets as configured.
#[derive(Clone, Debug)]
struct Budgets {
    stream_bytes: u64,
    ids_in_flight: u64,
    per_stream: u64,
    max_streams: u64,
}

impl Budgets {
    fn of(alloc: &AllocTuning) -> Budgets {
        Budgets {
            stream_bytes: alloc.max_stream_bytes as u64,
            ids_in_flight: alloc.max_ids_in_flight as u64,
            per_stream: alloc.stream_batch_bytes(alloc.max_batch_uids) as u64
                + stream_transport_bytes(alloc.max_batch_uids as u64),
            max_streams: alloc.max_streams as u64,
        }
    }
}

/// How long one phase's good-client calls took and how they failed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SeriesReport {
    pub name: String,
    pub calls: u64,
    pub calls_per_s: f64,
    pub errors: u64,
    pub error_rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// gRPC code → how many, and the first message.
    pub errors_by_code: BTreeMap<String, Sample>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub count: u64,
    /// The first non-empty message seen with this code (empty if none had one).
    pub message: String,
    /// How many came with an empty message.
    pub empty_messages: u64,
}

impl Sample {
    fn add(&mut self, message: &str) {
        self.count += 1;
        if message.trim().is_empty() {
            self.empty_messages += 1;
        } else if self.message.is_empty() {
            self.message = message.chars().take(300).collect();
        }
    }
}

/// What one attack did and was answered.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AttackReport {
    pub name: String,
    pub what: String,
    pub source: String,
    /// Calls (or connections, streams) tried.
    pub attempts: u64,
    /// Answered without an error (a stream opened, ids issued, a connection accepted).
    pub answered: u64,
    /// Refusals by gRPC code.
    pub refusals: BTreeMap<String, Sample>,
    /// Ends below gRPC: a connection closed or refused, no answer in time.
    pub transport: BTreeMap<String, Sample>,
    /// The codes this attack's refusals may have.
    pub allowed: Vec<String>,
    pub counters: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RssReport {
    pub samples: usize,
    pub warmup_max_kib: u64,
    pub baseline_max_kib: u64,
    pub hostile_max_kib: u64,
    pub after_last_kib: u64,
    pub stores_max_kib: u64,
    pub aborted_at_kib: Option<u64>,
    /// Per phase, the largest value seen of each `seqsvr_alloc_budget_in_use{budget}` gauge
    /// (scraped every second).
    pub budgets_in_use_max: BTreeMap<String, BTreeMap<String, u64>>,
}

/// The store's leases view at the end (it drops a registration that never heartbeats after a
/// lease: the most held at once is the registrations attack's [`attacks::HELD_COUNTER`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RegistrationView {
    /// Registrations the store's leader lists for [`HOSTILE_ALLOC_IDENTITY`].
    pub held_by_hostile_identity: usize,
    /// The longest address among every registration it lists.
    pub longest_address: usize,
    pub registrations_listed: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct HostileReport {
    pub seconds: u64,
    pub baseline_s: f64,
    pub hostile_s: f64,
    pub machine: String,
    pub alloc_limits: BTreeMap<String, u64>,
    pub rss: RssReport,
    pub rss_bound: Option<RssBound>,
    pub baseline: Vec<SeriesReport>,
    pub hostile: Vec<SeriesReport>,
    pub after: Vec<SeriesReport>,
    pub attacks: Vec<AttackReport>,
    pub registrations: RegistrationView,
    pub alloc_alive: bool,
    pub violations: Vec<String>,
    pub notes: Vec<String>,
    pub kept_at: Option<PathBuf>,
}

impl HostileReport {
    /// A Markdown summary: bounds, memory, the good client in both phases, every attack.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "# seqcheck hostile: {} s ({:.0} s baseline, {:.0} s hostile)\n\nmachine: {}\n\n",
            self.seconds, self.baseline_s, self.hostile_s, self.machine
        ));
        if self.violations.is_empty() {
            s.push_str("**0 violations**\n\n");
        } else {
            s.push_str(&format!("**{} violations**\n\n", self.violations.len()));
            for v in &self.violations {
                s.push_str(&format!("- VIOLATION {v}\n"));
            }
            s.push('\n');
        }
        s.push_str("## AllocSvr memory (VmRSS)\n\n| phase | max RSS |\n|---|---|\n");
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        s.push_str(&format!("| warm-up | {} |\n", mib(self.rss.warmup_max_kib)));
        s.push_str(&format!("| baseline | {} |\n", mib(self.rss.baseline_max_kib)));
        s.push_str(&format!("| hostile | {} |\n", mib(self.rss.hostile_max_kib)));
        s.push_str(&format!("| after (last sample) | {} |\n", mib(self.rss.after_last_kib)));
        if let Some(b) = &self.rss_bound {
            s.push_str(&format!("\nbound: {} ({})\n", mib(b.bound_kib), b.formula));
            s.push_str(&format!(
                "\n(with alloc.max_streams streams open, the same terms give {})\n",
                mib(b.at_max_streams_kib)
            ));
        }
        if !self.rss.budgets_in_use_max.is_empty() {
            s.push_str("\n| phase | most in use: streams | stream_bytes | ids_in_flight | waiting_calls |\n|---|---|---|---|---|\n");
            for (phase, b) in &self.rss.budgets_in_use_max {
                let get = |k: &str| b.get(k).copied().unwrap_or(0);
                s.push_str(&format!(
                    "| {phase} | {} | {:.1} MiB | {} | {} |\n",
                    get("streams"),
                    get("stream_bytes") as f64 / (1 << 20) as f64,
                    get("ids_in_flight"),
                    get("waiting_calls")
                ));
            }
        }
        s.push_str(&format!(
            "\nstore members' max RSS: {}; AllocSvr alive at the end: {}\n\n",
            mib(self.rss.stores_max_kib),
            self.alloc_alive
        ));
        s.push_str(
            "## Good client\n\n| phase | series | calls | calls/s | errors | error rate | p50 | p99 | max |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        for (phase, series) in
            [("baseline", &self.baseline), ("hostile", &self.hostile), ("after", &self.after)]
        {
            for r in series {
                s.push_str(&format!(
                    "| {phase} | {} | {} | {:.0} | {} | {:.3} % | {:.2} ms | {:.2} ms | {:.1} ms |\n",
                    r.name,
                    r.calls,
                    r.calls_per_s,
                    r.errors,
                    r.error_rate * 100.0,
                    r.p50_ms,
                    r.p99_ms,
                    r.max_ms
                ));
            }
        }
        let errors: Vec<String> = [&self.baseline, &self.hostile, &self.after]
            .iter()
            .flat_map(|series| series.iter())
            .flat_map(|r| {
                r.errors_by_code.iter().map(move |(code, e)| {
                    format!("- {}: {} × {code}: {}\n", r.name, e.count, e.message)
                })
            })
            .collect();
        if !errors.is_empty() {
            s.push_str("\nGood-client errors:\n\n");
            for e in errors {
                s.push_str(&e);
            }
        }
        s.push_str(
            "\n## Attacks\n\n| attack | from | attempts | answered | refusals | transport ends |\n\
             |---|---|---|---|---|---|\n",
        );
        let list = |m: &BTreeMap<String, Sample>| {
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} × {}", v.count)).collect();
            if parts.is_empty() {
                "-".to_string()
            } else {
                parts.join(", ")
            }
        };
        for a in &self.attacks {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                a.name,
                a.source,
                a.attempts,
                a.answered,
                list(&a.refusals),
                list(&a.transport)
            ));
        }
        s.push_str("\nSample messages and counters:\n\n");
        for a in &self.attacks {
            s.push_str(&format!(
                "- **{}** ({}); allowed: {}\n",
                a.name,
                a.what,
                a.allowed.join(", ")
            ));
            for (code, e) in a.refusals.iter().chain(a.transport.iter()) {
                s.push_str(&format!("  - {code}: {}\n", e.message));
            }
            if !a.counters.is_empty() {
                let c: Vec<String> = a.counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
                s.push_str(&format!("  - counters: {}\n", c.join(", ")));
            }
        }
        let r = &self.registrations;
        s.push_str(&format!(
            "\nStore registrations listed at the end: {} ({} of {HOSTILE_ALLOC_IDENTITY}); \
             longest address {} bytes. Bound on those of {HOSTILE_ALLOC_IDENTITY} held at once: \
             {HELD_REGISTRATIONS_MAX}\n",
            r.registrations_listed, r.held_by_hostile_identity, r.longest_address
        ));
        for n in &self.notes {
            s.push_str(&format!("\nnote: {n}\n"));
        }
        s
    }
}

/// The canonical name of a gRPC code (as `grpc-status` documents it).
pub use seqsvr_tls::http_error::code_name;

/// What the client side of tonic, hyper and h2 say when a connection broke, was refused or a
/// call was given up below gRPC (no `grpc-status` from the server).
const TRANSPORT_PHRASES: &[&str] = &[
    "transport error",
    "h2 protocol error",
    "tcp connect error",
    "error trying to connect",
    "connection",
    "Connection",
    "Timeout expired",
    "operation was canceled",
    "broken pipe",
    "stream no longer needed",
];

/// A status that is a transport-level end, not an answer of the server.
pub fn is_transport(status: &Status) -> bool {
    matches!(status.code(), Code::Unknown | Code::Unavailable | Code::Cancelled | Code::Internal)
        && TRANSPORT_PHRASES.iter().any(|p| status.message().contains(p))
}

/// Phases, for the RSS samples.
const WARMUP: u8 = 0;
const BASELINE: u8 = 1;
const HOSTILE: u8 = 2;
const AFTER: u8 = 3;

/// VmRSS of `pid` in KiB (None once the process is gone).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[derive(Default)]
struct RssLog {
    /// (ms since start, phase, AllocSvr KiB, largest store member KiB)
    samples: Vec<(u64, u8, u64, u64)>,
    aborted_at_kib: Option<u64>,
    /// (phase, budget) → the largest `seqsvr_alloc_budget_in_use` seen.
    budgets: BTreeMap<(u8, String), u64>,
}

const PHASE_NAMES: [&str; 4] = ["warmup", "baseline", "hostile", "after"];

/// The budgets whose use is sampled.
const BUDGET_GAUGES: [&str; 4] = ["streams", "stream_bytes", "ids_in_flight", "waiting_calls"];

/// Samples every 200 ms until `stop` (and the budget gauges at `metrics` every second);
/// above `ceiling` (KiB, once known) sets `abort`.
#[allow(clippy::too_many_arguments)]
async fn sample_rss(
    alloc: u32,
    metrics: String,
    stores: Vec<u32>,
    phase: Arc<AtomicU8>,
    ceiling_kib: Arc<std::sync::atomic::AtomicU64>,
    abort: Arc<tokio::sync::watch::Sender<bool>>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<RssLog>>,
) {
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        ticks += 1;
        if ticks.is_multiple_of(5) {
            if let Ok(samples) = crate::observe::scrape(&metrics, Duration::from_millis(500)).await
            {
                let p = phase.load(Ordering::Relaxed);
                let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                for budget in BUDGET_GAUGES {
                    let v = samples.sum("seqsvr_alloc_budget_in_use", &[("budget", budget)]);
                    let max = log.budgets.entry((p, budget.to_string())).or_default();
                    *max = (*max).max(v as u64);
                }
            }
        }
        let Some(kib) = rss_kib(alloc) else { continue };
        let store_kib = stores.iter().filter_map(|&p| rss_kib(p)).max().unwrap_or(0);
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        log.samples.push((
            t0.elapsed().as_millis() as u64,
            phase.load(Ordering::Relaxed),
            kib,
            store_kib,
        ));
        let ceiling = ceiling_kib.load(Ordering::Relaxed);
        if ceiling > 0 && kib > ceiling && log.aborted_at_kib.is_none() {
            log.aborted_at_kib = Some(kib);
            let _ = abort.send(true);
        }
    }
}

/// One good-client series as it runs.
#[derive(Default)]
struct SeriesLog {
    latencies_us: Vec<u64>,
    errors: BTreeMap<String, Sample>,
}

impl SeriesLog {
    fn record(&mut self, started: std::time::Instant, result: Result<(), &Status>) {
        self.latencies_us.push(started.elapsed().as_micros() as u64);
        if let Err(status) = result {
            let code = if is_transport(status) {
                format!("{} (transport)", code_name(status.code()))
            } else {
                code_name(status.code()).to_string()
            };
            self.errors.entry(code).or_default().add(status.message());
        }
    }

    fn report(mut self, name: &str, seconds: f64) -> SeriesReport {
        self.latencies_us.sort_unstable();
        let n = self.latencies_us.len();
        let at = |q: f64| -> f64 {
            if n == 0 {
                return 0.0;
            }
            let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
            self.latencies_us[i] as f64 / 1000.0
        };
        let errors: u64 = self.errors.values().map(|s| s.count).sum();
        SeriesReport {
            name: name.to_string(),
            calls: n as u64,
            calls_per_s: if seconds > 0.0 { n as f64 / seconds } else { 0.0 },
            errors,
            error_rate: if n == 0 { 0.0 } else { errors as f64 / n as f64 },
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: at(1.0),
            errors_by_code: self.errors,
        }
    }
}

/// The good client: `SeqClient::next` over [`GOOD_UIDS`] uids from [`GOOD_SEQ_TASKS`] tasks,
/// `IdClient` calls of [`GOOD_ID_COUNT`] ids over every scheme from [`GOOD_ID_TASKS`] tasks,
/// and every [`PROBE_PERIOD`] a fresh TLS connection that asks one `Next` (no retry).
pub const GOOD_UIDS: u64 = 1_000;
pub const GOOD_SEQ_TASKS: usize = 4;
/// Between two calls of one sequence task: 4 tasks × 250 calls/s at most.
pub const GOOD_SEQ_PERIOD: Duration = Duration::from_millis(4);
pub const GOOD_ID_TASKS: usize = 2;
/// Between two calls of one id task: 2 tasks × 50 calls/s at most.
pub const GOOD_ID_PERIOD: Duration = Duration::from_millis(20);
pub const GOOD_ID_COUNT: u32 = 10;
pub const PROBE_PERIOD: Duration = Duration::from_millis(250);
/// Each good call's deadline (the SDK retries within it).
pub const GOOD_DEADLINE: Duration = Duration::from_secs(3);

struct Good {
    seq: Arc<SeqClient>,
    ids: Arc<IdClient>,
    alloc_addr: String,
    uid_begin: u64,
    schemes: Vec<(String, Scheme)>,
}

async fn good_client(good: Arc<Good>, until: Instant) -> Vec<SeriesReport> {
    let started = Instant::now();
    let mut seq_tasks = Vec::new();
    for t in 0..GOOD_SEQ_TASKS {
        let good = good.clone();
        seq_tasks.push(tokio::spawn(async move {
            let mut log = SeriesLog::default();
            let mut tick = tokio::time::interval(GOOD_SEQ_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = t as u64;
            while Instant::now() < until {
                tick.tick().await;
                let uid = good.uid_begin + 50_000 + n % GOOD_UIDS;
                n += GOOD_SEQ_TASKS as u64;
                let started = std::time::Instant::now();
                let result = good.seq.next(uid, GOOD_DEADLINE).await;
                log.record(started, result.as_ref().map(|_| ()));
            }
            log
        }));
    }
    let mut id_tasks = Vec::new();
    for t in 0..GOOD_ID_TASKS {
        let good = good.clone();
        id_tasks.push(tokio::spawn(async move {
            let mut log = SeriesLog::default();
            let mut tick = tokio::time::interval(GOOD_ID_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = t;
            while Instant::now() < until {
                tick.tick().await;
                let (name, scheme) = &good.schemes[n % good.schemes.len()];
                n += GOOD_ID_TASKS;
                let started = std::time::Instant::now();
                let result = if *scheme == Scheme::RongCloud {
                    let session = Session {
                        session_type: 1,
                        id: SessionId::Text(format!("good-{}", n % 64)),
                    };
                    good.ids.next_session_ids(name, GOOD_ID_COUNT, &session, GOOD_DEADLINE).await
                } else {
                    good.ids.next_ids(name, GOOD_ID_COUNT, 0, GOOD_DEADLINE).await
                };
                log.record(started, result.as_ref().map(|_| ()));
            }
            log
        }));
    }
    let probe = {
        let good = good.clone();
        tokio::spawn(async move {
            let mut log = SeriesLog::default();
            let mut tick = tokio::time::interval(PROBE_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = 0;
            while Instant::now() < until {
                tick.tick().await;
                n += 1;
                let started = std::time::Instant::now();
                let result = fresh_connection_next(&good.alloc_addr, good.uid_begin + n).await;
                log.record(started, result.as_ref().map(|_| ()));
            }
            log
        })
    };
    let mut seq = SeriesLog::default();
    for t in seq_tasks {
        let log = t.await.unwrap_or_default();
        seq.latencies_us.extend(log.latencies_us);
        for (code, s) in log.errors {
            let mine = seq.errors.entry(code).or_default();
            mine.count += s.count;
            mine.empty_messages += s.empty_messages;
            if mine.message.is_empty() {
                mine.message = s.message;
            }
        }
    }
    let mut ids = SeriesLog::default();
    for t in id_tasks {
        let log = t.await.unwrap_or_default();
        ids.latencies_us.extend(log.latencies_us);
        for (code, s) in log.errors {
            let mine = ids.errors.entry(code).or_default();
            mine.count += s.count;
            mine.empty_messages += s.empty_messages;
            if mine.message.is_empty() {
                mine.message = s.message;
            }
        }
    }
    let probes = probe.await.unwrap_or_default();
    let secs = started.elapsed().as_secs_f64();
    vec![
        seq.report("seq next (SDK)", secs),
        ids.report("NextIds (SDK)", secs),
        probes.report("fresh connection", secs),
    ]
}

/// A new connection (TLS with this process's identity, from 127.0.0.1) and one `Next` on it.
async fn fresh_connection_next(addr: &str, uid: u64) -> Result<(), Status> {
    let endpoint = seqsvr_client::tls::endpoint(addr, seqsvr_client::tls::Plane::Client)?
        .connect_timeout(GOOD_DEADLINE);
    let call = async {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("transport error: connect: {e}")))?;
        let mut client = pb::seq_service_client::SeqServiceClient::new(channel);
        let mut request = tonic::Request::new(pb::NextRequest { uid, route_version: 0 });
        request.set_timeout(GOOD_DEADLINE);
        client.next(request).await.map(|_| ())
    };
    match tokio::time::timeout(GOOD_DEADLINE, call).await {
        Ok(result) => result,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {GOOD_DEADLINE:?} on a new connection"
        ))),
    }
}

/// The CPU model (`lscpu`), for the report.
fn machine() -> String {
    let model = std::process::Command::new("lscpu")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.starts_with("Model name:"))
                .map(|l| l.trim_start_matches("Model name:").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    format!("{model}, {cpus} CPUs")
}

/// Runs both phases on a fresh cluster. `Err` = the run could not be carried out.
pub async fn run(cfg: &HostileConfig) -> anyhow::Result<HostileReport> {
    anyhow::ensure!(cfg.seconds >= 6, "--seconds {} is too short: give at least 6", cfg.seconds);
    if let Some(unknown) = cfg.attacks.iter().find(|a| !attacks::ATTACKS.contains(&a.as_str())) {
        anyhow::bail!("unknown attack {unknown:?}; known: {}", attacks::ATTACKS.join(", "));
    }
    std::fs::create_dir_all(&cfg.out_dir)?;
    let options = ClusterOptions {
        sets: 1,
        members: 3,
        allocs_per_set: 1,
        // The production limits and lease: they are what the hostile load meets.
        alloc: AllocTuning::default(),
        ..ClusterOptions::default()
    };
    let mut cluster = Cluster::start(options);
    println!("[hostile] cluster started in {}", cluster.dir.path().display());
    let result = scenario(&mut cluster, cfg).await;
    let keep = cfg.keep || result.as_ref().map_or(true, |r| !r.violations.is_empty());
    let result = result.map(|mut report| {
        if keep {
            cluster.dir.disable_cleanup(true);
            report.kept_at = Some(cluster.dir.path().to_path_buf());
        }
        report
    });
    if keep {
        cluster.dir.disable_cleanup(true);
        println!("[hostile] cluster data and logs kept at {}", cluster.dir.path().display());
    }
    let report = result?;
    std::fs::write(cfg.out_dir.join("report.json"), serde_json::to_vec_pretty(&report)?)?;
    std::fs::write(cfg.out_dir.join("summary.md"), report.summary())?;
    Ok(report)
}

async fn scenario(cluster: &mut Cluster, cfg: &HostileConfig) -> anyhow::Result<HostileReport> {
    let set = SetId(0);
    let key = ProcKey::Alloc(set, 0);
    let seq = Arc::new(cluster.seq_client().await);
    cluster.try_wait_serving(&seq).await?;
    let ids = Arc::new(
        IdClient::from_config(&cluster.config)
            .map_err(|s| anyhow::anyhow!("id client: {}", s.message()))?,
    );
    let schemes: Vec<(String, Scheme)> =
        cluster.config.ids.schemes.iter().map(|(name, s)| (name.clone(), s.scheme)).collect();
    // Every scheme issues before the clock starts (worker ids acquired, sessions' sections
    // loaded): the phases measure serving, not start-up.
    for (name, scheme) in &schemes {
        let issued = if *scheme == Scheme::RongCloud {
            let session = Session { session_type: 1, id: SessionId::Text("warm-up".into()) };
            ids.next_session_ids(name, 1, &session, WAIT_MAX).await
        } else {
            ids.next_ids(name, 1, 0, WAIT_MAX).await
        };
        issued.map_err(|s| anyhow::anyhow!("warm-up NextIds of {name}: {}", s.message()))?;
    }
    let alloc_pid =
        cluster.pid(key).ok_or_else(|| anyhow::anyhow!("the AllocSvr is not running"))?;
    let store_pids: Vec<u32> = cluster
        .store_ids(set)
        .into_iter()
        .filter_map(|id| cluster.pid(ProcKey::Store(set, id)))
        .collect();
    let alloc_addr = cluster.proc(key).addr.clone();
    let set_config = cluster.config.set(set).ok_or_else(|| anyhow::anyhow!("no set 0"))?.clone();
    let tuning = cluster.config.alloc.clone();
    let budgets = Budgets::of(&tuning);
    let mut report = HostileReport {
        seconds: cfg.seconds,
        machine: machine(),
        alloc_limits: BTreeMap::from([
            ("alloc.max_batch_uids".to_string(), tuning.max_batch_uids as u64),
            ("alloc.max_streams".to_string(), tuning.max_streams as u64),
            ("alloc.max_waiting_calls".to_string(), tuning.max_waiting_calls as u64),
            ("alloc.max_stream_bytes".to_string(), budgets.stream_bytes),
            ("alloc.max_bytes_per_stream".to_string(), tuning.max_bytes_per_stream as u64),
            ("alloc.max_ids_in_flight".to_string(), budgets.ids_in_flight),
            ("alloc.request_timeout_ms".to_string(), tuning.request_timeout_ms),
            ("ids.max_count".to_string(), u64::from(cluster.config.ids.max_count)),
        ]),
        ..HostileReport::default()
    };

    let phase = Arc::new(AtomicU8::new(WARMUP));
    let ceiling_kib = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (abort, abort_rx) = tokio::sync::watch::channel(false);
    let abort = Arc::new(abort);
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let rss = Arc::new(Mutex::new(RssLog::default()));
    let sampler = tokio::spawn(sample_rss(
        alloc_pid,
        cluster.proc(key).metrics_addr.clone(),
        store_pids,
        phase.clone(),
        ceiling_kib.clone(),
        abort.clone(),
        stop_sampling.clone(),
        rss.clone(),
    ));
    let good = Arc::new(Good {
        seq: seq.clone(),
        ids: ids.clone(),
        alloc_addr: alloc_addr.clone(),
        uid_begin: set_config.uid_begin,
        schemes: schemes.clone(),
    });
    // A second of warm-up samples, then the baseline.
    let warm = good_client(good.clone(), Instant::now() + Duration::from_secs(1)).await;
    drop(warm);
    let baseline_len = Duration::from_secs(cfg.seconds) / 3;
    let hostile_len = Duration::from_secs(cfg.seconds) - baseline_len;
    report.baseline_s = baseline_len.as_secs_f64();
    report.hostile_s = hostile_len.as_secs_f64();
    phase.store(BASELINE, Ordering::Relaxed);
    println!("[hostile] baseline: the good client alone for {baseline_len:?}");
    report.baseline = good_client(good.clone(), Instant::now() + baseline_len).await;
    let baseline_max_kib = {
        let log = rss.lock().unwrap_or_else(|e| e.into_inner());
        log.samples.iter().filter(|s| s.1 == BASELINE).map(|s| s.2).max().unwrap_or(0)
    };
    anyhow::ensure!(baseline_max_kib > 0, "no RSS sample of the AllocSvr (pid {alloc_pid})");
    // The abort ceiling: the bound with every stream the configuration allows open, + 1 GiB.
    let load = Load::of(&cfg.attacks);
    let worst = RssBound::new(baseline_max_kib, &budgets, budgets.max_streams, &load);
    ceiling_kib.store(worst.bound_kib + ABORT_ABOVE_BOUND_BYTES / 1024, Ordering::Relaxed);

    phase.store(HOSTILE, Ordering::Relaxed);
    println!("[hostile] hostile phase: the good client and every attack for {hostile_len:?}");
    let until = Instant::now() + hostile_len;
    let run = Arc::new(attacks::Run {
        alloc_addr: alloc_addr.clone(),
        until,
        abort: abort_rx,
        uid_begin: set_config.uid_begin,
        uid_end: set_config.uid_end,
        max_batch_uids: tuning.max_batch_uids,
        request_timeout: Duration::from_millis(tuning.request_timeout_ms),
        max_count: cluster.config.ids.max_count,
        schemes: schemes.clone(),
        client_tls: cluster.client_tls_of(HOSTILE_CLIENT_IDENTITY),
        connecting: tokio::sync::watch::channel(0).0,
    });
    let stores = attacks::StoreClients {
        as_alloc: cluster.store_client_as_identity(set, HOSTILE_ALLOC_IDENTITY),
        as_member: cluster.store_client_as_identity(set, HOSTILE_MEMBER_IDENTITY),
        as_admin: cluster.store_client_of(set),
    };
    let running = attacks::start_all(&run, stores, &cfg.attacks);
    report.hostile = good_client(good.clone(), until).await;
    let mut attacks_done = Vec::new();
    for (attack, handle) in running {
        // Every attack stops by `until`; a few seconds more for calls in flight, then cut.
        let limit = until + run.request_timeout + Duration::from_secs(5);
        let handle_abort = handle.abort_handle();
        if tokio::time::timeout_at(limit, handle).await.is_err() {
            handle_abort.abort();
            report.notes.push(format!("attack {} was cut off after the phase", attack.name()));
        }
        attacks_done.push(attack);
    }
    phase.store(AFTER, Ordering::Relaxed);
    println!("[hostile] after: the good client alone for {AFTER_PHASE:?}");
    report.after = good_client(good.clone(), Instant::now() + AFTER_PHASE).await;
    stop_sampling.store(true, Ordering::Relaxed);
    let _ = sampler.await;

    // What held.
    let crashed = cluster.exited_on_its_own(key);
    report.alloc_alive = crashed.is_none();
    if let Some(status) = crashed {
        report.violations.push(format!("the AllocSvr exited during the run: {status}"));
    }
    let log = cluster.log_of(key);
    if let Some(line) = log.lines().find(|l| l.contains("panicked")) {
        report.violations.push(format!("the AllocSvr panicked: {line}"));
    }
    {
        let log = rss.lock().unwrap_or_else(|e| e.into_inner());
        let max_of =
            |p: u8| log.samples.iter().filter(|s| s.1 == p).map(|s| s.2).max().unwrap_or(0);
        report.rss = RssReport {
            samples: log.samples.len(),
            warmup_max_kib: max_of(WARMUP),
            baseline_max_kib: max_of(BASELINE),
            hostile_max_kib: max_of(HOSTILE),
            after_last_kib: log.samples.last().map_or(0, |s| s.2),
            stores_max_kib: log.samples.iter().map(|s| s.3).max().unwrap_or(0),
            aborted_at_kib: log.aborted_at_kib,
            budgets_in_use_max: BTreeMap::new(),
        };
        for ((p, budget), max) in &log.budgets {
            report
                .rss
                .budgets_in_use_max
                .entry(PHASE_NAMES[*p as usize].to_string())
                .or_default()
                .insert(budget.clone(), *max);
        }
        let mut csv = String::from("ms,phase,alloc_rss_kib,store_max_rss_kib\n");
        for (ms, p, a, s) in &log.samples {
            let p = PHASE_NAMES[*p as usize];
            csv.push_str(&format!("{ms},{p},{a},{s}\n"));
        }
        std::fs::write(cfg.out_dir.join("rss.csv"), csv)?;
    }
    let streams_open_max = report
        .rss
        .budgets_in_use_max
        .get("hostile")
        .and_then(|b| b.get("streams"))
        .copied()
        .unwrap_or(budgets.max_streams);
    let bound = RssBound::new(baseline_max_kib, &budgets, streams_open_max, &load);
    println!("[hostile] RSS bound: {}", bound.formula);
    if report.rss.hostile_max_kib > bound.bound_kib {
        report.violations.push(format!(
            "the AllocSvr's RSS reached {} MiB in the hostile phase, above the bound of {} MiB ({}){}",
            report.rss.hostile_max_kib / 1024,
            bound.bound_kib / 1024,
            bound.formula,
            if report.rss.aborted_at_kib.is_some() { "; the hostile load was stopped early" } else { "" }
        ));
    }
    report.rss_bound = Some(bound);
    for r in &report.hostile {
        let max =
            if r.name == "fresh connection" { PROBE_ERROR_RATE_MAX } else { GOOD_ERROR_RATE_MAX };
        if r.calls == 0 {
            report
                .violations
                .push(format!("the good client made no {} call in the hostile phase", r.name));
        } else if r.error_rate >= max {
            let codes: Vec<String> = r
                .errors_by_code
                .iter()
                .map(|(code, s)| format!("{} × {code} ({})", s.count, s.message))
                .collect();
            report.violations.push(format!(
                "the good client's {} calls failed {} of {} times in the hostile phase ({:.2} %, \
                 bound {:.0} %): {}",
                r.name,
                r.errors,
                r.calls,
                r.error_rate * 100.0,
                max * 100.0,
                codes.join("; ")
            ));
        }
    }
    let after_ok =
        report.after.iter().filter(|r| r.name != "fresh connection").all(|r| r.calls > r.errors);
    if !after_ok {
        report
            .violations
            .push("the good client got no answer after the hostile load was gone".to_string());
    }
    for attack in &attacks_done {
        let a = attack.report();
        for (code, sample) in &a.refusals {
            if !a.allowed.iter().any(|c| c == code) {
                report.violations.push(format!(
                    "attack {}: {} refusals with {code}, not one of {}: {:?}",
                    a.name,
                    sample.count,
                    a.allowed.join(", "),
                    sample.message
                ));
            }
            if sample.empty_messages > 0 {
                report.violations.push(format!(
                    "attack {}: {} refusals with {code} came without a message",
                    a.name, sample.empty_messages
                ));
            }
        }
        if a.name == "registrations" {
            if a.counters.get("long address accepted").copied().unwrap_or(0) > 0 {
                report.violations.push(format!(
                    "the store accepted a RegisterAlloc address of {} bytes (it is replicated and \
                     kept)",
                    attacks::LONG_ADDRESS_BYTES
                ));
            }
            let held = a.counters.get(attacks::HELD_COUNTER).copied().unwrap_or(0);
            if held > HELD_REGISTRATIONS_MAX as u64 {
                report.violations.push(format!(
                    "the store held {held} registrations of the one identity \
                     {HOSTILE_ALLOC_IDENTITY} at once (bound {HELD_REGISTRATIONS_MAX})"
                ));
            }
            let from_member =
                a.counters.get("accepted from a member identity").copied().unwrap_or(0);
            if from_member > 0 {
                report.violations.push(format!(
                    "the store accepted {from_member} registrations from {HOSTILE_MEMBER_IDENTITY}, \
                     a certificate that is no AllocSvr's"
                ));
            }
        }
        report.attacks.push(a);
    }
    match cluster.leases(set).await {
        Ok(leases) => {
            report.registrations = RegistrationView {
                held_by_hostile_identity: leases
                    .allocs
                    .iter()
                    .filter(|a| a.identity == HOSTILE_ALLOC_IDENTITY)
                    .count(),
                longest_address: leases.allocs.iter().map(|a| a.addr.len()).max().unwrap_or(0),
                registrations_listed: leases.allocs.len(),
            };
        }
        Err(s) => {
            report.notes.push(format!("the store's leases view did not answer: {}", s.message()))
        }
    }
    let baseline_errors: u64 = report.baseline.iter().map(|r| r.errors).sum();
    if baseline_errors > 0 {
        report.notes.push(format!(
            "the good client had {baseline_errors} errors in the baseline already (no hostile load)"
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_read_from_the_sorted_latencies() {
        let mut log = SeriesLog {
            latencies_us: (1..=100).rev().map(|ms| ms * 1000).collect(),
            ..SeriesLog::default()
        };
        log.errors.entry("UNAVAILABLE".into()).or_default().add("no answer");
        let r = log.report("s", 10.0);
        assert_eq!((r.p50_ms, r.p99_ms, r.max_ms), (50.0, 99.0, 100.0));
        assert_eq!((r.calls, r.errors), (100, 1));
        assert!((r.error_rate - 0.01).abs() < 1e-9 && (r.calls_per_s - 10.0).abs() < 1e-9);
        assert_eq!(SeriesLog::default().report("empty", 1.0).p99_ms, 0.0);
    }

    /// Transport-level ends are told apart from the server's refusals by code and wording.
    #[test]
    fn transport_ends_are_not_refusals() {
        assert!(is_transport(&Status::unavailable("transport error: connect: refused")));
        assert!(is_transport(&Status::unknown("h2 protocol error: stream reset")));
        assert!(is_transport(&Status::cancelled("Timeout expired")));
        let shed = Status::resource_exhausted("Too many active requests for the connection");
        assert!(!is_transport(&shed), "a refusal whatever its words");
        assert!(!is_transport(&Status::internal("failed to decode Protobuf message: ...")));
        assert!(!is_transport(&Status::unavailable("no lease: retry elsewhere")));
    }

    #[test]
    fn empty_messages_are_counted_apart() {
        let mut s = Sample::default();
        s.add("  ");
        s.add("first");
        s.add("second");
        assert_eq!((s.count, s.empty_messages, s.message.as_str()), (3, 1, "first"));
    }

    /// The bound is the baseline plus each budget, a batch and the transport's buffers per open
    /// stream, the connections' buffers and the stalled sockets, and a quarter of that for the
    /// allocator.
    #[test]
    fn the_rss_bound_adds_the_budgets_to_the_baseline() {
        let budgets = Budgets::of(&AllocTuning::default());
        let load = Load::of(&[]);
        assert_eq!(
            load.connections,
            GOOD_CONNECTIONS + 72,
            "4 + 64 + 2 + 1 + 1 attack connections"
        );
        let b = RssBound::new(10 * 1024, &budgets, 100, &load);
        let per_stream = AllocTuning::default().stream_batch_bytes(10_000) as u64
            + 4 * ((32 << 10) + 100_000 + 512);
        let held = (128 << 20)
            + 1_000_000 * BYTES_PER_ID_IN_FLIGHT
            + 100 * per_stream
            + 77 * BYTES_PER_CONNECTION
            + 768 * BYTES_PER_STALLED_SOCKET;
        assert_eq!(b.bound_kib, 10 * 1024 + (held + held / 4) / 1024);
        assert!(b.at_max_streams_kib > b.bound_kib);
        assert!(b.formula.contains("100 streams open"), "{}", b.formula);
    }
}
