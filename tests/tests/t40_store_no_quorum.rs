//! t40: with 2 of 3 members down an advance fails with UNAVAILABLE, and it has changed nothing
//! once they return.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions};
use seqsvr_core::ids::SectionId;
use std::time::Duration;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advance_without_quorum_is_unavailable_and_changes_nothing() {
    let mut cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_leader().await;
    let client = cluster.store_client();
    client.advance(&[(SectionId(7), 100)], Duration::from_secs(20)).await.expect("advance");

    // Kill both followers: the leader is left alone.
    let followers: Vec<_> = cluster.ids().into_iter().filter(|&id| id != leader).collect();
    for &id in &followers {
        cluster.kill9(id);
    }
    // check_quorum makes the lone leader step down within an election timeout.
    wait_for("the lone leader to step down", || async {
        let s = cluster.status(leader).await?;
        (s.role != "leader").then_some(())
    })
    .await;

    let err = client
        .advance(&[(SectionId(7), 500), (SectionId(8), 500)], Duration::from_secs(2))
        .await
        .expect_err("no quorum");
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());

    for &id in &followers {
        cluster.start_member(id);
    }
    cluster.wait_leader().await;
    let values =
        client.get(&[SectionId(7), SectionId(8)], Duration::from_secs(20)).await.expect("read");
    assert_eq!(
        values,
        vec![(SectionId(7), 100), (SectionId(8), 0)],
        "the refused advance changed nothing"
    );
}
