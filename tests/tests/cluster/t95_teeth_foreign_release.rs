//! t95 (holder check): `ReleaseAlloc` lets the store move an AllocSvr's sections at once,
//! without waiting out its lease, so only the identity that registered that AllocSvr may send
//! it. Here, while two AllocSvrs serve over mutual TLS, the second one's certificate asks the
//! store leader to release the first one's registration. Two clients watch from both sides, as
//! in `t95_teeth_release_before_stop`: `stale` calls only uids of the first AllocSvr's sections,
//! `fresh` calls those and the second one's. The first AllocSvr is cut off from the store just
//! before (it serves on until its lease ends, as it may: the store waits `lease + margin`
//! before it moves a silent AllocSvr's sections). The normal build refuses the release
//! (`PERMISSION_DENIED`) and values never go back. With `SEQSVR_TEETH=no-holder-check` the release
//! applies, the second AllocSvr serves the sections from the persisted `max_seq` at once while
//! the first still serves its pre-allocated values below it: I1 is violated.

use seqsvr_cluster_tests::{
    assert_no_violation, test_pki, wait_for, Cluster, ClusterOptions, ProcKey, RecordedLoad,
};
use seqsvr_core::ids::SetId;
use seqsvr_proto::v1 as pb;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// A StoreService client of the store at `addr` presenting the test PKI's `who` certificate.
async fn store_as(
    addr: &str,
    who: &str,
) -> pb::store_service_client::StoreServiceClient<tonic::transport::Channel> {
    let pki = test_pki();
    let read = |f: String| std::fs::read(pki.join(f)).expect("test PKI file");
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("cluster-ca.pem".into())))
        .identity(Identity::from_pem(read(format!("{who}.pem")), read(format!("{who}.key"))))
        .domain_name("store.seqsvr");
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls config")
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect to the store leader");
    pb::store_service_client::StoreServiceClient::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_allocsvrs_certificate_cannot_release_a_registration() {
    let defaults = ClusterOptions::default();
    // A lease long enough that the cut-off victim serves on for seconds after the release: the
    // teeth build's overlap (both AllocSvrs serving its sections) is then wide enough to be
    // seen on a loaded machine (with the default 1.5 s it was missed about one run in three).
    // And a step far above one lease's calls: the cut-off victim can advance no section, and
    // with the harness's step (1000) it ran out within about two seconds; every caller then
    // waited on it, so the fresh client never learned the new route table in time (CI missed
    // the overlap so).
    let alloc = seqsvr_core::config::AllocTuning {
        lease_ms: 5_000,
        lease_margin_ms: 300,
        heartbeat_ms: 500,
        step: 1_000_000,
        ..defaults.alloc.clone()
    };
    let cluster =
        Cluster::start(ClusterOptions { allocs_per_set: 2, proxied: true, alloc, ..defaults });
    let stale = Arc::new(cluster.seq_client().await);
    let fresh = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&stale).await;
    cluster.wait_serving(&fresh).await;
    let victim = ProcKey::Alloc(SetId(0), 0);
    let victim_addr = cluster.proc(victim).addr.clone();
    let (mine, theirs) = seqsvr_cluster_tests::uids_by_owner(&stale, &victim_addr).await;
    let leases = cluster.leases(SetId(0)).await.expect("leases");
    let registration = leases
        .allocs
        .iter()
        .find(|a| a.addr == victim_addr && !a.replaced && !a.released)
        .expect("the first AllocSvr's registration")
        .alloc_id;

    let fresh_uids: Vec<u64> = mine.iter().chain(&theirs).copied().collect();
    let t0 = Instant::now();
    let stale_load = RecordedLoad::start_at(t0, stale.clone(), mine.clone(), 2);
    let fresh_load = RecordedLoad::start_at(t0, fresh.clone(), fresh_uids, 2);
    stale_load.wait_progress("before the foreign release", 300).await;
    fresh_load.wait_progress("before the foreign release", 300).await;

    // The second AllocSvr's certificate (role alloc, a registration of its own) asks for it,
    // while the first one serves out its lease cut off from the store.
    let leader = cluster.wait_leader().await;
    cluster.cut_links_of(victim, true, false);
    let mut rogue = store_as(&cluster.member(leader).addr, "alloc-0-2").await;
    let release = rogue.release_alloc(pb::ReleaseAllocRequest { alloc_id: registration }).await;
    // The victim's sections end up with the other AllocSvr either way: at once if the release
    // applied, else once the cut-off victim's lease must have run out. Then both clients go on.
    let moved = mine[0] / cluster.config.section_size;
    wait_for("the fresh client to see the victim's section elsewhere", || {
        let (fresh, victim_addr) = (fresh.clone(), victim_addr.clone());
        async move {
            let tables = fresh.route_tables();
            let entry = tables
                .first()?
                .entries
                .iter()
                .find(|e| e.section_begin <= moved && moved < e.section_end)?
                .clone();
            (entry.addr != victim_addr).then_some(())
        }
    })
    .await;
    fresh_load.wait_progress("after the foreign release", 500).await;
    stale_load.wait_progress("after the foreign release", 300).await;
    let mut history = stale_load.finish().await;
    history.extend(fresh_load.finish().await);
    assert_no_violation(&history);
    let refused = release.expect_err("a release of another AllocSvr's registration was accepted");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("registered by \"alloc-0-1\""), "{refused:?}");
}
