//! t92: a voter whose data dir is lost and that restarts under the same leader, without being
//! removed first (the operator skipped step 1 of "replace a dead member").
//!
//! The leader's progress for it still says it holds entries it lost, so the leader's
//! heartbeats carry a commit index past its (empty) log: raft-rs aborts on that, and the member
//! crash-looped. It must instead catch up by snapshot and stay vote-blocked (acknowledging the
//! log, which counts toward commits, but never voting or leading); removing and re-adding it
//! lifts the block.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey};
use seqsvr_core::ids::{SectionId, SetId};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_voter_under_the_same_leader_catches_up_vote_blocked_and_is_re_added() {
    let mut cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_leader().await;
    let client = cluster.store_client();
    let section = SectionId(3);
    let raised = client.advance(&[(section, 5_000)], WAIT).await.expect("raise")[0].1;
    assert_eq!(raised, 5_000);
    let ids = cluster.ids();
    let wiped = *ids.iter().find(|&&id| id != leader).expect("a follower");
    let other = *ids.iter().find(|&&id| id != leader && id != wiped).expect("another follower");
    // It acknowledged the raise, so the leader's progress for it is past the bootstrap.
    wait_for("the follower to apply the raise", || async {
        (cluster.local_values(wiped, &[section]).await[&section] == raised).then_some(())
    })
    .await;

    cluster.kill9(wiped);
    cluster.wipe_data_dir(ProcKey::Store(SetId(0), wiped));
    cluster.start_member(wiped); // `existing`: the default after the first start
    let status = wait_for("the wiped member to catch up by snapshot", || async {
        let s = cluster.status(wiped).await?;
        (s.applied_index > 0 && s.leader_id == leader.0).then_some(s)
    })
    .await;
    assert!(cluster.is_running(wiped), "the wiped member must not crash");
    assert!(status.vote_blocked, "a member restarted on an empty dir must not vote: {status:?}");
    assert_eq!(cluster.local_values(wiped, &[section]).await[&section], raised);
    // (Whether a heartbeat with the stale commit index arrives before the snapshot depends on
    // timing; `driver/inbound.rs`'s unit test pins the clamp itself.)

    // It cannot lead.
    let refused =
        client.transfer_leader(wiped, WAIT).await.expect_err("transfer to a blocked member");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");

    // Its acknowledgements still count: with the other follower down, the leader commits with it.
    cluster.kill9(other);
    let again =
        client.advance(&[(section, 6_000)], WAIT).await.expect("commit with the blocked member");
    assert_eq!(again[0].1, 6_000);
    cluster.start_member(other);

    // Remove and re-add: the promotion reaches it through its log and lifts the block.
    let addr = cluster.member(wiped).addr.clone();
    let removed = client.remove(wiped, WAIT).await.expect("remove");
    assert!(removed.members.iter().all(|m| m.id != wiped.0), "{removed:?}");
    wait_for("re-add as a learner", || async { client.add_learner(wiped, &addr, WAIT).await.ok() })
        .await;
    wait_for("promote once caught up", || async { client.promote(wiped, WAIT).await.ok() }).await;
    wait_for("the re-added member to vote again", || async {
        let s = cluster.status(wiped).await?;
        (!s.vote_blocked && s.voters.contains(&wiped.0)).then_some(())
    })
    .await;
    // The leader learns that the member is no longer vote-blocked from the member's next Raft
    // batch (it says so in every batch): until then it refuses it as a transfer target.
    wait_for("the leader to accept the re-added member as a transfer target", || async {
        client.transfer_leader(wiped, WAIT).await.ok()
    })
    .await;
    wait_for("the re-added member to lead", || async {
        (cluster.status(wiped).await?.role == "leader").then_some(())
    })
    .await;
    let read = client.get(&[section], WAIT).await.expect("read");
    assert_eq!(read[0].1, 6_000, "nothing was lost on the way");
}
