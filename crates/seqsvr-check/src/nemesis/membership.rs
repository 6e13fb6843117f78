//! Store membership faults: `replace-member` (a member loses its disk and is re-added as a
//! learner, then promoted) and `transfer-leader-storm` (several leader transfers in one burst),
//! plus the membership repair the runner's heal step uses. Every wait here is bounded and
//! returns an error instead of panicking, so the runner can retry or skip a fault whose
//! precondition changed.

use super::Ctx;
use crate::cluster::{wait_until, Cluster, ProcKey, WAIT_MAX};
use seqsvr_client::store::StoreClient;
use seqsvr_core::ids::{NodeId, SetId};
use seqsvr_proto::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::Code;

/// A voter lagging more than this many entries behind the leader's commit index is not
/// "healthy" for the purpose of taking another voter out.
const HEALTHY_LAG_MAX: u64 = 200;
/// How long a re-added member may take to catch up before the promotion gives up.
const CATCH_UP_MAX: Duration = Duration::from_secs(120);

/// The leader of `set` and its status, once every running member that the leader counts as a
/// voter names it as leader. Members outside the replicated membership (removed, not re-added
/// yet) and vote-blocked ones are not asked to agree.
pub(super) async fn leader_status(
    cluster: &Cluster,
    set: SetId,
    max: Duration,
) -> anyhow::Result<pb::StoreStatusResponse> {
    let running: Vec<NodeId> = cluster
        .store_ids(set)
        .into_iter()
        .filter(|&id| cluster.is_running_proc(ProcKey::Store(set, id)))
        .collect();
    // What the last poll saw, for the error when no leader is agreed on in time.
    let seen = std::sync::Mutex::new(String::new());
    let found =
        wait_until(&format!("a leader the running voters of set {set} agree on"), max, || async {
            let mut statuses = Vec::new();
            let mut view = Vec::new();
            for &id in &running {
                match cluster.store_status(set, id).await {
                    Some(s) => {
                        view.push(format!(
                            "{id}: {} of term {}, leader {}",
                            s.role, s.term, s.leader_id
                        ));
                        statuses.push(s);
                    }
                    None => view.push(format!("{id}: no answer")),
                }
            }
            *seen.lock().unwrap_or_else(|e| e.into_inner()) = view.join("; ");
            let leaders: Vec<&pb::StoreStatusResponse> =
                statuses.iter().filter(|s| s.role == "leader").collect();
            let [leader] = leaders.as_slice() else { return None };
            let voters = &leader.voters;
            for &id in &running {
                if !voters.is_empty() && !voters.contains(&id.0) {
                    continue;
                }
                let s = statuses.iter().find(|s| s.id == id.0)?;
                if s.leader_id != leader.id {
                    return None;
                }
            }
            Some((*leader).clone())
        })
        .await;
    found.map_err(|e| {
        e.context(format!("last seen: {}", seen.lock().unwrap_or_else(|e| e.into_inner())))
    })
}

fn member_of(status: &pb::StoreStatusResponse, id: NodeId) -> Option<&pb::MemberInfo> {
    status.members.iter().find(|m| m.id == id.0)
}

fn describe(members: &[pb::MemberInfo]) -> String {
    let parts: Vec<String> = members
        .iter()
        .map(|m| {
            format!(
                "{}{}@{} lag {}",
                m.id,
                if m.learner { " (learner)" } else { "" },
                m.addr,
                m.lag
            )
        })
        .collect();
    parts.join(", ")
}

/// `replace-member`: a random member of the set loses its disk. It is removed from the Raft
/// group (the leader hands over first when it is the one), killed, its data dir wiped, started
/// empty with `--initial-cluster-state existing` (it must not vote), added back as a learner
/// with the same id and address, and promoted once caught up.
///
/// Precondition (else "not now"): every configured member runs, is a voter in the replicated
/// membership and is caught up, and no learner is pending. So the set never drops below two
/// healthy voters of three, and faults run one at a time, so no other store fault has a
/// member down meanwhile.
pub(super) async fn replace_member(
    cluster: &mut Cluster,
    set: SetId,
    pick: usize,
    ctx: &Ctx<'_>,
) -> anyhow::Result<()> {
    let ids = cluster.store_ids(set);
    for &id in &ids {
        anyhow::ensure!(
            cluster.is_running_proc(ProcKey::Store(set, id)),
            "member {id} is not running"
        );
    }
    let leader = leader_status(cluster, set, Duration::from_secs(10)).await?;
    anyhow::ensure!(
        !leader.members.is_empty(),
        "the store reports no replicated membership (server without membership changes?)"
    );
    for &id in &ids {
        let m = member_of(&leader, id)
            .ok_or_else(|| anyhow::anyhow!("member {id} is not in the replicated membership"))?;
        anyhow::ensure!(!m.learner, "member {id} is still a learner");
        anyhow::ensure!(
            id.0 == leader.id || m.lag <= HEALTHY_LAG_MAX,
            "member {id} lags {} entries behind",
            m.lag
        );
    }
    let victim = ids[pick % ids.len()];
    let addr = member_of(&leader, victim)
        .map(|m| m.addr.clone())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| cluster.proc(ProcKey::Store(set, victim)).addr.clone());
    ctx.say(format!(
        "(member {victim}{} at {addr}; membership: {}) ",
        if victim.0 == leader.id { ", the leader" } else { "" },
        describe(&leader.members)
    ));
    let store = cluster.store_client_of(set);
    let t = Instant::now();
    if let Err(status) = store.remove(victim, Duration::from_secs(10)).await {
        // The removal may have applied although its answer was lost (a deadline during the
        // hand-over): the membership says.
        let now = leader_status(cluster, set, Duration::from_secs(10)).await?;
        if member_of(&now, victim).is_some() {
            anyhow::bail!("remove {victim}: {:?}: {}", status.code(), status.message());
        }
        ctx.say(format!("(remove answered {:?} but applied) ", status.code()));
    }
    cluster.set_removed(ProcKey::Store(set, victim), true);
    let after = leader_status(cluster, set, Duration::from_secs(20)).await?;
    ctx.say(format!(
        "removed in {:.1}s, leader {}, {} voters; ",
        t.elapsed().as_secs_f64(),
        after.id,
        after.voters.len()
    ));
    readd(cluster, set, victim, &addr, ctx).await
}

/// Kills member `id`, wipes its data dir, starts it empty (`existing`: it must not vote), adds
/// it back as a learner at `addr` and promotes it once it has caught up.
async fn readd(
    cluster: &mut Cluster,
    set: SetId,
    id: NodeId,
    addr: &str,
    ctx: &Ctx<'_>,
) -> anyhow::Result<()> {
    let key = ProcKey::Store(set, id);
    cluster.kill9_proc(key);
    cluster.wipe_data_dir(key);
    cluster.start_proc(key);
    let t = Instant::now();
    // An empty member started as `existing` must wait to be added: never vote, never campaign.
    let fresh =
        wait_until(&format!("wiped member {id} to answer"), Duration::from_secs(20), || {
            cluster.store_status(set, id)
        })
        .await?;
    if fresh.vote_blocked {
        ctx.say("restarted empty (vote blocked); ".to_string());
    } else {
        ctx.flag(format!(
            "restarted empty but NOT VOTE-BLOCKED (role {}, term {}, voters {:?}); ",
            fresh.role, fresh.term, fresh.voters
        ));
    }
    let store = cluster.store_client_of(set);
    retry_membership(&format!("add learner {id}"), Duration::from_secs(30), || {
        store.add_learner(id, addr, Duration::from_secs(5))
    })
    .await?;
    ctx.say(format!("learner added after {:.1}s; ", t.elapsed().as_secs_f64()));
    promote_when_caught_up(cluster, set, id, &store, ctx).await
}

/// Retries a membership call refused because another change is pending, or unavailable during
/// a leader change, until `max`.
async fn retry_membership<F, Fut>(
    what: &str,
    max: Duration,
    mut call: F,
) -> anyhow::Result<pb::MembershipResponse>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<pb::MembershipResponse, tonic::Status>>,
{
    let until = Instant::now() + max;
    loop {
        match call().await {
            Ok(r) => return Ok(r),
            Err(s)
                if matches!(
                    s.code(),
                    Code::FailedPrecondition | Code::Unavailable | Code::DeadlineExceeded
                ) && Instant::now() < until =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(s) => anyhow::bail!("{what}: {:?}: {}", s.code(), s.message()),
        }
    }
}

/// Promotes learner `id` (refused until it has caught up: retried, bounded), then waits until
/// the member itself knows it is a voter and follows the leader.
async fn promote_when_caught_up(
    cluster: &mut Cluster,
    set: SetId,
    id: NodeId,
    store: &StoreClient,
    ctx: &Ctx<'_>,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let until = t + CATCH_UP_MAX;
    let mut refusals = 0u32;
    let mut last_lag = None;
    loop {
        // The leader's view of the learner just before asking (a few ms stale: the learner may
        // catch up in between), for the log.
        let before = leader_status(cluster, set, Duration::from_secs(5))
            .await
            .ok()
            .and_then(|l| member_of(&l, id).map(|m| (m.match_index, m.lag)));
        if let Some((_, lag)) = before {
            last_lag = Some(lag);
        }
        match store.promote(id, Duration::from_secs(5)).await {
            Ok(_) => {
                if let Some((matched, lag)) = before {
                    ctx.say(format!("(leader's view just before: match {matched}, lag {lag}) "));
                }
                break;
            }
            Err(s) if Instant::now() < until => {
                if s.code() == Code::FailedPrecondition {
                    refusals += 1;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(s) => anyhow::bail!(
                "promote {id}: {:?}: {} (refused {refusals} times, last lag {last_lag:?})",
                s.code(),
                s.message()
            ),
        }
    }
    ctx.say(format!(
        "promoted after {:.1}s ({refusals} refusals while catching up{}); ",
        t.elapsed().as_secs_f64(),
        last_lag.map(|l| format!(", last lag seen {l}")).unwrap_or_default()
    ));
    let seen = std::sync::Mutex::new(None);
    let me = wait_until(&format!("member {id} to know it is a voter"), WAIT_MAX, || async {
        let s = cluster.store_status(set, id).await?;
        let ok = !s.vote_blocked && s.voters.contains(&id.0) && s.leader_id != 0;
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
            "role {}, term {}, leader {}, voters {:?}, learners {:?}, vote_blocked {}, applied {}, \
             commit {}",
            s.role,
            s.term,
            s.leader_id,
            s.voters,
            s.learners,
            s.vote_blocked,
            s.applied_index,
            s.commit_index
        ));
        ok.then_some(s)
    })
    .await
    .map_err(|e| {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).take();
        e.context(format!("member {id} said: {}", seen.unwrap_or_else(|| "nothing".into())))
    })?;
    ctx.say(format!("a voter again, following {} ", me.leader_id));
    cluster.set_removed(ProcKey::Store(set, id), false);
    Ok(())
}

/// Makes every configured member of `set` a voter again after an interrupted fault: a member
/// missing from the replicated membership is wiped and re-added, a learner is promoted.
pub(super) async fn repair(cluster: &mut Cluster, set: SetId, ctx: &Ctx<'_>) -> anyhow::Result<()> {
    // The cluster file's members: the harness may have marked one removed.
    let ids: Vec<NodeId> = cluster
        .config
        .set(set)
        .map(|s| s.stores.iter().map(|m| m.id).collect())
        .unwrap_or_default();
    for id in ids {
        let leader = leader_status(cluster, set, WAIT_MAX).await?;
        if leader.members.is_empty() {
            return Ok(()); // no membership reported: nothing to repair
        }
        match member_of(&leader, id) {
            None => {
                let addr = cluster.proc(ProcKey::Store(set, id)).addr.clone();
                ctx.say(format!("[repair: member {id} was left out; re-adding] "));
                readd(cluster, set, id, &addr, ctx).await?;
            }
            Some(m) if m.learner => {
                ctx.say(format!("[repair: member {id} is a learner; promoting] "));
                let store = cluster.store_client_of(set);
                promote_when_caught_up(cluster, set, id, &store, ctx).await?;
            }
            Some(_) => cluster.set_removed(ProcKey::Store(set, id), false),
        }
    }
    Ok(())
}

/// Transfers per storm, in two bursts: the first all at once (concurrent calls), the second
/// back to back (each sent as soon as the previous one was answered, no pause).
const STORM_CONCURRENT: usize = 4;
const STORM_SEQUENTIAL: usize = 4;

/// `transfer-leader-storm`: several leader transfers to different voters in quick succession
/// while the clients run, so that several land within one Raft tick where possible; then the
/// set must settle on one leader.
pub(super) async fn transfer_storm(
    cluster: &Cluster,
    set: SetId,
    pick: usize,
    ctx: &Ctx<'_>,
) -> anyhow::Result<()> {
    let leader = leader_status(cluster, set, Duration::from_secs(10)).await?;
    let mut voters: Vec<NodeId> = if leader.voters.is_empty() {
        cluster.store_ids(set)
    } else {
        leader.voters.iter().map(|&v| NodeId(v)).collect()
    };
    voters.sort();
    anyhow::ensure!(voters.len() >= 2, "set {set} has {} voters", voters.len());
    // Targets cycle through the voters from a seeded start, never the same twice in a row; the
    // first is never the current leader.
    let start = pick % voters.len();
    let mut targets: Vec<NodeId> = (0..STORM_CONCURRENT + STORM_SEQUENTIAL + voters.len())
        .map(|i| voters[(start + i) % voters.len()])
        .collect();
    if targets[0].0 == leader.id {
        targets.remove(0);
    }
    targets.truncate(STORM_CONCURRENT + STORM_SEQUENTIAL);
    let names: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
    ctx.say(format!("(leader {}, targets {}) ", leader.id, names.join(" ")));
    let store = Arc::new(cluster.store_client_of(set));
    let deadline = Duration::from_secs(3);
    let mut results: BTreeMap<String, u32> = BTreeMap::new();
    let mut tally = |r: Result<(), tonic::Status>| {
        let key = match r {
            Ok(()) => "ok".to_string(),
            Err(s) => format!("{:?}", s.code()),
        };
        *results.entry(key).or_insert(0) += 1;
    };
    let mut burst = tokio::task::JoinSet::new();
    for &target in &targets[..STORM_CONCURRENT] {
        let store = store.clone();
        burst.spawn(async move { store.transfer_leader(target, deadline).await });
    }
    while let Some(r) = burst.join_next().await {
        tally(r.unwrap_or_else(|e| Err(tonic::Status::internal(e.to_string()))));
    }
    for &target in &targets[STORM_CONCURRENT..] {
        tally(store.transfer_leader(target, deadline).await);
    }
    let parts: Vec<String> = results.iter().map(|(k, n)| format!("{n} {k}")).collect();
    ctx.say(format!("(answers: {}) ", parts.join(", ")));
    anyhow::ensure!(results.contains_key("ok"), "no transfer was accepted");
    let settled = leader_status(cluster, set, WAIT_MAX).await?;
    ctx.say(format!("(settled on leader {}, term {}) ", settled.id, settled.term));
    Ok(())
}
