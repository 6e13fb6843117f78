//! t50: a member that was down across a log compaction catches up by snapshot, then agrees.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions};
use seqsvr_core::ids::SectionId;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_down_across_compaction_catches_up_by_snapshot() {
    let mut options = ClusterOptions::default();
    options.tuning.compact_log_entries = 16;
    let mut cluster = Cluster::start(options);
    let leader = cluster.wait_leader().await;
    let lagging = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let client = cluster.store_client();
    client.advance(&[(SectionId(0), 1)], Duration::from_secs(20)).await.expect("advance");
    let lagging_last = cluster.status(lagging).await.expect("status").last_index;
    cluster.kill9(lagging);

    let sections: Vec<SectionId> = (0..10).map(SectionId).collect();
    for i in 1..=100u64 {
        client
            .advance(&[(SectionId(i % 10), i * 10)], Duration::from_secs(20))
            .await
            .expect("advance");
    }
    let s = cluster.status(leader).await.expect("leader status");
    assert!(
        s.snapshot_index > lagging_last,
        "the leader compacted past the lagging member's log ({} <= {lagging_last})",
        s.snapshot_index
    );

    cluster.start_member(lagging);
    let commit = cluster.status(leader).await.unwrap().commit_index;
    cluster.wait_applied(commit).await;
    let st = wait_for("the lagging member's status", || cluster.status(lagging)).await;
    assert!(
        st.snapshot_index > lagging_last,
        "it installed a snapshot (snapshot index {})",
        st.snapshot_index
    );
    assert!(cluster.log_text(lagging).contains("installing snapshot"));
    assert_eq!(
        cluster.local_values(lagging, &sections).await,
        cluster.local_values(leader, &sections).await
    );

    // It restarts from its own disk after the snapshot, too.
    cluster.kill9(lagging);
    cluster.start_member(lagging);
    cluster.wait_leader().await;
    cluster.wait_applied(commit).await;
    assert_eq!(
        cluster.local_values(lagging, &sections).await,
        cluster.local_values(leader, &sections).await
    );
}
