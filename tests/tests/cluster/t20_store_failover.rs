//! t20: `kill -9` of the leader during a stream of advances: a new leader serves, every
//! acknowledged advance survives, and no section's committed max_seq is ever seen to go down.

use seqsvr_cluster_tests::{Cluster, ClusterOptions};
use seqsvr_core::ids::SectionId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill9_loses_no_acknowledged_advance() {
    let mut cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_leader().await;
    let client = Arc::new(cluster.store_client());
    let stop = Arc::new(AtomicBool::new(false));

    // Writer: raises sections 0..8 round-robin, recording each acknowledged value and checking
    // that the committed value it gets back never goes down.
    let writer = {
        let client = client.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut acked: BTreeMap<SectionId, u64> = BTreeMap::new();
            let mut next = 1u64;
            let mut failures = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let section = SectionId(next % 8);
                match client.advance(&[(section, next)], Duration::from_secs(2)).await {
                    Ok(values) => {
                        let (s, v) = values[0];
                        assert_eq!(s, section);
                        assert!(v >= next, "committed value {v} below the requested {next}");
                        let prev = acked.insert(s, v).unwrap_or(0);
                        assert!(v >= prev, "section {s} went down from {prev} to {v}");
                    }
                    Err(_) => failures += 1, // unknown outcome during the failover: constrains nothing
                }
                next += 1;
            }
            (acked, failures)
        })
    };

    // Let some advances commit, kill the leader, and wait until a new leader commits more.
    let commit_before = cluster.status(leader).await.unwrap().commit_index;
    seqsvr_cluster_tests::wait_for("advances to commit before the kill", || async {
        let s = cluster.status(leader).await?;
        (s.commit_index > commit_before + 20).then_some(())
    })
    .await;
    cluster.kill9(leader);
    let new_leader = cluster.wait_leader().await;
    assert_ne!(new_leader, leader);
    let commit_after_election = cluster.status(new_leader).await.unwrap().commit_index;
    seqsvr_cluster_tests::wait_for("the new leader to commit advances", || async {
        let s = cluster.status(new_leader).await?;
        (s.commit_index > commit_after_election + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let (acked, _failures) = writer.await.expect("writer task");

    let sections: Vec<SectionId> = (0..8).map(SectionId).collect();
    let now = client.get(&sections, Duration::from_secs(20)).await.expect("read after failover");
    for (s, v) in now {
        let a = acked.get(&s).copied().unwrap_or(0);
        assert!(v >= a, "section {s}: acknowledged {a} but the store holds {v}");
    }

    // The killed member comes back, catches up and agrees.
    cluster.start_member(leader);
    let commit = cluster.status(new_leader).await.unwrap().commit_index;
    cluster.wait_applied(commit).await;
    let reference = cluster.local_values(new_leader, &sections).await;
    assert_eq!(cluster.local_values(leader, &sections).await, reference);
}
