//! t95 (worker-id lease wait, issue 10): the store frees an AllocSvr's worker id only once that
//! AllocSvr's lease must be over. Here the first AllocSvr issues snowflake ids under worker id
//! W and is then cut off from the store (it may serve on until its lease ends). Once the store
//! lists W as free, the second AllocSvr leases it and issues; then the first one is asked again.
//! The normal build frees W only after `lease + margin`, when the first AllocSvr has stopped:
//! it answers UNAVAILABLE and W's ids only go up. With `SEQSVR_TEETH=no-worker-wait` W is freed after a
//! third of a lease, the first AllocSvr still serves and issues below the second one's ids: G2
//! (one worker id's ids increase in real time) is violated.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, IdRecorder, ProcKey};
use seqsvr_core::ids::SetId;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_id_is_not_handed_on_while_its_holder_may_issue() {
    let defaults = ClusterOptions::default();
    // A lease long enough that the teeth build's third of it is well before its end.
    let alloc = seqsvr_core::config::AllocTuning {
        lease_ms: 6_000,
        lease_margin_ms: 500,
        heartbeat_ms: 1_000,
        ..defaults.alloc.clone()
    };
    // One snowflake worker id per set: its next holder can only be the one after it.
    let mut ids = seqsvr_cluster_tests::test_ids_config();
    ids.schemes.get_mut("snowflake").expect("snowflake").workers_per_set = Some(1);
    // A reservation that outlives the lease, so the cut-off holder could go on issuing after a
    // third of it if only the lease stopped it (its next holder borrows up to just below it).
    ids.reserve_ms = 20_000;
    ids.max_ahead_ms = 19_000;
    let cluster =
        Cluster::start(ClusterOptions { allocs_per_set: 2, proxied: true, alloc, ids, ..defaults });
    let holder = ProcKey::Alloc(SetId(0), 0);
    let (a, b) =
        (cluster.proc(holder).addr.clone(), cluster.proc(ProcKey::Alloc(SetId(0), 1)).addr.clone());
    // Past the new leader's wait (one lease, in which its arbiter frees and moves nothing):
    // both AllocSvrs own sections.
    wait_for("both AllocSvrs to own sections", || async {
        let leases = cluster.leases(SetId(0)).await.ok()?;
        let owners = leases.allocs.iter().filter(|a| a.n_sections > 0).count();
        (owners == 2).then_some(())
    })
    .await;
    let rec = IdRecorder::default();
    let worker = wait_for("the first AllocSvr to serve snowflake ids", || async {
        rec.next_ids(&a, "snowflake", 10, 0).await.ok().map(|(w, _)| w)
    })
    .await;
    for _ in 0..20 {
        rec.served_ids(&a, "snowflake", 100, 0).await;
    }
    cluster.cut_links_of(holder, true, false);
    let cut_at = std::time::Instant::now();
    wait_for("the store to free the cut-off AllocSvr's worker id", || async {
        let leases = cluster.leases(SetId(0)).await.ok()?;
        let record =
            leases.workers.iter().find(|w| w.scheme == "snowflake" && w.worker_id == worker)?;
        (record.alloc_id == 0).then_some(())
    })
    .await;
    eprintln!("{:?} after the cut, the worker id is free", cut_at.elapsed());
    let (handed_to, _) = rec.served_ids(&b, "snowflake", 100, 0).await;
    assert_eq!(handed_to, worker, "the second AllocSvr leases the only worker id, freed");
    let late = rec.next_ids(&a, "snowflake", 100, 0).await;
    eprintln!("{:?} after the cut, the cut-off AllocSvr answered: {late:?}", cut_at.elapsed());
    cluster.heal_all_links();
    rec.assert_no_violation();
    let refused = late.expect_err("the cut-off AllocSvr issued after its worker id was freed");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
}
