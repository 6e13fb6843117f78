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
fn cpu_text(us: f64) -> String {
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
            _ => format!("{x:.0}"),
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
