//! t95 (graceful stop): an AllocSvr that gets SIGTERM must stop serving *before* it hands its
//! sections back (`ReleaseAlloc`), because the store then gives them to another AllocSvr at
//! once, without a lease wait. Two clients load it from both sides: `stale` calls only uids of
//! the stopping AllocSvr's sections, `fresh` calls the same uids and uids of the other
//! AllocSvr. And one probe, arranged so that it needs no luck: as soon as the store shows a
//! probe uid's section settled at the other AllocSvr, the test has that heir serve the uid
//! (its request carries the store's route version, so the heir asks for its grant at once),
//! then asks the stopping AllocSvr for the same uid directly, both calls marked not to be
//! forwarded (before its grant the heir would pass the call on to the stopping AllocSvr, which
//! made the probe compare that AllocSvr with itself: caught only when the loads happened to
//! be, one run in three). The normal build refuses (it
//! stopped serving before it released): values never go back. With
//! `SEQSVR_TEETH=release-before-stop` (release first, serve on for half a lease, 3 s here) the
//! stopping AllocSvr answers with a value below the heir's: I1 is violated, on every run.

use seqsvr_cluster_tests::history::{Operation, Outcome};
use seqsvr_cluster_tests::{
    assert_no_violation, wait_for, Cluster, ClusterOptions, ProcKey, RecordedLoad,
};
use seqsvr_core::config::AllocTuning;
use seqsvr_core::ids::SetId;
use seqsvr_proto::v1 as pb;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The client number of the probe's own calls in the history.
const PROBE_CLIENT: u32 = u32::MAX - 3;

/// One `Next` sent straight to `addr` (no route table, no retries, never forwarded), as a
/// history operation.
async fn next_direct(t0: Instant, addr: &str, uid: u64, route_version: u64) -> Operation {
    let invoke_ns = t0.elapsed().as_nanos() as u64;
    let answer = async {
        let channel = seqsvr_client::store::alloc_channel(addr)?;
        // Served by `addr` itself or refused: an AllocSvr that does not own the uid yet (the
        // heir before its grant) would otherwise forward the call to the owner its table names
        // (the stopping AllocSvr), and the probe would compare that AllocSvr with itself.
        let mut client = pb::seq_service_client::SeqServiceClient::with_interceptor(
            channel,
            seqsvr_client::seq::NoForward,
        );
        let mut request = tonic::Request::new(pb::NextRequest { uid, route_version });
        request.set_timeout(Duration::from_secs(2));
        match tokio::time::timeout(Duration::from_secs(2), client.next(request)).await {
            Ok(reply) => reply.map(|r| r.into_inner().seq),
            Err(_) => Err(tonic::Status::deadline_exceeded(format!("{addr} did not answer"))),
        }
    }
    .await;
    let outcome = match answer {
        Ok(v) => Outcome::Ok { values: vec![v] },
        Err(s) => Outcome::Unknown { reason: format!("{:?}: {}", s.code(), s.message()) },
    };
    Operation {
        client: PROBE_CLIENT,
        set: 0,
        uids: vec![uid],
        invoke_ns,
        complete_ns: t0.elapsed().as_nanos() as u64,
        outcome,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_never_go_back_when_an_allocsvr_hands_its_sections_back() {
    // A 6 s lease: the teeth serve on for 3 s after releasing, far longer than the probe needs.
    let alloc = AllocTuning { lease_ms: 6_000, ..ClusterOptions::default().alloc };
    let mut cluster =
        Cluster::start(ClusterOptions { allocs_per_set: 2, alloc, ..Default::default() });
    let stale = Arc::new(cluster.seq_client().await);
    let fresh = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&stale).await;
    cluster.wait_serving(&fresh).await;
    // Wait until both AllocSvrs own sections (the second one took half of the first's).
    let key = ProcKey::Alloc(SetId(0), 0);
    let stopping_addr = cluster.proc(key).addr.clone();
    let (mine, theirs) = seqsvr_cluster_tests::uids_by_owner(&stale, &stopping_addr).await;
    let fresh_uids: Vec<u64> = mine.iter().chain(&theirs).copied().collect();
    // The last uid of a section the loads touch: no load calls it, so the stopping AllocSvr
    // has room for it whatever the loads used up (it is served once before the SIGTERM).
    let size = cluster.config.section_size;
    let probe_section = mine[0] / size;
    let probe_uid = probe_section * size + size - 1;

    let t0 = Instant::now();
    let stale_load = RecordedLoad::start_at(t0, stale.clone(), mine.clone(), 2);
    let fresh_load = RecordedLoad::start_at(t0, fresh.clone(), fresh_uids, 2);
    stale_load.wait_progress("before the SIGTERM", 300).await;
    fresh_load.wait_progress("before the SIGTERM", 300).await;
    let mut probes = vec![next_direct(t0, &stopping_addr, probe_uid, 0).await];
    assert!(
        matches!(probes[0].outcome, Outcome::Ok { .. }),
        "the stopping AllocSvr serves the probe uid before the SIGTERM: {:?}",
        probes[0].outcome
    );

    cluster.sigterm(key);
    // The hand-back: the probe uid's section settled at the other AllocSvr.
    let (heir_addr, route_version) = wait_for("the section settled at the other AllocSvr", || {
        let cluster = &cluster;
        let stopping_addr = &stopping_addr;
        async move {
            let l = cluster.leases(SetId(0)).await.ok()?;
            let run = l.runs.iter().find(|r| {
                r.section_begin <= probe_section && probe_section < r.section_end && r.settled
            })?;
            let owner = l.allocs.iter().find(|a| a.alloc_id == run.alloc_id)?;
            (owner.addr != *stopping_addr).then(|| (owner.addr.clone(), l.route_version))
        }
    })
    .await;
    // The heir serves the uid (its first request may find it still loading: retried).
    let served = wait_for("the heir to serve the probe uid", || {
        let heir_addr = &heir_addr;
        async move {
            let op = next_direct(t0, heir_addr, probe_uid, route_version).await;
            matches!(op.outcome, Outcome::Ok { .. }).then_some(op)
        }
    })
    .await;
    probes.push(served);
    // Then the AllocSvr that released it: it must have stopped serving before it released.
    probes.push(next_direct(t0, &stopping_addr, probe_uid, 0).await);
    // The probe alone decides, whatever the loads happened to do: an answer of the stopping
    // AllocSvr now is at most its own max_seq, below the heir's, which starts above it.
    if let (Outcome::Ok { values: heir }, Outcome::Ok { values: late }) =
        (&probes[1].outcome, &probes[2].outcome)
    {
        assert!(
            late[0] > heir[0],
            "I1/I3 violated: the stopping AllocSvr answered {} for uid {probe_uid} after the \
             heir answered {}: it served on after it handed the section back",
            late[0],
            heir[0]
        );
    }

    fresh_load.wait_progress("after the hand-back", 500).await;
    stale_load.wait_progress("after the hand-back", 300).await;
    let mut history = stale_load.finish().await;
    history.extend(fresh_load.finish().await);
    history.extend(probes);
    assert_no_violation(&history);
    let status = cluster.wait_exit(key).await;
    assert!(status.success(), "exit status {status:?}");
}
