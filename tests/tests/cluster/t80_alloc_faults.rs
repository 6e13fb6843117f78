//! t80: the promise under faults. Concurrent clients record every successful call (invoke and
//! completion on one clock); `check_monotonic` then verifies I1: per uid, values distinct and
//! increasing in real-time order. Faults: kill -9 of an AllocSvr, SIGSTOP past its lease, a
//! stale-epoch advance (fencing), kill -9 of the store leader, a whole set down.

use seqsvr_client::seq::SeqClient;
use seqsvr_cluster_tests::history::{Operation, Outcome};
use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey, WAIT_MAX};
use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId, Seq, SetId};
use seqsvr_core::store::SectionAdvance;
use seqsvr_proto::v1 as pb;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::Code;

fn options() -> ClusterOptions {
    ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() }
}

/// Clients calling `next` for uids spread over every section, until stopped.
/// One clock for every recorded call of a test.
fn since(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

fn ok_op(uid: u64, invoke_ns: u64, complete_ns: u64, value: u64) -> Operation {
    Operation {
        client: 0,
        set: 0,
        uids: vec![uid],
        invoke_ns,
        complete_ns,
        outcome: Outcome::Ok { values: vec![value] },
    }
}

struct Load {
    t0: Instant,
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<Operation>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(client: Arc<SeqClient>, uids: Vec<u64>, n_clients: usize) -> Load {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..n_clients)
            .map(|c| {
                let (client, stop, ops, uids) =
                    (client.clone(), stop.clone(), ops.clone(), uids.clone());
                tokio::spawn(async move {
                    let mut i = c;
                    while !stop.load(Ordering::SeqCst) {
                        let uid = uids[i % uids.len()];
                        i += n_clients;
                        let invoked = since(t0);
                        // Timeouts and errors are "unknown": they constrain nothing.
                        if let Ok(value) = client.next(uid, Duration::from_secs(5)).await {
                            ops.lock().unwrap().push(ok_op(uid, invoked, since(t0), value));
                        }
                    }
                })
            })
            .collect();
        Load { t0, stop, ops, tasks }
    }

    fn count(&self) -> usize {
        self.ops.lock().unwrap().len()
    }

    async fn finish(self) -> Vec<Operation> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("load task");
        }
        Arc::try_unwrap(self.ops).expect("tasks done").into_inner().unwrap()
    }
}

/// Waits until `n` more successful calls than now were recorded.
async fn wait_progress(load: &Load, n: usize, what: &str) {
    let target = load.count() + n;
    wait_for(what, || async { (load.count() >= target).then_some(()) }).await;
}

fn uids_over_sections(cluster: &Cluster, set: usize, n: u64) -> Vec<u64> {
    let s = &cluster.config.sets[set];
    let stride = (s.uid_end - s.uid_begin) / n;
    (0..n).map(|i| s.uid_begin + i * stride + i % 7).collect()
}

fn assert_no_violations(ops: &[Operation]) {
    seqsvr_cluster_tests::assert_no_violation(ops);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_alloc_under_load_hands_its_sections_over_without_regression() {
    let mut cluster = Cluster::start(options());
    let client = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&client).await;
    let uids = uids_over_sections(&cluster, 0, 40);
    let load = Load::start(client.clone(), uids.clone(), 4);
    wait_progress(&load, 200, "load before the kill").await;

    cluster.kill9_proc(ProcKey::Alloc(SetId(0), 0));
    // Every uid is served again (by the survivor) once the dead lease has run out.
    wait_for("the survivor to own every section", || async {
        let l = cluster.leases(SetId(0)).await.ok()?;
        let live: Vec<u64> =
            l.allocs.iter().filter(|a| !a.expired && !a.replaced).map(|a| a.alloc_id).collect();
        (live.len() == 1 && l.runs.iter().all(|r| r.settled && r.alloc_id == live[0])).then_some(())
    })
    .await;
    for &uid in &uids {
        client.next(uid, WAIT_MAX).await.expect("served after the hand-over");
    }
    wait_progress(&load, 200, "load after the hand-over").await;
    assert_no_violations(&load.finish().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_past_the_lease_serves_nothing_stale_after_sigcont() {
    let cluster = Cluster::start(options());
    let client = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&client).await;
    let uids = uids_over_sections(&cluster, 0, 40);
    let load = Load::start(client.clone(), uids.clone(), 4);
    wait_progress(&load, 200, "load before the pause").await;

    let paused = ProcKey::Alloc(SetId(0), 0);
    let paused_addr = cluster.proc(paused).addr.clone();
    let before = cluster.leases(SetId(0)).await.expect("leases");
    let paused_id =
        before.allocs.iter().find(|a| a.addr == paused_addr).expect("registered").alloc_id;
    cluster.pause(paused, true);
    wait_for("the paused AllocSvr to expire and lose its sections", || async {
        let l = cluster.leases(SetId(0)).await.ok()?;
        let gone = l.allocs.iter().all(|a| a.alloc_id != paused_id || a.expired);
        (gone && l.runs.iter().all(|r| r.settled && r.alloc_id != paused_id)).then_some(())
    })
    .await;
    wait_progress(&load, 200, "load served by the other AllocSvr").await;

    cluster.pause(paused, false);
    // Straight at the woken AllocSvr: each answer is an error or a value newer than anything
    // served before (checked with the rest of the history).
    let channel = seqsvr_client::store::alloc_channel(&paused_addr).unwrap();
    // Never forwarded: the woken AllocSvr's own answers, not the new owner's through it.
    let mut direct = pb::seq_service_client::SeqServiceClient::with_interceptor(
        channel,
        seqsvr_client::seq::NoForward,
    );
    let mut ops = Vec::new();
    for &uid in uids.iter().cycle().take(200) {
        let invoked = since(load.t0);
        match direct.next(pb::NextRequest { uid, route_version: 0 }).await {
            Ok(r) => ops.push(ok_op(uid, invoked, since(load.t0), r.into_inner().seq)),
            Err(s) => assert!(
                matches!(s.code(), Code::FailedPrecondition | Code::Unavailable),
                "unexpected {s:?}"
            ),
        }
    }
    wait_progress(&load, 100, "load after SIGCONT").await;
    let mut all = load.finish().await;
    all.extend(ops);
    assert_no_violations(&all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advance_with_a_stale_epoch_or_by_a_non_owner_is_rejected() {
    let cluster = Cluster::start(options());
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let store = cluster.store_client();
    let l = cluster.leases(SetId(0)).await.expect("leases");
    let run = l.runs[0];
    let section = SectionId(run.section_begin);
    let other = l.allocs.iter().find(|a| a.alloc_id != run.alloc_id).expect("two allocs");
    // Each advance goes out with the certificate of the AllocSvr it is made for (only the
    // registering identity may advance for a registration): the fence is what refuses them.
    let as_alloc = |alloc_id: u64| {
        let addr = &l.allocs.iter().find(|a| a.alloc_id == alloc_id).expect("registered").addr;
        cluster.store_client_as(SetId(0), cluster.alloc_at(SetId(0), addr).expect("ours"))
    };
    let (as_owner, as_other) = (as_alloc(run.alloc_id), as_alloc(other.alloc_id));
    let other = other.alloc_id;
    let before = store.get(&[section], WAIT_MAX).await.unwrap()[0].1;
    let adv = |epoch| {
        [SectionAdvance {
            section,
            max_seq: Seq(before + 1_000_000),
            lease_epoch: LeaseEpoch(epoch),
        }]
    };

    let stale =
        as_owner.advance_as(Some(AllocId(run.alloc_id)), &adv(run.lease_epoch - 1), WAIT_MAX).await;
    let err = stale.expect_err("stale epoch");
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().contains("NOT_OWNER"), "{}", err.message());
    let err = as_other
        .advance_as(Some(AllocId(other)), &adv(run.lease_epoch), WAIT_MAX)
        .await
        .expect_err("not owner");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(store.get(&[section], WAIT_MAX).await.unwrap()[0].1, before, "nothing changed");

    // After a move, the old owner's epoch is stale at once.
    let moved = store
        .admin(WAIT_MAX, |mut c, _| async move {
            c.move_sections(pb::MoveSectionsRequest {
                section_begin: section.0,
                section_end: section.0 + 1,
                to_alloc_id: other,
            })
            .await
        })
        .await
        .expect("move");
    assert!(moved.lease_epoch > run.lease_epoch, "epochs grow");
    let err = as_owner
        .advance_as(Some(AllocId(run.alloc_id)), &adv(run.lease_epoch), WAIT_MAX)
        .await
        .expect_err("moved");
    assert_eq!(err.code(), Code::FailedPrecondition);
    // And the section is served by its new owner once the fence passed, above anything before.
    let uid = section.0 * cluster.config.section_size;
    let v = client.next(uid, WAIT_MAX).await.expect("served by the new owner");
    assert!(v > before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_leader_kill9_under_load_keeps_serving_and_advancing() {
    let mut opts = options();
    opts.alloc.step = 200; // small: advances keep happening across the election
    let mut cluster = Cluster::start(opts);
    let client = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&client).await;
    let load_uids = uids_over_sections(&cluster, 0, 10);
    let load = Load::start(client.clone(), load_uids.clone(), 4);
    wait_progress(&load, 300, "load before the kill").await;
    let leader = cluster.wait_leader().await;
    cluster.kill9(leader);
    let new_leader = cluster.wait_leader().await;
    // Advances resume. Progress is measured from the new leader's own baseline: a linearizable
    // read served after its election (ReadIndex waits for its term's first entry, the no-op, to
    // commit), then its commit index. Only an AdvanceMaxSeq committed after that raises a
    // section's max_seq: the no-op, lease and arbiter entries alone do not.
    let sections: Vec<SectionId> =
        load_uids.iter().map(|&u| SectionId(u / cluster.config.section_size)).collect();
    let store = cluster.store_client();
    let base = store.get(&sections, WAIT_MAX).await.expect("read after the election");
    let base_commit = wait_for("the new leader's status", || async {
        let s = cluster.status(new_leader).await?;
        (s.role == "leader").then_some(s.commit_index)
    })
    .await;
    wait_for("an advance committed by the new leader", || async {
        let s = cluster.status(new_leader).await?;
        let now = store.get(&sections, Duration::from_secs(2)).await.ok()?;
        let advanced = now.iter().zip(&base).any(|(n, b)| n.1 > b.1);
        (s.commit_index > base_commit && advanced).then_some(())
    })
    .await;
    wait_progress(&load, 300, "load after the election").await;
    assert_no_violations(&load.finish().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sets_serve_their_own_uids_and_survive_each_other() {
    let mut opts = options();
    opts.sets = 2;
    opts.allocs_per_set = 1;
    let mut cluster = Cluster::start(opts);
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let (u0, u1) = (cluster.config.sets[0].uid_begin + 5, cluster.config.sets[1].uid_begin + 5);
    let a = client.next(u0, WAIT_MAX).await.unwrap();
    let b = client.next(u1, WAIT_MAX).await.unwrap();
    assert!(a > 0 && b > 0);
    // Each set's route table lists only its own AllocSvr.
    for (i, set) in cluster.config.sets.iter().enumerate() {
        let table =
            client.route_tables().into_iter().find(|t| t.set_id == set.id.0).expect("table");
        assert!(table.entries.iter().all(|e| e.addr == set.allocs[0]), "set {i}: {table:?}");
    }
    // Stop all of set 1: set 0 keeps serving; set 1 answers UNAVAILABLE within the deadline.
    for id in cluster.store_ids(SetId(1)) {
        cluster.kill9_proc(ProcKey::Store(SetId(1), id));
    }
    cluster.kill9_proc(ProcKey::Alloc(SetId(1), 0));
    for _ in 0..50 {
        let v = client.next(u0, WAIT_MAX).await.expect("set 0 unaffected");
        assert!(v > a);
    }
    let err = client.next(u1, Duration::from_secs(2)).await.expect_err("set 1 is down");
    assert!(matches!(err.code(), Code::Unavailable | Code::DeadlineExceeded), "{err:?}");
}
