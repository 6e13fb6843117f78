//! t40: with 2 of 3 members down, a leader that still believes it leads refuses an advance with
//! UNAVAILABLE "no quorum" (nothing is proposed), and the refused advance never applies, not
//! even once the members return and a new term commits.
//!
//! The refusal must come from the quorum check (`driver/health.rs::check_can_serve`), not from a leader
//! that already stepped down (NotLeader): so the advance is sent while the member still reports
//! `role == leader` in the same term before and after the call. The window for that is between
//! the moment the leader stops counting the dead members as heard (one election timeout after
//! their last message) and raft-rs's check_quorum step-down (at the next election-timeout
//! boundary after that); its length depends on where the kill fell, so a round that misses it
//! (the leader stepped down first) is repeated, a bounded number of times. The window is found
//! with linearizable reads, which go through the same check but put nothing into the log: an
//! advance sent too early would be proposed and could commit after the members return.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, WAIT_MAX};
use seqsvr_core::ids::{NodeId, SectionId};
use seqsvr_proto::v1 as pb;
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Code, Status};

/// Rounds of "kill both followers, catch the lone leader before it steps down".
const ROUNDS: u64 = 10;

fn store_service(
    addr: &str,
) -> pb::store_service_client::StoreServiceClient<tonic::transport::Channel> {
    pb::store_service_client::StoreServiceClient::new(
        seqsvr_client::store::channel(addr).expect("channel"),
    )
}

fn no_quorum(s: &Status) -> bool {
    s.code() == Code::Unavailable && s.message().contains("no quorum")
}

/// One linearizable read straight at `addr`, given `timeout`: while the leader still counts its
/// dead followers as heard, the read waits for acks that never come and times out.
async fn probe_read(addr: &str, timeout: Duration) -> Result<(), Status> {
    let mut request = tonic::Request::new(pb::GetMaxSeqRequest { sections: vec![7] });
    request.set_timeout(timeout);
    match tokio::time::timeout(timeout, store_service(addr).get_max_seq(request)).await {
        Ok(r) => r.map(|_| ()),
        Err(_) => Err(Status::deadline_exceeded("probe read timed out")),
    }
}

/// One AdvanceMaxSeq attempt straight at `addr` (no retries, no leader following).
async fn advance_once(addr: &str, sections: &[(SectionId, u64)]) -> Result<(), Status> {
    let mut request = tonic::Request::new(pb::AdvanceMaxSeqRequest {
        sections: sections
            .iter()
            .map(|&(s, v)| pb::SectionMaxSeq { section: s.0, max_seq: v, lease_epoch: 0 })
            .collect(),
        alloc_id: 0,
    });
    let timeout = Duration::from_secs(5);
    request.set_timeout(timeout);
    match tokio::time::timeout(timeout, store_service(addr).advance_max_seq(request)).await {
        Ok(r) => r.map(|_| ()),
        Err(_) => Err(Status::deadline_exceeded("advance timed out")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advance_without_quorum_is_unavailable_and_changes_nothing() {
    let mut cluster = Cluster::start(ClusterOptions::default());
    cluster.wait_leader().await;
    let client = cluster.store_client();
    client.advance(&[(SectionId(7), 100)], Duration::from_secs(20)).await.expect("advance");

    // Every advance sent to a leader without its followers: none of them may ever apply.
    let mut refused: Vec<SectionId> = Vec::new();
    let mut caught = false;
    for round in 0..ROUNDS {
        let leader = cluster.wait_leader().await;
        let addr = cluster.member(leader).addr.clone();
        let followers: Vec<NodeId> = cluster.ids().into_iter().filter(|&id| id != leader).collect();
        for &id in &followers {
            cluster.kill9(id);
        }

        // Wait until the lone leader refuses a read for lack of quorum, or steps down first.
        let until = Instant::now() + WAIT_MAX;
        let before = loop {
            assert!(Instant::now() < until, "the lone leader neither refused nor stepped down");
            let Some(s) = cluster.status(leader).await else { continue };
            if s.role != "leader" {
                eprintln!("round {round}: the leader stepped down before refusing a read");
                break None;
            }
            match probe_read(&addr, Duration::from_millis(20)).await {
                Err(e) if no_quorum(&e) => break Some(s),
                Ok(()) => panic!("a read was confirmed by a lone leader"),
                Err(_) => {} // still counts the followers as heard, or stepped down meanwhile
            }
        };

        if let Some(before) = before {
            let sections = [(SectionId(100 + round), 500), (SectionId(200 + round), 500)];
            refused.extend(sections.iter().map(|&(s, _)| s));
            let err = advance_once(&addr, &sections).await.expect_err("no quorum: refused");
            let after = cluster.status(leader).await;
            assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
            let still_leader =
                after.as_ref().is_some_and(|a| a.role == "leader" && a.term == before.term);
            if still_leader {
                // The member led the same term before and after the call: it refused as leader.
                assert!(
                    no_quorum(&err),
                    "a leader without quorum must refuse with \"no quorum\": {}",
                    err.message()
                );
                eprintln!("refused for lack of quorum while leading, in round {round}");
                caught = true;
            } else {
                eprintln!("round {round}: the leader stepped down around the advance");
                // It stepped down around the call (NotLeader, or no quorum just before): not
                // the case this test is after; nothing was proposed either way.
                assert!(
                    no_quorum(&err)
                        || err.message().contains("not the leader")
                        || err.message().contains("no leader known"),
                    "a lone member answered neither no quorum nor not leader: {}",
                    err.message()
                );
            }
        }

        for &id in &followers {
            cluster.start_member(id);
        }
        if caught {
            break;
        }
    }
    assert!(
        caught,
        "in {ROUNDS} rounds the lone leader never refused an advance for lack of quorum while \
         still leading (it always stepped down first, or proposed without a quorum in sight)"
    );

    // The members are back. A linearizable read commits the new term first: an entry the lone
    // leader might have appended is then either committed or gone for good.
    let leader = cluster.wait_leader().await;
    let mut sections = vec![SectionId(7)];
    sections.extend(&refused);
    let values = client.get(&sections, Duration::from_secs(20)).await.expect("read");
    let mut expected = vec![(SectionId(7), 100)];
    expected.extend(refused.iter().map(|&s| (s, 0)));
    assert_eq!(values, expected, "the refused advances changed nothing");

    // And no member holds them either, once all applied what the leader committed.
    let commit = wait_for("the leader's status", || cluster.status(leader)).await.commit_index;
    cluster.wait_applied(commit).await;
    for id in cluster.ids() {
        let local = cluster.local_values(id, &sections).await;
        let local: Vec<(SectionId, u64)> = local.into_iter().collect();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(local, want, "member {id}'s own state");
    }
}
