//! t10: a 3-member set elects a leader, commits advances, and every member applies the same
//! values; bad input is refused with INVALID_ARGUMENT and proposes nothing; non-leaders redirect.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions};
use seqsvr_core::ids::SectionId;
use seqsvr_proto::v1 as pb;
use std::time::Duration;
use tonic::Code;

const DEADLINE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_commits_and_every_member_applies_the_same_values() {
    let cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_leader().await;
    let client = cluster.store_client();

    let sections: Vec<SectionId> = (0..20).map(SectionId).collect();
    let mut expected = std::collections::BTreeMap::new();
    for round in 1..=10u64 {
        let batch: Vec<(SectionId, u64)> =
            sections.iter().map(|&s| (s, round * 1000 + s.0)).collect();
        let got = client.advance(&batch, DEADLINE).await.expect("advance");
        assert_eq!(got, batch, "a raise returns the committed new values in request order");
        expected.extend(batch);
    }
    // Asking for less leaves the value and returns it.
    let got = client.advance(&[(SectionId(3), 5)], DEADLINE).await.expect("advance lower");
    assert_eq!(got, vec![(SectionId(3), 10_003)]);
    let read = client.get(&sections, DEADLINE).await.expect("linearizable read");
    assert_eq!(read, expected.clone().into_iter().collect::<Vec<_>>());

    let commit = cluster.status(leader).await.expect("leader status").commit_index;
    cluster.wait_applied(commit).await;
    for id in cluster.ids() {
        assert_eq!(
            cluster.local_values(id, &sections).await,
            expected,
            "member {id} applied the same values"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_proposes_nothing() {
    // Sections [0, 1000), batch max 64; no id schemes, whose records the leader would propose.
    let options = ClusterOptions { ids: Default::default(), ..ClusterOptions::default() };
    let cluster = Cluster::start(options);
    let leader = cluster.wait_leader().await;
    let client = cluster.store_client();
    client.advance(&[(SectionId(1), 10)], DEADLINE).await.expect("warm-up advance");
    // The leader proposes on its own after an election (the lease timing, the commands
    // version, then the set's layout): counted only once they are in, so that they are not
    // taken for bad input's.
    let before = wait_for("the leader's own proposals after its election to apply", || async {
        let s = cluster.status(leader).await?;
        let settled = s.lease_ms != 0
            && s.commands_version == s.build_commands_version
            && s.recorded_layout.is_some()
            && s.applied_index == s.last_index;
        settled.then_some(s.last_index)
    })
    .await;

    let too_many: Vec<(SectionId, u64)> = (0..65).map(|s| (SectionId(s), 1)).collect();
    let cases: Vec<(&str, Vec<(SectionId, u64)>)> = vec![
        ("empty batch", vec![]),
        ("section out of range", vec![(SectionId(2), 5), (SectionId(1000), 5)]),
        ("oversized batch", too_many),
        ("duplicate section", vec![(SectionId(2), 5), (SectionId(2), 6)]),
    ];
    for (what, batch) in cases {
        let err = client.advance(&batch, DEADLINE).await.expect_err(what);
        assert_eq!(err.code(), Code::InvalidArgument, "{what}: {}", err.message());
    }
    let err = client.get(&[SectionId(5000)], DEADLINE).await.expect_err("read out of range");
    assert_eq!(err.code(), Code::InvalidArgument);

    let after = cluster.status(leader).await.expect("status");
    assert_eq!(after.last_index, before, "no entry was proposed for bad input");
    assert_eq!(
        client.get(&[SectionId(2)], DEADLINE).await.unwrap(),
        vec![(SectionId(2), 0)],
        "partial batch not applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_answer_with_the_leader_address() {
    let cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_leader().await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let channel = seqsvr_client::store::channel(&cluster.member(follower).addr).unwrap();
    let mut direct = pb::store_service_client::StoreServiceClient::new(channel);
    let err = direct
        .advance_max_seq(pb::AdvanceMaxSeqRequest {
            sections: vec![pb::SectionMaxSeq { section: 1, max_seq: 1, lease_epoch: 0 }],
            alloc_id: 0,
        })
        .await
        .expect_err("a follower does not serve");
    assert_eq!(err.code(), Code::Unavailable);
    let hint = err
        .metadata()
        .get(seqsvr_proto::LEADER_ADDR_METADATA)
        .expect("leader hint")
        .to_str()
        .unwrap();
    assert_eq!(hint, cluster.member(leader).addr);
    assert!(err.message().contains(&cluster.member(leader).addr), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seqctl_store_status_json_has_the_stable_keys() {
    let cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_leader().await;
    let rows = wait_for("seqctl store status to list all members with one leader", || async {
        let out = tokio::process::Command::from(cluster.seqctl())
            .args(["store", "status", "--json"])
            .output()
            .await
            .expect("run seqctl");
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).ok()?;
        (out.status.success() && rows.iter().filter(|r| r["role"] == "leader").count() == 1)
            .then_some(rows)
    })
    .await;
    assert_eq!(rows.len(), 3);
    for row in &rows {
        for key in
            ["set", "id", "addr", "role", "term", "leader_id", "commit_index", "applied_index"]
        {
            assert!(row.get(key).is_some(), "key {key} missing in {row}");
        }
        assert_eq!(row["leader_id"], leader.0);
    }
}
