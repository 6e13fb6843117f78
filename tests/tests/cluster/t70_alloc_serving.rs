//! t70: the AllocSvr tier serves: contiguous values across step boundaries, batches, bad input,
//! seqctl's next/get/route, and strictly increasing values across an AllocSvr kill -9.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey, WAIT_MAX};
use seqsvr_core::ids::SetId;
use tonic::Code;

fn options(step: u64) -> ClusterOptions {
    let mut o = ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() };
    o.alloc.step = step;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_boundaries_are_contiguous_and_batches_ordered() {
    let cluster = Cluster::start(options(10));
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;

    // With step 10, 3000 calls cross ~300 step boundaries: strictly increasing and, with no
    // fault, contiguous.
    let uid = 4242;
    let mut last = client.current(uid, WAIT_MAX).await.expect("current");
    for _ in 0..3000 {
        let v = client.next(uid, WAIT_MAX).await.expect("next");
        assert_eq!(v, last + 1, "contiguous while nothing fails");
        last = v;
    }
    assert_eq!(client.current(uid, WAIT_MAX).await.unwrap(), last);

    // A batch: a repeated uid gets increasing values in batch order, across sections and owners.
    let uids = [7, 7, 99_999, 7, 12_345];
    let before: Vec<u64> = futures_current(&client, &uids).await;
    let got = client.next_batch(&uids, WAIT_MAX).await.expect("batch");
    assert!(got[0] > before[0] && got[1] > got[0] && got[3] > got[1], "{got:?}");
    assert!(got[2] > before[2] && got[4] > before[4]);
}

async fn futures_current(client: &seqsvr_client::seq::SeqClient, uids: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    for &u in uids {
        out.push(client.current(u, WAIT_MAX).await.expect("current"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_invalid_argument_and_changes_nothing() {
    let cluster = Cluster::start(options(100));
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let end = cluster.config.sets[0].uid_end;

    let err = client.next(end, WAIT_MAX).await.expect_err("uid outside every set");
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    let err = client.next_batch(&[], WAIT_MAX).await.expect_err("empty batch");
    assert_eq!(err.code(), Code::InvalidArgument);

    // Straight to an AllocSvr: oversized batch, and a batch with one bad uid, change nothing.
    let channel =
        seqsvr_client::store::alloc_channel(&cluster.proc(ProcKey::Alloc(SetId(0), 0)).addr)
            .unwrap();
    let no_forward = seqsvr_client::seq::NoForward; // this AllocSvr's own answers
    let mut direct = seqsvr_proto::v1::seq_service_client::SeqServiceClient::with_interceptor(
        channel, no_forward,
    );
    let before = client.current(5, WAIT_MAX).await.unwrap();
    let too_many = vec![5u64; 1001];
    let err = direct
        .next_batch(seqsvr_proto::v1::NextBatchRequest { uids: too_many, ..Default::default() })
        .await
        .expect_err("oversized");
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = direct
        .next_batch(seqsvr_proto::v1::NextBatchRequest {
            uids: vec![5, end + 7],
            ..Default::default()
        })
        .await
        .expect_err("one uid out of range");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(client.current(5, WAIT_MAX).await.unwrap(), before, "nothing was allocated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seqctl_next_get_and_route() {
    let cluster = Cluster::start(options(100));
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let seqctl = |args: &[&str]| cluster.seqctl().args(args).output().expect("run seqctl");
    let out = seqctl(&["next", "42", "42"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<(u64, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (u, s) = l.split_once(' ').expect("UID SEQ");
            (u.parse().unwrap(), s.parse().unwrap())
        })
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[1].1 > lines[0].1);
    let out = seqctl(&["get", "42"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("42 {}", lines[1].1));

    let out = seqctl(&["next", "999999999"]);
    assert!(!out.status.success(), "a uid outside the cluster fails");
    assert!(String::from_utf8_lossy(&out.stderr).contains("InvalidArgument"));

    let out = seqctl(&["route", "--json"]);
    let sets: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("route json");
    assert_eq!(sets.len(), 1);
    for key in ["set", "version", "entries"] {
        assert!(sets[0].get(key).is_some(), "{key} missing");
    }
    let entries = sets[0]["entries"].as_array().unwrap();
    assert!(!entries.is_empty());
    for e in entries {
        for key in ["section_begin", "section_end", "alloc_id", "addr"] {
            assert!(e.get(key).is_some(), "{key} missing in {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_calls_stay_increasing_across_alloc_kill9_and_restart() {
    let mut cluster = Cluster::start(options(50));
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let uid = 1234;
    let mut last = 0;
    let step = |v: u64, last: &mut u64| {
        assert!(v > *last, "uid {uid}: {v} after {last}");
        *last = v;
    };
    for _ in 0..100 {
        step(client.next(uid, WAIT_MAX).await.unwrap(), &mut last);
    }
    for i in 0..2 {
        cluster.kill9_proc(ProcKey::Alloc(SetId(0), i));
        for _ in 0..50 {
            step(
                client.next(uid, WAIT_MAX).await.expect("served again after a hand-over"),
                &mut last,
            );
        }
        cluster.start_proc(ProcKey::Alloc(SetId(0), i));
        for _ in 0..50 {
            step(client.next(uid, WAIT_MAX).await.unwrap(), &mut last);
        }
    }
    // The restarted AllocSvrs registered anew and get sections again.
    wait_for("both AllocSvrs to own sections again", || async {
        let leases = cluster
            .store_client()
            .admin(std::time::Duration::from_secs(2), |mut c, _| async move {
                c.leases(seqsvr_proto::v1::LeasesRequest {}).await
            })
            .await
            .ok()?;
        (leases.allocs.iter().filter(|a| a.n_sections > 0 && !a.expired).count() == 2).then_some(())
    })
    .await;
}

/// Concurrent `next` calls through one SDK client ride few RPCs, and a coalesced RPC answers
/// each uid on its own: a uid whose section moved away comes back 0 (the SDK retries it alone,
/// at the new owner) while the others are served.
#[tokio::test(flavor = "current_thread")]
async fn concurrent_calls_are_coalesced_and_entries_answer_independently() {
    use seqsvr_proto::v1 as pb;
    let cluster = Cluster::start(options(100));
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let size = cluster.config.section_size;
    let table = client.route_tables().into_iter().find(|t| t.set_id == 0).expect("set 0 table");
    let entry = table.entries.iter().find(|e| e.section_end - e.section_begin >= 2).expect("run");
    let (moved, kept) = (entry.section_begin, entry.section_begin + 1);
    let uids: Vec<u64> = (0..40).map(|i| [moved, kept][i % 2] * size + i as u64).collect();
    client.next(uids[0], WAIT_MAX).await.expect("warm up");

    // 200 calls at once on a current-thread runtime: they queue before the coalescing task
    // runs, so a handful of RPCs carry them all.
    let before = futures_current(&client, &uids).await;
    let rpcs = client.coalesced_rpcs();
    let calls = (0..200).map(|i| client.next(uids[i % uids.len()], WAIT_MAX));
    let got: Vec<u64> = futures::future::try_join_all(calls).await.expect("all served");
    let sent = client.coalesced_rpcs() - rpcs;
    assert!((1..=10).contains(&sent), "200 calls took {sent} coalesced RPCs");
    for (i, uid) in uids.iter().enumerate() {
        let mut mine: Vec<u64> = got.iter().skip(i).step_by(uids.len()).copied().collect();
        mine.sort_unstable();
        mine.dedup();
        assert_eq!(mine.len(), 5, "uid {uid}: distinct values");
        assert!(mine[0] > before[i], "uid {uid}: above every earlier value");
    }

    // Move `moved` to the other AllocSvr and wait until the old owner dropped it.
    let other = table.entries.iter().find(|e| e.alloc_id != entry.alloc_id).expect("2 allocs");
    let (to_alloc_id, old_addr) = (other.alloc_id, entry.addr.clone());
    cluster
        .store_client_of(SetId(0))
        .admin(WAIT_MAX, |mut c, _| async move {
            c.move_sections(pb::MoveSectionsRequest {
                section_begin: moved,
                section_end: moved + 1,
                to_alloc_id,
            })
            .await
        })
        .await
        .expect("move");
    let channel = seqsvr_client::store::alloc_channel(&old_addr).unwrap();
    // Marked no-forward: the old owner's own answers (forwarding would ask the new one).
    let no_forward = seqsvr_client::seq::NoForward;
    let mut direct =
        pb::seq_service_client::SeqServiceClient::with_interceptor(channel, no_forward);
    let (m, k) = (moved * size + 1, kept * size);
    let before_k = client.current(k, WAIT_MAX).await.unwrap();
    let answer = wait_for("the old owner to stop serving the moved section", || {
        let mut direct = direct.clone();
        async move {
            let r = direct
                .next_batch(pb::NextBatchRequest {
                    uids: vec![m, k],
                    route_version: 0,
                    independent: true,
                })
                .await
                .ok()?
                .into_inner();
            (r.seqs[0] == 0).then_some(r.seqs)
        }
    })
    .await;
    assert!(answer[1] > before_k, "the kept section is served in the same RPC: {answer:?}");
    // All or nothing: NOT_OWNER, sent with the route version this client had before the move.
    let err = direct
        .next_batch(pb::NextBatchRequest {
            uids: vec![m, k],
            route_version: table.version,
            independent: false,
        })
        .await
        .expect_err("all or nothing");
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().starts_with("NOT_OWNER"), "{}", err.message());
    // It carries a route table naming the section's actual owner (as the store says), no older
    // than the client's.
    let carried = seqsvr_proto::route_table_of(&err)
        .unwrap_or_else(|| panic!("NOT_OWNER without a decodable route table: {err:?}"));
    assert_eq!(carried.set_id, 0);
    assert!(
        carried.version >= table.version,
        "route table v{} is older than the client's v{}",
        carried.version,
        table.version
    );
    let store_table = cluster
        .store_client_of(SetId(0))
        .admin(WAIT_MAX, |mut c, _| async move { c.route_table(pb::GetRouteTableRequest {}).await })
        .await
        .expect("the store's route table")
        .route_table
        .expect("route table");
    let owner_of = |t: &pb::RouteTable, section: u64| {
        t.entries
            .iter()
            .find(|e| e.section_begin <= section && section < e.section_end)
            .map(|e| (e.alloc_id, e.addr.clone()))
    };
    let store_owner = owner_of(&store_table, moved).expect("the store assigns the moved section");
    assert_eq!(store_owner, (to_alloc_id, other.addr.clone()), "the store's owner is the target");
    assert_eq!(
        owner_of(&carried, moved),
        Some(store_owner),
        "NOT_OWNER's route table v{} names the actual owner of section {moved}: {carried:?}",
        carried.version
    );

    // The SDK (its route table still says the old owner) serves both sections.
    let before = futures_current(&client, &[m, k]).await;
    let got = futures::future::try_join_all([m, k, m, k].map(|u| client.next(u, WAIT_MAX)))
        .await
        .expect("served after the move");
    assert!(got[0] > before[0] && got[2] > before[0] && got[0] != got[2], "{got:?}");
    assert!(got[1] > before[1] && got[3] > before[1] && got[1] != got[3], "{got:?}");
}
