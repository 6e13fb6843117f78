//! t98: a plain gRPC client (tonic's generated `SeqServiceClient`, one address, no route table
//! of its own, no `seqsvr-no-forward`) is served every uid of both sets through forwarding,
//! through a section move and a `kill -9` of an owner: every answer strictly increasing per
//! uid (I1), no value twice, and every call answered in the end (a failed attempt is retried,
//! as a plain client does; none gives up).

use seqsvr_cluster_tests::history::{Operation, Outcome};
use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey, WAIT_MAX};
use seqsvr_core::ids::SetId;
use seqsvr_proto::v1 as pb;
use seqsvr_proto::v1::seq_service_client::SeqServiceClient;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;

/// Plain clients calling one AllocSvr until stopped: even ones `Next` of one uid, odd ones a
/// `NextBatch` of two uids of one set with the first repeated. A failed attempt is retried
/// until it succeeds (within `WAIT_MAX`, else the test fails: a call was lost).
struct PlainLoad {
    t0: Instant,
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<Operation>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn since(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// One attempt: the values, in request order.
async fn attempt(client: &mut SeqServiceClient<Channel>, uids: &[u64]) -> Option<Vec<u64>> {
    let timeout = Duration::from_secs(3);
    if let [uid] = uids {
        let mut r = tonic::Request::new(pb::NextRequest { uid: *uid, route_version: 0 });
        r.set_timeout(timeout);
        return client.next(r).await.ok().map(|r| vec![r.into_inner().seq]);
    }
    let batch = pb::NextBatchRequest { uids: uids.to_vec(), route_version: 0, independent: false };
    let mut r = tonic::Request::new(batch);
    r.set_timeout(timeout);
    client.next_batch(r).await.ok().map(|r| r.into_inner().seqs)
}

impl PlainLoad {
    fn start(client: SeqServiceClient<Channel>, sets: Vec<(u64, Vec<u64>)>, n: usize) -> PlainLoad {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..n)
            .map(|c| {
                let (mut client, stop, ops, sets) =
                    (client.clone(), stop.clone(), ops.clone(), sets.clone());
                tokio::spawn(async move {
                    let mut i = c;
                    while !stop.load(Ordering::SeqCst) {
                        let (set, uids) = &sets[i % sets.len()];
                        let uid = uids[(i / sets.len()) % uids.len()];
                        let other = uids[(i / sets.len() + 1) % uids.len()];
                        i += n;
                        let call = if c % 2 == 0 { vec![uid] } else { vec![uid, other, uid] };
                        let invoked = since(t0);
                        let give_up = Instant::now() + WAIT_MAX;
                        let values = loop {
                            if let Some(values) = attempt(&mut client, &call).await {
                                break values;
                            }
                            assert!(
                                Instant::now() < give_up,
                                "a call of {call:?} was never answered"
                            );
                        };
                        assert_eq!(values.len(), call.len());
                        ops.lock().unwrap().push(Operation {
                            client: c as u32,
                            set: *set,
                            uids: call,
                            invoke_ns: invoked,
                            complete_ns: since(t0),
                            outcome: Outcome::Ok { values },
                        });
                    }
                })
            })
            .collect();
        PlainLoad { t0, stop, ops, tasks }
    }

    fn count(&self) -> usize {
        self.ops.lock().unwrap().len()
    }

    async fn progress(&self, n: usize, what: &str) {
        let target = self.count() + n;
        wait_for(what, || async { (self.count() >= target).then_some(()) }).await;
    }

    async fn finish(self) -> Vec<Operation> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("a load task failed");
        }
        let _ = self.t0;
        Arc::try_unwrap(self.ops).expect("tasks done").into_inner().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_with_one_address_is_served_through_a_move_and_a_kill() {
    let mut cluster =
        Cluster::start(ClusterOptions { sets: 2, allocs_per_set: 2, ..Default::default() });
    let sdk = cluster.seq_client().await;
    cluster.wait_serving(&sdk).await;
    let size = cluster.config.section_size;
    // Uids in 8 sections of each set.
    let uids_of = |set: usize| -> Vec<u64> {
        let s = &cluster.config.sets[set];
        (0..8).map(|i| s.uid_begin + i * 37 * size + i).collect()
    };
    let sets = vec![(0, uids_of(0)), (1, uids_of(1))];
    // The one address: set 0's second AllocSvr.
    let front = cluster.config.sets[0].allocs[1].clone();
    let channel = seqsvr_client::store::alloc_channel(&front).expect("a channel");
    let load = PlainLoad::start(SeqServiceClient::new(channel), sets.clone(), 6);
    load.progress(300, "plain calls before the move").await;

    // Move the section of set 0's first uid to the other AllocSvr of set 0.
    let table = sdk.route_tables().into_iter().find(|t| t.set_id == 0).expect("set 0's table");
    let moved = sets[0].1[0] / size;
    let owner = table.owner_of_section(moved).expect("assigned").alloc_id;
    let to = table.entries.iter().find(|e| e.alloc_id != owner).expect("2 allocs").alloc_id;
    cluster
        .store_client_of(SetId(0))
        .admin(WAIT_MAX, |mut c, _| async move {
            c.move_sections(pb::MoveSectionsRequest {
                section_begin: moved,
                section_end: moved + 1,
                to_alloc_id: to,
            })
            .await
        })
        .await
        .expect("move");
    load.progress(300, "plain calls after the move").await;

    // kill -9 the AllocSvr of set 0 that is not the front, and set 1's first.
    let other =
        cluster.alloc_at(SetId(0), &cluster.config.sets[0].allocs[0].clone()).expect("alloc");
    cluster.kill9_proc(other);
    cluster.kill9_proc(ProcKey::Alloc(SetId(1), 0));
    load.progress(300, "plain calls after the kills").await;
    let ops = load.finish().await;
    seqsvr_cluster_tests::assert_no_violation(&ops);
    // Both sets' uids were answered, through the one address.
    for (set, _) in &sets {
        assert!(ops.iter().any(|o| o.set == *set), "set {set} was served");
    }
}
