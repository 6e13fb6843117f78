//! `seqbench sdks`: issue 32's comparison of the SDKs for other languages with the Rust SDK and
//! with Redis driven from the same language, in one run on one cluster.
//!
//! Each case is a driver program (`sdk/go/examples/bench`, `sdk/java/bench`,
//! `sdk/python/examples/bench.py`, and `seqbench run` itself for Rust) that runs the same
//! closed-loop workload and prints one JSON line (or, for `seqbench run`, writes the file named
//! by `{out}`) with `values_per_s`, `calls`, the latency quantiles and its own CPU per call over
//! its timed window. This module runs the cases one after another, `--runs` times in a rotated
//! order (run r starts at case r, so no case always runs first or last on a warm or a cold
//! machine), and reads the CPU time of the servers from /proc (the cluster's processes for a
//! seqsvr case, the Redis for a redis case) and of the whole machine at the edges of each
//! driver's timed window, which the driver prints on stdout ([`WINDOW_START`], [`WINDOW_END`]);
//! the servers' CPU in the window is divided by the window's calls.

use crate::cpu::machine_busy_us;
use crate::report::{cpu_text, median};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct SdksArgs {
    /// One case, `LANG:TARGET=COMMAND` (TARGET: seqsvr or redis); COMMAND is split on
    /// whitespace (no quoting), and `{out}` in it is replaced by a file the driver writes its
    /// JSON result to; without `{out}` the driver's last stdout line is its result. Repeat.
    #[arg(long = "case", required = true)]
    cases: Vec<String>,
    /// Rounds of every case.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// PIDs whose CPU a seqsvr case is charged (every StoreSvr and AllocSvr of the cluster).
    #[arg(long, value_delimiter = ',')]
    seqsvr_pids: Vec<u32>,
    /// PIDs whose CPU a redis case is charged.
    #[arg(long, value_delimiter = ',')]
    redis_pids: Vec<u32>,
    /// Directory for the runs (`sdks.json`, every driver's output); created, must be empty.
    #[arg(long)]
    out: PathBuf,
    /// Write the markdown report here too (it is always printed).
    #[arg(long)]
    report: Option<PathBuf>,
}

/// The line a driver prints on stdout as its timed window starts, and as it ends: the servers'
/// CPU is counted between the two (a JVM's warm-up and every driver's start-up are left out).
pub const WINDOW_START: &str = "SEQBENCH_WINDOW start";
pub const WINDOW_END: &str = "SEQBENCH_WINDOW end";

/// One case of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub lang: String,
    pub target: String,
    pub command: Vec<String>,
}

/// Parses `LANG:TARGET=COMMAND`.
pub fn parse_case(text: &str) -> anyhow::Result<Case> {
    let (name, command) = text
        .split_once('=')
        .with_context(|| format!("--case {text:?}: give LANG:TARGET=COMMAND"))?;
    let (lang, target) = name
        .split_once(':')
        .with_context(|| format!("--case {text:?}: give LANG:TARGET=COMMAND"))?;
    anyhow::ensure!(
        matches!(target, "seqsvr" | "redis"),
        "--case {text:?}: the target is seqsvr or redis, not {target:?}"
    );
    anyhow::ensure!(!lang.is_empty(), "--case {text:?}: no language");
    let command: Vec<String> = command.split_whitespace().map(str::to_string).collect();
    anyhow::ensure!(!command.is_empty(), "--case {text:?}: no command");
    Ok(Case { lang: lang.to_string(), target: target.to_string(), command })
}

/// The order of round `round` (0-based): the cases rotated left by `round`.
pub fn round_order(n_cases: usize, round: usize) -> Vec<usize> {
    (0..n_cases).map(|i| (i + round) % n_cases.max(1)).collect()
}

/// One driver run, as measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SdkRun {
    pub round: usize,
    pub lang: String,
    pub target: String,
    pub values_per_s: f64,
    pub calls: u64,
    pub errors: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The driver's own CPU per call over its timed window.
    pub client_cpu_us_per_call: f64,
    /// The charged servers' CPU from the driver's start to its exit, per call.
    pub server_cpu_us_per_call: f64,
    /// Calls per coalesced batch, where the driver reports it.
    pub calls_per_batch: Option<f64>,
    /// Busy cores of the machine beyond the servers and the driver's window, over the run.
    pub other_cores: f64,
    /// The driver's wall time, start-up included.
    pub wall_s: f64,
    /// Over what the servers' CPU was counted: the driver's timed window (it printed
    /// [`WINDOW_START`] and [`WINDOW_END`]) or its whole life.
    pub server_cpu_scope: String,
    /// The driver's result as it printed it.
    pub driver: serde_json::Value,
}

/// Reads the fields every driver prints from its result JSON.
pub fn from_driver(round: usize, case: &Case, v: serde_json::Value) -> anyhow::Result<SdkRun> {
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
    let need = |k: &str| num(k).with_context(|| format!("the driver's result has no {k:?}"));
    Ok(SdkRun {
        round,
        lang: case.lang.clone(),
        target: case.target.clone(),
        values_per_s: need("values_per_s")?,
        calls: need("calls")? as u64,
        errors: num("errors").unwrap_or(0.0) as u64,
        p50_us: need("p50_us")?,
        p99_us: need("p99_us")?,
        client_cpu_us_per_call: need("client_cpu_us_per_call")?,
        server_cpu_us_per_call: 0.0,
        calls_per_batch: calls_per_batch(&v),
        other_cores: 0.0,
        wall_s: 0.0,
        server_cpu_scope: String::new(),
        driver: v,
    })
}

/// Calls per coalesced batch from a driver's result: its `calls_per_coalesced_rpc`, or `calls`
/// ÷ `coalesced_rpcs` (`seqbench run`'s fields); none for a driver that does not coalesce.
pub fn calls_per_batch(v: &serde_json::Value) -> Option<f64> {
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).filter(|x| *x > 0.0);
    num("calls_per_coalesced_rpc").or_else(|| Some(num("calls")? / num("coalesced_rpcs")?))
}

fn run_case(args: &SdksArgs, round: usize, index: usize, case: &Case) -> anyhow::Result<SdkRun> {
    let stem = format!("r{round}-{}-{}", case.lang, case.target);
    let out_file = args.out.join(format!("{stem}.result.json"));
    let mut uses_out = false;
    let argv: Vec<String> = case
        .command
        .iter()
        .map(|a| {
            if a.contains("{out}") {
                uses_out = true;
            }
            a.replace("{out}", &out_file.display().to_string())
        })
        .collect();
    let pids = if case.target == "redis" { &args.redis_pids } else { &args.seqsvr_pids };
    eprintln!(">> round {round} case {index}: {} {} ({})", case.lang, case.target, argv.join(" "));
    let started = Instant::now();
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(args.out.join(format!("{stem}.stderr")))?)
        .spawn()
        .with_context(|| format!("starting {}", argv[0]))?;
    // The servers' and the machine's CPU at the driver's window edges (or at its start and
    // exit if it prints none).
    let sample = || -> anyhow::Result<(u64, u64, Instant)> {
        Ok((crate::servers_cpu_us(pids)?, machine_busy_us()?, Instant::now()))
    };
    let mut at_start = sample()?;
    let mut at_end = None;
    let mut stdout = String::new();
    let mut scope = "driver's whole life";
    let reader = std::io::BufReader::new(child.stdout.take().context("the driver's stdout")?);
    for line in std::io::BufRead::lines(reader) {
        let line = line.context("reading the driver's stdout")?;
        match line.trim() {
            WINDOW_START => {
                at_start = sample()?;
                scope = "timed window";
            }
            WINDOW_END => at_end = Some(sample()?),
            _ => {
                stdout.push_str(&line);
                stdout.push('\n');
            }
        }
    }
    let status = child.wait().context("waiting for the driver")?;
    let at_end = match at_end {
        Some(s) => s,
        None => sample()?,
    };
    let wall = started.elapsed().as_secs_f64();
    let servers_used = at_end.0.saturating_sub(at_start.0);
    let machine_used = at_end.1.saturating_sub(at_start.1);
    let measured_s = at_end.2.duration_since(at_start.2).as_secs_f64().max(1e-3);
    std::fs::write(args.out.join(format!("{stem}.stdout")), &stdout)?;
    anyhow::ensure!(
        status.success(),
        "{} {} exited with {status} (its output is in {}/{stem}.stderr)",
        case.lang,
        case.target,
        args.out.display()
    );
    let json: serde_json::Value = if uses_out {
        let bytes = std::fs::read(&out_file)
            .with_context(|| format!("the driver wrote no {}", out_file.display()))?;
        serde_json::from_slice(&bytes).with_context(|| format!("{}", out_file.display()))?
    } else {
        let line = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .with_context(|| format!("{} {} printed no result line", case.lang, case.target))?;
        serde_json::from_str(line)
            .with_context(|| format!("{} {}: not a JSON result: {line}", case.lang, case.target))?
    };
    let mut run = from_driver(round, case, json)?;
    anyhow::ensure!(run.calls > 0, "{} {} served no call", case.lang, case.target);
    run.server_cpu_us_per_call = servers_used as f64 / run.calls as f64;
    let client_us = run.client_cpu_us_per_call * run.calls as f64;
    run.other_cores =
        ((machine_used as f64 - servers_used as f64 - client_us) / 1e6 / measured_s).max(0.0);
    run.wall_s = wall;
    run.server_cpu_scope = scope.to_string();
    eprintln!(
        "   {:.0} values/s, client {:.2} + servers {:.2} CPU µs/call, {} errors",
        run.values_per_s, run.client_cpu_us_per_call, run.server_cpu_us_per_call, run.errors
    );
    Ok(run)
}

pub fn run(args: SdksArgs) -> anyhow::Result<()> {
    let cases: Vec<Case> = args.cases.iter().map(|c| parse_case(c)).collect::<Result<_, _>>()?;
    anyhow::ensure!(args.runs > 0, "--runs 0: nothing to measure");
    anyhow::ensure!(
        !args.out.exists()
            || std::fs::read_dir(&args.out).map(|mut d| d.next().is_none()).unwrap_or(false),
        "--out {}: exists and is not empty (runs are never mixed)",
        args.out.display()
    );
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let machine_before =
        format!("{}; load average before the runs {}", cpu_model(), load_average());
    let mut runs = Vec::new();
    for round in 0..args.runs {
        for i in round_order(cases.len(), round) {
            runs.push(run_case(&args, round, i, &cases[i])?);
        }
    }
    let machine = format!("{machine_before}; at the end {}", load_average());
    let json = args.out.join("sdks.json");
    let file = SdksFile { machine: machine.clone(), runs };
    std::fs::write(&json, serde_json::to_vec_pretty(&file)?)?;
    let md = report(&file.runs, &machine);
    print!("{md}");
    if let Some(path) = &args.report {
        std::fs::write(path, &md).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(">> {} runs in {}", file.runs.len(), json.display());
    Ok(())
}

/// What a `seqbench sdks` run leaves in `sdks.json`.
#[derive(Serialize, Deserialize)]
pub struct SdksFile {
    /// The CPU model, the cores, the load average before and after.
    pub machine: String,
    pub runs: Vec<SdkRun>,
}

/// The CPU model and core count, for the report's header.
fn cpu_model() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    format!("{model}, {cores} cores")
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// What issue 32 asks of each language's SDK against the Rust SDK's values/s.
pub fn target_ratio(lang: &str) -> Option<f64> {
    match lang {
        "go" | "java" => Some(0.5),
        "python" => Some(0.2),
        _ => None,
    }
}

fn medians(runs: &[&SdkRun], f: impl Fn(&SdkRun) -> f64) -> f64 {
    median(runs.iter().map(|r| f(r)).collect())
}

/// The markdown tables: per language, seqsvr and Redis medians, the ratios and the targets.
pub fn report(runs: &[SdkRun], machine: &str) -> String {
    let mut by: BTreeMap<(String, String), Vec<&SdkRun>> = BTreeMap::new();
    let mut langs: Vec<String> = Vec::new();
    for r in runs {
        if !langs.contains(&r.lang) {
            langs.push(r.lang.clone());
        }
        by.entry((r.lang.clone(), r.target.clone())).or_default().push(r);
    }
    let rounds = runs.iter().map(|r| r.round).max().map_or(0, |m| m + 1);
    let values = |lang: &str, target: &str| {
        by.get(&(lang.to_string(), target.to_string())).map(|v| medians(v, |r| r.values_per_s))
    };
    let rust = values("rust", "seqsvr");
    let mut out = String::new();
    let _ = writeln!(out, "Machine: {machine}. Medians of {rounds} rounds, cases rotated.\n");
    out.push_str(
        "| SDK | target | values/s | ÷ Rust SDK | ÷ Redis, same language | p50 µs | p99 µs \
         | calls per batch | client CPU µs/call | servers CPU µs/call | total CPU µs/call \
         | other cores busy | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for lang in &langs {
        for target in ["seqsvr", "redis"] {
            let Some(rs) = by.get(&(lang.clone(), target.to_string())) else { continue };
            let v = medians(rs, |r| r.values_per_s);
            let client = medians(rs, |r| r.client_cpu_us_per_call);
            let servers = medians(rs, |r| r.server_cpu_us_per_call);
            let ratio_rust = match (target, rust) {
                ("seqsvr", Some(base)) if base > 0.0 => format!("{:.2}×", v / base),
                _ => "—".into(),
            };
            let ratio_redis = match (target, values(lang, "redis")) {
                ("seqsvr", Some(redis)) if redis > 0.0 => format!("{:.2}×", v / redis),
                _ => "—".into(),
            };
            let batch: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.calls_per_batch.or_else(|| calls_per_batch(&r.driver)))
                .collect();
            let batch =
                if batch.is_empty() { "—".into() } else { format!("{:.1}", median(batch)) };
            let _ = writeln!(
                out,
                "| {lang} | {} | {v:.0} | {ratio_rust} | {ratio_redis} | {:.0} | {:.0} | {batch} \
                 | {} | {} | {} | {:.2} | {} |",
                if target == "seqsvr" { "seqsvr SDK" } else { "Redis INCR, one pipelined conn" },
                medians(rs, |r| r.p50_us),
                medians(rs, |r| r.p99_us),
                cpu_text(client),
                cpu_text(servers),
                cpu_text(client + servers),
                medians(rs, |r| r.other_cores),
                rs.iter().map(|r| r.errors).sum::<u64>(),
            );
        }
    }
    out.push_str("\n| target | measured (median) | |\n|---|---|---|\n");
    for lang in &langs {
        let Some(want) = target_ratio(lang) else { continue };
        let (Some(v), Some(base)) = (values(lang, "seqsvr"), rust) else { continue };
        let got = if base > 0.0 { v / base } else { 0.0 };
        let _ = writeln!(
            out,
            "| {lang} SDK ≥ {want:.1}× the Rust SDK | {got:.2}× ({v:.0} ÷ {base:.0} values/s) | {} |",
            if got >= want { "MET" } else { "**MISSED**" }
        );
    }
    out
}

/// Reads a `sdks.json` back (for re-reporting a run).
pub fn load(path: &Path) -> anyhow::Result<SdksFile> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a seqbench sdks file", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_parse_and_bad_ones_say_why() {
        let c = parse_case("go:redis=bin/bench --target redis --seconds 10").unwrap();
        assert_eq!((c.lang.as_str(), c.target.as_str()), ("go", "redis"));
        assert_eq!(c.command, ["bin/bench", "--target", "redis", "--seconds", "10"]);
        for bad in ["go=bench", "go:memcached=bench", ":seqsvr=bench", "go:seqsvr=  "] {
            assert!(parse_case(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_case_runs_once_a_round_and_leads_one_round() {
        assert_eq!(round_order(4, 0), [0, 1, 2, 3]);
        assert_eq!(round_order(4, 1), [1, 2, 3, 0]);
        assert_eq!(round_order(4, 5), [1, 2, 3, 0]);
        let firsts: Vec<usize> = (0..4).map(|r| round_order(4, r)[0]).collect();
        assert_eq!(firsts, [0, 1, 2, 3]);
    }

    fn run(lang: &str, target: &str, values: f64, round: usize) -> SdkRun {
        let case = Case { lang: lang.into(), target: target.into(), command: vec!["x".into()] };
        let json = serde_json::json!({
            "values_per_s": values, "calls": 1000, "p50_us": 100, "p99_us": 900,
            "client_cpu_us_per_call": 3.0,
        });
        from_driver(round, &case, json).unwrap()
    }

    #[test]
    fn the_report_takes_medians_and_judges_each_language_against_its_target() {
        let mut runs = Vec::new();
        for (round, rust) in [100_000.0, 90_000.0, 110_000.0].into_iter().enumerate() {
            runs.push(run("rust", "seqsvr", rust, round));
            runs.push(run("go", "seqsvr", 60_000.0 + round as f64, round));
            runs.push(run("go", "redis", 120_000.0, round));
            runs.push(run("python", "seqsvr", 15_000.0, round));
        }
        let md = report(&runs, "test CPU");
        assert!(
            md.contains("| go SDK ≥ 0.5× the Rust SDK | 0.60× (60001 ÷ 100000 values/s) | MET |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| python SDK ≥ 0.2× the Rust SDK | 0.15× (15000 ÷ 100000 values/s) | **MISSED** |"
            ),
            "{md}"
        );
        assert!(md.contains("| go | seqsvr SDK | 60001 | 0.60× | 0.50× |"), "{md}");
        assert!(md.contains("Medians of 3 rounds"), "{md}");
    }

    #[test]
    fn calls_per_batch_comes_from_either_drivers_fields() {
        let go = serde_json::json!({"calls": 100, "calls_per_coalesced_rpc": 12.5});
        let rust = serde_json::json!({"calls": 100, "coalesced_rpcs": 8});
        let redis = serde_json::json!({"calls": 100, "coalesced_rpcs": 0});
        assert_eq!(calls_per_batch(&go), Some(12.5));
        assert_eq!(calls_per_batch(&rust), Some(12.5));
        assert_eq!(calls_per_batch(&redis), None);
    }

    #[test]
    fn a_driver_result_without_its_numbers_is_refused() {
        let case = Case { lang: "go".into(), target: "seqsvr".into(), command: vec![] };
        let err = from_driver(0, &case, serde_json::json!({"calls": 3})).unwrap_err();
        assert!(err.to_string().contains("values_per_s"), "{err}");
    }
}
