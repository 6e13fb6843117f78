//! t95 (high-water mark, issue 10): a new holder of a worker id starts above the time every
//! earlier holder may have used, whatever its own clock says. Here one AllocSvr issues
//! snowflake ids for a few seconds, is killed (kill -9), and once the store freed its worker id
//! it is restarted with its wall clock set back (libfaketime) into the time it already used,
//! and leases the same worker id. The normal build starts above the persisted mark (waiting for
//! the clock to come near it): no id twice. With `SEQSVR_TEETH=no-high-water` it starts from its clock
//! and reissues ids of the first run: G1 is violated.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, IdRecorder, ProcKey};
use seqsvr_core::ids::SetId;
use seqsvr_core::idscheme::{LayoutSpec, Scheme};

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_the_clock_set_back_never_reissues_an_id() {
    // One snowflake worker id per set: its next holder can only be the one after it.
    let mut ids = seqsvr_cluster_tests::test_ids_config();
    ids.schemes.get_mut("snowflake").expect("snowflake").workers_per_set = Some(1);
    let mut cluster = Cluster::start(ClusterOptions {
        allocs_per_set: 1,
        faketime: true,
        ids,
        ..ClusterOptions::default()
    });
    let key = ProcKey::Alloc(SetId(0), 0);
    let addr = cluster.proc(key).addr.clone();
    let layout = LayoutSpec::of(Scheme::Snowflake).load(unix_ms()).expect("snowflake");
    let time_of = |id: u128| layout.unix_ms(layout.decode(id).expect("a snowflake id").time);
    let rec = IdRecorder::default();
    let worker = wait_for("the AllocSvr to serve snowflake ids", || async {
        rec.next_ids(&addr, "snowflake", 10, 0).await.ok().map(|(w, _)| w)
    })
    .await;
    // Ids over at least 3 s of their own time, densely (every call's first id has sequence 0).
    // A call refused for a moment (a late heartbeat on a busy machine) is retried: the test is
    // about which ids come back, not about availability.
    let first = time_of(rec.served_ids(&addr, "snowflake", 200, 0).await.1[0]);
    loop {
        let (_, ids) = rec.served_ids(&addr, "snowflake", 200, 0).await;
        if time_of(ids[ids.len() - 1]) >= first + 3_000 {
            break;
        }
    }
    cluster.kill9_proc(key);
    wait_for("the store to free the killed AllocSvr's worker id", || async {
        let leases = cluster.leases(SetId(0)).await.ok()?;
        let record =
            leases.workers.iter().find(|w| w.scheme == "snowflake" && w.worker_id == worker)?;
        (record.alloc_id == 0).then_some(())
    })
    .await;
    // Back into the first run's time: about a second after its first id.
    let back_s = (unix_ms() - first - 1_000).div_ceil(1_000);
    cluster.set_wall_clock_offset(key, &format!("-{back_s}"));
    cluster.start_proc(key);
    let again = wait_for("the restarted AllocSvr to serve snowflake ids", || async {
        rec.next_ids(&addr, "snowflake", 200, 0).await.ok().map(|(w, _)| w)
    })
    .await;
    assert_eq!(again, worker, "the restarted AllocSvr leases the only worker id again");
    for _ in 0..30 {
        rec.served_ids(&addr, "snowflake", 200, 0).await;
    }
    rec.assert_no_violation();
}
