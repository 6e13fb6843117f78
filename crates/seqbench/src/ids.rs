//! `seqbench ids`: the id benchmark (issue 10), one mode of one scheme per run, and
//! `seqbench ids-report`, which puts the runs side by side.
//!
//! Served (against a running cluster, through the SDK `seqsvr_client::ids`):
//! - `next`: `IdClient::next_ids` with `--count` ids per call from `--concurrency` tasks, each
//!   call timed;
//! - `cached`: one `IdClient::cached` ([`CachedIds`], `--capacity`) shared by `--concurrency`
//!   taker tasks; one take in `--sample-every` is timed (a clock read per take would cost as
//!   much as the take), every take is counted. Each task yields after 64 takes, or the two
//!   runtime threads would run two takers only.
//!
//! Local ceilings (in this process, one thread, no coordination, no RPC):
//! - `generator`: a bare loop of [`Generator`] for the scheme's layout with one worker id,
//!   reading the wall clock for every id, borrowing at most `ids.max_ahead_ms` ahead of it
//!   (the served rules, one worker);
//! - `generator-unbounded`: the same loop with no bound on borrowing: what the layout code
//!   costs on this CPU;
//! - `uuid-crate`: `uuid::Uuid::now_v7()` in a loop.
//!
//! Every run reports ids per second, the latency of one call (one take for `cached` and the
//! ceilings), CPU time per id of this process and of `--server-pids` (from /proc, as
//! `seqbench run` does), the worker ids seen, and how far ahead of the wall clock the issued
//! times run: at the end (the last id of each task decoded, time vs now) and the most seen in
//! samples during the run.

use anyhow::Context;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use seqsvr_client::ids::{CachedIds, CachedIdsOptions, Id, IdClient, Session, SessionId};
use seqsvr_core::config::ClusterConfig;
use seqsvr_core::idscheme::{issued_fields, Generator, Layout, Next, Scheme};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One call's deadline (a `NextIds`, or a take from an empty cache).
const CALL_DEADLINE: Duration = Duration::from_secs(5);
/// Takes between two yields of a `cached` taker, and between two clock reads.
const BURST: u64 = 64;
/// Takes between two lead samples (decoding the id: its time vs the wall clock).
const LEAD_SAMPLE_EVERY: u64 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdMode {
    /// `NextIds` with `--count` ids per call.
    Next,
    /// The SDK's client-side cache (`IdClient::cached`), many takers.
    Cached,
    /// In-process ceiling: a bare `Generator` loop, one worker, the config's `max_ahead_ms`.
    Generator,
    /// The same loop with no bound on how far ahead it borrows (the layout code's CPU cost).
    GeneratorUnbounded,
    /// In-process ceiling for uuidv7: `uuid::Uuid::now_v7()` in a loop.
    UuidCrate,
}

impl IdMode {
    fn served(self) -> bool {
        matches!(self, IdMode::Next | IdMode::Cached)
    }
}

#[derive(Clone, Debug, clap::Args)]
pub struct IdsArgs {
    #[arg(long, value_enum)]
    mode: IdMode,
    /// A scheme name of the cluster config's `[ids.schemes]` (served; for `generator`, the
    /// layout looped over). Ignored by `uuid-crate`.
    #[arg(long, default_value = "snowflake")]
    scheme: String,
    /// The scheme name the result is reported under (default: --scheme): runs of several
    /// served names of one layout (each with its own worker ids' marks) as one row.
    #[arg(long)]
    report_as: Option<String>,
    /// A label for the report (default: derived from the mode).
    #[arg(long)]
    label: Option<String>,
    /// The cluster config: the AllocSvrs to ask, the layouts and `ids.max_ahead_ms`.
    #[arg(long, default_value = "data/local/cluster.toml")]
    config: PathBuf,
    /// Mutual TLS (the cluster file has `[tls]`): this client's certificate.
    #[arg(long, env = "SEQSVR_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert.
    #[arg(long, env = "SEQSVR_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Concurrent callers (`next`) or takers (`cached`); the ceilings run one thread.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// `next`: ids per `NextIds` call.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// `cached`: ids the cache holds at most (it refills half of it per `NextIds`; the SDK's
    /// default is 8192).
    #[arg(long, default_value_t = 8192)]
    capacity: usize,
    /// `cached`: `NextIds` calls per refill, at once (the SDK's default is 4).
    #[arg(long, default_value_t = CachedIdsOptions::default().parallel_fetches)]
    parallel_fetches: u32,
    /// `cached` and the ceilings: time one take in this many (all are counted).
    #[arg(long, default_value_t = 16)]
    sample_every: u64,
    /// PIDs of the server processes (every StoreSvr and AllocSvr) whose CPU time during the run
    /// is divided by the ids served.
    #[arg(long, value_delimiter = ',')]
    server_pids: Vec<u32>,
    /// Where the result JSON goes.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdRunResult {
    pub label: String,
    pub mode: IdMode,
    /// The scheme's name in the config ("uuid-crate" for that mode).
    pub scheme: String,
    /// The layout's scheme (snowflake, uid-generator, weibo, uuidv7).
    pub layout: String,
    /// Ids per call (`next`), else 1.
    pub count: u32,
    /// Tasks (served) or threads (ceilings).
    pub concurrency: usize,
    /// `cached`: the cache's capacity (0 otherwise).
    pub capacity: usize,
    pub seconds: f64,
    pub calls: u64,
    pub ids: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub ids_per_s: f64,
    pub calls_per_s: f64,
    /// Calls timed (all for `next`, one in `--sample-every` for the others).
    pub timed_calls: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    /// CPU time (user + system) of this process per id, in ns.
    pub client_cpu_ns_per_id: f64,
    /// CPU time of the `--server-pids` processes per id, in ns (0 without them).
    pub server_cpu_ns_per_id: f64,
    /// Distinct worker ids seen (every answer for `next`, sampled ids for `cached`).
    pub worker_ids: Vec<u64>,
    /// The bound the run was under: the config's `ids.max_ahead_ms` (the ceilings: their own).
    pub max_ahead_ms: u64,
    /// The last id of each task decoded at the end of the run: the most its time (the start of
    /// its unit) was ahead of the wall clock, in ms (negative: behind).
    pub lead_end_ms: i64,
    /// The most seen in samples during the run.
    pub lead_max_ms: i64,
    /// The least lead of the tasks' first ids, when received (i64::MIN: none).
    #[serde(default)]
    pub lead_first_ms: i64,
    /// Ids per second of issued time: the ids over the time their timestamps span, i.e. the run
    /// plus how much further ahead of the clock the issued times ran at the end than at the
    /// start. Borrowing future time inflates `ids_per_s` over a short run; this is what a
    /// layout's per-unit limit bounds.
    #[serde(default)]
    pub ids_per_issued_s: f64,
    /// The layout's own limit per worker id: sequence numbers per second of time units.
    pub layout_ids_per_s_per_worker: f64,
    /// `cached`: refills (`NextIds` calls) and failed ones.
    pub cache_fetches: u64,
    pub cache_failed_fetches: u64,
}

/// What one task measured.
struct TaskOut {
    hist: Histogram<u64>,
    calls: u64,
    ids: u64,
    errors: u64,
    first_error: Option<String>,
    last: Option<Id>,
    workers: BTreeSet<u64>,
    lead_max_ms: i64,
    /// The lead of the task's first id, when it was received (taken).
    lead_first_ms: Option<i64>,
}

impl TaskOut {
    fn new() -> anyhow::Result<TaskOut> {
        Ok(TaskOut {
            hist: histogram()?,
            calls: 0,
            ids: 0,
            errors: 0,
            first_error: None,
            last: None,
            workers: BTreeSet::new(),
            lead_max_ms: i64::MIN,
            lead_first_ms: None,
        })
    }

    fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }

    fn merge(&mut self, other: TaskOut) -> anyhow::Result<()> {
        self.hist.add(&other.hist)?;
        self.calls += other.calls;
        self.ids += other.ids;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.workers.extend(other.workers);
        self.lead_max_ms = self.lead_max_ms.max(other.lead_max_ms);
        self.lead_first_ms = match (self.lead_first_ms, other.lead_first_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(())
    }
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How far the time of `id` (the start of its unit) is ahead of `now_ms`, and its worker id.
fn lead_of(layout: &Layout, id: u128, now_ms: u64) -> Option<(i64, Option<u64>)> {
    let fields = layout.decode(id).ok()?;
    let lead = layout.unix_ms(fields.time) as i64 - now_ms as i64;
    Some((lead, seqsvr_core::idscheme::worker_of(layout, &fields)))
}

/// The time the timestamps of a run's ids span, in seconds: the run, plus how much further
/// ahead of the clock the issued times were at the end (`lead_end_ms`) than at the first id
/// (`lead_first_ms`); never less than the run. i64::MIN: not known (the run alone).
fn issued_seconds(seconds: f64, lead_first_ms: i64, lead_end_ms: i64) -> f64 {
    let ran_ahead_ms = match (lead_first_ms, lead_end_ms) {
        (i64::MIN, _) | (_, i64::MIN) => 0,
        (first, end) => end.saturating_sub(first).max(0),
    };
    seconds + ran_ahead_ms as f64 / 1000.0
}

/// Sequence numbers per second of time units: the most one worker id issues without borrowing.
fn per_worker_per_s(layout: &Layout) -> f64 {
    (layout.max_sequence() as f64 + 1.0) * 1000.0 / layout.unit().ms() as f64
}

fn label_of(a: &IdsArgs) -> String {
    if let Some(l) = &a.label {
        return l.clone();
    }
    match a.mode {
        IdMode::Next => format!("NextIds ×{}", a.count),
        IdMode::Cached if a.parallel_fetches == CachedIdsOptions::default().parallel_fetches => {
            format!("cached, capacity {}", a.capacity)
        }
        IdMode::Cached => {
            format!("cached, capacity {}, {} NextIds per refill", a.capacity, a.parallel_fetches)
        }
        IdMode::Generator => "ceiling: Generator loop".into(),
        IdMode::GeneratorUnbounded => "ceiling: Generator loop, unbounded".into(),
        IdMode::UuidCrate => "ceiling: uuid crate now_v7".into(),
    }
}

pub async fn run(a: IdsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.sample_every > 0, "--sample-every must be at least 1");
    anyhow::ensure!(a.concurrency > 0, "--concurrency must be at least 1");
    let needs_config = a.mode != IdMode::UuidCrate;
    let config = if needs_config {
        let text = std::fs::read_to_string(&a.config)
            .with_context(|| format!("reading {}", a.config.display()))?;
        Some(ClusterConfig::from_toml_str(&text)?)
    } else {
        None
    };
    let layout = match &config {
        Some(c) => Some(
            seqsvr_client::ids::layout_of(&c.ids, &a.scheme, now_ms())
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        None => None,
    };
    let config_ahead_ms = config.as_ref().map_or(0, |c| c.ids.max_ahead_ms);
    let label = label_of(&a);
    let done = Arc::new(AtomicU64::new(0));
    let progress = tokio::spawn(crate::progress(done.clone(), a.seconds, label.clone()));
    let (out, seconds, cpu, cache_stats, max_ahead_ms) = match a.mode {
        IdMode::Next | IdMode::Cached => {
            let (config, layout) = (config.as_ref().expect("read"), layout.clone().expect("read"));
            let (cert, key) = (a.tls_cert.as_deref(), a.tls_key.as_deref());
            seqsvr_client::tls::use_cluster_identity(config.tls.as_ref(), &a.config, cert, key)?;
            let client = Arc::new(IdClient::from_config(config)?);
            let (out, seconds, cpu, stats) = served(&a, client, Arc::new(layout), &done).await?;
            (out, seconds, cpu, stats, config_ahead_ms)
        }
        IdMode::Generator | IdMode::GeneratorUnbounded => {
            let layout = layout.clone().expect("read");
            let ahead_ms = if a.mode == IdMode::Generator { config_ahead_ms } else { u64::MAX };
            let (seconds, every, done) = (a.seconds, a.sample_every, done.clone());
            let (out, secs, cpu) = tokio::task::spawn_blocking(move || {
                ceiling(|| generator_loop(&layout, ahead_ms, seconds, every, &done))
            })
            .await??;
            (out, secs, cpu, (0, 0), ahead_ms)
        }
        IdMode::UuidCrate => {
            let (seconds, every, done) = (a.seconds, a.sample_every, done.clone());
            let (out, secs, cpu) =
                tokio::task::spawn_blocking(move || ceiling(|| uuid_loop(seconds, every, &done)))
                    .await??;
            (out, secs, cpu, (0, 0), 0)
        }
    };
    progress.abort();
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!();
    }
    let (out, lead_end_ms) = out;
    let ids = out.ids.max(1) as f64;
    let lead_first_ms = out.lead_first_ms.unwrap_or(i64::MIN);
    let issued_seconds = issued_seconds(seconds, lead_first_ms, lead_end_ms);
    let layout_name = match (&layout, a.mode) {
        (_, IdMode::UuidCrate) => Scheme::UuidV7.name().to_string(),
        (Some(l), _) => l.scheme().name().to_string(),
        (None, _) => String::new(),
    };
    let result = IdRunResult {
        label,
        mode: a.mode,
        scheme: match (&a.report_as, a.mode) {
            (_, IdMode::UuidCrate) => "uuid-crate".into(),
            (Some(name), _) => name.clone(),
            (None, _) => a.scheme.clone(),
        },
        layout: layout_name,
        count: if a.mode == IdMode::Next { a.count } else { 1 },
        concurrency: if a.mode.served() { a.concurrency } else { 1 },
        capacity: if a.mode == IdMode::Cached { a.capacity } else { 0 },
        seconds,
        calls: out.calls,
        ids: out.ids,
        errors: out.errors,
        first_error: out.first_error.clone(),
        ids_per_s: out.ids as f64 / seconds,
        calls_per_s: out.calls as f64 / seconds,
        timed_calls: out.hist.len(),
        p50_ns: out.hist.value_at_quantile(0.5),
        p99_ns: out.hist.value_at_quantile(0.99),
        p999_ns: out.hist.value_at_quantile(0.999),
        max_ns: out.hist.max(),
        client_cpu_ns_per_id: cpu.0 as f64 * 1000.0 / ids,
        server_cpu_ns_per_id: cpu.1 as f64 * 1000.0 / ids,
        worker_ids: out.workers.iter().copied().collect(),
        max_ahead_ms,
        lead_end_ms,
        lead_max_ms: out.lead_max_ms,
        lead_first_ms,
        ids_per_issued_s: out.ids as f64 / issued_seconds,
        layout_ids_per_s_per_worker: layout.as_ref().map_or(4_096_000.0, per_worker_per_s),
        cache_fetches: cache_stats.0,
        cache_failed_fetches: cache_stats.1,
    };
    println!(
        "{:<40} {:>12.0} ids/s {:>10.0} calls/s  p50 {:>9.3} us  p99 {:>9.3} us  cpu/id client {:.0} ns servers {:.0} ns  workers {:?}  lead end {} ms max {} ms  errors {}",
        format!("{} {}", result.scheme, result.label),
        result.ids_per_s,
        result.calls_per_s,
        result.p50_ns as f64 / 1000.0,
        result.p99_ns as f64 / 1000.0,
        result.client_cpu_ns_per_id,
        result.server_cpu_ns_per_id,
        result.worker_ids,
        result.lead_end_ms,
        result.lead_max_ms,
        result.errors,
    );
    if let Some(e) = &result.first_error {
        eprintln!("first error: {e}");
    }
    if let Some(path) = &a.out {
        std::fs::write(path, serde_json::to_vec_pretty(&result)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Runs `body` (a ceiling loop on this thread) and measures this process's CPU time over it:
/// (what it measured and the lead at its end, seconds, (client CPU µs, 0)).
#[allow(clippy::type_complexity)]
fn ceiling(
    body: impl FnOnce() -> anyhow::Result<(TaskOut, i64)>,
) -> anyhow::Result<((TaskOut, i64), f64, (u64, u64))> {
    let cpu_before = crate::cpu_us("self")?;
    let started = Instant::now();
    let out = body()?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = crate::cpu_us("self")?.saturating_sub(cpu_before);
    Ok((out, seconds, (cpu, 0)))
}

/// The served modes: `--concurrency` tasks for `--seconds`, after a warm-up that leases a
/// worker id on every AllocSvr (unmeasured).
#[allow(clippy::type_complexity)]
async fn served(
    a: &IdsArgs,
    client: Arc<IdClient>,
    layout: Arc<Layout>,
    done: &Arc<AtomicU64>,
) -> anyhow::Result<((TaskOut, i64), f64, (u64, u64), (u64, u64))> {
    // rongcloud: caller i asks for its own session (spread over the sections), whose ids come
    // from its section's owner; the "worker ids" of the report count the sessions.
    let rongcloud = layout.scheme() == Scheme::RongCloud;
    anyhow::ensure!(
        !(rongcloud && a.mode == IdMode::Cached),
        "the cached path does not apply to rongcloud: its ids belong to a session"
    );
    let session_of = |i: usize| {
        rongcloud.then(|| Session {
            session_type: (i % 16) as u32,
            id: SessionId::Text(format!("bench-session-{i}")),
        })
    };
    if rongcloud {
        // Warm-up: every session's section installs its slot (one reservation each).
        for i in 0..a.concurrency {
            let session = session_of(i).expect("rongcloud");
            client
                .next_session_ids(&a.scheme, 1, &session, CALL_DEADLINE)
                .await
                .with_context(|| format!("warm-up NextIds of {:?}", a.scheme))?;
        }
    }
    // Warm-up: each AllocSvr leases its worker id for the scheme on its first call.
    for _ in 0..client.addresses().len() * 2 * usize::from(!rongcloud) {
        client
            .next_ids(&a.scheme, 1, 0, CALL_DEADLINE)
            .await
            .with_context(|| format!("warm-up NextIds of {:?}", a.scheme))?;
    }
    let cache = if a.mode == IdMode::Cached {
        let options = CachedIdsOptions {
            capacity: a.capacity,
            parallel_fetches: a.parallel_fetches,
            ..CachedIdsOptions::default()
        };
        let cache = Arc::new(client.cached(&a.scheme, 0, options)?);
        cache.next(CALL_DEADLINE).await.context("warm-up take from the id cache")?;
        // Let the first refills fill the buffer.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Some(cache)
    } else {
        None
    };
    let stats_before = cache.as_ref().map(|c| c.stats()).unwrap_or_default();
    let cpu_before = (crate::cpu_us("self")?, crate::servers_cpu_us(&a.server_pids)?);
    let started = Instant::now();
    let until = started + Duration::from_secs(a.seconds);
    let mut tasks = Vec::new();
    for i in 0..a.concurrency {
        let (layout, done) = (layout.clone(), done.clone());
        let every = a.sample_every;
        tasks.push(match &cache {
            Some(cache) => tokio::spawn(take_loop(cache.clone(), until, every, layout, done)),
            None => {
                let (client, scheme, count) = (client.clone(), a.scheme.clone(), a.count);
                let session = session_of(i);
                tokio::spawn(next_loop(client, scheme, count, session, until, layout, done))
            }
        });
    }
    let mut all = TaskOut::new()?;
    let mut lasts = Vec::new();
    for t in tasks {
        let mut out = t.await??;
        lasts.extend(out.last.take());
        all.merge(out)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = (
        crate::cpu_us("self")?.saturating_sub(cpu_before.0),
        crate::servers_cpu_us(&a.server_pids)?.saturating_sub(cpu_before.1),
    );
    let now = now_ms();
    let lead_end =
        lasts.iter().filter_map(|id| lead_of(&layout, id.value(), now)).map(|(l, _)| l).max();
    let stats = cache.as_ref().map(|c| c.stats()).unwrap_or_default();
    let fetches =
        (stats.fetches - stats_before.fetches, stats.failed_fetches - stats_before.failed_fetches);
    Ok(((all, lead_end.unwrap_or(i64::MIN)), seconds, cpu, fetches))
}

/// One `next` caller: `NextIds` of `count` until `until`, each call timed.
async fn next_loop(
    client: Arc<IdClient>,
    scheme: String,
    count: u32,
    session: Option<Session>,
    until: Instant,
    layout: Arc<Layout>,
    done: Arc<AtomicU64>,
) -> anyhow::Result<TaskOut> {
    let session_key = session.as_ref().map(|s| s.key()).transpose()?;
    let mut out = TaskOut::new()?;
    loop {
        let t = Instant::now();
        if t >= until {
            break;
        }
        let answer = match &session {
            Some(session) => client.next_session_ids(&scheme, count, session, CALL_DEADLINE).await,
            None => client.next_ids(&scheme, count, 0, CALL_DEADLINE).await,
        };
        match answer {
            Ok(got) => {
                let _ = out.hist.record((t.elapsed().as_nanos() as u64).max(1));
                out.calls += 1;
                out.ids += got.ids.len() as u64;
                out.workers.insert(session_key.unwrap_or(got.worker_id));
                out.last = got.ids.get(got.ids.len().saturating_sub(1));
                done.fetch_add(1, Ordering::Relaxed);
                let last = out.last.and_then(|id| lead_of(&layout, id.value(), now_ms()));
                if let Some((lead, _)) = last {
                    out.lead_max_ms = out.lead_max_ms.max(lead);
                }
                if out.lead_first_ms.is_none() {
                    let first =
                        got.ids.first().and_then(|id| lead_of(&layout, id.value(), now_ms()));
                    out.lead_first_ms = first.map(|(lead, _)| lead);
                }
            }
            Err(e) => out.error(format!("{:?}: {}", e.code(), e.message())),
        }
    }
    Ok(out)
}

/// One `cached` taker: takes until `until` (checked every [`BURST`] takes), yielding between
/// bursts; one take in `every` timed, one in [`LEAD_SAMPLE_EVERY`] decoded.
async fn take_loop(
    cache: Arc<CachedIds>,
    until: Instant,
    every: u64,
    layout: Arc<Layout>,
    done: Arc<AtomicU64>,
) -> anyhow::Result<TaskOut> {
    let mut out = TaskOut::new()?;
    let mut k: u64 = 0;
    while Instant::now() < until {
        for _ in 0..BURST {
            let t = k.is_multiple_of(every).then(Instant::now);
            match cache.next(CALL_DEADLINE).await {
                Ok(id) => {
                    if let Some(t) = t {
                        let _ = out.hist.record((t.elapsed().as_nanos() as u64).max(1));
                    }
                    out.calls += 1;
                    out.last = Some(id);
                    if out.lead_first_ms.is_none() {
                        out.lead_first_ms = lead_of(&layout, id.value(), now_ms()).map(|l| l.0);
                    }
                    if k.is_multiple_of(LEAD_SAMPLE_EVERY) {
                        if let Some((lead, worker)) = lead_of(&layout, id.value(), now_ms()) {
                            out.lead_max_ms = out.lead_max_ms.max(lead);
                            out.workers.extend(worker);
                        }
                    }
                }
                Err(e) => {
                    out.error(format!("{:?}: {}", e.code(), e.message()));
                    // A failing take may have waited its whole deadline: stop on time.
                    if Instant::now() >= until {
                        break;
                    }
                }
            }
            k += 1;
        }
        done.fetch_add(BURST, Ordering::Relaxed);
        tokio::task::yield_now().await;
    }
    out.ids = out.calls;
    Ok(out)
}

/// The in-process ceiling: one [`Generator`] of `layout` (worker id 1, no high-water mark),
/// the wall clock read for every id, borrowing at most `max_ahead_ms` ahead of it and sleeping
/// when it would go further (as the AllocSvr waits).
fn generator_loop(
    layout: &Layout,
    max_ahead_ms: u64,
    seconds: u64,
    every: u64,
    done: &AtomicU64,
) -> anyhow::Result<(TaskOut, i64)> {
    let unit_ms = layout.unit().ms();
    let max_ahead_units = if max_ahead_ms == u64::MAX { u64::MAX } else { max_ahead_ms / unit_ms };
    let mut generator = Generator::new(layout, 0, max_ahead_units)?;
    let mut rng = StdRng::seed_from_u64(7);
    let mut out = TaskOut::new()?;
    out.workers.insert(1);
    let end_ms = now_ms() + seconds * 1000;
    let (mut k, mut last) = (0u64, None);
    'ids: loop {
        let t = k.is_multiple_of(every).then(Instant::now);
        k += 1;
        let mut clock = now_ms();
        if clock >= end_ms {
            break;
        }
        let stamp = loop {
            match generator.next(layout.units_at(clock), layout.max_time())? {
                Next::Issue(stamp) => break stamp,
                Next::WaitUntil(unit) => {
                    let due = layout.unix_ms(unit).min(end_ms);
                    std::thread::sleep(Duration::from_millis(due.saturating_sub(clock).max(1)));
                    clock = now_ms();
                    if clock >= end_ms {
                        break 'ids;
                    }
                }
                Next::RaiseHighWater(_) => anyhow::bail!("no high-water mark here"),
            }
        };
        // rongcloud: one session's fields where the others carry worker id 1.
        let fields = match layout.scheme() {
            Scheme::RongCloud => seqsvr_core::idscheme::session_fields(stamp, 1, 1),
            _ => issued_fields(layout, 1, stamp, 0, rng.random()),
        };
        let id = layout.encode(&fields)?;
        std::hint::black_box(id);
        if let Some(t) = t {
            let _ = out.hist.record((t.elapsed().as_nanos() as u64).max(1));
        }
        out.calls += 1;
        last = Some(id);
        if out.calls.is_multiple_of(1 << 16) {
            done.fetch_add(1 << 16, Ordering::Relaxed);
        }
    }
    out.ids = out.calls;
    out.lead_max_ms = (generator.stats().max_lead.saturating_mul(unit_ms)) as i64;
    let lead_end = last.and_then(|id| lead_of(layout, id, now_ms())).map_or(i64::MIN, |l| l.0);
    Ok((out, lead_end))
}

/// The in-process ceiling of uuidv7: `Uuid::now_v7()` for `seconds`, one thread.
fn uuid_loop(seconds: u64, every: u64, done: &AtomicU64) -> anyhow::Result<(TaskOut, i64)> {
    let mut out = TaskOut::new()?;
    let until = Instant::now() + Duration::from_secs(seconds);
    let unix_ms = |u: &uuid::Uuid| {
        u.get_timestamp().map(|ts| {
            let (s, ns) = ts.to_unix();
            (s * 1000 + u64::from(ns) / 1_000_000) as i64
        })
    };
    let mut k = 0u64;
    let mut last = uuid::Uuid::nil();
    while Instant::now() < until {
        for _ in 0..1024 {
            let t = k.is_multiple_of(every).then(Instant::now);
            let u = std::hint::black_box(uuid::Uuid::now_v7());
            if let Some(t) = t {
                let _ = out.hist.record((t.elapsed().as_nanos() as u64).max(1));
            }
            if k.is_multiple_of(LEAD_SAMPLE_EVERY) {
                if let Some(ms) = unix_ms(&u) {
                    out.lead_max_ms = out.lead_max_ms.max(ms - now_ms() as i64);
                }
            }
            last = u;
            k += 1;
        }
        done.fetch_add(1024, Ordering::Relaxed);
    }
    out.calls = k;
    out.ids = k;
    let lead_end = unix_ms(&last).map_or(i64::MIN, |ms| ms - now_ms() as i64);
    Ok((out, lead_end))
}

// ---- the report ----

fn median_of(runs: &[&IdRunResult], f: impl Fn(&IdRunResult) -> f64) -> f64 {
    crate::median(runs.iter().map(|r| f(r)).collect())
}

fn lead_text(ms: i64) -> String {
    match ms {
        i64::MIN => "-".into(),
        ms if ms.abs() >= 60_000 => format!("{ms} ({:.1} min)", ms as f64 / 60_000.0),
        ms => format!("{ms}"),
    }
}

fn ratio_text(r: f64) -> String {
    if r < 0.1 {
        format!("{r:.4}×")
    } else {
        format!("{r:.2}×")
    }
}

/// `seqbench ids-report`: medians per (scheme, label) as markdown; the ratio of each served
/// path to the scheme's local ceiling; the targets of issue 10, met or missed. `json`: all runs
/// in one file.
pub fn report(paths: &[PathBuf], json: Option<&PathBuf>) -> anyhow::Result<()> {
    let mut runs: Vec<IdRunResult> = Vec::new();
    for p in paths {
        let r: IdRunResult = serde_json::from_slice(&std::fs::read(p)?)
            .with_context(|| format!("{}", p.display()))?;
        runs.push(r);
    }
    if let Some(json) = json {
        std::fs::write(json, serde_json::to_vec_pretty(&runs)?)
            .with_context(|| format!("writing {}", json.display()))?;
    }
    // (scheme, mode, count, capacity, label) → runs, in a fixed order.
    type Key = (String, u8, u32, usize, String);
    let mut groups: BTreeMap<Key, Vec<&IdRunResult>> = BTreeMap::new();
    let mode_order = |m: IdMode| match m {
        IdMode::Next => 0,
        IdMode::Cached => 1,
        IdMode::Generator => 2,
        IdMode::GeneratorUnbounded => 3,
        IdMode::UuidCrate => 4,
    };
    for r in &runs {
        let key = (r.scheme.clone(), mode_order(r.mode), r.count, r.capacity, r.label.clone());
        groups.entry(key).or_default().push(r);
    }
    let med = |g: &[&IdRunResult]| median_of(g, |r| r.ids_per_s);
    // The local ceiling of a scheme: its Generator loop under the served bound.
    let ceiling_of = |scheme: &str| {
        groups
            .iter()
            .find(|((s, m, ..), _)| s == scheme && *m == mode_order(IdMode::Generator))
            .map(|(_, g)| med(g))
    };
    let uuid_crate = groups.iter().find(|((s, ..), _)| s == "uuid-crate").map(|(_, g)| med(g));
    let schemes: Vec<String> = {
        let mut s: Vec<String> = Vec::new();
        for r in runs.iter().filter(|r| r.mode.served()) {
            if !s.contains(&r.scheme) {
                s.push(r.scheme.clone());
            }
        }
        // Each scheme, then its bench-only variants (`NAME-ahead`).
        s.sort_by_key(|name| (name.replace("-ahead", ""), name.clone()));
        s
    };

    println!("### Served: one client process, the SDK against the local cluster");
    println!();
    println!(
        "| scheme | path | runs | ids/s (median) | ids per s of issued time | calls/s | p50 µs | p99 µs | CPU ns/id client | CPU ns/id servers | worker ids | ÷ ceiling | lead at end ms (max during) | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for scheme in &schemes {
        for ((s, m, _, _, label), g) in &groups {
            if s != scheme || *m > 1 {
                continue;
            }
            let ids_per_s = med(g);
            let ratio = ceiling_of(s).map_or("-".into(), |c| ratio_text(ids_per_s / c));
            let workers = g.iter().map(|r| r.worker_ids.len()).max().unwrap_or(0);
            println!(
                "| {s} | {label} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {workers} | {ratio} | {} ({}) | {} |",
                g.len(),
                ids_per_s,
                median_of(g, |r| r.ids_per_issued_s),
                median_of(g, |r| r.calls_per_s),
                median_of(g, |r| r.p50_ns as f64) / 1000.0,
                median_of(g, |r| r.p99_ns as f64) / 1000.0,
                median_of(g, |r| r.client_cpu_ns_per_id),
                median_of(g, |r| r.server_cpu_ns_per_id),
                lead_text(median_of(g, |r| r.lead_end_ms as f64) as i64),
                lead_text(g.iter().map(|r| r.lead_max_ms).max().unwrap_or(i64::MIN)),
                g.iter().map(|r| r.errors).sum::<u64>(),
            );
        }
    }
    println!();
    println!("### Local ceilings: in this process, one thread, no coordination, no RPC");
    println!();
    println!(
        "| scheme | loop | max_ahead_ms | runs | ids/s (median) | p50 µs | p99 µs | CPU ns/id | lead at end ms (max during) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for ((s, m, _, _, label), g) in &groups {
        if *m < 2 {
            continue;
        }
        let ahead = match g[0].max_ahead_ms {
            u64::MAX => "unbounded".to_string(),
            0 => "-".to_string(),
            ms => ms.to_string(),
        };
        println!(
            "| {s} | {label} | {ahead} | {} | {:.0} | {:.3} | {:.3} | {:.1} | {} ({}) |",
            g.len(),
            med(g),
            median_of(g, |r| r.p50_ns as f64) / 1000.0,
            median_of(g, |r| r.p99_ns as f64) / 1000.0,
            median_of(g, |r| r.client_cpu_ns_per_id),
            lead_text(median_of(g, |r| r.lead_end_ms as f64) as i64),
            lead_text(g.iter().map(|r| r.lead_max_ms).max().unwrap_or(i64::MIN)),
        );
    }

    // ---- targets ----
    println!();
    println!("### Targets (issue 10)");
    println!();
    let met = |ok: bool| if ok { "**met**" } else { "**missed**" };
    // The best served path of a scheme by the median of `metric`: (label, that median,
    // workers, runs).
    let best_by = |scheme: &str, mode: Option<IdMode>, metric: fn(&IdRunResult) -> f64| {
        groups
            .iter()
            .filter(|((s, m, ..), _)| {
                s == scheme && *m <= 1 && mode.is_none_or(|mode| *m == mode_order(mode))
            })
            .map(|((_, _, _, _, label), g)| {
                let workers = g.iter().map(|r| r.worker_ids.len()).max().unwrap_or(0);
                (label.clone(), median_of(g, metric), workers, g.clone())
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    };
    let best = |scheme: &str, mode: Option<IdMode>| best_by(scheme, mode, |r| r.ids_per_s);
    for scheme in schemes.iter().filter(|s| {
        runs.iter().any(|r| {
            &r.scheme == *s
                && r.mode == IdMode::Cached
                && (r.layout == "uuidv7" || r.layout == "uid-generator")
        })
    }) {
        if let Some((label, v, _, g)) = best(scheme, Some(IdMode::Cached)) {
            let r = g[0];
            let lead = median_of(&g, |r| r.lead_end_ms as f64) as i64;
            let lead = if lead > 0 {
                format!(
                    "issued times {lead} ms ({:.1} min) ahead of the wall clock at the end",
                    lead as f64 / 60_000.0
                )
            } else {
                format!(
                    "issued times not ahead of the wall clock at the end ({} ms: cached ids were \
                     issued before they were handed out)",
                    lead_text(lead)
                )
            };
            println!(
                "- `{scheme}` through the SDK's cached path ≥ 6 M ids/s from one client process: {} — {:.2} M ids/s ({label}, median of {} runs); {lead} (bound `ids.max_ahead_ms` = {} ms).",
                met(v >= 6e6),
                v / 1e6,
                g.len(),
                r.max_ahead_ms
            );
        }
    }
    for scheme in
        schemes.iter().filter(|s| runs.iter().any(|r| &r.scheme == *s && r.layout == "snowflake"))
    {
        // Judged per second of issued time: a short run that borrows future time units (up to
        // ids.max_ahead_ms) would otherwise exceed the layout's own limit.
        if let Some((label, v, workers, g)) = best_by(scheme, None, |r| r.ids_per_issued_s) {
            let handed = med(&g);
            let per = g[0].layout_ids_per_s_per_worker;
            let want = 0.9 * per * workers as f64;
            let next1000 = groups
                .iter()
                .find(|((s, m, ..), g)| s == scheme && *m == 0 && g[0].count == 1000)
                .map(|(_, g)| {
                    let v = median_of(g, |r| r.ids_per_issued_s);
                    format!(
                        "; NextIds ×1000: {:.2} M = {:.2}×",
                        v / 1e6,
                        v / (per * workers.max(1) as f64)
                    )
                })
                .unwrap_or_default();
            println!(
                "- `{scheme}` ≥ 0.9 × 4,096 per ms × {workers} worker ids in use = {:.2} M ids/s: {} — best path {label}: {:.2} M ids per second of issued time ({:.2}× the layout limit of the worker ids in use; {:.2} M ids/s handed out over the run, the rest borrowed ahead of the clock){next1000}.",
                want / 1e6,
                met(v >= want),
                v / 1e6,
                v / (per * workers.max(1) as f64),
                handed / 1e6,
            );
        }
    }
    for scheme in &schemes {
        let Some((label, v, workers, g)) = best(scheme, None) else { continue };
        let layout = g[0].layout.clone();
        let mut ceilings = Vec::new();
        if let Some(c) = ceiling_of(scheme) {
            ceilings.push(("its Generator loop (one worker id, same bound)", c));
        }
        if layout == "uuidv7" {
            if let Some(c) = uuid_crate {
                ceilings.push(("the uuid crate's now_v7", c));
            }
        }
        for (what, c) in ceilings {
            // What the layout allows the served path over a run: every worker id in use at
            // its own limit, plus what it may borrow (max_ahead) once, spread over the run.
            let r = g[0];
            let allowance =
                (r.seconds + r.max_ahead_ms as f64 / 1000.0) / r.seconds.max(f64::MIN_POSITIVE);
            let cap = r.layout_ids_per_s_per_worker * workers as f64 * allowance;
            let verdict = if 0.5 * c > cap {
                format!(
                    "not applicable: the layout caps {workers} worker ids at {:.2} M ids/s over a {:.0} s run (with {} ms of borrowing), below 0.5× = {:.2} M",
                    cap / 1e6,
                    r.seconds,
                    r.max_ahead_ms,
                    0.5 * c / 1e6
                )
            } else {
                met(v >= 0.5 * c).to_string()
            };
            let cached = best(scheme, Some(IdMode::Cached))
                .map(|(l, cv, ..)| format!("; cached path ({l}): {}", ratio_text(cv / c)))
                .unwrap_or_default();
            println!(
                "- `{scheme}` ≥ 0.5× the local ceiling ({what}, {:.2} M ids/s): {verdict} — best path {label}: {:.2} M ids/s = {}{cached}.",
                c / 1e6,
                v / 1e6,
                ratio_text(v / c)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_core::idscheme::{Fields, LayoutSpec};

    const NOW_MS: u64 = 1_796_000_000_000;

    fn uid_generator() -> Layout {
        let spec = LayoutSpec {
            epoch_ms: Some(1_735_689_600_000),
            time_bits: Some(30),
            worker_bits: Some(20),
            seq_bits: Some(13),
            ..LayoutSpec::of(Scheme::UidGenerator)
        };
        spec.load(NOW_MS).unwrap()
    }

    #[test]
    fn borrowed_time_counts_as_issued_time() {
        // 10 s that ran the issued times from 25 ms behind to 1987 ms ahead span 12.012 s.
        assert!((issued_seconds(10.0, -25, 1987) - 12.012).abs() < 1e-9);
        // Catching up with the clock (a lead left by an earlier run) never shortens the run.
        assert_eq!(issued_seconds(10.0, 1937, -4), 10.0);
        assert_eq!(issued_seconds(10.0, i64::MIN, 1987), 10.0);
        assert_eq!(issued_seconds(10.0, -25, i64::MIN), 10.0);
    }

    #[test]
    fn lead_is_the_start_of_the_ids_unit_minus_the_clock() {
        let layout = LayoutSpec::of(Scheme::Snowflake).load(NOW_MS).unwrap();
        let time = layout.units_at(NOW_MS);
        let fields = Fields { time, worker: 3, sequence: 9, ..Fields::default() };
        let id = layout.encode(&fields).unwrap();
        assert_eq!(lead_of(&layout, id, NOW_MS - 250), Some((250, Some(3))));
        assert_eq!(lead_of(&layout, id, NOW_MS + 40), Some((-40, Some(3))));
        assert_eq!(per_worker_per_s(&layout), 4_096_000.0);
        assert_eq!(per_worker_per_s(&uid_generator()), 8_192.0);
    }

    /// The bounded ceiling follows the served rules: uid-generator's one worker id issues its
    /// 8,192 per second plus at most `max_ahead` borrowed seconds, then waits for the clock.
    #[test]
    fn the_generator_ceiling_borrows_only_up_to_its_bound() {
        let done = AtomicU64::new(0);
        let (out, lead_end) = generator_loop(&uid_generator(), 2_000, 1, 16, &done).unwrap();
        assert!(out.ids >= 3 * 8_192, "{} ids", out.ids);
        assert!(out.ids <= 5 * 8_192, "{} ids", out.ids);
        assert!(out.lead_max_ms <= 2_000, "{}", out.lead_max_ms);
        assert!(lead_end <= 2_000, "{lead_end}");
    }
}
