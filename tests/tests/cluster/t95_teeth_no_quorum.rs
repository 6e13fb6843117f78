//! t95 (quorum check): a store leader cut off from the other members stops taking proposals
//! once it has not heard from a quorum for an election timeout, before raft-rs makes it step
//! down: it answers UNAVAILABLE "no quorum" (nothing proposed), and an advance it refused never
//! applies later. Without that check (`SEQSVR_TEETH=no-quorum-check`) the lone leader appends every
//! request to its log until it steps down, and its callers learn nothing but a timeout.

use seqsvr_cluster_tests::{Cluster, ClusterOptions, ProcKey};
use seqsvr_core::ids::{SectionId, SetId};
use seqsvr_proto::v1 as pb;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::Code;

/// One advance sent straight to the isolated leader: its section (one per attempt) and answer.
struct Attempt {
    section: u64,
    max_seq: u64,
    answer: Result<(), (Code, String)>,
}

const RAISE: u64 = 1_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_refuses_with_no_quorum_and_the_refused_advance_never_applies() {
    let options = ClusterOptions { proxied: true, ..ClusterOptions::default() };
    let cluster = Cluster::start(options);
    let store = cluster.store_client();
    store.advance(&[(SectionId(1), 10)], Duration::from_secs(20)).await.expect("first advance");

    let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let mut next_section = 100u64;
    let mut saw_no_quorum = false;
    for round in 0..5 {
        let leader = cluster.wait_leader().await;
        let key = ProcKey::Store(SetId(0), leader);
        let addr = cluster.member(leader).addr.clone();
        cluster.cut_links_of(key, true, true);
        let cut_at = Instant::now();
        // Advances straight at the isolated leader every 20 ms, each on its own section, until
        // it no longer calls itself leader.
        let mut tasks = Vec::new();
        while cut_at.elapsed() < Duration::from_secs(10) && next_section < 990 {
            let status = cluster.status(leader).await;
            if status.is_some_and(|s| s.role != "leader") {
                break;
            }
            let (section, max_seq) = (next_section, RAISE + next_section);
            next_section += 1;
            let (addr, attempts) = (addr.clone(), attempts.clone());
            tasks.push(tokio::spawn(async move {
                let channel = seqsvr_client::store::channel(&addr).expect("channel");
                let mut c = pb::store_service_client::StoreServiceClient::new(channel);
                let mut req = tonic::Request::new(pb::AdvanceMaxSeqRequest {
                    sections: vec![pb::SectionMaxSeq { section, max_seq, lease_epoch: 0 }],
                    alloc_id: 0,
                });
                req.set_timeout(Duration::from_millis(300));
                let answer = match c.advance_max_seq(req).await {
                    Ok(_) => Ok(()),
                    Err(s) => Err((s.code(), s.message().to_string())),
                };
                attempts.lock().unwrap().push(Attempt { section, max_seq, answer });
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for t in tasks {
            t.await.expect("attempt task");
        }
        cluster.heal_all_links();
        let refused = attempts
            .lock()
            .unwrap()
            .iter()
            .filter(
                |a| matches!(&a.answer, Err((Code::Unavailable, m)) if m.starts_with("no quorum")),
            )
            .count();
        eprintln!(
            "round {round}: leader {leader} isolated for {:?}; {refused} advances refused with \
             'no quorum' so far",
            cut_at.elapsed()
        );
        if refused > 0 {
            saw_no_quorum = true;
            break;
        }
    }
    cluster.wait_leader().await;
    let attempts = std::mem::take(&mut *attempts.lock().unwrap());
    let sections: Vec<SectionId> = attempts.iter().map(|a| SectionId(a.section)).collect();
    let mut values = std::collections::BTreeMap::new();
    for chunk in sections.chunks(32) {
        values.extend(store.get(chunk, Duration::from_secs(20)).await.expect("read"));
    }
    for a in &attempts {
        if let Err((Code::Unavailable, m)) = &a.answer {
            if m.starts_with("no quorum") {
                let v = values[&SectionId(a.section)];
                assert!(
                    v < a.max_seq,
                    "an advance refused with 'no quorum' applied later: section {} is at {v}",
                    a.section
                );
            }
        }
    }
    let answers: std::collections::BTreeMap<String, usize> =
        attempts.iter().fold(Default::default(), |mut m, a| {
            let key = match &a.answer {
                Ok(()) => "ok".to_string(),
                Err((code, msg)) => {
                    format!("{code:?}: {}", msg.chars().take(40).collect::<String>())
                }
            };
            *m.entry(key).or_default() += 1;
            m
        });
    assert!(
        saw_no_quorum,
        "an isolated leader never answered 'no quorum' before stepping down (in 5 isolations; \
         it proposes without a quorum in sight?); answers: {answers:?}"
    );
    // The set still works.
    store.advance(&[(SectionId(1), 20)], Duration::from_secs(20)).await.expect("advance after");
}
