//! t91: Raft membership changes under client load (`DESIGN.md` §8). One set, 3 stores, 2
//! AllocSvrs, callers recording every `next` into a history. The set grows 3 → 5 (a new member
//! starts empty with `--initial-cluster-state existing`, joins as a learner, catches up, is
//! promoted; twice), shrinks back to 3 (removing the current leader and one other voter), then a
//! member is replaced (removed, stopped, wiped, started empty, added as a learner, promoted).
//! After every step: `seqctl store status --json` shows the new membership, every section's
//! committed max_seq is at least what was read before, and the set still serves. At the end the
//! history has no regression and no duplicate.

use seqsvr_client::store::StoreClient;
use seqsvr_cluster_tests::history::check;
use seqsvr_cluster_tests::lost_disk::{add_learner_retrying, member_list, promote_retrying};
use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey, RecordedLoad, WAIT_MAX};
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const SET: SetId = SetId(0);
/// Successful calls the load must make after each step (the set still serves).
const PROGRESS: u64 = 50;

fn key(id: NodeId) -> ProcKey {
    ProcKey::Store(SET, id)
}

/// Every section's committed max_seq as last read; a later read must never be lower.
struct Floors {
    seen: BTreeMap<SectionId, u64>,
    /// A section only the operator raises, once per step.
    raised: SectionId,
}

impl Floors {
    /// Raises `self.raised` by a step through the leader, then reads every advanced section
    /// (linearizable reads) and checks none went below what an earlier read saw.
    async fn raise_and_check(&mut self, cluster: &Cluster, after: &str) {
        let store = cluster.store_client_of(SET);
        let target = self.seen.get(&self.raised).copied().unwrap_or(0) + 1_000_000;
        let acked =
            store.advance(&[(self.raised, target)], WAIT_MAX).await.expect("operator raise");
        assert!(acked[0].1 >= target, "raise acknowledged {acked:?} below {target}");
        let range = cluster.config.set(SET).unwrap().sections(cluster.config.section_size);
        let advanced = store.load(range, WAIT_MAX).await.expect("load every advanced section");
        let mut sections: BTreeSet<SectionId> = advanced.keys().copied().collect();
        sections.extend(self.seen.keys().copied());
        let sections: Vec<SectionId> = sections.into_iter().collect();
        for chunk in sections.chunks(64) {
            for (s, v) in store.get(chunk, WAIT_MAX).await.expect("linearizable read") {
                let before = self.seen.get(&s).copied().unwrap_or(0);
                assert!(
                    v >= before,
                    "{after}: section {s} read {v}, below the {before} read before"
                );
                self.seen.insert(s, v);
            }
        }
        assert!(self.seen[&self.raised] >= target, "{after}: the raise of {} is gone", self.raised);
        println!("{after}: {} sections read, none lower than before", sections.len());
    }
}

/// `seqctl store status --json` rows (whatever its exit code: removed members that are still in
/// the cluster file are unreachable).
async fn seqctl_store_status(cluster: &Cluster) -> Option<Vec<serde_json::Value>> {
    let out = tokio::process::Command::from(cluster.seqctl())
        .args(["store", "status", "--json"])
        .output()
        .await
        .expect("run seqctl");
    serde_json::from_slice(&out.stdout).ok()
}

/// Waits until `seqctl store status --json` shows exactly `voters` and `learners` in the
/// `members` of every answering current member (and `vote_blocked: false` for its voters), with
/// at least one such member answering; then checks the keys of the membership are in place.
async fn expect_membership(cluster: &Cluster, voters: &[NodeId], learners: &[NodeId], step: &str) {
    let want: BTreeSet<(u64, bool)> =
        voters.iter().map(|v| (v.0, false)).chain(learners.iter().map(|l| (l.0, true))).collect();
    let current: BTreeSet<u64> = want.iter().map(|&(id, _)| id).collect();
    let rows = wait_for(&format!("seqctl to show members {want:?} {step}"), || async {
        let rows = seqctl_store_status(cluster).await?;
        let answering: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["id"].as_u64().is_some_and(|id| current.contains(&id)))
            .filter(|r| r["role"] != "unreachable")
            .collect();
        if answering.is_empty() {
            return None;
        }
        for r in &answering {
            let id = r["id"].as_u64()?;
            if voters.iter().any(|v| v.0 == id) && r["vote_blocked"] != false {
                return None; // a voter that may not vote: not caught up with the change yet
            }
            let members = r["members"].as_array()?;
            let got: BTreeSet<(u64, bool)> = members
                .iter()
                .map(|m| Some((m["id"].as_u64()?, m["learner"].as_bool()?)))
                .collect::<Option<_>>()?;
            if got != want {
                return None;
            }
        }
        Some(rows)
    })
    .await;
    for r in rows.iter().filter(|r| r["role"] != "unreachable") {
        assert!(r.get("vote_blocked").is_some(), "vote_blocked missing in {r}");
        for m in r["members"].as_array().expect("members") {
            for k in ["id", "addr", "learner", "match_index", "lag"] {
                assert!(m.get(k).is_some(), "key {k} missing in member {m} of {r}");
            }
        }
    }
    println!("{step}: seqctl shows voters {voters:?}, learners {learners:?}");
}

/// Adds `id` (already running) as a learner, waits until it caught up, promotes it.
async fn join(cluster: &mut Cluster, voters: &mut Vec<NodeId>, id: NodeId, step: &str) {
    let addr = cluster.proc(key(id)).addr.clone();
    let store: StoreClient = cluster.store_client_of(SET);
    let added = add_learner_retrying(&store, id, &addr).await.expect("add learner");
    println!("{step}: added {id} as a learner: {:?}", member_list(&added.members));
    assert!(added.members.iter().any(|m| m.id == id.0 && m.learner), "{:?}", added.members);
    cluster.set_removed(key(id), false);
    expect_membership(cluster, voters, &[id], &format!("{step} (learner)")).await;
    cluster.wait_caught_up(SET, id).await;
    let promoted = promote_retrying(&store, id).await.expect("promote");
    println!("{step}: promoted {id}: {:?}", member_list(&promoted.members));
    assert!(promoted.members.iter().any(|m| m.id == id.0 && !m.learner), "{:?}", promoted.members);
    voters.push(id);
    voters.sort();
    expect_membership(cluster, voters, &[], step).await;
}

/// Removes voter `id` through the leader, then stops it.
async fn leave(cluster: &mut Cluster, voters: &mut Vec<NodeId>, id: NodeId, step: &str) {
    let store = cluster.store_client_of(SET);
    let removed = store.remove(id, WAIT_MAX).await.expect("remove member");
    println!("{step}: removed {id}: {:?}", member_list(&removed.members));
    assert!(removed.members.iter().all(|m| m.id != id.0), "{:?}", removed.members);
    cluster.kill9_proc(key(id));
    cluster.set_removed(key(id), true);
    voters.retain(|&v| v != id);
    expect_membership(cluster, voters, &[], step).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_shrink_and_replace_members_under_load() {
    let options = ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() };
    let mut cluster = Cluster::start(options);
    let client = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&client).await;
    let section_size = cluster.config.section_size;
    // Two uids in each of 8 sections, spread over the set (both AllocSvrs serve some).
    let uids: Vec<u64> =
        (0..8u64).flat_map(|i| [i * 97 * section_size, i * 97 * section_size + 1]).collect();
    let load = RecordedLoad::start(client.clone(), uids, 4);
    load.wait_progress("before any change", PROGRESS).await;
    let mut floors = Floors { seen: BTreeMap::new(), raised: SectionId(999) };
    floors.raise_and_check(&cluster, "start").await;
    let mut voters = cluster.voters(SET).await;
    assert_eq!(voters, vec![NodeId(1), NodeId(2), NodeId(3)]);
    expect_membership(&cluster, &voters, &[], "start").await;

    // Grow 3 → 5.
    for n in [4, 5] {
        let step = format!("grow to {n}");
        let id = cluster.new_store_member(SET);
        cluster.start_proc(key(id));
        join(&mut cluster, &mut voters, id, &step).await;
        assert_eq!(cluster.voters(SET).await, voters);
        load.wait_progress(&format!("after {step}"), PROGRESS).await;
        floors.raise_and_check(&cluster, &step).await;
    }
    assert_eq!(voters.len(), 5);

    // Shrink 5 → 3: the current leader first (it hands over leadership), then another voter.
    let leader = cluster.wait_set_leader(SET).await;
    leave(&mut cluster, &mut voters, leader, &format!("remove the leader {leader}")).await;
    let new_leader = cluster.wait_set_leader(SET).await;
    assert_ne!(new_leader, leader);
    load.wait_progress("after removing the leader", PROGRESS).await;
    floors.raise_and_check(&cluster, "remove the leader").await;
    let other = *voters.iter().find(|&&v| v != new_leader).expect("a follower");
    leave(&mut cluster, &mut voters, other, &format!("remove follower {other}")).await;
    load.wait_progress("after removing a follower", PROGRESS).await;
    floors.raise_and_check(&cluster, "remove a follower").await;
    assert_eq!(voters.len(), 3);
    assert_eq!(cluster.voters(SET).await, voters);

    // Replace a follower: remove it, stop it, wipe its disk, start it empty, add it back.
    let leader = cluster.wait_set_leader(SET).await;
    let replaced = *voters.iter().find(|&&v| v != leader).expect("a follower");
    let step = format!("replace {replaced}");
    leave(&mut cluster, &mut voters, replaced, &format!("{step}: remove")).await;
    cluster.wipe_data_dir(key(replaced));
    cluster.start_proc(key(replaced));
    let s = wait_for("the wiped member to answer", || cluster.store_status(SET, replaced)).await;
    assert!(s.vote_blocked, "an empty member started with `existing` may not vote: {s:?}");
    join(&mut cluster, &mut voters, replaced, &step).await;
    assert_eq!(voters.len(), 3);
    assert_eq!(cluster.voters(SET).await, voters);
    load.wait_progress(&format!("after {step}"), PROGRESS).await;
    floors.raise_and_check(&cluster, &step).await;
    // The replaced member holds the committed state itself.
    let mine = cluster.local_values(replaced, &[floors.raised]).await;
    let held = mine.get(&floors.raised).copied().unwrap_or(0);
    assert!(held >= floors.seen[&floors.raised], "the replaced member holds {mine:?}");

    let ops = load.finish().await;
    let report = check(&ops);
    println!(
        "history: {} ok, {} failed, {} unknown; longest gap {:?} ms",
        report.n_ok, report.n_fail, report.n_unknown, report.longest_gap_ms
    );
    assert!(
        report.is_valid(),
        "violations: {:#?}",
        &report.violations[..report.violations.len().min(5)]
    );
    assert!(report.n_ok > 0);
}
