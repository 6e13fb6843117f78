//! The nemesis runner: a real local cluster (every link proxied, AllocSvrs under libfaketime),
//! concurrent clients recording a history, and a seeded schedule of faults, each healed and
//! recovered from before the next. At the end the history is checked and saved.
//!
//! A fault whose precondition does not hold when its turn comes (a leader moved, a section is
//! mid-hand-over, a membership change is pending, the machine is slow) is not a failed run: the
//! runner heals the cluster and retries it a bounded number of times, then skips it, and the
//! report counts every kind's runs and skips with their reasons. The run fails only when a
//! scheduled fault kind could not run at all, or when the cluster does not recover.
//!
//! Ids (issue 10): beside the seq load, an id load calls `IdService.NextIds` (`ids.jsonl`,
//! checked by [`crate::ids::check`]); id violations count as violations of the run
//! (`nemesis/id_faults.rs`).
//!
//! Clients (issue 31, `nemesis/clients.rs`): of every four, two use the SDK, one is a plain
//! gRPC client of one AllocSvr and one an HTTP/JSON client of one AllocSvr (HTTP/1.1 and
//! HTTP/2 in turn); the last two reach the owners of other uids through forwarding.

pub(crate) mod clients;
pub(crate) mod id_faults;
mod lease_faults;
mod membership;

use crate::cluster::{wait_until, Cluster, ClusterOptions, ProcKey, LIBFAKETIME, WAIT_MAX};
use crate::history::{check, write_jsonl, Operation, Outcome, Report, Violation};
use clients::{calls_by_kind, connect_clients, outcome_of, ClientKind, KindCalls, LoadClient};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use seqsvr_client::seq::SeqClient;
use seqsvr_core::ids::{LeaseEpoch, NodeId, Seq, SetId};
use seqsvr_proto::v1 as pb;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::Code;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// `kill -9` one AllocSvr, restart it.
    KillAlloc,
    /// `kill -9` a set's store leader, restart it.
    KillStoreLeader,
    /// `kill -9` a majority of a set's store members (leader included), restart them.
    KillStoreMajority,
    /// SIGSTOP an AllocSvr for longer than its lease, then SIGCONT.
    PauseAlloc,
    /// Cut every link between an AllocSvr and its set's store members.
    PartitionAlloc,
    /// Cut the store leader off from the other members.
    IsolateStoreLeader,
    /// Jump an AllocSvr's wall clock forward, then 2 h back while it is cut off from its store
    /// members until another AllocSvr serves its section, then ask it for a value there: a lease
    /// on the wall clock would still look valid (`nemesis/lease_faults.rs`).
    ClockJump,
    /// Play a deposed AllocSvr that missed the end of its lease (a lease bug, an extreme clock
    /// error): move a section away from its owner, then, as the old owner with its old lease
    /// epoch, try to extend the section's range and serve from it. Fencing must refuse the
    /// advance; if it does not, the value served collides with the new owner's.
    ZombieAdvance,
    /// A store member loses its disk: remove it from the Raft group (the leader hands over
    /// first if it is the one), kill it, wipe its data dir, start it empty (it must not vote),
    /// add it back as a learner with the same id and address, promote it once caught up.
    ReplaceMember,
    /// Several leader transfers to different voters in quick succession, while clients run.
    TransferLeaderStorm,
    /// Hold the store's answers to an AllocSvr for most of its heartbeat timeout, let a held
    /// grant through, cut it off, and once another AllocSvr serves its section ask it for a
    /// value there: a lease measured from the answer's arrival would still look valid
    /// (`nemesis/lease_faults.rs`).
    DelayAllocReplies,
    /// `kill -9` an AllocSvr, set its wall clock 5 to 120 s back, restart it once its
    /// registration expired (its worker ids may come back to it), later restart it with its
    /// clock right: ids must stay unique and one worker's ids increasing
    /// (`nemesis/id_faults.rs`).
    ClockBackRestart,
}

pub const ALL_FAULTS: [FaultKind; 12] = [
    FaultKind::KillAlloc,
    FaultKind::KillStoreLeader,
    FaultKind::KillStoreMajority,
    FaultKind::PauseAlloc,
    FaultKind::PartitionAlloc,
    FaultKind::IsolateStoreLeader,
    FaultKind::ClockJump,
    FaultKind::ZombieAdvance,
    FaultKind::ReplaceMember,
    FaultKind::TransferLeaderStorm,
    FaultKind::DelayAllocReplies,
    FaultKind::ClockBackRestart,
];

impl FaultKind {
    pub fn parse(name: &str) -> Option<FaultKind> {
        ALL_FAULTS.iter().copied().find(|k| k.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillAlloc => "kill-alloc",
            FaultKind::KillStoreLeader => "kill-store-leader",
            FaultKind::KillStoreMajority => "kill-store-majority",
            FaultKind::PauseAlloc => "pause-alloc",
            FaultKind::PartitionAlloc => "partition-alloc",
            FaultKind::IsolateStoreLeader => "isolate-store-leader",
            FaultKind::ClockJump => "clock-jump",
            FaultKind::ZombieAdvance => "zombie-advance",
            FaultKind::ReplaceMember => "replace-member",
            FaultKind::TransferLeaderStorm => "transfer-leader-storm",
            FaultKind::DelayAllocReplies => "delay-alloc-replies",
            FaultKind::ClockBackRestart => "clock-back-restart",
        }
    }
}

/// One scheduled fault with its target, drawn from the seed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub set: u64,
    /// Which AllocSvr of the set (AllocSvr faults).
    pub alloc: usize,
    /// Which store member (membership faults): an index into the set's members, taken modulo
    /// their number ([`MEMBER_PICKS`] is a multiple of 3, 4 and 5).
    pub member: usize,
}

/// The range `Fault::member` is drawn from.
pub const MEMBER_PICKS: usize = 60;

/// The fault schedule of a seed: every kind once in a seeded order, then seeded draws. The
/// same seed always gives the same schedule.
pub fn schedule(seed: u64, kinds: &[FaultKind], n: usize, sets: u64, allocs: usize) -> Vec<Fault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut order: Vec<FaultKind> = kinds.to_vec();
    order.shuffle(&mut rng);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let kind = if i < order.len() { order[i] } else { order[rng.random_range(0..order.len())] };
        out.push(Fault {
            kind,
            set: rng.random_range(0..sets),
            alloc: rng.random_range(0..allocs.max(1)),
            member: rng.random_range(0..MEMBER_PICKS),
        });
    }
    out
}

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub seconds: u64,
    pub seed: u64,
    pub out_dir: PathBuf,
    pub sets: u64,
    pub clients: usize,
    pub kinds: Vec<FaultKind>,
    pub step: u64,
    /// Lease terms of the run's cluster (`None`: the harness's defaults, lease 1500 ms, margin
    /// 200 ms, heartbeat 300 ms).
    pub lease_ms: Option<u64>,
    pub lease_margin_ms: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    /// Issue and check ids during the run (`--no-id-load` turns it off).
    pub id_load: bool,
}

/// What became of one scheduled fault.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum FaultResult {
    Ran,
    /// Could not run in any of its attempts; `reason` is the last attempt's.
    Skipped {
        reason: String,
    },
}

/// One scheduled fault as it happened: when, how many attempts, and what it did (the same text
/// the run prints).
#[derive(Clone, Debug, Serialize)]
pub struct FaultRecord {
    #[serde(flatten)]
    pub fault: Fault,
    /// Seconds since the run started.
    pub at_s: f64,
    pub attempts: u32,
    #[serde(flatten)]
    pub result: FaultResult,
    pub log: String,
}

/// Per fault kind: how often it ran, how often it was skipped and why.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KindTally {
    pub ran: u64,
    pub skipped: u64,
    /// Attempts that could not run and were tried again (whether or not a later one ran).
    pub retried: u64,
    pub skip_reasons: BTreeMap<String, u64>,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub seconds: u64,
    pub faults: Vec<FaultRecord>,
    pub faults_by_kind: BTreeMap<&'static str, KindTally>,
    /// Per kind of client (SDK, plain gRPC, HTTP/1.1, HTTP/2): its clients and their calls.
    pub clients: BTreeMap<ClientKind, KindCalls>,
    /// The seq history's report; id violations are mirrored into its `violations` too (see
    /// [`crate::ids::IdReport::mirror_into`]), so one verdict covers both.
    pub report: Report,
    /// The id history's report (`ids.jsonl`).
    pub ids: crate::ids::IdReport,
}

impl Summary {
    pub fn table(&self) -> String {
        let r = &self.report;
        let mut t = String::new();
        t.push_str(&format!("| seed | {} |\n|---|---|\n", self.seed));
        t.push_str(&format!("| duration | {:.1} s |\n", r.duration_s));
        t.push_str(&format!(
            "| operations | {} ok, {} failed, {} unknown, {} malformed ({} values) |\n",
            r.n_ok, r.n_fail, r.n_unknown, r.n_malformed, r.n_values
        ));
        t.push_str(&clients::table_rows(&self.clients));
        t.push_str(&format!("| ok operations/s | {:.0} |\n", r.ops_per_s));
        for (set, gap) in &r.longest_gap_ms {
            t.push_str(&format!(
                "| set {set}: longest stretch without a successful call | {gap} ms |\n"
            ));
        }
        for (kind, n) in &self.faults_by_kind {
            let mut cell = format!("{} ran", n.ran);
            if n.skipped > 0 {
                let reasons: Vec<String> =
                    n.skip_reasons.iter().map(|(why, k)| format!("{k}× {why}")).collect();
                cell.push_str(&format!(", {} skipped ({})", n.skipped, reasons.join("; ")));
            }
            if n.retried > 0 {
                cell.push_str(&format!(", {} attempts retried", n.retried));
            }
            t.push_str(&format!("| faults: {kind} | {} |\n", cell.replace('|', "/")));
        }
        t.push_str(&self.ids.table_rows());
        t.push_str(&format!("| violations (seq and id) | {} |\n", r.violations.len()));
        t
    }
}

pub(crate) struct Load {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) ops: Arc<Mutex<Vec<Operation>>>,
    pub(crate) ok: Arc<AtomicU64>,
    pub(crate) tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Each client's kind, by client index (`Operation::client`).
    pub(crate) kinds: Vec<ClientKind>,
}

impl Load {
    /// Stops the callers, waits for their last calls, and saves the history as
    /// `history.jsonl` in `out_dir`.
    pub(crate) async fn finish(self, out_dir: &std::path::Path) -> anyhow::Result<Vec<Operation>> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = t.await;
        }
        let ops = Arc::try_unwrap(self.ops).map_err(|_| anyhow::anyhow!("load still running"))?;
        let ops = ops.into_inner().unwrap_or_else(|e| e.into_inner());
        write_jsonl(
            &ops,
            std::io::BufWriter::new(std::fs::File::create(out_dir.join("history.jsonl"))?),
        )?;
        Ok(ops)
    }
}

/// Concurrent callers per client, sharing its `SeqClient`: their calls to one AllocSvr get
/// coalesced into one RPC, so the SDK's coalescing is under test too. (An HTTP client's callers
/// have a connection each.)
const WORKERS_PER_CLIENT: usize = 2;

/// Each client has its own `SeqClient`, hence its own route table, as independent application
/// servers would: during a hand-over some still go to the old owner while others already go to
/// the new one, which is exactly where a broken hand-over shows. Plain and HTTP clients
/// ([`LoadClient::Plain`], [`LoadClient::Http`]) go through forwarding, where a hand-over shows
/// at the hop.
pub(crate) fn start_load(
    clients: Vec<LoadClient>,
    uids: Vec<(u64, u64)>,
    seed: u64,
    t0: Instant,
) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(Mutex::new(Vec::new()));
    let ok = Arc::new(AtomicU64::new(0));
    let kinds: Vec<ClientKind> = clients.iter().map(LoadClient::kind).collect();
    let tasks = clients
        .into_iter()
        .enumerate()
        .flat_map(|(c, client)| {
            // A few hot uids per client, overlapping between clients: a client whose uids
            // all sit on one AllocSvr keeps its route table as long as that AllocSvr
            // answers, like a real application server would.
            let mut rng = StdRng::seed_from_u64(seed ^ ((c as u64 + 1) * 0x9E37_79B9));
            let mine: Vec<(u64, u64)> =
                (0..4).map(|_| uids[rng.random_range(0..uids.len())]).collect();
            (0..WORKERS_PER_CLIENT).map(move |w| (c, w, client.clone(), mine.clone()))
        })
        .map(|(c, w, client, mine)| {
            let (stop, ops, ok) = (stop.clone(), ops.clone(), ok.clone());
            tokio::spawn(async move {
                let mut rng =
                    StdRng::seed_from_u64(seed ^ ((c as u64 + 1) * 0x9E37_79B9) ^ (w as u64 + 1));
                // A plain or HTTP client has no retry policy of its own: after a failure it
                // waits as the SDK would before the next call (jittered, doubling, reset by a
                // success), instead of failing again at once against an AllocSvr that is down
                // (a refused connection fails in microseconds: a spin of unknowns).
                let pauses = !matches!(client.kind(), ClientKind::Sdk);
                let mut backoff = seqsvr_client::retry::RetryPolicy::STANDARD
                    .backoff_seeded(seed ^ ((c as u64) << 8) ^ w as u64);
                while !stop.load(Ordering::SeqCst) {
                    let (set, first) = mine[rng.random_range(0..mine.len())];
                    let batch: Vec<u64> = if rng.random_bool(0.1) {
                        let same_set: Vec<u64> =
                            mine.iter().filter(|(s, _)| *s == set).map(|&(_, u)| u).collect();
                        (0..rng.random_range(2..5))
                            .map(|_| same_set[rng.random_range(0..same_set.len())])
                            .collect()
                    } else {
                        vec![first]
                    };
                    let invoke_ns = t0.elapsed().as_nanos() as u64;
                    let result = if batch.len() == 1 {
                        client.next(batch[0], Duration::from_secs(3)).await
                    } else {
                        client.next_batch(&batch, Duration::from_secs(3)).await
                    };
                    let complete_ns = t0.elapsed().as_nanos() as u64;
                    let failed = result.is_err();
                    if !failed {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    let outcome = outcome_of(result);
                    ops.lock().unwrap_or_else(|e| e.into_inner()).push(Operation {
                        client: c as u32,
                        set,
                        uids: batch,
                        invoke_ns,
                        complete_ns,
                        outcome,
                    });
                    match (pauses, failed) {
                        (true, true) => tokio::time::sleep(backoff.next_delay()).await,
                        (true, false) => backoff.reset(),
                        (false, _) => {}
                    }
                }
            })
        })
        .collect();
    Load { stop, ops, ok, tasks, kinds }
}

/// Attempts per scheduled fault: one that cannot run now is retried after the cluster healed,
/// then skipped.
const ATTEMPTS: u32 = 3;
/// Once the time is up, a kind that has not run yet gets this many more scheduled faults.
const LATE_CHANCES: u32 = 2;

/// Runs one nemesis session. `Err` means the run itself could not be carried out (the cluster
/// did not recover in time, a scheduled fault kind could not run at all); violations are in
/// the summary. The history and report are written either way.
pub async fn run(cfg: RunConfig) -> anyhow::Result<Summary> {
    std::fs::create_dir_all(&cfg.out_dir)?;
    let faketime = std::path::Path::new(LIBFAKETIME).exists();
    let needs_faketime =
        |k: FaultKind| matches!(k, FaultKind::ClockJump | FaultKind::ClockBackRestart);
    let kinds: Vec<FaultKind> =
        cfg.kinds.iter().copied().filter(|&k| !needs_faketime(k) || faketime).collect();
    if kinds.len() < cfg.kinds.len() {
        eprintln!(
            "warning: {LIBFAKETIME} missing (Debian package faketime): no clock-jump or \
             clock-back-restart faults"
        );
    }
    anyhow::ensure!(!kinds.is_empty(), "no fault kinds to inject");
    let mut options = ClusterOptions {
        sets: cfg.sets,
        allocs_per_set: 2,
        proxied: true,
        faketime,
        n_sections: 200,
        ..ClusterOptions::default()
    };
    options.alloc.step = cfg.step;
    options.alloc.lease_ms = cfg.lease_ms.unwrap_or(options.alloc.lease_ms);
    options.alloc.lease_margin_ms = cfg.lease_margin_ms.unwrap_or(options.alloc.lease_margin_ms);
    options.alloc.heartbeat_ms = cfg.heartbeat_ms.unwrap_or(options.alloc.heartbeat_ms);
    options.alloc.validate().map_err(|e| anyhow::anyhow!("lease terms: {e}"))?;
    let allocs = options.allocs_per_set;
    let mut cluster = Cluster::start(options);
    let client = Arc::new(SeqClient::connect(&seeds(&cluster), WAIT_MAX).await?);
    serving(&cluster, &client).await?;
    eprintln!(
        "cluster serving ({} sets); data and logs in {}",
        cfg.sets,
        cluster.dir.path().display()
    );
    for set in &cluster.config.sets {
        if let Ok(l) = membership::leader_status(&cluster, set.id, WAIT_MAX).await {
            let m: Vec<String> = l.members.iter().map(|m| format!("{}@{}", m.id, m.addr)).collect();
            eprintln!("set {}: leader {}, members [{}]", set.id, l.id, m.join(", "));
        }
    }

    // Hot uids spread over every set's sections: contention per uid makes order matter.
    let mut uids = Vec::new();
    for set in &cluster.config.sets {
        let span = set.uid_end - set.uid_begin;
        for i in 0..16u64 {
            uids.push((set.id.0, set.uid_begin + (span / 16) * i + i));
        }
    }
    let t0 = Instant::now();
    let clients =
        connect_clients(cfg.clients, &cluster.config.sets, &seeds(&cluster), WAIT_MAX).await?;
    let load = start_load(clients, uids, cfg.seed, t0);
    // ---- ids (issue 10): the id load on every AllocSvr of every set ----
    let (mut id_schemes, id_layouts) =
        id_faults::served_schemes(&cluster.config.ids, &cluster.config.sets, cfg.seed)?;
    if !cfg.id_load {
        id_schemes.clear(); // no id load, and no scheme is required to have been served
    }
    let id_allocs: Vec<(u64, String)> = cluster
        .config
        .sets
        .iter()
        .flat_map(|s| s.allocs.iter().map(move |a| (s.id.0, a.clone())))
        .collect();
    let id_load = id_faults::start_id_load(id_allocs, id_schemes.clone(), cfg.seed, t0);
    let plan = schedule(cfg.seed, &kinds, 10_000, cfg.sets, allocs);
    let mut records: Vec<FaultRecord> = Vec::new();
    let mut tally: BTreeMap<FaultKind, KindTally> =
        kinds.iter().map(|&k| (k, KindTally::default())).collect();
    let mut late_chances: BTreeMap<FaultKind, u32> = BTreeMap::new();
    let until = t0 + Duration::from_secs(cfg.seconds);
    let mut run_error = None;
    let mut anomalies = false;
    // Violations a fault saw itself (not in the history's order alone): added to the report.
    let mut fault_violations: Vec<Violation> = Vec::new();
    for fault in plan {
        if Instant::now() >= until {
            // Past the time only for kinds that have not run yet, a few more chances each.
            let missing: Vec<FaultKind> = kinds
                .iter()
                .copied()
                .filter(|k| {
                    tally[k].ran == 0 && late_chances.get(k).copied().unwrap_or(0) < LATE_CHANCES
                })
                .collect();
            if missing.is_empty() {
                break;
            }
            if !missing.contains(&fault.kind) {
                continue;
            }
            *late_chances.entry(fault.kind).or_insert(0) += 1;
        }
        let ctx = Ctx {
            client: &client,
            ops: &load.ops,
            ids: &id_load.recorder,
            t0,
            log: Mutex::new(String::new()),
            anomaly: AtomicBool::new(false),
            violations: Mutex::new(Vec::new()),
        };
        let ran = run_fault(&mut cluster, &fault, &ctx, &load.ok).await;
        // What the fault saw itself counts whether or not it could finish.
        fault_violations.append(&mut ctx.violations.lock().unwrap_or_else(|e| e.into_inner()));
        match ran {
            Ok((at_s, attempts, result)) => {
                let t = tally.entry(fault.kind).or_default();
                t.retried += u64::from(attempts - 1);
                match &result {
                    FaultResult::Ran => t.ran += 1,
                    FaultResult::Skipped { reason } => {
                        t.skipped += 1;
                        *t.skip_reasons.entry(reason_key(reason)).or_insert(0) += 1;
                    }
                }
                anomalies |= ctx.anomaly.load(Ordering::SeqCst);
                records.push(FaultRecord {
                    at_s,
                    fault,
                    attempts,
                    result,
                    log: ctx.log.into_inner().unwrap_or_else(|e| e.into_inner()),
                });
            }
            Err(e) => {
                eprintln!();
                run_error =
                    Some(e.context(format!("during {} on set {}", fault.kind.name(), fault.set)));
                break;
            }
        }
    }
    if run_error.is_none() {
        let never: Vec<String> = tally
            .iter()
            .filter(|(_, t)| t.ran == 0)
            .map(|(k, t)| {
                let why: Vec<&str> = t.skip_reasons.keys().map(|r| r.as_str()).collect();
                format!("{} ({})", k.name(), why.join("; "))
            })
            .collect();
        if !never.is_empty() {
            run_error = Some(anyhow::anyhow!(
                "fault kinds that could not run at all: {}",
                never.join(", ")
            ));
        }
    }
    let kinds = load.kinds.clone();
    let ops = load.finish(&cfg.out_dir).await?;
    let mut report = check(&ops);
    let clients = calls_by_kind(&ops, &kinds, &report.violations);
    if run_error.is_none() {
        run_error = clients::silent_kinds(&clients);
    }
    report.violations.extend(fault_violations);
    // ---- ids: check, fail the run if a scheme was never served, mirror the violations ----
    let id_calls = id_load.finish(&cfg.out_dir).await?;
    let ids = crate::ids::check(&id_calls, &id_layouts);
    if run_error.is_none() {
        run_error = id_faults::unserved(&ids, &id_schemes);
    }
    ids.mirror_into(&mut report, &id_calls);
    let faults_by_kind = tally.into_iter().map(|(k, t)| (k.name(), t)).collect();
    let summary = Summary {
        seed: cfg.seed,
        seconds: cfg.seconds,
        faults: records,
        faults_by_kind,
        clients,
        report,
        ids,
    };
    std::fs::write(cfg.out_dir.join("report.json"), serde_json::to_vec_pretty(&summary)?)?;
    std::fs::write(cfg.out_dir.join("summary.md"), summary.table())?;
    let retried = summary.faults_by_kind.values().any(|t| t.retried > 0 || t.skipped > 0);
    if !summary.report.is_valid() || run_error.is_some() || retried || anomalies {
        // Keep the cluster's logs for a look: a violation, a failed run, a fault that could
        // not run at its first attempt, or an anomaly a fault flagged.
        cluster.dir.disable_cleanup(true);
        eprintln!("cluster data and logs kept in {}", cluster.dir.path().display());
    }
    if let Some(e) = run_error {
        if !summary.report.is_valid() {
            // A violation outranks a run that could not finish: report it (exit 1), and say
            // why the run stopped.
            eprintln!("\nthe run also stopped early: {e:#}");
            return Ok(summary);
        }
        eprintln!("\n{}", summary.table());
        return Err(e);
    }
    Ok(summary)
}

/// A skip reason without the parts that differ from run to run (ports, numbers), so the
/// report's per-kind reasons group; the full text is in the fault's log.
fn reason_key(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    let mut in_number = false;
    for c in reason.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out.replace("N.N.N.N:N", "ADDR").chars().take(160).collect()
}

/// Runs one scheduled fault: up to [`ATTEMPTS`] attempts, the cluster healed after each one
/// that could not run; then waits until every set serves again and some traffic went through.
/// `Err` only when the cluster does not recover.
async fn run_fault(
    cluster: &mut Cluster,
    fault: &Fault,
    ctx: &Ctx<'_>,
    ok: &AtomicU64,
) -> anyhow::Result<(f64, u32, FaultResult)> {
    let started = ctx.t0.elapsed().as_secs_f64();
    eprint!("[{started:7.1}s] {:<22} set {} ", fault.kind.name(), fault.set);
    let mut attempts = 0;
    let result = loop {
        attempts += 1;
        match inject(cluster, fault, ctx).await {
            Ok(()) => break FaultResult::Ran,
            Err(e) => {
                let reason = format!("{e:#}");
                ctx.say(format!("[attempt {attempts} could not run: {reason}] "));
                heal(cluster, ctx).await?;
                if attempts >= ATTEMPTS {
                    ctx.say("SKIPPED ".to_string());
                    break FaultResult::Skipped { reason };
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let healed = ctx.t0.elapsed().as_secs_f64();
    serving(cluster, ctx.client).await?;
    let recovered = ctx.t0.elapsed().as_secs_f64();
    eprintln!(
        "healed after {:.1}s, serving again {:.1}s later; {} ok calls so far",
        healed - started,
        recovered - healed,
        ok.load(Ordering::Relaxed)
    );
    // Some quiet traffic between faults.
    let ok_before = ok.load(Ordering::Relaxed);
    wait_until("traffic between faults", WAIT_MAX, || async {
        (ok.load(Ordering::Relaxed) >= ok_before + 200).then_some(())
    })
    .await?;
    Ok((started, attempts, result))
}

/// Undoes whatever an interrupted fault left behind: heals every link, resumes paused
/// processes, resets wall clocks, starts stopped processes, makes every store member a voter
/// again. `Err` when the cluster cannot be brought back.
async fn heal(cluster: &mut Cluster, ctx: &Ctx<'_>) -> anyhow::Result<()> {
    cluster.heal_all_links();
    let keys: Vec<ProcKey> = cluster.procs.iter().map(|p| p.key).collect();
    for key in keys {
        if cluster.is_running_proc(key) {
            cluster.pause(key, false);
        } else {
            ctx.say(format!("[heal: restarting {key:?}] "));
            cluster.start_proc(key);
        }
        if matches!(key, ProcKey::Alloc(..)) {
            cluster.set_wall_clock_offset(key, "+0");
        }
    }
    let sets: Vec<SetId> = cluster.config.sets.iter().map(|s| s.id).collect();
    for set in sets {
        membership::repair(cluster, set, ctx).await.map_err(|e| e.context("healing"))?;
    }
    Ok(())
}

/// Like [`Cluster::wait_serving`], but an error instead of a panic when it takes too long.
async fn serving(cluster: &Cluster, client: &SeqClient) -> anyhow::Result<()> {
    cluster.try_wait_serving(client).await
}

fn seeds(cluster: &Cluster) -> Vec<String> {
    cluster.config.sets.iter().flat_map(|s| s.allocs.first().cloned()).collect()
}

/// What a fault may need from the run: a client, the history to add its own calls to, and the
/// fault's log (printed as it goes and kept in the report).
struct Ctx<'a> {
    client: &'a SeqClient,
    ops: &'a Mutex<Vec<Operation>>,
    /// The id history, for faults that call `NextIds` themselves.
    ids: &'a id_faults::IdRecorder,
    t0: Instant,
    log: Mutex<String>,
    /// Something worth a look that is not a violation (a server answer that breaks a rule the
    /// fault checks): the cluster's logs are kept.
    anomaly: AtomicBool,
    /// Violations the fault saw itself, which the history's order alone does not show (an
    /// AllocSvr that served after the store had settled its section elsewhere, I3).
    violations: Mutex<Vec<Violation>>,
}

impl Ctx<'_> {
    /// Prints `text` on the fault's line and keeps it in the fault's log.
    fn say(&self, text: String) {
        eprint!("{text}");
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push_str(&text);
    }

    /// Like [`Ctx::say`], and marks the run as having something worth a look.
    fn flag(&self, text: String) {
        self.anomaly.store(true, Ordering::SeqCst);
        self.say(text);
    }

    /// Like [`Ctx::flag`], and counts `violation` in the run's report (the run fails).
    fn violate(&self, violation: Violation, text: String) {
        self.violations.lock().unwrap_or_else(|e| e.into_inner()).push(violation);
        self.flag(text);
    }
}

/// Runs one fault and heals it. `Err`: it could not run now (its precondition did not hold or
/// changed under it); the runner heals whatever it left and may try again.
async fn inject(cluster: &mut Cluster, fault: &Fault, ctx: &Ctx<'_>) -> anyhow::Result<()> {
    let set = SetId(fault.set);
    let alloc = ProcKey::Alloc(set, fault.alloc);
    let lease =
        Duration::from_millis(cluster.config.alloc.lease_ms + cluster.config.alloc.lease_margin_ms);
    let leader_wait = Duration::from_secs(20);
    match fault.kind {
        FaultKind::KillAlloc => {
            ctx.say(format!("(alloc {}) ", fault.alloc));
            cluster.kill9_proc(alloc);
            tokio::time::sleep(Duration::from_millis(500)).await;
            cluster.start_proc(alloc);
        }
        FaultKind::KillStoreLeader => {
            let leader = NodeId(membership::leader_status(cluster, set, leader_wait).await?.id);
            ctx.say(format!("(member {leader}) "));
            cluster.kill9_proc(ProcKey::Store(set, leader));
            let next = membership::leader_status(cluster, set, WAIT_MAX).await;
            cluster.start_proc(ProcKey::Store(set, leader));
            ctx.say(format!("(new leader {}) ", next?.id));
        }
        FaultKind::KillStoreMajority => {
            let leader = NodeId(membership::leader_status(cluster, set, leader_wait).await?.id);
            let other =
                cluster.store_ids(set).into_iter().find(|&id| id != leader).unwrap_or(NodeId(1));
            ctx.say(format!("(members {leader}, {other}) "));
            cluster.kill9_proc(ProcKey::Store(set, leader));
            cluster.kill9_proc(ProcKey::Store(set, other));
            tokio::time::sleep(Duration::from_millis(1500)).await;
            cluster.start_proc(ProcKey::Store(set, leader));
            cluster.start_proc(ProcKey::Store(set, other));
        }
        FaultKind::PauseAlloc => {
            ctx.say(format!("(alloc {}) ", fault.alloc));
            cluster.pause(alloc, true);
            tokio::time::sleep(lease + Duration::from_millis(1000)).await;
            cluster.pause(alloc, false);
        }
        FaultKind::PartitionAlloc => {
            ctx.say(format!("(alloc {}) ", fault.alloc));
            cluster.cut_links_of(alloc, true, false);
            tokio::time::sleep(lease + Duration::from_millis(1000)).await;
            cluster.heal_all_links();
        }
        FaultKind::IsolateStoreLeader => {
            let leader = NodeId(membership::leader_status(cluster, set, leader_wait).await?.id);
            ctx.say(format!("(member {leader}) "));
            cluster.cut_links_of(ProcKey::Store(set, leader), true, true);
            // Until the others elected someone else.
            let others: Vec<NodeId> =
                cluster.store_ids(set).into_iter().filter(|&id| id != leader).collect();
            let elected = wait_until("a new leader on the majority side", WAIT_MAX, || async {
                for &id in &others {
                    let s = cluster.store_status(set, id).await?;
                    if s.role == "leader" {
                        return Some(());
                    }
                }
                None
            })
            .await;
            if elected.is_ok() {
                tokio::time::sleep(lease).await;
            }
            cluster.heal_all_links();
            elected?;
        }
        FaultKind::ClockJump => lease_faults::clock_jump(cluster, alloc, ctx).await?,
        FaultKind::DelayAllocReplies => {
            lease_faults::delay_alloc_replies(cluster, alloc, ctx).await?
        }
        FaultKind::ZombieAdvance => zombie_advance(cluster, set, ctx).await?,
        FaultKind::ClockBackRestart => {
            id_faults::clock_back_restart(cluster, alloc, fault, ctx).await?
        }
        FaultKind::ReplaceMember => {
            membership::replace_member(cluster, set, fault.member, ctx).await?
        }
        FaultKind::TransferLeaderStorm => {
            membership::transfer_storm(cluster, set, fault.member, ctx).await?
        }
    }
    Ok(())
}

/// A store call's error as "could not run now".
fn step(what: &str) -> impl Fn(tonic::Status) -> anyhow::Error + '_ {
    move |s| anyhow::anyhow!("{what}: {:?}: {}", s.code(), s.message())
}

async fn zombie_advance(cluster: &Cluster, set: SetId, ctx: &Ctx<'_>) -> anyhow::Result<()> {
    use seqsvr_core::ids::{AllocId, SectionId};
    use seqsvr_core::store::SectionAdvance;
    let config = cluster.config.set(set).ok_or_else(|| anyhow::anyhow!("no set {set}"))?;
    let uid = config.uid_begin; // in every client pool
    let section = SectionId(uid / cluster.config.section_size);
    let store = cluster.store_client_of(set);
    let leases = store
        .admin(WAIT_MAX, |mut c, _| async move { c.leases(pb::LeasesRequest {}).await })
        .await
        .map_err(step("leases"))?;
    let run = leases
        .runs
        .iter()
        .find(|r| r.section_begin <= section.0 && section.0 < r.section_end && r.settled)
        .ok_or_else(|| anyhow::anyhow!("section {section} is not settled with an owner"))?;
    let (zombie, zombie_epoch) = (run.alloc_id, run.lease_epoch);
    // The zombie's advance is sent with the zombie's own certificate (only the identity that
    // registered an AllocSvr may advance for it): the fence, not the role check, is on trial.
    let zombie_addr = leases.allocs.iter().find(|a| a.alloc_id == zombie).map(|a| a.addr.clone());
    let zombie_key = zombie_addr
        .and_then(|addr| cluster.alloc_at(set, &addr))
        .ok_or_else(|| anyhow::anyhow!("alloc {zombie} is not an AllocSvr the harness started"))?;
    let heir = leases
        .allocs
        .iter()
        .find(|a| a.alloc_id != zombie && !a.expired && !a.replaced && !a.draining)
        .ok_or_else(|| anyhow::anyhow!("no live second AllocSvr to move section {section} to"))?;
    ctx.say(format!("(section {section}: alloc {zombie} → {}) ", heir.alloc_id));
    let request = pb::MoveSectionsRequest {
        section_begin: section.0,
        section_end: section.0 + 1,
        to_alloc_id: heir.alloc_id,
    };
    store
        .admin(WAIT_MAX, |mut c, _| async move { c.move_sections(request).await })
        .await
        .map_err(step("move section"))?;
    // Until the heir owns the section for good (the fence passed) and serves it.
    let heir_id = heir.alloc_id;
    wait_until("the heir to own the moved section", WAIT_MAX, || async {
        let l = store
            .admin(Duration::from_secs(2), |mut c, _| async move {
                c.leases(pb::LeasesRequest {}).await
            })
            .await
            .ok()?;
        l.runs
            .iter()
            .any(|r| {
                r.section_begin <= section.0
                    && section.0 < r.section_end
                    && r.alloc_id == heir_id
                    && r.settled
            })
            .then_some(())
    })
    .await?;
    ctx.client.next(uid, WAIT_MAX).await.map_err(step("next from the heir"))?;
    let committed = store.get(&[section], WAIT_MAX).await.map_err(step("get max_seq"))?[0].1;
    // The zombie extends its range with its old epoch and, if that commits, serves from it.
    let invoke_ns = ctx.t0.elapsed().as_nanos() as u64;
    let advance = [SectionAdvance {
        section,
        max_seq: Seq(committed + 1000),
        lease_epoch: LeaseEpoch(zombie_epoch),
    }];
    let as_zombie = cluster.store_client_as(set, zombie_key);
    match as_zombie.advance_as(Some(AllocId(zombie)), &advance, WAIT_MAX).await {
        Ok(_) => {
            ctx.say("(stale advance ACCEPTED) ".to_string());
            let mut ops = ctx.ops.lock().unwrap_or_else(|e| e.into_inner());
            ops.push(Operation {
                client: u32::MAX,
                set: set.0,
                uids: vec![uid],
                invoke_ns,
                complete_ns: ctx.t0.elapsed().as_nanos() as u64,
                outcome: Outcome::Ok { values: vec![committed + 1] },
            });
        }
        Err(status) if status.code() == Code::FailedPrecondition => ctx.say("(fenced) ".into()),
        // Neither accepted nor refused: fencing was not put to the test.
        Err(status) => return Err(step("stale advance")(status)),
    }
    // The heir serves the uid once more: after a zombie value, this must not go backwards.
    let invoke_ns = ctx.t0.elapsed().as_nanos() as u64;
    if let Ok(v) = ctx.client.next(uid, WAIT_MAX).await {
        ctx.ops.lock().unwrap_or_else(|e| e.into_inner()).push(Operation {
            client: u32::MAX - 1,
            set: set.0,
            uids: vec![uid],
            invoke_ns,
            complete_ns: ctx.t0.elapsed().as_nanos() as u64,
            outcome: Outcome::Ok { values: vec![v] },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_schedule_and_every_kind_first() {
        let a = schedule(7, &ALL_FAULTS, 30, 2, 2);
        assert_eq!(a, schedule(7, &ALL_FAULTS, 30, 2, 2));
        assert_ne!(a, schedule(8, &ALL_FAULTS, 30, 2, 2));
        let mut first: Vec<FaultKind> = a[..ALL_FAULTS.len()].iter().map(|f| f.kind).collect();
        first.sort();
        assert_eq!(first, ALL_FAULTS.to_vec());
        assert!(a.iter().all(|f| f.set < 2 && f.alloc < 2 && f.member < MEMBER_PICKS));
        let ran = FaultRecord {
            fault: a[0].clone(),
            at_s: 1.5,
            attempts: 2,
            result: FaultResult::Skipped { reason: "x".into() },
            log: String::new(),
        };
        let json = serde_json::to_value(&ran).unwrap();
        assert_eq!(json["result"], "skipped");
        assert_eq!(json["reason"], "x");
        assert_eq!(json["set"], a[0].set);
    }

    #[test]
    fn skip_reasons_group_without_ports_and_numbers() {
        assert_eq!(
            reason_key("member 2 at 127.0.0.1:40123 did not answer within 1.5s"),
            "member N at ADDR did not answer within N.Ns"
        );
    }
}
