//! `seqcheck load`: the nemesis's recorded client load against a cluster someone else runs
//! (containers, another machine), described by its cluster file, while an outside script
//! injects the faults and marks them on stdin.
//!
//! Protocol on stdin, one command per line: `step NAME` marks the start of a step (the previous
//! step ends there); `stop` (or end of input) stops the load. Every call is recorded as in the
//! nemesis; at the end the history is checked and, per step, the longest stretch in which a set
//! saw no successful call is reported: what a client felt during that step.
//!
//! The clients are the nemesis's mix (`nemesis/clients.rs`): SDK clients, and plain gRPC and
//! HTTP/JSON clients of one AllocSvr of the cluster file each; a kind of client that never got a
//! value fails the run, as its part of the check would be empty.
//!
//! Beside the sequence load, the nemesis's id load (unless `id_load` is off): `NextIds` of every
//! scheme the cluster file serves (`rongcloud` included: a few sessions, each asked of its owner),
//! on every AllocSvr of the loaded sets, checked at the end for ids issued twice and ids of one
//! worker id or one session going back (G1, G2). A scheme that never got one id fails the run:
//! its checks would be empty.

use crate::history::{check, Operation, Outcome, Report};
use crate::ids::IdReport;
use crate::nemesis::clients::{self, calls_by_kind, connect_clients, silent_kinds};
use crate::nemesis::clients::{ClientKind, KindCalls};
use crate::nemesis::{id_faults, start_load};
use seqsvr_client::seq::SeqClient;
use seqsvr_core::config::ClusterConfig;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub config: PathBuf,
    pub out_dir: PathBuf,
    pub clients: usize,
    pub seed: u64,
    /// The sets to load (all of the file's when empty): a compose file may run only some.
    pub sets: Vec<u64>,
    /// How long to wait for the first successful call of every set before the load starts.
    pub connect_wait: Duration,
    /// This client's certificate and key, when the cluster file has `[tls]`.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Also issue and check ids of every served scheme (the nemesis's id load).
    pub id_load: bool,
}

/// One marked step: its name, window and, per set, the longest stretch without a successful
/// call inside the window.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StepGap {
    pub name: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub calls_ok: u64,
    pub longest_gap_ms: BTreeMap<u64, u64>,
}

#[derive(Debug, Serialize)]
pub struct LoadSummary {
    /// Per kind of client (SDK, plain gRPC, HTTP/1.1, HTTP/2): its clients and their calls.
    pub clients: BTreeMap<ClientKind, KindCalls>,
    /// The sequence history's report; id violations are mirrored into it, so `is_valid` covers
    /// both.
    pub report: Report,
    pub steps: Vec<StepGap>,
    /// The id load's report (empty without it).
    pub ids: IdReport,
}

impl LoadSummary {
    /// A Markdown table: one row per step, then the totals.
    pub fn table(&self) -> String {
        let mut t = String::from(
            "| step | duration | successful calls | longest stretch without a successful call |\n\
             |---|---|---|---|\n",
        );
        for s in &self.steps {
            let gaps: Vec<String> =
                s.longest_gap_ms.iter().map(|(set, ms)| format!("set {set}: {ms} ms")).collect();
            t.push_str(&format!(
                "| {} | {:.1} s | {} | {} |\n",
                s.name,
                (s.end_ms - s.start_ms) as f64 / 1000.0,
                s.calls_ok,
                gaps.join(", ")
            ));
        }
        let r = &self.report;
        t.push_str(&format!(
            "\nCalls: {} ok, {} failed, {} unknown, {} malformed; values handed out: {}; \
             violations: {}.\n",
            r.n_ok,
            r.n_fail,
            r.n_unknown,
            r.n_malformed,
            r.n_values,
            r.violations.len()
        ));
        if !self.clients.is_empty() {
            t.push_str("\n| clients | |\n|---|---|\n");
            t.push_str(&clients::table_rows(&self.clients));
        }
        if self.ids.n_ok + self.ids.n_fail + self.ids.n_unknown + self.ids.n_malformed > 0 {
            t.push_str("\n| ids | |\n|---|---|\n");
            t.push_str(&self.ids.table_rows());
        }
        t
    }
}

/// Per step, per set: the longest stretch in `[start, end)` without a successful completion
/// (from the window's start to the first, between two, from the last to the window's end).
pub fn step_gaps(ops: &[Operation], marks: &[(String, u64)], end_ns: u64) -> Vec<StepGap> {
    let mut ok_times: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for op in ops {
        if matches!(op.outcome, Outcome::Ok { .. }) {
            ok_times.entry(op.set).or_default().push(op.complete_ns);
        }
    }
    for times in ok_times.values_mut() {
        times.sort_unstable();
    }
    let sets: Vec<u64> = ops
        .iter()
        .map(|op| op.set)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    marks
        .iter()
        .enumerate()
        .map(|(i, (name, start))| {
            let end = marks.get(i + 1).map_or(end_ns, |(_, t)| *t).max(*start);
            let mut calls_ok = 0;
            let mut longest_gap_ms = BTreeMap::new();
            for &set in &sets {
                let times = ok_times.get(&set).map(Vec::as_slice).unwrap_or(&[]);
                let inside: Vec<u64> =
                    times.iter().copied().filter(|&t| t >= *start && t < end).collect();
                calls_ok += inside.len() as u64;
                let mut previous = *start;
                let mut gap = 0;
                for t in inside {
                    gap = gap.max(t - previous);
                    previous = t;
                }
                gap = gap.max(end - previous);
                longest_gap_ms.insert(set, gap / 1_000_000);
            }
            StepGap {
                name: name.clone(),
                start_ms: start / 1_000_000,
                end_ms: end / 1_000_000,
                calls_ok,
                longest_gap_ms,
            }
        })
        .collect()
}

/// Hot uids spread over every set's range, 16 per set (as the nemesis uses).
fn hot_uids(config: &ClusterConfig) -> Vec<(u64, u64)> {
    let mut uids = Vec::new();
    for set in &config.sets {
        let span = set.uid_end - set.uid_begin;
        for i in 0..16u64 {
            uids.push((set.id.0, set.uid_begin + (span / 16) * i + i));
        }
    }
    uids
}

/// Runs the load until `stop` or end of input on stdin; writes `history.jsonl`, `report.json`
/// and `summary.md` to the out dir. `Err` means the run itself failed (no cluster to talk to).
pub async fn run(cfg: LoadConfig) -> anyhow::Result<LoadSummary> {
    let text = std::fs::read_to_string(&cfg.config)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", cfg.config.display()))?;
    let mut config = ClusterConfig::from_toml_str(&text)
        .map_err(|e| anyhow::anyhow!("in {}: {e}", cfg.config.display()))?;
    let (cert, key) = (cfg.tls_cert.as_deref(), cfg.tls_key.as_deref());
    seqsvr_client::tls::use_cluster_identity(config.tls.as_ref(), &cfg.config, cert, key)?;
    if !cfg.sets.is_empty() {
        for id in &cfg.sets {
            anyhow::ensure!(
                config.sets.iter().any(|s| s.id.0 == *id),
                "set {id} is not in {}",
                cfg.config.display()
            );
        }
        config.sets.retain(|s| cfg.sets.contains(&s.id.0));
    }
    std::fs::create_dir_all(&cfg.out_dir)?;
    let seeds: Vec<String> = config.sets.iter().flat_map(|s| s.allocs.clone()).collect();
    anyhow::ensure!(!seeds.is_empty(), "{} lists no AllocSvr", cfg.config.display());
    let probe = SeqClient::connect(&seeds, cfg.connect_wait).await?;
    let uids = hot_uids(&config);
    for set in &config.sets {
        let uid = set.uid_begin;
        probe.next(uid, cfg.connect_wait).await.map_err(|s| {
            anyhow::anyhow!(
                "set {} does not serve (uid {uid}): {:?} {}",
                set.id,
                s.code(),
                s.message()
            )
        })?;
    }
    let t0 = Instant::now();
    let clients = connect_clients(cfg.clients, &config.sets, &seeds, cfg.connect_wait).await?;
    let load = start_load(clients, uids, cfg.seed, t0);
    let (mut id_schemes, id_layouts) =
        id_faults::served_schemes(&config.ids, &config.sets, cfg.seed)?;
    if !cfg.id_load {
        id_schemes.clear(); // no id load, and no scheme is required to have been served
    }
    let id_allocs: Vec<(u64, String)> = config
        .sets
        .iter()
        .flat_map(|s| s.allocs.iter().map(move |a| (s.id.0, a.clone())))
        .collect();
    let id_names: Vec<&str> = id_schemes.iter().map(|s| s.name.as_str()).collect();
    if !id_names.is_empty() {
        eprintln!("load: ids of {} on {} AllocSvrs", id_names.join(", "), id_allocs.len());
    }
    let id_load = id_faults::start_id_load(id_allocs, id_schemes.clone(), cfg.seed, t0);
    eprintln!("load: {} clients running; mark steps on stdin (`step NAME`, `stop`)", cfg.clients);
    let mut marks: Vec<(String, u64)> = vec![("start".into(), 0)];
    // Stdin is read on a thread of its own (blocking reads), one line at a time.
    let (line_tx, mut lines) = tokio::sync::mpsc::channel::<String>(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if line_tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = lines.recv().await {
        let line = line.trim();
        if line == "stop" {
            break;
        }
        if let Some(name) = line.strip_prefix("step ") {
            let at = t0.elapsed().as_nanos() as u64;
            eprintln!(
                "load: step {name:?} at {:.1} s ({} successful calls so far)",
                at as f64 / 1e9,
                load.ok.load(Ordering::Relaxed)
            );
            marks.push((name.trim().to_string(), at));
        } else if !line.is_empty() {
            eprintln!("load: ignoring {line:?} (expected `step NAME` or `stop`)");
        }
    }
    let kinds = load.kinds.clone();
    let ops = load.finish(&cfg.out_dir).await?;
    let end_ns = t0.elapsed().as_nanos() as u64;
    let mut report = check(&ops);
    let clients = calls_by_kind(&ops, &kinds, &report.violations);
    let id_calls = id_load.finish(&cfg.out_dir).await?;
    let ids = crate::ids::check(&id_calls, &id_layouts);
    ids.mirror_into(&mut report, &id_calls);
    let unserved = id_faults::unserved(&ids, &id_schemes).or_else(|| silent_kinds(&clients));
    let summary = LoadSummary { steps: step_gaps(&ops, &marks, end_ns), clients, report, ids };
    std::fs::write(cfg.out_dir.join("report.json"), serde_json::to_string_pretty(&summary)?)?;
    std::fs::write(cfg.out_dir.join("summary.md"), summary.table())?;
    if let Some(e) = unserved {
        if summary.report.is_valid() {
            // Nothing broken was seen, but part of the check is empty: not a pass.
            return Err(e);
        }
        eprintln!("load: {e}");
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(set: u64, complete_ms: u64) -> Operation {
        Operation {
            client: 0,
            set,
            uids: vec![1],
            invoke_ns: complete_ms * 1_000_000,
            complete_ns: complete_ms * 1_000_000,
            outcome: Outcome::Ok { values: vec![complete_ms] },
        }
    }

    #[test]
    fn a_step_reports_the_longest_stretch_without_success_per_set_including_its_edges() {
        let ops = vec![
            ok(0, 10),
            ok(0, 20),
            ok(0, 150), // set 0: 20 → 150 is the longest inside step "kill"
            ok(0, 190),
            ok(1, 105),
            Operation { outcome: Outcome::Unknown { reason: "timeout".into() }, ..ok(0, 120) },
        ];
        let marks = vec![("start".to_string(), 0), ("kill".to_string(), 100_000_000)];
        let steps = step_gaps(&ops, &marks, 200_000_000);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].name, "start");
        assert_eq!(steps[0].calls_ok, 2);
        // Set 0 in [0, 100): 0→10, 10→20, 20→100 (the window's end): 80 ms.
        assert_eq!(steps[0].longest_gap_ms[&0], 80);
        // Set 1 had no success at all in [0, 100): the whole window.
        assert_eq!(steps[0].longest_gap_ms[&1], 100);
        // Set 0 in [100, 200): 100→150 is 50, 150→190 is 40, 190→200 is 10; the unknown call
        // at 120 does not count.
        assert_eq!(steps[1].longest_gap_ms[&0], 50);
        assert_eq!(steps[1].longest_gap_ms[&1], 95);
        assert_eq!(steps[1].calls_ok, 3);
        let mut summary = LoadSummary {
            report: check(&ops),
            steps,
            clients: BTreeMap::new(),
            ids: IdReport::default(),
        };
        let table = summary.table();
        assert!(table.contains("| kill | 0.1 s | 3 |"), "{table}");
        assert!(!table.contains("id calls"), "no id load, no id rows: {table}");
        summary.ids.n_ok = 4;
        summary.ids.n_ids = 40;
        assert!(summary.table().contains("| id calls | 4 ok (40 ids)"), "{}", summary.table());
    }
}
