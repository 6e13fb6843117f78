//! t95 (graceful stop): an AllocSvr that gets SIGTERM must stop serving *before* it hands its
//! sections back (`ReleaseAlloc`), because the store then gives them to another AllocSvr at
//! once, without a lease wait. Two clients see it from both sides: `stale` calls only uids of
//! the stopping AllocSvr's sections (so it learns of no newer route table until that AllocSvr
//! refuses), `fresh` calls the same uids and uids of the other AllocSvr (so it learns the new
//! table as soon as the hand-over is there). The normal build passes: values never go back.
//! With `SEQSVR_TEETH=release-before-stop` (release first, serve on for half a lease) the stale client
//! gets values below those the fresh one already got from the new owner: I1 is violated.

use seqsvr_cluster_tests::{assert_no_violation, Cluster, ClusterOptions, ProcKey, RecordedLoad};
use seqsvr_core::ids::SetId;
use std::sync::Arc;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_never_go_back_when_an_allocsvr_hands_its_sections_back() {
    let mut cluster =
        Cluster::start(ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() });
    let stale = Arc::new(cluster.seq_client().await);
    let fresh = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&stale).await;
    cluster.wait_serving(&fresh).await;
    // Wait until both AllocSvrs own sections (the second one took half of the first's).
    let alloc = ProcKey::Alloc(SetId(0), 0);
    let (mine, theirs) =
        seqsvr_cluster_tests::uids_by_owner(&stale, &cluster.proc(alloc).addr).await;
    let fresh_uids: Vec<u64> = mine.iter().chain(&theirs).copied().collect();

    let t0 = Instant::now();
    let stale_load = RecordedLoad::start_at(t0, stale.clone(), mine.clone(), 2);
    let fresh_load = RecordedLoad::start_at(t0, fresh.clone(), fresh_uids, 2);
    stale_load.wait_progress("before the SIGTERM", 300).await;
    fresh_load.wait_progress("before the SIGTERM", 300).await;
    let status = cluster.terminate(alloc).await;
    assert!(status.success(), "exit status {status:?}");
    fresh_load.wait_progress("after the hand-back", 500).await;
    stale_load.wait_progress("after the hand-back", 300).await;
    let mut history = stale_load.finish().await;
    history.extend(fresh_load.finish().await);
    assert_no_violation(&history);
}
