//! t95 (ReadIndex before a grant): a deposed store leader that has not noticed yet must not
//! renew leases. The interleaving: leader L1 hands leadership to L2 (`MsgTimeoutNow`, so L2 is
//! elected at once, not an election timeout later) while nothing from the other members
//! reaches L1: L1 still believes it leads, and heard from a quorum moments ago. AllocSvr A
//! reaches only L1, AllocSvr B only the others. L2 hears nothing from A, expires it after one
//! lease and hands A's sections to B.
//!
//! With ReadIndex, L1 cannot confirm its leadership, so A's lease runs out before B serves.
//! Without it (`SEQSVR_TEETH=no-readindex-before-grant`), L1 keeps renewing A's lease for up to an
//! election timeout (`check_can_serve` still sees the quorum it heard before the cut): A and B
//! serve the same section at once, and a value from A after one from B goes back (I1, I3).
//! The election timeout here (2 s) is longer than the default so that window outlasts the new
//! leader's one-lease wait.

use seqsvr_cluster_tests::history::{check, Operation, Outcome};
use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey};
use seqsvr_core::ids::{NodeId, SetId};
use seqsvr_proto::v1 as pb;
use std::time::Duration;
use tokio::time::Instant;

fn cut(cluster: &Cluster, from: ProcKey, to: ProcKey) {
    cluster.links.get(&(from, to)).expect("a proxied link").set_cut(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_grants_no_lease_while_the_new_one_moves_sections() {
    let mut options = ClusterOptions {
        allocs_per_set: 2,
        proxied: true,
        n_sections: 20,
        ..ClusterOptions::default()
    };
    options.tuning.election_ticks = 40; // 2 s at 50 ms a tick
    let mut cluster = Cluster::start(options);
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let set = SetId(0);
    // A store client follows a redirect to the address in the redirecting member's own view,
    // which here is that member's proxy to the leader: an AllocSvr redirected that way would
    // lose L1 when the test cuts the peer links into it. So member 1 leads, and the AllocSvrs
    // restart: each store client tries member 1 first and is never redirected.
    let store = cluster.store_client();
    wait_for("member 1 to lead", || async {
        if cluster.wait_leader().await == NodeId(1) {
            return Some(());
        }
        let _ = store.transfer_leader(NodeId(1), Duration::from_secs(2)).await;
        None
    })
    .await;
    for i in 0..2 {
        cluster.kill9_proc(ProcKey::Alloc(set, i));
        cluster.start_proc(ProcKey::Alloc(set, i));
    }

    let uid = 0;
    let mut staged = None;
    for attempt in 0..3 {
        cluster.wait_serving(&client).await;
        client.next(uid, Duration::from_secs(20)).await.expect("served before the fault");
        // A = the owner of section 0 (uid 0), B = the other AllocSvr.
        let l = wait_for("leases", || async { cluster.leases(SetId(0)).await.ok() }).await;
        let owner =
            l.runs.iter().find(|r| r.section_begin == 0).expect("section 0 assigned").alloc_id;
        let owner_addr =
            l.allocs.iter().find(|a| a.alloc_id == owner).expect("registered").addr.clone();
        let (a, b) = if cluster.proc(ProcKey::Alloc(set, 0)).addr == owner_addr {
            (ProcKey::Alloc(set, 0), ProcKey::Alloc(set, 1))
        } else {
            (ProcKey::Alloc(set, 1), ProcKey::Alloc(set, 0))
        };
        let l1 = cluster.wait_leader().await;
        let others: Vec<NodeId> = cluster.ids().into_iter().filter(|&id| id != l1).collect();
        let l2 = others[0];
        // L2 must hold L1's whole log, or the transfer waits for acks the cut stops.
        wait_for("L2 to hold the leader's whole log", || async {
            let s1 = cluster.store_status(set, l1).await?;
            let s2 = cluster.store_status(set, l2).await?;
            (s1.commit_index == s1.last_index && s2.last_index == s1.last_index).then_some(())
        })
        .await;
        let k1 = ProcKey::Store(set, l1);
        // Nothing from the others reaches L1 (its own messages still go out); A reaches only
        // L1, B only the others.
        for &o in &others {
            cut(&cluster, ProcKey::Store(set, o), k1);
            cut(&cluster, a, ProcKey::Store(set, o));
        }
        cut(&cluster, b, k1);
        let cut_at = Instant::now();
        let l1_client =
            seqsvr_client::store::StoreClient::new(&[(l1, cluster.member(l1).addr.clone())])
                .expect("store client");
        let transferred = l1_client.transfer_leader(l2, Duration::from_secs(1)).await;
        let mut l2_leads = false;
        while transferred.is_ok() && !l2_leads && cut_at.elapsed() < Duration::from_millis(600) {
            l2_leads = cluster.store_status(set, l2).await.is_some_and(|s| s.role == "leader");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let l1_status = cluster.store_status(set, l1).await;
        eprintln!(
            "attempt {attempt}: transfer {transferred:?}; L2 ({l2}) leads: {l2_leads} {:?} after \
             the cut; L1 ({l1}) says {:?}",
            cut_at.elapsed(),
            l1_status.as_ref().map(|s| (&s.role, s.term))
        );
        if l2_leads && l1_status.is_some_and(|s| s.role == "leader") {
            staged = Some((a, b, cut_at));
            break;
        }
        // Not the interleaving this test is about: heal and stage it again.
        cluster.heal_all_links();
    }
    let (a, b, cut_at) = staged.expect("could not stage a prompt leader transfer in 3 attempts");
    let (a_addr, b_addr) = (cluster.proc(a).addr.clone(), cluster.proc(b).addr.clone());
    // A running B would never get past L1: its store client tries the remembered leader first,
    // and a hung one eats the whole heartbeat deadline. A restarted B registers with L2.
    cluster.kill9_proc(b);
    cluster.start_proc(b);

    // Straight at A and at B, in turn, on one clock, for longer than L1's window plus a lease.
    let t0 = Instant::now();
    let since = |t: Instant| t.duration_since(t0).as_nanos() as u64;
    // Never forwarded (`NoForward`): each answer is A's or B's own, so B before its grant
    // cannot pass A's values off as its own (nor A, once it learnt the move, B's).
    let mut seq_a = pb::seq_service_client::SeqServiceClient::with_interceptor(
        seqsvr_client::store::alloc_channel(&a_addr).unwrap(),
        seqsvr_client::seq::NoForward,
    );
    let mut seq_b = pb::seq_service_client::SeqServiceClient::with_interceptor(
        seqsvr_client::store::alloc_channel(&b_addr).unwrap(),
        seqsvr_client::seq::NoForward,
    );
    let mut ops = Vec::new();
    let (mut from_a, mut from_b) = (0, 0);
    let (mut last_a, mut first_b) = (None, None);
    while cut_at.elapsed() < Duration::from_secs(6) {
        for (which, c) in [(0, &mut seq_b), (1, &mut seq_a)] {
            let invoked = Instant::now();
            let mut req = tonic::Request::new(pb::NextRequest { uid, route_version: 0 });
            req.set_timeout(Duration::from_millis(200));
            if let Ok(r) = c.next(req).await {
                if which == 0 {
                    from_b += 1;
                    first_b = first_b.or(Some(cut_at.elapsed()));
                } else {
                    from_a += 1;
                    last_a = Some(cut_at.elapsed());
                }
                ops.push(Operation {
                    client: which,
                    set: 0,
                    uids: vec![uid],
                    invoke_ns: since(invoked),
                    complete_ns: since(Instant::now()),
                    outcome: Outcome::Ok { values: vec![r.into_inner().seq] },
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.heal_all_links();
    eprintln!(
        "served: {from_a} by A (the old owner, last {last_a:?} after the cut), {from_b} by B \
         (first {first_b:?} after the cut)"
    );
    let report = check(&ops);
    assert!(
        report.is_valid(),
        "I1/I3 violated: A kept a lease from the deposed leader while B served the section \
         ({} violations, first: {:?})",
        report.violations.len(),
        &report.violations[..report.violations.len().min(3)]
    );
    // The fault was real: B took the section over.
    assert!(from_b > 0, "B never served the moved section: the interleaving did not happen");
}
