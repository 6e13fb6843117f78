//! t94: members started the way `docker-compose.yml` starts them — every start says
//! `--initial-cluster-state new`, plus `--created-marker` on storage that outlives the data dirs.
//!
//! Once the set serves, the members write the marker. A member whose data dir is lost and that
//! comes back with the same command line must then start as `existing`: empty, vote-blocked,
//! caught up by snapshot. Without the marker, `new` on an empty dir with live peers is refused
//! (the process exits), and with every peer unreachable it would re-create the set and could
//! vote for a leader that lacks committed values.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey};
use seqsvr_core::ids::{SectionId, SetId};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_started_with_new_after_the_set_was_created_comes_back_vote_blocked() {
    let mut cluster = Cluster::start(ClusterOptions { created_marker: true, ..Default::default() });
    let leader = cluster.wait_leader().await;
    let client = cluster.store_client();
    let section = SectionId(7);
    let raised = client.advance(&[(section, 9_000)], WAIT).await.expect("raise")[0].1;
    let marker = cluster.created_marker_path(SetId(0));
    wait_for("a member to write the created marker", || async { marker.exists().then_some(()) })
        .await;

    let ids = cluster.ids();
    let wiped = *ids.iter().find(|&&id| id != leader).expect("a follower");
    wait_for("the follower to apply the raise", || async {
        (cluster.local_values(wiped, &[section]).await[&section] == raised).then_some(())
    })
    .await;
    cluster.kill9(wiped);
    cluster.wipe_data_dir(ProcKey::Store(SetId(0), wiped));
    cluster.start_member(wiped); // `new` again, as a compose restart would
    let status = wait_for("the wiped member to catch up by snapshot", || async {
        let s = cluster.status(wiped).await?;
        (s.applied_index > 0 && s.leader_id == leader.0).then_some(s)
    })
    .await;
    assert!(cluster.is_running(wiped), "the member must start, not refuse `new`");
    assert!(status.vote_blocked, "a lost disk must come back non-voting: {status:?}");
    assert!(
        cluster.log_text(wiped).contains("the created marker exists"),
        "the member says why it did not bootstrap"
    );
    assert_eq!(cluster.local_values(wiped, &[section]).await[&section], raised);
}
