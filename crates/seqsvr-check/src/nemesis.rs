//! The nemesis runner: a real local cluster (every link proxied, AllocSvrs under libfaketime),
//! concurrent clients recording a history, and a seeded schedule of faults, each healed and
//! recovered from before the next. At the end the history is checked and saved.

use crate::cluster::{wait_for, Cluster, ClusterOptions, ProcKey, LIBFAKETIME, WAIT_MAX};
use crate::history::{check, write_jsonl, Operation, Outcome, Report};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use seqsvr_client::seq::SeqClient;
use seqsvr_core::ids::{NodeId, SetId};
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
    /// Jump an AllocSvr's wall clock forward, then backward, then back.
    ClockJump,
    /// Play a deposed AllocSvr that missed the end of its lease (a lease bug, an extreme clock
    /// error): move a section away from its owner, then, as the old owner with its old lease
    /// epoch, try to extend the section's range and serve from it. Fencing must refuse the
    /// advance; if it does not, the value served collides with the new owner's.
    ZombieAdvance,
}

pub const ALL_FAULTS: [FaultKind; 8] = [
    FaultKind::KillAlloc,
    FaultKind::KillStoreLeader,
    FaultKind::KillStoreMajority,
    FaultKind::PauseAlloc,
    FaultKind::PartitionAlloc,
    FaultKind::IsolateStoreLeader,
    FaultKind::ClockJump,
    FaultKind::ZombieAdvance,
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
}

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
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub seconds: u64,
    pub faults: Vec<Fault>,
    pub faults_by_kind: BTreeMap<&'static str, u64>,
    pub report: Report,
}

impl Summary {
    pub fn table(&self) -> String {
        let r = &self.report;
        let mut t = String::new();
        t.push_str(&format!("| seed | {} |\n|---|---|\n", self.seed));
        t.push_str(&format!("| duration | {:.1} s |\n", r.duration_s));
        t.push_str(&format!(
            "| operations | {} ok, {} failed, {} unknown ({} values) |\n",
            r.n_ok, r.n_fail, r.n_unknown, r.n_values
        ));
        t.push_str(&format!("| ok operations/s | {:.0} |\n", r.ops_per_s));
        for (set, gap) in &r.longest_gap_ms {
            t.push_str(&format!(
                "| set {set}: longest stretch without a successful call | {gap} ms |\n"
            ));
        }
        for (kind, n) in &self.faults_by_kind {
            t.push_str(&format!("| faults: {kind} | {n} |\n"));
        }
        t.push_str(&format!("| violations | {} |\n", r.violations.len()));
        t
    }
}

struct Load {
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<Operation>>>,
    ok: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Concurrent callers per client, sharing its `SeqClient`: their calls to one AllocSvr get
/// coalesced into one RPC, so the SDK's coalescing is under test too.
const WORKERS_PER_CLIENT: usize = 2;

/// Each client has its own `SeqClient`, hence its own route table, as independent application
/// servers would: during a hand-over some still go to the old owner while others already go to
/// the new one, which is exactly where a broken hand-over shows.
fn start_load(clients: Vec<Arc<SeqClient>>, uids: Vec<(u64, u64)>, seed: u64, t0: Instant) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(Mutex::new(Vec::new()));
    let ok = Arc::new(AtomicU64::new(0));
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
                        client.next(batch[0], Duration::from_secs(3)).await.map(|v| vec![v])
                    } else {
                        client.next_batch(&batch, Duration::from_secs(3)).await
                    };
                    let complete_ns = t0.elapsed().as_nanos() as u64;
                    let outcome = match result {
                        Ok(values) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                            Outcome::Ok { values }
                        }
                        // Refused before anything happened.
                        Err(s) if s.code() == Code::InvalidArgument => {
                            Outcome::Fail { code: format!("{:?}", s.code()) }
                        }
                        // Anything else may have allocated a value whose answer was lost.
                        Err(s) => {
                            Outcome::Unknown { reason: format!("{:?}: {}", s.code(), s.message()) }
                        }
                    };
                    ops.lock().unwrap_or_else(|e| e.into_inner()).push(Operation {
                        client: c as u32,
                        set,
                        uids: batch,
                        invoke_ns,
                        complete_ns,
                        outcome,
                    });
                }
            })
        })
        .collect();
    Load { stop, ops, ok, tasks }
}

/// Runs one nemesis session. `Err` means the run itself could not be carried out (the cluster
/// did not recover in time, a process would not start); violations are in the summary.
pub async fn run(cfg: RunConfig) -> anyhow::Result<Summary> {
    std::fs::create_dir_all(&cfg.out_dir)?;
    let faketime = std::path::Path::new(LIBFAKETIME).exists();
    let kinds: Vec<FaultKind> =
        cfg.kinds.iter().copied().filter(|&k| k != FaultKind::ClockJump || faketime).collect();
    if kinds.len() < cfg.kinds.len() {
        eprintln!("warning: {LIBFAKETIME} missing (Debian package faketime): no clock-jump faults");
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
    let allocs = options.allocs_per_set;
    let mut cluster = Cluster::start(options);
    let client = Arc::new(SeqClient::connect(&seeds(&cluster), WAIT_MAX).await?);
    cluster.wait_serving(&client).await;
    eprintln!(
        "cluster serving ({} sets); data and logs in {}",
        cfg.sets,
        cluster.dir.path().display()
    );

    // Hot uids spread over every set's sections: contention per uid makes order matter.
    let mut uids = Vec::new();
    for set in &cluster.config.sets {
        let span = set.uid_end - set.uid_begin;
        for i in 0..16u64 {
            uids.push((set.id.0, set.uid_begin + (span / 16) * i + i));
        }
    }
    let t0 = Instant::now();
    let mut clients = Vec::with_capacity(cfg.clients);
    for _ in 0..cfg.clients {
        clients.push(Arc::new(SeqClient::connect(&seeds(&cluster), WAIT_MAX).await?));
    }
    let load = start_load(clients, uids, cfg.seed, t0);
    let plan = schedule(cfg.seed, &kinds, 10_000, cfg.sets, allocs);
    let mut done = Vec::new();
    let until = t0 + Duration::from_secs(cfg.seconds);
    let mut run_error = None;
    for fault in plan {
        if Instant::now() >= until && done.len() >= kinds.len() {
            break;
        }
        let started = t0.elapsed().as_secs_f64();
        eprint!("[{started:7.1}s] {:<22} set {} ", fault.kind.name(), fault.set);
        let ctx = Ctx { client: &client, ops: &load.ops, t0 };
        if let Err(e) = inject(&mut cluster, &fault, &ctx).await {
            run_error = Some(e);
            break;
        }
        let healed = t0.elapsed().as_secs_f64();
        cluster.wait_serving(&client).await;
        let recovered = t0.elapsed().as_secs_f64();
        eprintln!(
            "healed after {:.1}s, serving again {:.1}s later; {} ok calls so far",
            healed - started,
            recovered - healed,
            load.ok.load(Ordering::Relaxed)
        );
        done.push(fault);
        // Some quiet traffic between faults.
        let ok_before = load.ok.load(Ordering::Relaxed);
        wait_for("traffic between faults", || async {
            (load.ok.load(Ordering::Relaxed) >= ok_before + 200).then_some(())
        })
        .await;
    }
    load.stop.store(true, Ordering::SeqCst);
    for t in load.tasks {
        let _ = t.await;
    }
    let ops = Arc::try_unwrap(load.ops).map_err(|_| anyhow::anyhow!("load still running"))?;
    let ops = ops.into_inner().unwrap_or_else(|e| e.into_inner());
    let report = check(&ops);
    write_jsonl(
        &ops,
        std::io::BufWriter::new(std::fs::File::create(cfg.out_dir.join("history.jsonl"))?),
    )?;
    let mut faults_by_kind = BTreeMap::new();
    for f in &done {
        *faults_by_kind.entry(f.kind.name()).or_insert(0) += 1;
    }
    let summary =
        Summary { seed: cfg.seed, seconds: cfg.seconds, faults: done, faults_by_kind, report };
    std::fs::write(cfg.out_dir.join("report.json"), serde_json::to_vec_pretty(&summary)?)?;
    std::fs::write(cfg.out_dir.join("summary.md"), summary.table())?;
    if !summary.report.is_valid() {
        // Keep the cluster's logs next to the history.
        cluster.dir.disable_cleanup(true);
    }
    if let Some(e) = run_error {
        return Err(e);
    }
    Ok(summary)
}

fn seeds(cluster: &Cluster) -> Vec<String> {
    cluster.config.sets.iter().flat_map(|s| s.allocs.first().cloned()).collect()
}

/// What a fault may need from the run: a client, and the history to add its own calls to.
struct Ctx<'a> {
    client: &'a SeqClient,
    ops: &'a Mutex<Vec<Operation>>,
    t0: Instant,
}

async fn inject(cluster: &mut Cluster, fault: &Fault, ctx: &Ctx<'_>) -> anyhow::Result<()> {
    let set = SetId(fault.set);
    let alloc = ProcKey::Alloc(set, fault.alloc);
    let lease =
        Duration::from_millis(cluster.config.alloc.lease_ms + cluster.config.alloc.lease_margin_ms);
    match fault.kind {
        FaultKind::KillAlloc => {
            eprint!("(alloc {}) ", fault.alloc);
            cluster.kill9_proc(alloc);
            tokio::time::sleep(Duration::from_millis(500)).await;
            cluster.start_proc(alloc);
        }
        FaultKind::KillStoreLeader => {
            let leader = cluster.wait_set_leader(set).await;
            eprint!("(member {leader}) ");
            cluster.kill9_proc(ProcKey::Store(set, leader));
            cluster.wait_set_leader(set).await;
            cluster.start_proc(ProcKey::Store(set, leader));
        }
        FaultKind::KillStoreMajority => {
            let leader = cluster.wait_set_leader(set).await;
            let other =
                cluster.store_ids(set).into_iter().find(|&id| id != leader).unwrap_or(NodeId(1));
            eprint!("(members {leader}, {other}) ");
            cluster.kill9_proc(ProcKey::Store(set, leader));
            cluster.kill9_proc(ProcKey::Store(set, other));
            tokio::time::sleep(Duration::from_millis(1500)).await;
            cluster.start_proc(ProcKey::Store(set, leader));
            cluster.start_proc(ProcKey::Store(set, other));
        }
        FaultKind::PauseAlloc => {
            eprint!("(alloc {}) ", fault.alloc);
            cluster.pause(alloc, true);
            tokio::time::sleep(lease + Duration::from_millis(1000)).await;
            cluster.pause(alloc, false);
        }
        FaultKind::PartitionAlloc => {
            eprint!("(alloc {}) ", fault.alloc);
            cluster.cut_links_of(alloc, true, false);
            tokio::time::sleep(lease + Duration::from_millis(1000)).await;
            cluster.heal_all_links();
        }
        FaultKind::IsolateStoreLeader => {
            let leader = cluster.wait_set_leader(set).await;
            eprint!("(member {leader}) ");
            cluster.cut_links_of(ProcKey::Store(set, leader), true, true);
            // Until the others elected someone else.
            wait_for("a new leader on the majority side", || async {
                for id in cluster.store_ids(set).into_iter().filter(|&id| id != leader) {
                    let s = cluster.store_status(set, id).await?;
                    if s.role == "leader" {
                        return Some(());
                    }
                }
                None
            })
            .await;
            tokio::time::sleep(lease).await;
            cluster.heal_all_links();
        }
        FaultKind::ClockJump => {
            eprint!("(alloc {}) ", fault.alloc);
            cluster.set_wall_clock_offset(alloc, "+1h");
            tokio::time::sleep(Duration::from_millis(1000)).await;
            cluster.set_wall_clock_offset(alloc, "-2h");
            tokio::time::sleep(Duration::from_millis(1000)).await;
            cluster.set_wall_clock_offset(alloc, "+0");
        }
        FaultKind::ZombieAdvance => zombie_advance(cluster, set, ctx).await?,
    }
    Ok(())
}

async fn zombie_advance(cluster: &Cluster, set: SetId, ctx: &Ctx<'_>) -> anyhow::Result<()> {
    use seqsvr_core::ids::{AllocId, SectionId};
    use seqsvr_core::store::SectionAdvance;
    use seqsvr_proto::v1 as pb;
    let config = cluster.config.set(set).ok_or_else(|| anyhow::anyhow!("no set {set}"))?;
    let uid = config.uid_begin; // in every client pool
    let section = SectionId(uid / cluster.config.section_size);
    let store = cluster.store_client_of(set);
    let leases = store
        .admin(WAIT_MAX, |mut c, _| async move { c.leases(pb::LeasesRequest {}).await })
        .await?;
    let Some(run) =
        leases.runs.iter().find(|r| r.section_begin <= section.0 && section.0 < r.section_end)
    else {
        eprint!("(section {section} unassigned: skipped) ");
        return Ok(());
    };
    let (zombie, zombie_epoch) = (run.alloc_id, run.lease_epoch);
    let Some(heir) = leases
        .allocs
        .iter()
        .find(|a| a.alloc_id != zombie && !a.expired && !a.replaced && !a.draining)
    else {
        eprint!("(no second AllocSvr: skipped) ");
        return Ok(());
    };
    eprint!("(section {section}: alloc {zombie} → {}) ", heir.alloc_id);
    let request = pb::MoveSectionsRequest {
        section_begin: section.0,
        section_end: section.0 + 1,
        to_alloc_id: heir.alloc_id,
    };
    store.admin(WAIT_MAX, |mut c, _| async move { c.move_sections(request).await }).await?;
    // Until the heir owns the section for good (the fence passed) and serves it.
    let heir_id = heir.alloc_id;
    wait_for("the heir to own the moved section", || async {
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
    .await;
    ctx.client.next(uid, WAIT_MAX).await?;
    let committed = store.get(&[section], WAIT_MAX).await?[0].1;
    // The zombie extends its range with its old epoch and, if that commits, serves from it.
    let invoke_ns = ctx.t0.elapsed().as_nanos() as u64;
    let advance =
        [SectionAdvance { section, max_seq: committed + 1000, lease_epoch: zombie_epoch }];
    match store.advance_as(Some(AllocId(zombie)), &advance, WAIT_MAX).await {
        Ok(_) => {
            eprint!("(stale advance ACCEPTED) ");
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
        Err(status) if status.code() == Code::FailedPrecondition => eprint!("(fenced) "),
        Err(status) => eprint!("(stale advance: {:?}) ", status.code()),
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
        assert!(a.iter().all(|f| f.set < 2 && f.alloc < 2));
    }
}
