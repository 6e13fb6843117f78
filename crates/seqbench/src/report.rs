//! Markdown from result JSONs: `seqbench report` (one table per directory of runs: medians,
//! the ratio to the peer at its best, CPU per call; or `--latency` for paced runs), and
//! `seqbench targets` (issue 13's targets, each measured, MET or MISSED).

use crate::RunResult;
use anyhow::Context;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The labels `scripts/bench.sh` gives the runs `seqbench targets` compares.
pub mod labels {
    /// The SDK as shipped (coalescing) against the cluster.
    pub const SEQSVR: &str = "seqsvr";
    /// The peer at its best: Redis AOF everysec, one shared auto-pipelining connection.
    pub const REDIS_BEST: &str = "redis everysec, shared conn";
    /// The SDK (coalescing) against the floor server.
    pub const FLOOR_COALESCED: &str = "floor, coalesced";
    /// 1,000 uids per `next_batch` against the cluster.
    pub const SEQSVR_BATCH: &str = "seqsvr batch 1000";
    /// 1,000 uids per `next_batch` against the floor server.
    pub const FLOOR_BATCH: &str = "floor batch 1000";
    /// The step runs.
    pub const STEP_100: &str = "seqsvr step 100";
    pub const STEP_100000: &str = "seqsvr step 100000";

    /// Issue 31's runs (`scripts/bench.sh --any-client-only`), in the order they are tabled.
    /// "over set 0": `--uids 100000 --uid-stride 21475`, half the uids owned by each of set
    /// 0's two AllocSvrs; "one section": uids [0, 100000), the main table's workload, all
    /// owned by one AllocSvr, the one the plain and HTTP runs then call.
    pub mod any {
        pub const FLOOR: &str = "floor, one RPC per call";
        pub const SDK: &str = "SDK, uids over set 0";
        pub const PLAIN: &str = "plain gRPC, one address, uids over set 0";
        pub const HTTP1: &str = "HTTP/1.1, conn per caller, uids over set 0";
        pub const HTTP2: &str = "HTTP/2, one shared conn, uids over set 0";
        pub const SDK_ONE: &str = "SDK, one section";
        pub const SDK_BEFORE: &str = "SDK before issue 31, one section";
        pub const PLAIN_OWNED: &str = "plain gRPC, one address, one section it owns";
        pub const HTTP1_OWNED: &str = "HTTP/1.1, conn per caller, one section it owns";
        pub const HTTP2_OWNED: &str = "HTTP/2, one shared conn, one section it owns";
        pub const ORDER: [&str; 10] = [
            FLOOR,
            SDK,
            PLAIN,
            HTTP1,
            HTTP2,
            SDK_ONE,
            SDK_BEFORE,
            PLAIN_OWNED,
            HTTP1_OWNED,
            HTTP2_OWNED,
        ];
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
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

/// Runs by label, in label order.
pub type ByLabel = BTreeMap<String, Vec<RunResult>>;

/// Reads result JSONs (files, or every `*.json` of a directory) grouped by label.
pub fn load(paths: &[PathBuf]) -> anyhow::Result<ByLabel> {
    let mut by_label = ByLabel::new();
    for p in paths {
        let files: Vec<PathBuf> = if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("listing {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            files
        } else {
            vec![p.clone()]
        };
        for f in files {
            let bytes = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
            let r: RunResult = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a seqbench run result", f.display()))?;
            by_label.entry(r.label.clone()).or_default().push(r);
        }
    }
    Ok(by_label)
}

fn med(runs: &[RunResult], f: impl Fn(&RunResult) -> f64) -> f64 {
    median(runs.iter().map(f).collect())
}

fn total_cpu(r: &RunResult) -> f64 {
    r.client_cpu_us_per_call + r.server_cpu_us_per_call
}

/// CPU µs per call with 2 decimals below 10, 1 below 1000, none above.
pub(crate) fn cpu_text(us: f64) -> String {
    match us {
        x if x < 10.0 => format!("{x:.2}"),
        x if x < 1000.0 => format!("{x:.1}"),
        x => format!("{x:.0}"),
    }
}

/// The throughput table: per label, medians over its runs, values/s ÷ `against`'s, and CPU
/// per call (client, servers, both).
pub fn throughput_table(by_label: &ByLabel, against: &str) -> String {
    let base = by_label.get(against).map(|r| med(r, |x| x.values_per_s));
    let mut out = format!(
        "| target | runs | values/s (median) | ÷ {against} | p50 µs | p99 µs | p99.9 µs | calls per batch | client CPU µs/call | servers CPU µs/call | total CPU µs/call | errors |\n"
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (label, runs) in by_label {
        let vps = med(runs, |x| x.values_per_s);
        let ratio = base.map_or_else(|| "-".into(), |b| format!("{:.2}×", vps / b.max(1e-9)));
        let per_rpc = if runs.iter().all(|r| r.coalesced_rpcs > 0) {
            format!("{:.1}", med(runs, |x| x.calls as f64 / x.coalesced_rpcs as f64))
        } else {
            "1".into()
        };
        let servers = if runs.iter().all(|r| r.server_processes > 0) {
            cpu_text(med(runs, |x| x.server_cpu_us_per_call))
        } else {
            "not counted".into()
        };
        let _ = writeln!(
            out,
            "| {label} | {} | {vps:.0} | {ratio} | {:.0} | {:.0} | {:.0} | {per_rpc} | {} | {servers} | {} | {} |",
            runs.len(),
            med(runs, |x| x.p50_us as f64),
            med(runs, |x| x.p99_us as f64),
            med(runs, |x| x.p999_us as f64),
            cpu_text(med(runs, |x| x.client_cpu_us_per_call)),
            cpu_text(med(runs, total_cpu)),
            runs.iter().map(|r| r.errors).sum::<u64>()
        );
    }
    out
}

/// The paced table: per label, medians of the rate reached and the percentiles, and p99.9 ÷
/// `against`'s.
pub fn latency_table(by_label: &ByLabel, against: &str) -> String {
    let base = by_label.get(against).map(|r| med(r, |x| x.p999_us as f64));
    let mut out = format!(
        "| target | runs | calls/s (median) | p50 µs | p99 µs | p99.9 µs | p99.9 ÷ {against}'s | total CPU µs/call | errors |\n"
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for (label, runs) in by_label {
        let p999 = med(runs, |x| x.p999_us as f64);
        let ratio = base.map_or_else(|| "-".into(), |b| format!("{:.2}×", p999 / b.max(1.0)));
        let _ = writeln!(
            out,
            "| {label} | {} | {:.0} | {:.0} | {:.0} | {p999:.0} | {ratio} | {} | {} |",
            runs.len(),
            med(runs, |x| x.calls_per_s),
            med(runs, |x| x.p50_us as f64),
            med(runs, |x| x.p99_us as f64),
            cpu_text(med(runs, total_cpu)),
            runs.iter().map(|r| r.errors).sum::<u64>()
        );
    }
    out
}

/// `seqbench report`.
pub fn report(paths: &[PathBuf], against: &str, latency: bool) -> anyhow::Result<()> {
    let by_label = load(paths)?;
    anyhow::ensure!(!by_label.is_empty(), "no result JSONs in {paths:?}");
    if !by_label.contains_key(against) {
        eprintln!("warning: no runs labelled {against:?}: the ratio column is empty");
    }
    print!(
        "{}",
        if latency {
            latency_table(&by_label, against)
        } else {
            throughput_table(&by_label, against)
        }
    );
    Ok(())
}

/// Which way a target bounds its measure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

/// One row of the targets table.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetRow {
    pub what: String,
    /// The measure (None: not measured in this run).
    pub measured: Option<f64>,
    pub bound: Bound,
    /// How the measure is written (`×`, ` B`, or nothing).
    pub unit: &'static str,
    /// The figures behind the measure.
    pub detail: String,
}

impl TargetRow {
    /// Some(true) MET, Some(false) MISSED, None not measured.
    pub fn met(&self) -> Option<bool> {
        self.measured.map(|m| match self.bound {
            Bound::AtLeast(b) => m >= b,
            Bound::AtMost(b) => m <= b,
        })
    }
}

/// Everything the targets are computed from.
#[derive(Default)]
pub struct TargetInputs {
    /// Throughput runs per distribution (e.g. "uniform", "zipf").
    pub dists: Vec<(String, ByLabel)>,
    /// Paced runs with the client and the servers on separate CPUs: seqsvr (target "seqsvr")
    /// and the floor (target "floor-coalesced") at the same rate.
    pub pinned: Option<ByLabel>,
    /// Paced Zipf runs with step 100 and 100,000.
    pub step: Option<ByLabel>,
    /// `seqbench touch`'s bytes per uid.
    pub touch_bytes_per_uid: Option<f64>,
    /// `seqbench crash-check` lines: (label, uids regressed).
    pub crash: Vec<(String, u64)>,
}

/// Medians of `f` over the runs of `label` (None if there are none).
fn med_of(by: &ByLabel, label: &str, f: impl Fn(&RunResult) -> f64) -> Option<f64> {
    by.get(label).filter(|r| !r.is_empty()).map(|r| med(r, f))
}

/// All runs of one target kind in `by` (whatever their labels).
fn runs_of_target(by: &ByLabel, target: &str) -> Vec<RunResult> {
    by.values().flatten().filter(|r| r.target == target).cloned().collect()
}

/// A ratio of two medians, with the figures it came from.
fn ratio_row(
    what: String,
    top: Option<f64>,
    bottom: Option<f64>,
    bound: Bound,
    describe: impl Fn(f64, f64) -> String,
) -> TargetRow {
    let (measured, detail) = match (top, bottom) {
        (Some(t), Some(b)) if b > 0.0 => (Some(t / b), describe(t, b)),
        _ => (None, "not measured".to_string()),
    };
    TargetRow { what, measured, bound, unit: "×", detail }
}

/// Issue 13's targets from the medians of the runs.
pub fn targets(inputs: &TargetInputs) -> Vec<TargetRow> {
    use labels::*;
    let vps = |x: &RunResult| x.values_per_s;
    let per_s = |t: f64, b: f64| format!("{t:.0} ÷ {b:.0} values/s");
    let mut rows = Vec::new();
    // Throughput ratios, each against what it is measured with, per distribution.
    let throughput = [
        ("seqsvr SDK ÷ Redis, one shared pipelined connection", SEQSVR, REDIS_BEST, 1.5),
        ("seqsvr SDK ÷ floor, coalesced", SEQSVR, FLOOR_COALESCED, 0.8),
        ("seqsvr batch 1,000 ÷ batch floor", SEQSVR_BATCH, FLOOR_BATCH, 0.8),
    ];
    for (what, top, bottom, at_least) in throughput {
        for (dist, by) in &inputs.dists {
            rows.push(ratio_row(
                format!("{what}, {dist}"),
                med_of(by, top, vps),
                med_of(by, bottom, vps),
                Bound::AtLeast(at_least),
                per_s,
            ));
        }
    }
    for (dist, by) in &inputs.dists {
        let counted = |label: &str| {
            by.get(label).filter(|r| !r.is_empty() && r.iter().all(|x| x.server_processes > 0))
        };
        let cpu = |label: &str| counted(label).map(|r| med(r, total_cpu));
        rows.push(ratio_row(
            format!(
                "CPU µs per call (client + all server processes): seqsvr ÷ Redis shared, {dist}"
            ),
            cpu(SEQSVR),
            cpu(REDIS_BEST),
            Bound::AtMost(1.0),
            |t, b| format!("{t:.2} ÷ {b:.2} µs"),
        ));
    }
    let pinned = inputs.pinned.as_ref().map(|by| {
        let p999 = |target: &str| {
            let runs = runs_of_target(by, target);
            (!runs.is_empty()).then(|| med(&runs, |x| x.p999_us as f64))
        };
        (p999("seqsvr"), p999("floor-coalesced"))
    });
    let (seqsvr_p999, floor_p999) = pinned.unwrap_or((None, None));
    rows.push(ratio_row(
        "paced p99.9, client and servers on separate CPUs: seqsvr ÷ floor (coalesced) at the same rate"
            .into(),
        seqsvr_p999,
        floor_p999,
        Bound::AtMost(1.2),
        |t, b| format!("{t:.0} ÷ {b:.0} µs"),
    ));
    rows.push(TargetRow {
        what: "AllocSvr memory per touched uid".into(),
        measured: inputs.touch_bytes_per_uid,
        bound: Bound::AtMost(5.0),
        unit: " B",
        detail: match inputs.touch_bytes_per_uid {
            Some(_) => "RSS growth ÷ uids touched".into(),
            None => "not measured".into(),
        },
    });
    let step =
        |label: &str| inputs.step.as_ref().and_then(|by| med_of(by, label, |x| x.p999_us as f64));
    rows.push(ratio_row(
        "p99.9 step 100 ÷ step 100,000 (Zipf, paced)".into(),
        step(STEP_100),
        step(STEP_100000),
        Bound::AtMost(1.5),
        |t, b| format!("{t:.0} ÷ {b:.0} µs"),
    ));
    let seqsvr_crash = inputs.crash.iter().find(|(label, _)| label == SEQSVR);
    let others: Vec<String> = inputs
        .crash
        .iter()
        .filter(|(label, _)| label != SEQSVR)
        .map(|(label, n)| format!("{label} {n}"))
        .collect();
    rows.push(TargetRow {
        what: "crash check: seqsvr uids whose next value went backwards".into(),
        measured: seqsvr_crash.map(|(_, n)| *n as f64),
        bound: Bound::AtMost(0.0),
        unit: "",
        detail: match (seqsvr_crash, others.is_empty()) {
            (None, _) => "not measured".into(),
            (Some(_), true) => "kill -9, restart, one next per uid".into(),
            (Some(_), false) => format!("the peers: {}", others.join(", ")),
        },
    });
    rows
}

/// The targets as a markdown table.
pub fn targets_table(rows: &[TargetRow]) -> String {
    let mut out = String::from("| what | measured (medians) | target | |\n|---|---|---|---|\n");
    for r in rows {
        let number = |x: f64| match r.unit {
            "×" => format!("{x:.2}×"),
            " B" => format!("{x:.2} B"),
            unit => format!("{x:.0}{unit}"),
        };
        let bound = match r.bound {
            Bound::AtLeast(b) => format!("≥ {}", number(b)),
            Bound::AtMost(0.0) => "0".to_string(),
            Bound::AtMost(b) => format!("≤ {}", number(b)),
        };
        let measured = match r.measured {
            Some(m) => format!("{} ({})", number(m), r.detail),
            None => r.detail.clone(),
        };
        let verdict = match r.met() {
            Some(true) => "MET",
            Some(false) => "**MISSED**",
            None => "not measured",
        };
        let _ = writeln!(out, "| {} | {measured} | {bound} | {verdict} |", r.what);
    }
    out
}

/// `seqbench targets`' inputs, from the files `scripts/bench.sh` writes.
pub struct TargetFiles<'a> {
    /// `name=DIR` per distribution.
    pub dists: &'a [String],
    pub pinned: Option<&'a Path>,
    pub step: Option<&'a Path>,
    /// `seqbench touch`'s JSON line.
    pub touch: Option<&'a Path>,
    /// `seqbench crash-check`'s JSON lines.
    pub crash: Option<&'a Path>,
}

/// (label, regressed uids) of each crash-check line.
pub fn parse_crash_lines(text: &str) -> anyhow::Result<Vec<(String, u64)>> {
    #[derive(serde::Deserialize)]
    struct Line {
        label: String,
        regressed_uids: u64,
    }
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let line: Line = serde_json::from_str(l)
                .with_context(|| format!("not a crash-check line: {l:?}"))?;
            Ok((line.label, line.regressed_uids))
        })
        .collect()
}

/// `bytes_per_uid` of `seqbench touch`'s JSON line.
pub fn parse_touch(text: &str) -> anyhow::Result<f64> {
    #[derive(serde::Deserialize)]
    struct Touch {
        bytes_per_uid: f64,
    }
    let t: Touch = serde_json::from_str(text.trim())
        .with_context(|| format!("not a touch result: {:?}", text.trim()))?;
    Ok(t.bytes_per_uid)
}

/// `seqbench targets`.
pub fn targets_command(files: &TargetFiles) -> anyhow::Result<()> {
    let mut inputs = TargetInputs::default();
    for d in files.dists {
        let (name, dir) = d
            .split_once('=')
            .with_context(|| format!("--dist {d:?}: NAME=DIR, e.g. uniform=results/uniform"))?;
        inputs.dists.push((name.to_string(), load(&[PathBuf::from(dir)])?));
    }
    inputs.pinned = files.pinned.map(|p| load(&[p.to_path_buf()])).transpose()?;
    inputs.step = files.step.map(|p| load(&[p.to_path_buf()])).transpose()?;
    let read =
        |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    inputs.touch_bytes_per_uid = files.touch.map(|p| parse_touch(&read(p)?)).transpose()?;
    inputs.crash = match files.crash {
        Some(p) => parse_crash_lines(&read(p)?)?,
        None => Vec::new(),
    };
    print!("{}", targets_table(&targets(&inputs)));
    Ok(())
}

/// Meituan Leaf's published figure (README: "在4C8G VM基础上，通过公司RPC方式调用，QPS压测结果近5w/s，
/// TP999 1ms"): close to 50,000 calls/s, p99.9 1 ms, on a 4-core 8 GB VM through Meituan's RPC.
pub const LEAF_QPS: f64 = 50_000.0;

/// Median of `f` over the runs of `label`, if there are any.
fn med_label(by: &ByLabel, label: &str, f: impl Fn(&RunResult) -> f64) -> Option<f64> {
    by.get(label).filter(|r| !r.is_empty()).map(|r| med(r, f))
}

/// The relative spread of a label's runs: (max − min) ÷ median of calls/s.
fn spread(runs: &[RunResult]) -> f64 {
    let v: Vec<f64> = runs.iter().map(|r| r.calls_per_s).collect();
    let (lo, hi) = v.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    if v.is_empty() {
        0.0
    } else {
        (hi - lo) / median(v).max(1e-9)
    }
}

/// The faster (median calls/s) of two labels that are measured.
fn best_of<'a>(by: &ByLabel, a: &'a str, b: &'a str) -> Option<&'a str> {
    let cps = |l: &str| med_label(by, l, |x| x.calls_per_s);
    match (cps(a), cps(b)) {
        (Some(x), Some(y)) => Some(if y > x { b } else { a }),
        (Some(_), None) => Some(a),
        (None, Some(_)) => Some(b),
        (None, None) => None,
    }
}

/// Issue 31's table: per label (the known ones in their order, then any other), medians of
/// calls/s, ÷ the floor's, the share forwarded, latencies, CPU per call; and Leaf's published
/// figure beside them.
pub fn any_client_table(by: &ByLabel) -> String {
    use labels::any::*;
    let base = med_label(by, FLOOR, |x| x.calls_per_s);
    let mut out = format!(
        "| target | runs | calls/s (median) | ÷ {FLOOR} | forwarded | p50 µs | p99 µs | p99.9 µs | client CPU µs/call | servers CPU µs/call | total CPU µs/call | errors | other processes, cores |\n"
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let others = by.keys().filter(|l| !ORDER.contains(&l.as_str())).map(String::as_str);
    for label in ORDER.into_iter().chain(others) {
        let Some(runs) = by.get(label).filter(|r| !r.is_empty()) else { continue };
        let cps = med(runs, |x| x.calls_per_s);
        let ratio = base.map_or_else(|| "-".into(), |b| format!("{:.2}×", cps / b.max(1e-9)));
        let forwarded =
            if runs.iter().any(|r| r.target == "seqsvr-plain" || r.target == "seqsvr-http") {
                format!("{:.0}%", med(runs, |x| x.forwarded_share()) * 100.0)
            } else {
                "-".into()
            };
        let servers = if runs.iter().all(|r| r.server_processes > 0) {
            cpu_text(med(runs, |x| x.server_cpu_us_per_call))
        } else {
            "not counted".into()
        };
        let others: Vec<f64> = runs.iter().filter_map(|r| r.others_cpu_cores).collect();
        let others = if others.len() == runs.len() {
            format!("{:.2}", median(others))
        } else {
            "not recorded".into()
        };
        let _ = writeln!(
            out,
            "| {label} | {} | {cps:.0} | {ratio} | {forwarded} | {:.0} | {:.0} | {:.0} | {} | {servers} | {} | {} | {others} |",
            runs.len(),
            med(runs, |x| x.p50_us as f64),
            med(runs, |x| x.p99_us as f64),
            med(runs, |x| x.p999_us as f64),
            cpu_text(med(runs, |x| x.client_cpu_us_per_call)),
            cpu_text(med(runs, total_cpu)),
            runs.iter().map(|r| r.errors).sum::<u64>(),
        );
    }
    let leaf = base.map_or_else(|| "-".into(), |b| format!("{:.2}×", LEAF_QPS / b.max(1e-9)));
    let _ = writeln!(
        out,
        "| Meituan Leaf, published (4-core 8 GB VM, Meituan's RPC; not run here) | - | ~{LEAF_QPS:.0} | {leaf} | - | - | - | ~1000 | - | - | - | - | - |"
    );
    out
}

/// Issue 31's targets on this 2-core box: HTTP/JSON one uid per request ≥ 50,000 calls/s
/// (Leaf's figure on half its cores) in its best mode, with the uids over set 0 (half of them
/// forwarded) and with one section the address owns; the plain gRPC client with one address
/// (half forwarded) ≥ 0.8× the one-RPC-per-call floor; the SDK's own row (one section) after
/// ÷ before issue 31 in the same run, unchanged within noise: the ratio of medians no further
/// from 1 than the larger relative spread (max − min) ÷ median of the two labels' runs.
pub fn any_client_targets(by: &ByLabel) -> Vec<TargetRow> {
    use labels::any::*;
    let cps = |x: &RunResult| x.calls_per_s;
    let mut rows = Vec::new();
    for (workload, h1, h2) in
        [("uids over set 0", HTTP1, HTTP2), ("one section it owns", HTTP1_OWNED, HTTP2_OWNED)]
    {
        let best = best_of(by, h1, h2);
        let measured = best.and_then(|l| med_label(by, l, cps));
        rows.push(TargetRow {
            what: format!("HTTP/JSON, one uid per request, 64 callers, {workload}: calls/s"),
            measured,
            bound: Bound::AtLeast(LEAF_QPS),
            unit: " calls/s",
            detail: match best {
                Some(l) => format!("best mode: {l}"),
                None => "not measured".into(),
            },
        });
    }
    rows.push(ratio_row(
        "plain gRPC client with one address (uids over set 0) ÷ floor, one RPC per call".into(),
        med_label(by, PLAIN, cps),
        med_label(by, FLOOR, cps),
        Bound::AtLeast(0.8),
        |t, b| format!("{t:.0} ÷ {b:.0} calls/s"),
    ));
    let noise = match (by.get(SDK_ONE), by.get(SDK_BEFORE)) {
        (Some(a), Some(b)) => spread(a).max(spread(b)),
        _ => 0.0,
    };
    let mut sdk = ratio_row(
        "SDK's own row (one section), after ÷ before issue 31, same run".into(),
        med_label(by, SDK_ONE, cps),
        med_label(by, SDK_BEFORE, cps),
        Bound::AtLeast(1.0 - noise),
        |t, b| format!("{t:.0} ÷ {b:.0} calls/s; runs' spread {:.0}%", noise * 100.0),
    );
    if noise > 0.0 {
        sdk.what.push_str(" (within the runs' own spread)");
    }
    // CPU per call moves less with the neighbours than calls/s: shown beside the ratio.
    if let (Some(after), Some(before)) =
        (med_label(by, SDK_ONE, total_cpu), med_label(by, SDK_BEFORE, total_cpu))
    {
        if sdk.measured.is_some() {
            let _ = write!(sdk.detail, "; total CPU µs/call {after:.2} ÷ {before:.2}");
        }
    }
    rows.push(sdk);
    rows
}

/// `seqbench any-client-report`: the table and the targets.
pub fn any_client_report(paths: &[PathBuf]) -> anyhow::Result<()> {
    let by = load(paths)?;
    anyhow::ensure!(!by.is_empty(), "no result JSONs in {paths:?}");
    print!("{}\n{}", any_client_table(&by), targets_table(&any_client_targets(&by)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        label: &str,
        target: &str,
        values_per_s: f64,
        p999_us: u64,
        cpu: (f64, f64),
    ) -> RunResult {
        RunResult {
            label: label.into(),
            target: target.into(),
            concurrency: 64,
            rate: 0.0,
            coalesced_rpcs: 0,
            seconds: 10.0,
            dist: "uniform".into(),
            calls: (values_per_s * 10.0) as u64,
            values: (values_per_s * 10.0) as u64,
            errors: 0,
            calls_per_s: values_per_s,
            values_per_s,
            p50_us: 100,
            p99_us: 500,
            p999_us,
            max_us: p999_us * 2,
            curve: Vec::new(),
            client_cpu_us_per_call: cpu.0,
            server_cpu_us_per_call: cpu.1,
            server_processes: 1,
            uid_stride: 1,
            forwarded_calls: 0,
            others_cpu_cores: Some(0.25),
        }
    }

    fn by(runs: Vec<RunResult>) -> ByLabel {
        let mut by = ByLabel::new();
        for r in runs {
            by.entry(r.label.clone()).or_default().push(r);
        }
        by
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![5.0]), 5.0);
    }

    fn uniform() -> ByLabel {
        use labels::*;
        by(vec![
            // seqsvr: medians 200k values/s, CPU 10 + 6 µs
            run(SEQSVR, "seqsvr", 190_000.0, 1000, (9.0, 6.0)),
            run(SEQSVR, "seqsvr", 200_000.0, 1000, (10.0, 6.0)),
            run(SEQSVR, "seqsvr", 260_000.0, 1000, (11.0, 6.0)),
            // Redis shared: median 100k, CPU 5 + 4.
            run(REDIS_BEST, "redis", 90_000.0, 900, (5.0, 4.0)),
            run(REDIS_BEST, "redis", 100_000.0, 900, (5.0, 4.0)),
            run(REDIS_BEST, "redis", 400_000.0, 900, (5.0, 4.0)),
            run(FLOOR_COALESCED, "floor-coalesced", 220_000.0, 800, (8.0, 2.0)),
            run(SEQSVR_BATCH, "seqsvr-batch", 14_000_000.0, 9000, (0.0, 0.0)),
            run(FLOOR_BATCH, "floor-batch", 20_000_000.0, 9000, (0.0, 0.0)),
        ])
    }

    #[test]
    fn targets_are_ratios_of_medians_with_their_verdicts() {
        use labels::*;
        let pinned = by(vec![
            run("seqsvr, pinned, at 50000/s", "seqsvr", 50_000.0, 1100, (0.0, 0.0)),
            run("seqsvr, pinned, at 50000/s", "seqsvr", 50_000.0, 1300, (0.0, 0.0)),
            run(
                "floor, coalesced, pinned, at 50000/s",
                "floor-coalesced",
                50_000.0,
                1000,
                (0.0, 0.0),
            ),
        ]);
        let step = by(vec![
            run(STEP_100, "seqsvr", 1.0, 3000, (0.0, 0.0)),
            run(STEP_100000, "seqsvr", 1.0, 2500, (0.0, 0.0)),
        ]);
        let inputs = TargetInputs {
            dists: vec![("uniform".into(), uniform())],
            pinned: Some(pinned),
            step: Some(step),
            touch_bytes_per_uid: Some(4.2),
            crash: vec![("redis-everysec".into(), 0), (SEQSVR.into(), 0)],
        };
        let rows = targets(&inputs);
        let get = |prefix: &str| rows.iter().find(|r| r.what.starts_with(prefix)).unwrap();
        let redis = get("seqsvr SDK ÷ Redis");
        assert_eq!(redis.measured, Some(2.0));
        assert_eq!(redis.met(), Some(true));
        let floor = get("seqsvr SDK ÷ floor");
        assert!((floor.measured.unwrap() - 200.0 / 220.0).abs() < 1e-9);
        assert_eq!(floor.met(), Some(true));
        let batch = get("seqsvr batch");
        assert_eq!((batch.measured, batch.met()), (Some(0.7), Some(false)));
        let cpu = get("CPU µs per call");
        assert!((cpu.measured.unwrap() - 16.0 / 9.0).abs() < 1e-9);
        assert_eq!(cpu.met(), Some(false));
        let paced = get("paced p99.9");
        assert_eq!((paced.measured, paced.met()), (Some(1.2), Some(true)), "1200 ÷ 1000, ≤ 1.2");
        assert_eq!(get("AllocSvr memory").met(), Some(true));
        assert_eq!(get("p99.9 step").measured, Some(1.2));
        let crash = get("crash check");
        assert_eq!((crash.measured, crash.met()), (Some(0.0), Some(true)));
        assert!(crash.detail.contains("redis-everysec 0"));

        let table = targets_table(&rows);
        assert!(table.contains("| 2.00× (200000 ÷ 100000 values/s) | ≥ 1.50× | MET |"), "{table}");
        assert!(table.contains("| 0.70× (14000000 ÷ 20000000 values/s) | ≥ 0.80× | **MISSED** |"));
        assert!(table.contains("| 4.20 B (RSS growth ÷ uids touched) | ≤ 5.00 B | MET |"));
        assert!(table.contains("| 0 (the peers: redis-everysec 0) | 0 | MET |"), "{table}");
    }

    #[test]
    fn a_target_without_its_runs_is_not_measured_never_met() {
        let mut uniform = uniform();
        uniform.remove(labels::REDIS_BEST);
        let rows = targets(&TargetInputs {
            dists: vec![("uniform".into(), uniform)],
            ..Default::default()
        });
        for r in &rows {
            let with_redis = r.what.contains("Redis");
            let measured_here = r.what.contains("floor, coalesced") || r.what.contains("batch");
            if with_redis || !measured_here {
                assert_eq!(r.met(), None, "{}", r.what);
                assert_eq!(r.detail, "not measured");
            }
        }
        assert!(targets_table(&rows).contains("| not measured |"));
    }

    #[test]
    fn cpu_is_not_compared_when_a_run_counted_no_server() {
        let mut uniform = uniform();
        for r in uniform.get_mut(labels::REDIS_BEST).unwrap() {
            r.server_processes = 0;
        }
        let rows = targets(&TargetInputs {
            dists: vec![("uniform".into(), uniform)],
            ..Default::default()
        });
        let cpu = rows.iter().find(|r| r.what.starts_with("CPU")).unwrap();
        assert_eq!(cpu.met(), None);
    }

    #[test]
    fn tables_show_ratios_against_the_peer_at_its_best_and_cpu() {
        let table = throughput_table(&uniform(), labels::REDIS_BEST);
        assert!(table
            .starts_with("| target | runs | values/s (median) | ÷ redis everysec, shared conn |"));
        assert!(
            table.contains(
                "| seqsvr | 3 | 200000 | 2.00× | 100 | 500 | 1000 | 1 | 10.0 | 6.00 | 16.0 | 0 |"
            ),
            "{table}"
        );
        assert!(table.contains("| redis everysec, shared conn | 3 | 100000 | 1.00× |"));
        let latency = latency_table(&uniform(), labels::SEQSVR);
        assert!(
            latency
                .contains("| floor, coalesced | 1 | 220000 | 100 | 500 | 800 | 0.80× | 10.0 | 0 |"),
            "{latency}"
        );
    }

    #[test]
    fn the_any_client_table_has_every_row_in_order_with_leaf_and_the_targets() {
        use labels::any::*;
        let mut plain = run(PLAIN, "seqsvr-plain", 40_000.0, 3000, (20.0, 60.0));
        plain.forwarded_calls = plain.calls / 2;
        let mut h2 = run(HTTP2, "seqsvr-http", 60_000.0, 4000, (15.0, 40.0));
        h2.forwarded_calls = h2.calls / 2;
        let mut runs = vec![
            run(FLOOR, "floor", 45_000.0, 2000, (20.0, 30.0)),
            run(FLOOR, "floor", 55_000.0, 2000, (20.0, 30.0)),
            plain,
            run(HTTP1, "seqsvr-http", 52_000.0, 5000, (25.0, 45.0)),
            h2,
            run(HTTP1_OWNED, "seqsvr-http", 45_000.0, 5000, (25.0, 45.0)),
            run(SDK_BEFORE, "seqsvr", 200_000.0, 1000, (5.0, 5.0)),
            RunResult {
                others_cpu_cores: None,
                ..run(SDK_BEFORE, "seqsvr", 220_000.0, 1000, (5.0, 5.0))
            },
            run(SDK_ONE, "seqsvr", 195_000.0, 1000, (5.0, 5.0)),
            run("another", "seqsvr", 1.0, 1, (0.0, 0.0)),
        ];
        runs.reverse();
        let by = by(runs);
        let table = any_client_table(&by);
        let rows: Vec<&str> =
            table.lines().skip(2).map(|l| l.split(" | ").next().unwrap()).collect();
        let firsts = ["| floor, one RPC per call", &format!("| {PLAIN}"), &format!("| {HTTP1}")];
        assert_eq!(rows[..3], firsts, "{table}");
        assert!(rows[rows.len() - 2].ends_with("another") && rows.last().unwrap().contains("Leaf"));
        assert!(
            table.contains(&format!("| {PLAIN} | 1 | 40000 | 0.80× | 50% | 100 | 500 | 3000 | 20.0 | 60.0 | 80.0 | 0 | 0.25 |")),
            "{table}"
        );
        assert!(table.contains(&format!("| {FLOOR} | 2 | 50000 | 1.00× | - |")), "{table}");
        assert!(table.contains("| ~50000 | 1.00× |"), "{table}");
        assert!(table.contains("| 0 | not recorded |"), "a run without the field: {table}");

        let rows = any_client_targets(&by);
        let http = &rows[0];
        assert_eq!((http.measured, http.met()), (Some(60_000.0), Some(true)));
        assert_eq!(http.detail, format!("best mode: {HTTP2}"));
        let owned = &rows[1];
        assert_eq!((owned.measured, owned.met()), (Some(45_000.0), Some(false)), "h1 only");
        let plain = &rows[2];
        assert_eq!((plain.measured, plain.met()), (Some(0.8), Some(true)), "40 k ÷ 50 k");
        // Before: 200 k and 220 k (spread 20 k ÷ 210 k); after 195 k ÷ 210 k = 0.93 ≥ 0.905.
        let sdk = &rows[3];
        assert!((sdk.measured.unwrap() - 195.0 / 210.0).abs() < 1e-9);
        assert_eq!(sdk.bound, Bound::AtLeast(1.0 - 20.0 / 210.0));
        assert_eq!(sdk.met(), Some(true));
        assert!(sdk.detail.ends_with("; total CPU µs/call 10.00 ÷ 10.00"), "{}", sdk.detail);
        let table = targets_table(&rows);
        assert!(table.contains("| 60000 calls/s (best mode: HTTP/2, one shared conn, uids over set 0) | ≥ 50000 calls/s | MET |"), "{table}");

        let mut slower = by.clone();
        slower.get_mut(SDK_ONE).unwrap()[0].calls_per_s = 180_000.0;
        assert_eq!(any_client_targets(&slower)[3].met(), Some(false), "0.86 is outside the spread");
        slower.remove(SDK_BEFORE);
        assert_eq!(any_client_targets(&slower)[3].met(), None, "no before runs: not measured");
    }

    #[test]
    fn crash_and_touch_lines_parse() {
        let lines = "{\"label\": \"redis-always\", \"uids_checked\": 1000, \"regressed_uids\": 0}\n\n{\"label\": \"seqsvr\", \"uids_checked\": 1000, \"regressed_uids\": 3}\n";
        assert_eq!(
            parse_crash_lines(lines).unwrap(),
            vec![("redis-always".to_string(), 0), ("seqsvr".to_string(), 3)]
        );
        assert!(parse_crash_lines("oops").is_err());
        let touch = "{\"uids_touched\": 10000000, \"rss_before\": 1, \"rss_after\": 2, \"bytes_per_uid\": 8.08}\n";
        assert_eq!(parse_touch(touch).unwrap(), 8.08);
        assert!(parse_touch("{}").is_err());
    }
}
