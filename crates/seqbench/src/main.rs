//! `seqbench`: one workload, many targets, side by side, each peer driven at its best.
//!
//! Every target gets the same client concurrency, the same uid distribution (uniform or Zipf
//! over N uids) and the same duration; latencies go into an HdrHistogram. Connections are made
//! before the timed window. Results are JSON (one file per run): throughput, latency
//! percentiles, and CPU time per call of this client and of the server processes
//! (`--server-pids`, and `--server-trees` with every descendant, from /proc). `seqbench report`
//! turns a directory of them into a markdown table of medians, ratios to the peer at its best
//! and CPU per call; `seqbench targets` checks issue 13's targets. `scripts/bench.sh` starts the
//! peers and alternates the targets.
//!
//! Targets:
//! - `floor`: one `Next` RPC per call on a bare `SeqServiceClient` (one shared channel, the
//!   SDK's message limits, no SDK) to the floor server: the cost of one RPC per call on
//!   seqsvr's RPC stack, the honest floor of "seqsvr, no coalescing". The floor server
//!   (`seqbench floor-serve`, module `floor`) is `SeqService` over the same TLS, connection
//!   limits and role check as an AllocSvr, whose handlers only bump an in-memory counter; its
//!   route table sends every uid to itself. `--url` is its address; without `--url` a
//!   plaintext one runs inside this process (its CPU then counts as the client's).
//! - `floor-coalesced`: the SDK (`SeqClient`, coalescing exactly as the `seqsvr` target) against
//!   the floor server: `seqsvr ÷ floor, coalesced` is what the allocation tier costs.
//! - `floor-batch`: the SDK's `next_batch` with `--batch` uids per call against the floor
//!   server, as `seqsvr-batch` calls the cluster.
//! - `seqsvr`, `seqsvr-batch`: a running cluster through the client SDK (one uid per call,
//!   coalesced unless `--no-coalesce`, or `--batch` uids per call).
//! - `redis`: `INCR seq:{uid}`. `--redis-conn shared` (the default, Redis at its best): every
//!   caller shares ONE `MultiplexedConnection`, on which redis-rs pipelines concurrent
//!   commands. `--redis-conn per-caller`: a `MultiplexedConnection` per caller (no pipelining
//!   across callers).
//! - `postgres`: `UPDATE counters SET seq = seq + 1 WHERE uid = $1 RETURNING seq` (prepared,
//!   autocommit, synchronous commit as the server is configured) through a fixed pool of
//!   `--pg-pool` connections shared by all callers (tokio-postgres pipelines the queries of
//!   concurrent callers on one connection); `--pg-pool 0`: a connection per caller.
//! - `etcd`: a per-uid counter via a compare-and-swap `Txn` on the key's mod_revision. Its best
//!   client settings: one HTTP/2 channel per member shared by every caller (callers spread over
//!   the members), a view of (value, mod_revision) per uid shared by all callers and warmed
//!   from one paged range read before the timed window, so an uncontended increment is one
//!   round trip; a lost CAS retries at once with the value the failed `Txn` returned.
//!
//! `seqbench ids` (module `ids`) measures the id service instead: `NextIds` and the SDK's
//! cached path per scheme, against in-process ceilings; `seqbench ids-report` tables them.

mod cpu;
mod floor;
mod http;
mod ids;
mod report;
mod sdks;
mod target;

use cpu::cpu_us;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use target::{RedisConn, Target, TargetKind};

#[derive(Parser)]
#[command(name = "seqbench", version, about = "Benchmark sequence allocators side by side")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Debug, clap::Args)]
struct Workload {
    /// floor | floor-coalesced | floor-batch | seqsvr | seqsvr-batch | seqsvr-plain |
    /// seqsvr-http | redis | postgres | etcd
    #[arg(long)]
    target: TargetKind,
    /// A label for the report (e.g. "redis everysec").
    #[arg(long)]
    label: Option<String>,
    /// seqsvr: the cluster config (seeds = the AllocSvrs it lists). floor* with --url: the
    /// cluster file the floor server serves with (its `[tls]`).
    #[arg(long, default_value = "data/local/cluster.toml")]
    config: PathBuf,
    /// seqsvr or the floor over mutual TLS (the cluster file has `[tls]`): this client's
    /// certificate.
    #[arg(long, env = "SEQSVR_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert.
    #[arg(long, env = "SEQSVR_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// redis: redis://127.0.0.1:6390/ ; postgres: a connection string; etcd: host:port,...;
    /// floor*: the floor server's host:port (none: an in-process floor, plaintext).
    #[arg(long, default_value = "")]
    url: String,
    /// redis: shared = one auto-pipelining connection for all callers (Redis at its best);
    /// per-caller = a connection per caller.
    #[arg(long, value_enum, default_value_t = RedisConn::Shared)]
    redis_conn: RedisConn,
    /// postgres: connections in the pool shared by all callers (0: one per caller; a pool
    /// larger than --concurrency has idle connections). See PG_POOL_DEFAULT for the default.
    #[arg(long, default_value_t = PG_POOL_DEFAULT)]
    pg_pool: usize,
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Run for this long (the upper bound when `--calls` is given).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Stop after this many calls in all (0 = run for `--seconds`).
    #[arg(long, default_value_t = 0)]
    calls: u64,
    /// Uids drawn from [0, uids).
    #[arg(long, default_value_t = 100_000)]
    uids: u64,
    /// Each uid drawn is multiplied by this: `--uids 100000 --uid-stride 21475` spreads the
    /// uids evenly over set 0 of the local cluster ([0, 2147500000)), so half of them are owned
    /// by each of its AllocSvrs (whose sections are contiguous runs); 1 keeps them in
    /// [0, uids).
    #[arg(long, default_value_t = 1)]
    uid_stride: u64,
    /// seqsvr-http: h1 = HTTP/1.1, one keep-alive connection per caller; h2 = HTTP/2,
    /// `--http-conns` connections shared by every caller.
    #[arg(long, value_enum, default_value_t = http::HttpMode::H2)]
    http: http::HttpMode,
    /// seqsvr-http with --http h2: connections shared by the callers (caller c uses c % N).
    #[arg(long, default_value_t = 1)]
    http_conns: usize,
    /// uniform | zipf
    #[arg(long, default_value = "uniform")]
    dist: String,
    /// Uids per call (seqsvr-batch, floor-batch).
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Where the result JSON goes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the highest value each uid got (for the crash check).
    #[arg(long)]
    last_values: Option<PathBuf>,
    /// seqsvr: send each call on its own instead of letting the SDK coalesce concurrent calls.
    #[arg(long)]
    no_coalesce: bool,
    /// seqsvr and the floors: send each coalesced batch as a `NextBatch` RPC instead of a
    /// message on the SDK's `NextStream` stream (how the SDK ran before it had streams).
    #[arg(long)]
    no_stream: bool,
    /// seqsvr: coalesced RPCs in flight per AllocSvr.
    #[arg(long, default_value_t = 2)]
    max_in_flight: usize,
    /// Paced load: this many calls per second in all (0 = as fast as possible). Latency counts
    /// from when a call was due, not when it was sent, so a stall is not hidden by the callers
    /// waiting for it (coordinated omission).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// PIDs of the server processes (every StoreSvr and AllocSvr, a Redis, ...) whose CPU time
    /// (user + system, from /proc) during the run is divided by the calls served.
    #[arg(long, value_delimiter = ',')]
    server_pids: Vec<u32>,
    /// Like --server-pids, with every descendant each has once this client's connections are
    /// made (PostgreSQL's postmaster: its backends, WAL writer, checkpointer...).
    #[arg(long, value_delimiter = ',')]
    server_trees: Vec<u32>,
}

/// `--pg-pool`'s default: the best of 1, 2, 4, 8, 16, 32 and 64 connections measured by hand
/// on this 2-core machine (64 callers, uniform, `synchronous_commit = on`; the table is in
/// docs/benchmarks/README.md): 1 connection ~370 calls/s, 8 ~1.9 k, 16 ~3.6 k, 32 ~5.2 k,
/// 64 ~7.3 k. The pool is not CPU-bound, so "cores × 2" is the wrong rule here: every UPDATE
/// commits on its own and waits for its WAL flush (~2.6 ms on this disk), and a connection runs
/// its queries one after another even when tokio-postgres pipelines them, so throughput is
/// connections ÷ flush time, bounded by group commit; more concurrent committers share each
/// flush. The best pool for 64 callers is one connection per caller.
const PG_POOL_DEFAULT: usize = 64;

#[derive(Subcommand)]
enum Command {
    /// Run one workload against one target.
    Run(Workload),
    /// After a crash and restart of the target: one `next` per uid in `--last-values`; counts
    /// uids whose new value is not above the last one handed out before the crash.
    CrashCheck {
        #[command(flatten)]
        workload: Workload,
    },
    /// Allocate once for each of `--uids` consecutive uids from `--from` (batches of
    /// `--batch`), and report the AllocSvrs' resident memory growth per uid touched.
    Touch {
        #[command(flatten)]
        workload: Workload,
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// PIDs of the AllocSvrs whose RSS to measure.
        #[arg(long, value_delimiter = ',')]
        pids: Vec<u32>,
    },
    /// Prepare a PostgreSQL database: the counters table with `--uids` rows.
    PgSetup {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 100_000)]
        uids: u64,
    },
    /// Ids (issue 10): one mode of one scheme — `NextIds`, the SDK's cached path, or a local
    /// in-process ceiling — with ids/s, latency per call, CPU per id and the issued times' lead.
    Ids(ids::IdsArgs),
    /// Summarize `seqbench ids` result JSONs as markdown: served paths, ceilings, targets.
    IdsReport {
        results: Vec<PathBuf>,
        /// Also write every run into this one JSON file (an array).
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Summarize result JSONs (files or directories) as markdown: medians over runs, each
    /// target's values/s ÷ `--against`'s, CPU µs per call (client, servers, total).
    Report {
        results: Vec<PathBuf>,
        /// The label every ratio is computed against (the peer at its best).
        #[arg(long, default_value = report::labels::REDIS_BEST)]
        against: String,
        /// Paced runs: the rate reached, the percentiles and p99.9 ÷ `--against`'s.
        #[arg(long)]
        latency: bool,
    },
    /// Issue 31's table from the result files of `scripts/bench.sh --any-client-only` (the
    /// labels of `report::labels::any`): calls/s medians, ÷ the one-RPC-per-call floor, the
    /// share forwarded, p99.9, CPU per call, Meituan Leaf's published figure beside them; then
    /// the targets (HTTP/JSON ≥ 50,000 calls/s, plain gRPC ≥ 0.8× the floor, the SDK
    /// unchanged), MET or MISSED.
    AnyClientReport { results: Vec<PathBuf> },
    /// Issue 13's targets from the result files of one `scripts/bench.sh` run, as a markdown
    /// table (measured median, target, MET or MISSED). Runs are found by the labels bench.sh
    /// gives them: "seqsvr", "redis everysec, shared conn", "floor, coalesced",
    /// "seqsvr batch 1000", "floor batch 1000", "seqsvr step 100", "seqsvr step 100000"; the
    /// pinned runs by target (seqsvr, floor-coalesced).
    Targets {
        /// NAME=DIR: the throughput runs of one uid distribution (repeat: uniform=…, zipf=…).
        #[arg(long = "dist")]
        dists: Vec<String>,
        /// The paced runs with the client and the servers pinned to separate CPUs.
        #[arg(long)]
        pinned: Option<PathBuf>,
        /// The step 100 / 100,000 runs.
        #[arg(long)]
        step: Option<PathBuf>,
        /// `seqbench touch`'s output.
        #[arg(long)]
        touch: Option<PathBuf>,
        /// `seqbench crash-check`'s output lines.
        #[arg(long)]
        crash: Option<PathBuf>,
    },
    /// Serve the floor: seqsvr's `SeqService` (same TLS, limits and role check as an AllocSvr)
    /// over in-memory counters, with a route table that sends every uid to itself.
    FloorServe(floor::FloorServeArgs),
    /// Issue 32: the SDKs for other languages against the Rust SDK and against Redis driven
    /// from the same language (driver programs run in rotated rounds; servers' CPU from /proc).
    Sdks(sdks::SdksArgs),
    /// The markdown of a `seqbench sdks` run again, from its `sdks.json`.
    SdksReport { json: PathBuf },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct RunResult {
    label: String,
    target: String,
    concurrency: usize,
    /// The paced rate asked for (0 = as fast as possible).
    #[serde(default)]
    rate: f64,
    /// seqsvr: batches the SDK sent for coalesced calls, as stream messages or RPCs (calls ÷
    /// this = calls per batch).
    #[serde(default)]
    coalesced_rpcs: u64,
    seconds: f64,
    dist: String,
    calls: u64,
    values: u64,
    errors: u64,
    calls_per_s: f64,
    values_per_s: f64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    /// Latency percentiles for a plot: (percentile, microseconds).
    curve: Vec<(f64, u64)>,
    /// CPU time (user + system) of this client process per call served, in µs.
    #[serde(default)]
    client_cpu_us_per_call: f64,
    /// CPU time of the `--server-pids` processes per call served, in µs (0 without them).
    #[serde(default)]
    server_cpu_us_per_call: f64,
    /// How many server processes were counted (0: the servers' CPU was not counted).
    #[serde(default)]
    server_processes: usize,
    /// `--uid-stride` (runs from before it had one: 1).
    #[serde(default = "one")]
    uid_stride: u64,
    /// seqsvr-plain, seqsvr-http: calls sent (answered or not) for a uid the one address does
    /// not own, so forwarded to the owner (0 for the other targets).
    #[serde(default)]
    forwarded_calls: u64,
    /// CPU the rest of the machine used during the run, in cores (busy time of all CPUs from
    /// /proc/stat, minus this client's and the counted servers', ÷ the run's length): other
    /// work sharing the cores, the noise (the uncounted servers of a run count here too). None
    /// in runs of a seqbench from before it was recorded.
    #[serde(default)]
    others_cpu_cores: Option<f64>,
}

fn one() -> u64 {
    1
}

impl RunResult {
    /// The share of the calls sent (answered or not) that were forwarded (0 when none were).
    fn forwarded_share(&self) -> f64 {
        self.forwarded_calls as f64 / (self.calls + self.errors).max(1) as f64
    }
}

fn uid_source(w: &Workload, seed: u64) -> anyhow::Result<impl FnMut() -> u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let zipf = match w.dist.as_str() {
        "uniform" => None,
        "zipf" => Some(Zipf::new(w.uids as f64, 1.0).map_err(|e| anyhow::anyhow!("zipf: {e}"))?),
        other => anyhow::bail!("unknown --dist {other:?}: uniform or zipf"),
    };
    let (n, stride) = (w.uids, w.uid_stride);
    anyhow::ensure!(n > 0 && stride > 0, "--uids and --uid-stride must be at least 1");
    anyhow::ensure!((n - 1).checked_mul(stride).is_some(), "--uids × --uid-stride passes 2^64");
    Ok(move || {
        stride
            * match &zipf {
                Some(z) => (z.sample(&mut rng) as u64).saturating_sub(1) % n,
                None => rng.random_range(0..n),
            }
    })
}

async fn run(w: Workload) -> anyhow::Result<()> {
    anyhow::ensure!(w.rate >= 0.0 && w.rate.is_finite(), "--rate: calls per second, >= 0");
    anyhow::ensure!(w.concurrency > 0, "--concurrency must be at least 1");
    let target = Arc::new(Target::connect(&w).await?);
    let batch = if w.target.batched() { w.batch } else { 1 };
    anyhow::ensure!(batch > 0, "--batch must be at least 1");
    let keep_last = w.last_values.is_some();
    // Every connection first (PostgreSQL starts a backend per connection), then the server
    // processes to count, then the clock: connecting is not part of the timed window.
    let mut handles = Vec::with_capacity(w.concurrency);
    for c in 0..w.concurrency {
        handles.push(target.handle(c).await?);
    }
    let servers = cpu::ServerProcesses::resolve(&w.server_pids, &w.server_trees)?;
    let done_calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started_calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // The window's edges for `seqbench sdks` (sdks.rs), which reads the servers' CPU at each.
    println!("{}", sdks::WINDOW_START);
    let cpu_before = (cpu::cpu_us("self")?, servers.cpu_us()?, cpu::machine_busy_us()?);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(w.seconds);
    // Paced: a thread hands out due times; the k-th call is due at started + k / rate and goes
    // to client k % concurrency.
    let mut pacer_queues = (w.rate > 0.0).then(|| pace(w.rate, w.concurrency, started, deadline));
    let progress = tokio::spawn(progress(done_calls.clone(), w.seconds, label_of(&w)));
    let mut tasks = Vec::new();
    for (c, mut handle) in handles.into_iter().enumerate() {
        let done_calls = done_calls.clone();
        let mut next_uid = uid_source(&w, c as u64 + 1)?;
        let mut due_times = pacer_queues.as_mut().and_then(|q| q.pop());
        let (started_calls, max_calls) = (started_calls.clone(), w.calls);
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        tasks.push(tokio::spawn(async move {
            let (mut calls, mut values, mut errors) = (0u64, 0u64, 0u64);
            let mut last: BTreeMap<u64, u64> = BTreeMap::new();
            let mut first_error: Option<String> = None;
            loop {
                let t = match &mut due_times {
                    Some(queue) => match queue.recv().await {
                        Some(due) => due,
                        None => break,
                    },
                    None if Instant::now() < deadline => Instant::now(),
                    None => break,
                };
                if max_calls > 0 && started_calls.fetch_add(1, Ordering::Relaxed) >= max_calls {
                    break;
                }
                let uids: Vec<u64> = (0..batch).map(|_| next_uid()).collect();
                match handle.next(&uids).await {
                    Ok(got) => {
                        let us = t.elapsed().as_micros() as u64;
                        let _ = hist.record(us.max(1));
                        calls += 1;
                        done_calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        values += got.len() as u64;
                        if keep_last {
                            for (u, v) in uids.iter().zip(got) {
                                let e = last.entry(*u).or_insert(0);
                                *e = (*e).max(v);
                            }
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
            }
            (hist, calls, values, errors, last, first_error, handle.forwarded_calls())
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut calls, mut values, mut errors, mut forwarded_calls) = (0, 0, 0, 0);
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    let mut first_error = None;
    for t in tasks {
        let (h, c, v, e, l, err, f) = t.await.context("a caller task failed")?;
        hist.add(&h)?;
        forwarded_calls += f;
        calls += c;
        values += v;
        errors += e;
        first_error = first_error.or(err);
        for (u, x) in l {
            let e = last.entry(u).or_insert(0);
            *e = (*e).max(x);
        }
    }
    if calls == 0 {
        anyhow::bail!(
            "{}: no call succeeded ({errors} failed; the first: {})",
            label_of(&w),
            first_error.as_deref().unwrap_or("none started")
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after =
        (cpu::cpu_us("self")?, servers.cpu_us().context("after the run")?, cpu::machine_busy_us()?);
    println!("{}", sdks::WINDOW_END);
    // What the rest of the machine used meanwhile: all CPUs' busy time minus this client's and
    // the counted servers'.
    let ours = cpu_after.0.saturating_sub(cpu_before.0) + cpu_after.1.saturating_sub(cpu_before.1);
    let others_us = cpu_after.2.saturating_sub(cpu_before.2).saturating_sub(ours);
    let per_call =
        |before: u64, after: u64| after.saturating_sub(before) as f64 / calls.max(1) as f64;
    progress.abort();
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!();
    }
    if let Some(e) = &first_error {
        eprintln!("{}: {errors} calls failed; the first: {e}", label_of(&w));
    }
    let curve = [50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99]
        .iter()
        .map(|&p| (p, hist.value_at_quantile(p / 100.0)))
        .collect();
    let result = RunResult {
        label: label_of(&w),
        target: w.target.name().to_string(),
        concurrency: w.concurrency,
        rate: w.rate,
        coalesced_rpcs: target.coalesced_rpcs(),
        seconds,
        dist: w.dist.clone(),
        calls,
        values,
        errors,
        calls_per_s: calls as f64 / seconds,
        values_per_s: values as f64 / seconds,
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        p999_us: hist.value_at_quantile(0.999),
        max_us: hist.max(),
        curve,
        client_cpu_us_per_call: per_call(cpu_before.0, cpu_after.0),
        server_cpu_us_per_call: per_call(cpu_before.1, cpu_after.1),
        server_processes: servers.len(),
        uid_stride: w.uid_stride,
        forwarded_calls,
        others_cpu_cores: Some(others_us as f64 / 1e6 / seconds),
    };
    println!(
        "{:<22} {:>10.0} calls/s {:>12.0} values/s  p50 {:>6} us  p99 {:>6} us  p99.9 {:>6} us  errors {}  cpu/call client {:.2} us servers {:.2} us ({} processes)",
        result.label, result.calls_per_s, result.values_per_s, result.p50_us, result.p99_us, result.p999_us, errors,
        result.client_cpu_us_per_call, result.server_cpu_us_per_call, result.server_processes
    );
    let others = others_us as f64 / 1e6 / seconds;
    println!("{:<22} other processes used {others:.2} cores meanwhile", "");
    if forwarded_calls > 0 {
        println!("{:<22} forwarded {:.1}% of the calls", "", result.forwarded_share() * 100.0);
    }
    if let Some(out) = &w.out {
        std::fs::write(out, serde_json::to_vec_pretty(&result)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(path) = &w.last_values {
        std::fs::write(path, serde_json::to_vec(&last)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Starts the pacer thread: it wakes every ~100 µs (thread sleeps are precise to tens of µs,
/// tokio's timers only to a millisecond, which would add up to 1 ms to every paced latency) and
/// releases every call due by then. One queue per client, popped from the back.
fn pace(
    rate: f64,
    clients: usize,
    started: Instant,
    deadline: Instant,
) -> Vec<tokio::sync::mpsc::UnboundedReceiver<Instant>> {
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..clients).map(|_| tokio::sync::mpsc::unbounded_channel()).unzip();
    let period = Duration::from_secs_f64(1.0 / rate);
    std::thread::spawn(move || {
        let mut k: u32 = 0;
        loop {
            let now = Instant::now();
            let mut due = started + period * k;
            while due <= now && due < deadline {
                let _ = senders[k as usize % senders.len()].send(due);
                k += 1;
                due = started + period * k;
            }
            if due >= deadline {
                return; // dropping the senders ends the clients
            }
            std::thread::sleep((due - now).max(Duration::from_micros(100)));
        }
    });
    let mut receivers = receivers;
    receivers.reverse();
    receivers
}

fn label_of(w: &Workload) -> String {
    w.label.clone().unwrap_or_else(|| w.target.name().to_string())
}

/// A progress bar on stderr, redrawn every second on a terminal, a line every 5 s otherwise.
async fn progress(calls: Arc<std::sync::atomic::AtomicU64>, seconds: u64, label: String) {
    use std::io::IsTerminal;
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let elapsed = started.elapsed().as_secs();
        let n = calls.load(std::sync::atomic::Ordering::Relaxed);
        let line = format!(
            "{label}: {} {elapsed:>3}/{seconds} s, {n} calls ({:.0}/s)",
            bar(elapsed, seconds, 30),
            n as f64 / elapsed.max(1) as f64
        );
        if tty {
            eprint!("\r{line}   ");
        } else if elapsed.is_multiple_of(5) {
            eprintln!("{line}");
        }
    }
}

/// `[=====>      ]`, `width` characters between the brackets.
fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = (done.min(total) as usize * width) / total.max(1) as usize;
    let head = if filled < width { ">" } else { "" };
    let rest = width - filled - head.len();
    format!("[{}{head}{}]", "=".repeat(filled), " ".repeat(rest))
}

async fn crash_check(w: Workload) -> anyhow::Result<()> {
    let path = w.last_values.clone().context("--last-values is required")?;
    let last: BTreeMap<u64, u64> = serde_json::from_slice(&std::fs::read(&path)?)?;
    let target = Target::connect(&w).await?;
    let mut handle = target.handle(0).await?;
    let mut regressed = 0u64;
    let mut checked = 0u64;
    for (&uid, &before) in &last {
        // The restarted peer may need a moment: retry a failing call a few times.
        let mut value = None;
        for _ in 0..50 {
            match handle.next(&[uid]).await {
                Ok(v) => {
                    value = Some(v[0]);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let v = value.with_context(|| format!("uid {uid}: no answer after the restart"))?;
        checked += 1;
        if v <= before {
            regressed += 1;
        }
    }
    println!(
        "{{\"label\": {:?}, \"uids_checked\": {checked}, \"regressed_uids\": {regressed}}}",
        w.label.clone().unwrap_or_else(|| w.target.name().to_string())
    );
    Ok(())
}

/// Resident memory of a process, from /proc.
fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid} is not running"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kb * 1024)
}

async fn touch(w: Workload, from: u64, pids: &[u32]) -> anyhow::Result<()> {
    anyhow::ensure!(!pids.is_empty(), "--pids: the AllocSvrs to measure");
    anyhow::ensure!(w.batch > 0, "--batch must be at least 1");
    let before: u64 = pids.iter().map(|&p| rss_bytes(p)).sum::<anyhow::Result<u64>>()?;
    let target = Arc::new(Target::connect(&w).await?);
    let end = from + w.uids;
    let next = Arc::new(std::sync::atomic::AtomicU64::new(from));
    let mut tasks = Vec::new();
    for c in 0..w.concurrency {
        let (next, mut handle) = (next.clone(), target.handle(c).await?);
        let batch = w.batch as u64;
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(batch, std::sync::atomic::Ordering::Relaxed);
                if first >= end {
                    return anyhow::Ok(());
                }
                let uids: Vec<u64> = (first..(first + batch).min(end)).collect();
                handle.next(&uids).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let after: u64 = pids.iter().map(|&p| rss_bytes(p)).sum::<anyhow::Result<u64>>()?;
    let growth = after.saturating_sub(before);
    println!(
        "{{\"uids_touched\": {}, \"rss_before\": {before}, \"rss_after\": {after}, \"bytes_per_uid\": {:.2}}}",
        w.uids,
        growth as f64 / w.uids.max(1) as f64
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run(w) => run(w).await,
        Command::CrashCheck { workload } => crash_check(workload).await,
        Command::Touch { workload, from, pids } => touch(workload, from, &pids).await,
        Command::PgSetup { url, uids } => target::pg_setup(&url, uids).await,
        Command::Report { results, against, latency } => {
            report::report(&results, &against, latency)
        }
        Command::Targets { dists, pinned, step, touch, crash } => {
            report::targets_command(&report::TargetFiles {
                dists: &dists,
                pinned: pinned.as_deref(),
                step: step.as_deref(),
                touch: touch.as_deref(),
                crash: crash.as_deref(),
            })
        }
        Command::AnyClientReport { results } => report::any_client_report(&results),
        Command::FloorServe(args) => floor::serve(args).await,
        Command::Ids(args) => ids::run(args).await,
        Command::IdsReport { results, json } => ids::report(&results, json.as_ref()),
        Command::Sdks(args) => sdks::run(args),
        Command::SdksReport { json } => {
            let file = sdks::load(&json)?;
            print!("{}", sdks::report(&file.runs, &file.machine));
            Ok(())
        }
    }
}

fn median(v: Vec<f64>) -> f64 {
    report::median(v)
}

/// CPU time of `pids` so far, in µs (the id benchmark's servers).
fn servers_cpu_us(pids: &[u32]) -> anyhow::Result<u64> {
    pids.iter().map(|p| cpu_us(&p.to_string())).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(dist: &str) -> Workload {
        Workload {
            target: TargetKind::Floor,
            label: None,
            config: PathBuf::new(),
            tls_cert: None,
            tls_key: None,
            url: String::new(),
            redis_conn: RedisConn::Shared,
            pg_pool: PG_POOL_DEFAULT,
            concurrency: 1,
            seconds: 1,
            calls: 0,
            uids: 1000,
            uid_stride: 1,
            http: http::HttpMode::H2,
            http_conns: 1,
            dist: dist.into(),
            batch: 1,
            out: None,
            last_values: None,
            no_coalesce: false,
            no_stream: false,
            max_in_flight: 2,
            rate: 0.0,
            server_pids: Vec::new(),
            server_trees: Vec::new(),
        }
    }

    #[test]
    fn progress_bar_fills_with_time() {
        assert_eq!(bar(0, 10, 10), "[>         ]");
        assert_eq!(bar(5, 10, 10), "[=====>    ]");
        assert_eq!(bar(10, 10, 10), "[==========]");
        assert_eq!(bar(12, 10, 10), "[==========]");
    }

    #[tokio::test]
    async fn the_pacer_hands_out_every_due_time_once_round_robin() {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(50);
        let mut queues = pace(1000.0, 4, started, deadline);
        queues.reverse(); // popped from the back: client 0 is the last
        let mut all = Vec::new();
        for (c, q) in queues.iter_mut().enumerate() {
            let mut mine = Vec::new();
            while let Some(due) = q.recv().await {
                mine.push(due);
            }
            for (k, due) in mine.iter().enumerate() {
                assert_eq!(*due, started + Duration::from_millis((k * 4 + c) as u64));
            }
            all.extend(mine);
        }
        assert_eq!(all.len(), 50, "one call per ms for 50 ms");
    }

    #[test]
    fn uid_distributions_stay_in_range_and_zipf_is_skewed() {
        let mut uniform = uid_source(&workload("uniform"), 1).unwrap();
        let mut zipf = uid_source(&workload("zipf"), 1).unwrap();
        let (mut hot_u, mut hot_z) = (0, 0);
        for _ in 0..10_000 {
            let (u, z) = (uniform(), zipf());
            assert!(u < 1000 && z < 1000);
            hot_u += (u < 10) as u32;
            hot_z += (z < 10) as u32;
        }
        assert!(hot_z > 3 * hot_u, "zipf favours low uids: {hot_z} vs {hot_u}");
        assert!(uid_source(&workload("pareto"), 1).is_err());
        let mut w = workload("uniform");
        w.uid_stride = 21_475;
        let mut spread = uid_source(&w, 1).unwrap();
        let (mut low, mut high) = (0, 0);
        for _ in 0..10_000 {
            let u = spread();
            assert!(u.is_multiple_of(21_475) && u < 1000 * 21_475, "{u}");
            low += (u < 500 * 21_475) as u32;
            high += (u >= 500 * 21_475) as u32;
        }
        assert!(low > 4000 && high > 4000, "both halves: {low} {high}");
        w.uid_stride = u64::MAX / 100;
        assert!(uid_source(&w, 1).is_err(), "999 × stride passes 2^64");
    }

    #[tokio::test]
    async fn floor_counts_per_uid() {
        let w = workload("uniform");
        let target = Target::connect(&w).await.unwrap();
        let mut h = target.handle(0).await.unwrap();
        assert_eq!(h.next(&[7]).await.unwrap(), vec![1]);
        assert_eq!(h.next(&[7]).await.unwrap(), vec![2]);
        assert_eq!(h.next(&[8]).await.unwrap(), vec![1]);
    }

    #[tokio::test]
    async fn the_sdk_runs_against_the_floor_coalesced_and_batched() {
        for target in [TargetKind::FloorCoalesced, TargetKind::FloorBatch] {
            let mut w = workload("uniform");
            w.target = target;
            let target = Target::connect(&w).await.unwrap();
            let mut h = target.handle(0).await.unwrap();
            assert_eq!(h.next(&[5]).await.unwrap(), vec![1]);
            assert_eq!(h.next(&[5, 6, 5]).await.unwrap(), vec![2, 1, 3]);
        }
    }
}
