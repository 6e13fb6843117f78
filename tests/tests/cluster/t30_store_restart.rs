//! t30: `kill -9` of every member, then restart: the state is intact (I2), from disk alone.

use seqsvr_cluster_tests::{Cluster, ClusterOptions};
use seqsvr_core::ids::SectionId;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_all_members_then_restart_keeps_state() {
    let mut cluster = Cluster::start(ClusterOptions::default());
    cluster.wait_leader().await;
    let client = cluster.store_client();
    let sections: Vec<SectionId> = (0..30).map(SectionId).collect();
    for round in 1..=5u64 {
        let batch: Vec<_> = sections.iter().map(|&s| (s, round * 100 + s.0)).collect();
        client.advance(&batch, Duration::from_secs(20)).await.expect("advance");
    }
    let before = client.get(&sections, Duration::from_secs(20)).await.expect("read");

    for id in cluster.ids() {
        cluster.kill9(id);
    }
    for id in cluster.ids() {
        cluster.start_member(id);
    }
    cluster.wait_leader().await;
    let client = cluster.store_client();
    let after = client.get(&sections, Duration::from_secs(20)).await.expect("read after restart");
    assert_eq!(after, before);
    // And it keeps working: an advance after the restart commits.
    let got =
        client.advance(&[(SectionId(0), 10_000)], Duration::from_secs(20)).await.expect("advance");
    assert_eq!(got, vec![(SectionId(0), 10_000)]);
}
