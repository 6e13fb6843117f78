//! `seqcheck lost-disk`: the lost-disk interleaving of `DESIGN.md` §8 with real processes.
//!
//! A set of three members: A leads, B and C follow (roles discovered, not assumed).
//! 1. Raise a few sections to `BASE`; every member applies it.
//! 2. SIGSTOP B (it will lag), raise the sections to `RAISED` through the leader: committed by A
//!    and C, acknowledged to us.
//! 3. `kill -9` A and C, wipe C's data dir, restart C empty (`--initial-cluster-state
//!    existing`). A dies *before* C comes back: a live A would catch C up by snapshot at once
//!    and close the hole by luck rather than by design.
//! 4. SIGCONT B. Now B (which never saw `RAISED`) and the empty C are a majority of {A, B, C}.
//!    If C votes (the bug, `SEQSVR_TEETH=bootstrap-empty-voter`), B is elected and a linearizable read
//!    returns `BASE`: `max_seq` went back (I4), and values up to `RAISED` may be served again
//!    (I2, then I1). With the fix C never votes: {B, C} elect nobody and reads fail UNAVAILABLE.
//!    We keep trying reads for a window of election timeouts (long enough for B to campaign
//!    several times), which bounds how long we look; it is not a pass/fail threshold.
//! 5. Restart A: A and B elect a leader, and the read must give back at least `RAISED`.
//! 6. Repair C as an operator would (remove it, wipe it, start it empty, add it as a learner,
//!    wait until it caught up, promote it), and read again from C's own state.

use crate::cluster::{wait_until, Cluster, ClusterOptions, ProcKey, WAIT_MAX};
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;
use tonic::Code;

/// The value every member has applied before B is paused.
pub const BASE: u64 = 1_000;
/// The value committed by A and C while B is paused.
pub const RAISED: u64 = 1_000_000;
/// The sections the scenario raises.
pub const SECTIONS: [u64; 4] = [0, 1, 2, 3];

#[derive(Clone, Debug)]
pub struct LostDiskConfig {
    /// How long to keep trying reads against {B, C}, in election timeouts of
    /// `election_ticks × tick_ms` (raft-rs randomises each in [1, 2) of that).
    pub window_election_timeouts: u32,
    /// Step 6: remove, wipe, re-add and promote the member that lost its disk.
    pub repair: bool,
    /// Keep the cluster's data and logs (always kept on a violation).
    pub keep: bool,
}

impl Default for LostDiskConfig {
    fn default() -> LostDiskConfig {
        LostDiskConfig { window_election_timeouts: 10, repair: true, keep: false }
    }
}

#[derive(Clone, Debug)]
pub struct LostDiskReport {
    /// Roles as discovered: (A = first leader, B = the lagging one, C = the one that lost its disk).
    pub a: NodeId,
    pub b: NodeId,
    pub c: NodeId,
    /// What the leader acknowledged for each section while B was paused.
    pub acknowledged: BTreeMap<SectionId, u64>,
    /// The broken promise, if any.
    pub violation: Option<String>,
    /// B and the empty C elected a leader while A was down (the empty member voted), even if
    /// the value happened to survive.
    pub elected_without_a: bool,
    /// What C said about itself after the window: may it vote? (`None`: it did not answer.)
    pub c_vote_blocked: Option<bool>,
    /// Things worth a look that are not violations.
    pub notes: Vec<String>,
    /// Where the cluster's data and logs were kept, if they were.
    pub kept_at: Option<PathBuf>,
}

impl LostDiskReport {
    pub fn is_valid(&self) -> bool {
        self.violation.is_none()
    }
}

struct Steps {
    t0: Instant,
}

impl Steps {
    fn say(&self, what: impl AsRef<str>) {
        println!("[lost-disk {:>7.2}s] {}", self.t0.elapsed().as_secs_f64(), what.as_ref());
    }
}

fn sections() -> Vec<SectionId> {
    SECTIONS.iter().map(|&s| SectionId(s)).collect()
}

/// The first section whose value is below what was acknowledged, as a violation text.
fn went_back(
    acknowledged: &BTreeMap<SectionId, u64>,
    read: &[(SectionId, u64)],
    context: &str,
) -> Option<String> {
    read.iter().find_map(|&(s, v)| {
        let a = acknowledged.get(&s).copied().unwrap_or(0);
        (v < a).then(|| {
            format!(
                "section {s}: a linearizable read {context} returned max_seq {v}, but {a} had been \
                 committed and acknowledged (I4: max_seq went back; I2: values in ({v}, {a}] can be \
                 handed out again)"
            )
        })
    })
}

/// Runs the scenario on a fresh local cluster. `Err` = the run could not be carried out.
pub async fn run(cfg: &LostDiskConfig) -> anyhow::Result<LostDiskReport> {
    let steps = Steps { t0: Instant::now() };
    let options = ClusterOptions { members: 3, allocs_per_set: 0, ..ClusterOptions::default() };
    let election_timeout =
        Duration::from_millis(options.tuning.tick_ms * options.tuning.election_ticks as u64);
    let set = SetId(0);
    let key = |id: NodeId| ProcKey::Store(set, id);
    let mut cluster = Cluster::start(options);
    steps.say(format!("started 3 store members in {}", cluster.dir.path().display()));
    let mut report = LostDiskReport {
        a: NodeId(0),
        b: NodeId(0),
        c: NodeId(0),
        acknowledged: BTreeMap::new(),
        violation: None,
        elected_without_a: false,
        c_vote_blocked: None,
        notes: Vec::new(),
        kept_at: None,
    };
    let result = scenario(&mut cluster, cfg, &steps, election_timeout, key, &mut report).await;
    if result.is_err() || report.violation.is_some() || cfg.keep {
        cluster.dir.disable_cleanup(true);
        report.kept_at = Some(cluster.dir.path().to_path_buf());
        steps.say(format!("cluster data and logs kept at {}", cluster.dir.path().display()));
    }
    result.map(|()| report)
}

async fn scenario(
    cluster: &mut Cluster,
    cfg: &LostDiskConfig,
    steps: &Steps,
    election_timeout: Duration,
    key: impl Fn(NodeId) -> ProcKey,
    report: &mut LostDiskReport,
) -> anyhow::Result<()> {
    let set = SetId(0);
    let sections = sections();

    // 1. Roles and the base value.
    let a = cluster.wait_set_leader(set).await;
    let followers: Vec<NodeId> = cluster.store_ids(set).into_iter().filter(|&id| id != a).collect();
    anyhow::ensure!(followers.len() == 2, "expected 2 followers, got {followers:?}");
    let (b, c) = (followers[0], followers[1]);
    (report.a, report.b, report.c) = (a, b, c);
    steps.say(format!(
        "A = member {a} leads; B = member {b} will lag; C = member {c} will lose its disk"
    ));
    let client = cluster.store_client_of(set);
    let base: Vec<(SectionId, u64)> = sections.iter().map(|&s| (s, BASE)).collect();
    client
        .advance(&base, WAIT_MAX)
        .await
        .map_err(|s| anyhow::anyhow!("raising to the base value failed: {s}"))?;
    let commit = cluster.store_status(set, a).await.map(|s| s.commit_index).unwrap_or(0);
    cluster.wait_applied(commit).await;
    steps.say(format!(
        "sections {SECTIONS:?} at max_seq {BASE}; all three members applied index {commit}"
    ));

    // 2. B lags; A and C commit the raise.
    cluster.pause(key(b), true);
    steps.say(format!("SIGSTOP B (member {b})"));
    let raise: Vec<(SectionId, u64)> = sections.iter().map(|&s| (s, RAISED)).collect();
    let acked = client
        .advance(&raise, WAIT_MAX)
        .await
        .map_err(|s| anyhow::anyhow!("the raise through the leader failed: {s}"))?;
    for &(s, v) in &acked {
        anyhow::ensure!(v >= RAISED, "section {s}: the leader acknowledged {v} < {RAISED}");
        report.acknowledged.insert(s, v);
    }
    steps.say(format!(
        "raised sections {SECTIONS:?} to {RAISED} through the leader: acknowledged {acked:?}"
    ));
    let c_values = wait_until("C to apply the raise", WAIT_MAX, || async {
        let s = cluster.store_status(set, c).await?;
        let leader_commit = cluster.store_status(set, a).await?.commit_index;
        (s.applied_index >= leader_commit).then_some(())?;
        let values = cluster.local_values(c, &sections).await;
        values.values().all(|&v| v >= RAISED).then_some(values)
    })
    .await?;
    steps.say(format!("C (member {c}) applied it: {c_values:?}; B (paused) cannot have"));

    // 3. A and C die; C loses its disk and comes back empty.
    cluster.kill9_proc(key(a));
    steps.say(format!("kill -9 A (member {a})"));
    cluster.kill9_proc(key(c));
    cluster.wipe_data_dir(key(c));
    steps.say(format!("kill -9 C (member {c}) and wipe its data dir"));
    cluster.start_proc(key(c));
    let c_status =
        wait_until("C to answer after its restart", WAIT_MAX, || cluster.store_status(set, c))
            .await?;
    steps.say(format!(
        "restarted C empty (--initial-cluster-state existing): role {}, term {}, voters {:?}, \
         vote_blocked {}, applied {}",
        c_status.role,
        c_status.term,
        c_status.voters,
        c_status.vote_blocked,
        c_status.applied_index
    ));

    // 4. B resumes: can {B, C} elect a leader that lacks the raise?
    cluster.pause(key(b), false);
    steps.say(format!("SIGCONT B (member {b}); reading the sections while only B and C run"));
    let window = election_timeout * 2 * cfg.window_election_timeouts;
    let mut window_start: Option<Instant> = None;
    let (mut c_answers, mut b_roles, mut errors) = (0u64, BTreeMap::new(), BTreeMap::new());
    let give_up = Instant::now() + WAIT_MAX;
    loop {
        if let Some(s) = cluster.store_status(set, b).await {
            window_start.get_or_insert_with(Instant::now);
            *b_roles.entry(format!("{} (term {})", s.role, s.term)).or_insert(0u64) += 1;
        }
        if cluster.store_status(set, c).await.is_some() {
            c_answers += 1;
        }
        match client.get(&sections, Duration::from_secs(1)).await {
            Ok(read) => {
                report.elected_without_a = true;
                let leader = cluster.store_status(set, b).await.map(|s| s.leader_id);
                steps.say(format!(
                    "read succeeded with only B and C running (leader per B: {leader:?}): {read:?}"
                ));
                if let Some(v) = went_back(&report.acknowledged, &read, "with only B and C running")
                {
                    steps.say(format!("VIOLATION: {v}"));
                    report.violation = Some(v);
                    return Ok(());
                }
                report.notes.push(format!(
                    "B and C elected a leader without A (the empty member voted?) yet read back \
                     {read:?}"
                ));
                break;
            }
            Err(s) => *errors.entry(format!("{:?}", s.code())).or_insert(0u64) += 1,
        }
        if let Some(start) = window_start {
            if start.elapsed() >= window && c_answers > 0 {
                steps.say(format!(
                    "no leader among B and C for {:?} ({} election timeouts of {election_timeout:?} \
                     at most): reads failed {errors:?}; B's roles seen {b_roles:?}; C answered \
                     {c_answers} times",
                    start.elapsed(),
                    2 * cfg.window_election_timeouts
                ));
                break;
            }
        }
        anyhow::ensure!(
            Instant::now() < give_up,
            "B and C did not both answer status within {WAIT_MAX:?} after SIGCONT"
        );
    }
    if let Some(s) = cluster.store_status(set, c).await {
        steps.say(format!(
            "C now: role {}, term {}, leader {}, vote_blocked {}, applied {}",
            s.role, s.term, s.leader_id, s.vote_blocked, s.applied_index
        ));
        report.c_vote_blocked = Some(s.vote_blocked);
        if !s.vote_blocked {
            report.notes.push(format!("C (member {c}) reported vote_blocked = false while empty"));
        }
    }

    // 5. A returns: the raise must read back.
    cluster.start_proc(key(a));
    steps.say(format!("restarted A (member {a})"));
    let read = client
        .get(&sections, WAIT_MAX)
        .await
        .map_err(|s| anyhow::anyhow!("no read within {WAIT_MAX:?} after A came back: {s}"))?;
    let leader = cluster.store_status(set, a).await.map(|s| s.leader_id);
    steps.say(format!("read with A back (leader per A: {leader:?}): {read:?}"));
    if let Some(v) = went_back(&report.acknowledged, &read, "after A came back") {
        steps.say(format!("VIOLATION: {v}"));
        report.violation = Some(v);
        return Ok(());
    }

    // 6. Repair C as an operator would.
    if cfg.repair {
        let removed = client
            .remove(c, WAIT_MAX)
            .await
            .map_err(|s| anyhow::anyhow!("removing C (member {c}) failed: {s}"))?;
        cluster.set_removed(key(c), true);
        steps.say(format!("removed C: members {:?}", member_list(&removed.members)));
        cluster.kill9_proc(key(c));
        cluster.wipe_data_dir(key(c));
        cluster.start_proc(key(c));
        let c_addr = cluster.proc(key(c)).addr.clone();
        let added = add_learner_retrying(&client, c, &c_addr).await?;
        cluster.set_removed(key(c), false);
        steps.say(format!(
            "restarted C empty and added it as a learner: members {:?}",
            member_list(&added.members)
        ));
        cluster.wait_caught_up(set, c).await;
        let promoted = promote_retrying(&client, c).await?;
        steps.say(format!(
            "C caught up and was promoted: members {:?}",
            member_list(&promoted.members)
        ));
        let values = cluster.local_values(c, &sections).await;
        let read: Vec<(SectionId, u64)> = values.into_iter().collect();
        steps.say(format!("C's own state: {read:?}"));
        if let Some(v) = went_back(&report.acknowledged, &read, "from the repaired C's own state") {
            steps.say(format!("VIOLATION: {v}"));
            report.violation = Some(v);
            return Ok(());
        }
        let read = client
            .get(&sections, WAIT_MAX)
            .await
            .map_err(|s| anyhow::anyhow!("no read after the repair: {s}"))?;
        if let Some(v) = went_back(&report.acknowledged, &read, "after the repair") {
            steps.say(format!("VIOLATION: {v}"));
            report.violation = Some(v);
            return Ok(());
        }
        steps.say(format!("read after the repair: {read:?}"));
    }
    steps.say("no violation: the raise was never read back lower");
    Ok(())
}

/// `id(L)` for learners, as a compact list.
pub fn member_list(members: &[seqsvr_proto::v1::MemberInfo]) -> Vec<String> {
    members
        .iter()
        .map(|m| if m.learner { format!("{}(learner)", m.id) } else { m.id.to_string() })
        .collect()
}

/// `add_learner`, retried while another membership change is still pending.
pub async fn add_learner_retrying(
    client: &seqsvr_client::store::StoreClient,
    id: NodeId,
    addr: &str,
) -> anyhow::Result<seqsvr_proto::v1::MembershipResponse> {
    let until = Instant::now() + WAIT_MAX;
    loop {
        match client.add_learner(id, addr, WAIT_MAX).await {
            Ok(r) => return Ok(r),
            Err(s) if s.code() == Code::FailedPrecondition && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(s) => anyhow::bail!("adding member {id} at {addr} as a learner failed: {s}"),
        }
    }
}

/// `promote`, retried while the learner is still catching up (FAILED_PRECONDITION).
pub async fn promote_retrying(
    client: &seqsvr_client::store::StoreClient,
    id: NodeId,
) -> anyhow::Result<seqsvr_proto::v1::MembershipResponse> {
    let until = Instant::now() + WAIT_MAX;
    loop {
        match client.promote(id, WAIT_MAX).await {
            Ok(r) => return Ok(r),
            Err(s) if s.code() == Code::FailedPrecondition && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(s) => anyhow::bail!("promoting member {id} failed: {s}"),
        }
    }
}
