//! t86: SIGTERM is a hand-over, not a failure (1 set, 3 store members, 2 AllocSvrs, client load
//! recorded throughout, one clock).
//!
//! - An AllocSvr that gets SIGTERM stops serving, hands its sections back (`ReleaseAlloc`), the
//!   store moves them to the other AllocSvr at once (no lease wait), and it exits 0; restarted,
//!   it gets sections again.
//! - The store leader that gets SIGTERM transfers leadership first and exits 0; restarted, it
//!   rejoins.
//!
//! The whole history passes the I1 checker. The longest stretch without a successful call is
//! printed for each step (`docs/OBSERVABILITY.md` records it; no timing is asserted).

use seqsvr_cluster_tests::history::check;
use seqsvr_cluster_tests::{
    assert_no_violation, wait_for, Cluster, ClusterOptions, ProcKey, RecordedLoad,
};
use seqsvr_core::ids::SetId;
use std::sync::Arc;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_sections_and_leadership_over() {
    let mut cluster =
        Cluster::start(ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() });
    let client = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&client).await;
    let set = cluster.config.sets[0].clone();
    let stride = (set.uid_end - set.uid_begin) / 40;
    let uids: Vec<u64> = (0..40).map(|i| set.uid_begin + i * stride + i % 7).collect();
    let t0 = Instant::now();
    let mut history = Vec::new();

    // 1. SIGTERM an AllocSvr under load.
    let load = RecordedLoad::start_at(t0, client.clone(), uids.clone(), 4);
    load.wait_progress("before the AllocSvr's SIGTERM", 500).await;
    let alloc = ProcKey::Alloc(SetId(0), 0);
    let status = cluster.terminate(alloc).await;
    assert!(status.success(), "the AllocSvr exits 0 on SIGTERM: {status:?}");
    let log = cluster.log_of(alloc);
    assert!(log.contains("stopped serving"), "it stopped serving first:\n{log}");
    assert!(log.contains("sections handed back to the store"), "the release committed:\n{log}");
    load.wait_progress("after the AllocSvr left", 500).await;
    let step1 = load.finish().await;
    let gap = check(&step1).longest_gap_ms.get(&0).copied().unwrap_or(0);
    println!("AllocSvr SIGTERM: longest stretch without a successful call: {gap} ms");
    history.extend(step1);

    // Restarted, it registers anew and takes sections again (a rolling restart).
    cluster.start_proc(alloc);
    let addr = cluster.proc(alloc).addr.clone();
    wait_for("the restarted AllocSvr owns sections again", || async {
        let leases = cluster.leases(SetId(0)).await.ok()?;
        let current = leases.allocs.iter().find(|a| a.addr == addr && !a.replaced)?;
        leases.runs.iter().any(|r| r.alloc_id == current.alloc_id && r.settled).then_some(())
    })
    .await;

    // 2. SIGTERM the store leader under load.
    let load = RecordedLoad::start_at(t0, client.clone(), uids.clone(), 4);
    load.wait_progress("before the leader's SIGTERM", 500).await;
    let leader = cluster.wait_leader().await;
    let key = ProcKey::Store(SetId(0), leader);
    let status = cluster.terminate(key).await;
    assert!(status.success(), "the store leader exits 0 on SIGTERM: {status:?}");
    let log = cluster.log_of(key);
    assert!(log.contains("leadership handed over"), "it transferred leadership:\n{log}");
    let next = cluster.wait_leader().await;
    assert_ne!(next, leader);
    load.wait_progress("after the leader left", 500).await;
    cluster.start_proc(key);
    cluster.wait_caught_up(SetId(0), leader).await;
    load.wait_progress("with the old leader back", 500).await;
    let step2 = load.finish().await;
    let gap = check(&step2).longest_gap_ms.get(&0).copied().unwrap_or(0);
    println!("store leader SIGTERM: longest stretch without a successful call: {gap} ms");
    history.extend(step2);

    assert_no_violation(&history);
}
