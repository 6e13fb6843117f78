//! `seqbench`: one workload, many targets, side by side.
//!
//! Every target gets the same client concurrency, the same uid distribution (uniform or Zipf
//! over N uids) and the same duration; latencies go into an HdrHistogram. Results are JSON (one
//! file per run) and `seqbench report` turns a directory of them into a markdown table of
//! medians and ratios. `scripts/bench.sh` starts the peers and alternates the targets.
//!
//! Targets:
//! - `floor`: an in-process gRPC server with seqsvr's request/response shape that only bumps an
//!   in-memory counter: the cost of the RPC stack alone.
//! - `seqsvr`, `seqsvr-batch`: a running cluster through the client SDK (one uid per call, or
//!   `--batch` uids per call).
//! - `redis`: `INCR seq:{uid}` on one connection per client.
//! - `postgres`: `UPDATE counters SET seq = seq + 1 WHERE uid = $1 RETURNING seq`.
//! - `etcd`: a per-uid counter via a compare-and-swap `Txn` on the key's mod_revision.
//!
//! `seqbench ids` (module `ids`) measures the id service instead: `NextIds` and the SDK's
//! cached path per scheme, against in-process ceilings; `seqbench ids-report` tables them.

mod floor;
mod ids;
mod target;

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
use target::{Target, TargetKind};

#[derive(Parser)]
#[command(name = "seqbench", version, about = "Benchmark sequence allocators side by side")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Debug, clap::Args)]
struct Workload {
    /// floor | seqsvr | seqsvr-batch | redis | postgres | etcd
    #[arg(long)]
    target: TargetKind,
    /// A label for the report (e.g. "redis everysec").
    #[arg(long)]
    label: Option<String>,
    /// seqsvr: the cluster config (seeds = the AllocSvrs it lists).
    #[arg(long, default_value = "data/local/cluster.toml")]
    config: PathBuf,
    /// seqsvr over mutual TLS (the cluster file has `[tls]`): this client's certificate.
    #[arg(long, env = "SEQSVR_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert.
    #[arg(long, env = "SEQSVR_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// redis: redis://127.0.0.1:6390/ ; postgres: a connection string.
    #[arg(long, default_value = "")]
    url: String,
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
    /// uniform | zipf
    #[arg(long, default_value = "uniform")]
    dist: String,
    /// Uids per call (seqsvr-batch).
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
}

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
    /// Summarize result JSONs (medians over runs, ratios) as markdown.
    Report {
        results: Vec<PathBuf>,
        /// The label every ratio is computed against (seqsvr / X).
        #[arg(long, default_value = "seqsvr")]
        against: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct RunResult {
    label: String,
    target: String,
    concurrency: usize,
    /// The paced rate asked for (0 = as fast as possible).
    #[serde(default)]
    rate: f64,
    /// seqsvr: RPCs the SDK sent for coalesced calls (calls ÷ this = calls per RPC).
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
}

fn uid_source(w: &Workload, seed: u64) -> anyhow::Result<impl FnMut() -> u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let zipf = match w.dist.as_str() {
        "uniform" => None,
        "zipf" => Some(Zipf::new(w.uids as f64, 1.0).map_err(|e| anyhow::anyhow!("zipf: {e}"))?),
        other => anyhow::bail!("unknown --dist {other:?}: uniform or zipf"),
    };
    let n = w.uids;
    Ok(move || match &zipf {
        Some(z) => (z.sample(&mut rng) as u64).saturating_sub(1) % n,
        None => rng.random_range(0..n),
    })
}

async fn run(w: Workload) -> anyhow::Result<()> {
    let target = Arc::new(Target::connect(&w).await?);
    let batch = if w.target == TargetKind::SeqsvrBatch { w.batch } else { 1 };
    anyhow::ensure!(w.rate >= 0.0 && w.rate.is_finite(), "--rate: calls per second, >= 0");
    let keep_last = w.last_values.is_some();
    let deadline = Instant::now() + Duration::from_secs(w.seconds);
    let started = Instant::now();
    // Paced: a thread hands out due times; the k-th call is due at started + k / rate and goes
    // to client k % concurrency.
    let mut pacer_queues = (w.rate > 0.0).then(|| pace(w.rate, w.concurrency, started, deadline));
    let done_calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started_calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let progress = tokio::spawn(progress(done_calls.clone(), w.seconds, label_of(&w)));
    let cpu_before = (cpu_us("self")?, servers_cpu_us(&w.server_pids)?);
    let mut tasks = Vec::new();
    for c in 0..w.concurrency {
        let target = target.clone();
        let done_calls = done_calls.clone();
        let mut next_uid = uid_source(&w, c as u64 + 1)?;
        let mut handle = target.handle(c).await?;
        let mut due_times = pacer_queues.as_mut().and_then(|q| q.pop());
        let (started_calls, max_calls) = (started_calls.clone(), w.calls);
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let (mut calls, mut values, mut errors) = (0u64, 0u64, 0u64);
            let mut last: BTreeMap<u64, u64> = BTreeMap::new();
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
                    Err(_) => errors += 1,
                }
            }
            (hist, calls, values, errors, last)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut calls, mut values, mut errors) = (0, 0, 0);
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for t in tasks {
        let (h, c, v, e, l) = t.await?;
        hist.add(&h)?;
        calls += c;
        values += v;
        errors += e;
        for (u, x) in l {
            let e = last.entry(u).or_insert(0);
            *e = (*e).max(x);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = (cpu_us("self")?, servers_cpu_us(&w.server_pids)?);
    let per_call =
        |before: u64, after: u64| after.saturating_sub(before) as f64 / calls.max(1) as f64;
    progress.abort();
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!();
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
    };
    println!(
        "{:<22} {:>10.0} calls/s {:>12.0} values/s  p50 {:>6} us  p99 {:>6} us  p99.9 {:>6} us  errors {}  cpu/call client {:.2} us servers {:.2} us",
        result.label, result.calls_per_s, result.values_per_s, result.p50_us, result.p99_us, result.p999_us, errors,
        result.client_cpu_us_per_call, result.server_cpu_us_per_call
    );
    if let Some(out) = &w.out {
        std::fs::write(out, serde_json::to_vec_pretty(&result)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(path) = &w.last_values {
        std::fs::write(path, serde_json::to_vec(&last)?)?;
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

/// CPU time (user + system) a process (`"self"` or a PID) has used so far, in µs, from
/// /proc/<pid>/stat (clock ticks of 10 ms: runs of seconds make that negligible).
fn cpu_us(pid: &str) -> anyhow::Result<u64> {
    const TICK_US: u64 = 10_000; // USER_HZ is 100 on Linux
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is not running"))?;
    cpu_ticks(&stat).map(|t| t * TICK_US).with_context(|| format!("malformed /proc/{pid}/stat"))
}

/// utime + stime (fields 14 and 15) of a /proc/<pid>/stat line. The command name (field 2,
/// in parentheses) may hold spaces and parentheses: fields are counted after the last ')'.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is the first after the name: fields 14 and 15 are at 11 and 12.
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(tick(11)? + tick(12)?)
}

fn servers_cpu_us(pids: &[u32]) -> anyhow::Result<u64> {
    pids.iter().map(|p| cpu_us(&p.to_string())).sum()
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
        Command::Report { results, against } => report(&results, &against),
        Command::Ids(args) => ids::run(args).await,
        Command::IdsReport { results, json } => ids::report(&results, json.as_ref()),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn report(paths: &[PathBuf], against: &str) -> anyhow::Result<()> {
    let mut by_label: BTreeMap<String, Vec<RunResult>> = BTreeMap::new();
    for p in paths {
        let r: RunResult = serde_json::from_slice(&std::fs::read(p)?)
            .with_context(|| format!("{}", p.display()))?;
        by_label.entry(r.label.clone()).or_default().push(r);
    }
    let med = |runs: &[RunResult], f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    let base = by_label.get(against).map(|r| med(r, |x| x.values_per_s));
    println!(
        "| target | runs | values/s (median) | {against} ÷ target | p50 µs | p99 µs | p99.9 µs | calls per RPC | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (label, runs) in &by_label {
        let vps = med(runs, |x| x.values_per_s);
        let ratio =
            base.map(|b| format!("{:.2}×", b / vps.max(1e-9))).unwrap_or_else(|| "-".into());
        let per_rpc = if runs.iter().all(|r| r.coalesced_rpcs > 0) {
            format!("{:.1}", med(runs, |x| x.calls as f64 / x.coalesced_rpcs as f64))
        } else {
            "1".into()
        };
        println!(
            "| {label} | {} | {:.0} | {ratio} | {:.0} | {:.0} | {:.0} | {per_rpc} | {} |",
            runs.len(),
            vps,
            med(runs, |x| x.p50_us as f64),
            med(runs, |x| x.p99_us as f64),
            med(runs, |x| x.p999_us as f64),
            runs.iter().map(|r| r.errors).sum::<u64>()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime_after_the_command_name() {
        let line = "4242 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 250 30 0 0 20 0 1 0";
        assert_eq!(cpu_ticks(line), Some(280));
        assert_eq!(cpu_ticks("4242 (short) S 1 2"), None);
        assert!(cpu_us("self").is_ok());
    }

    fn workload(dist: &str) -> Workload {
        Workload {
            target: TargetKind::Floor,
            label: None,
            config: PathBuf::new(),
            tls_cert: None,
            tls_key: None,
            url: String::new(),
            concurrency: 1,
            seconds: 1,
            calls: 0,
            uids: 1000,
            dist: dist.into(),
            batch: 1,
            out: None,
            last_values: None,
            no_coalesce: false,
            max_in_flight: 2,
            rate: 0.0,
            server_pids: Vec::new(),
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
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
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
}
