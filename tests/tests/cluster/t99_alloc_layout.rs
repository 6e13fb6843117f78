//! t99 (recorded layout, issue 30): an AllocSvr whose cluster file gives its set another
//! layout than the one the set recorded must never serve: its sections are not the store's (uid
//! 150 is in section 1 of 100 uids, but in section 3 of 50, whose `max_seq` was never advanced).
//! Here the set runs and records its layout (section_size 100); the AllocSvr alone is stopped
//! and restarted with the file edited to a section_size of 50, the store members keeping theirs.
//! The store's heartbeat replies carry the recorded layout (`HeartbeatResponse.layout`); the
//! AllocSvr refuses the grant, names both layouts, hands back and exits 1
//! (`allocsvr/src/lease.rs::layout_refusal`, `Shared::fatal`), and uid 150 is never served
//! meanwhile.

use seqsvr_cluster_tests::{Cluster, ClusterOptions, ProcKey};
use seqsvr_core::ids::SetId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const UID: u64 = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocsvr_with_another_layout_exits_without_serving() {
    let mut cluster = Cluster::start(ClusterOptions {
        allocs_per_set: 1,
        n_sections: 10,
        ..ClusterOptions::default()
    });
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let mut last = 0;
    for _ in 0..5 {
        last = client.next(UID, Duration::from_secs(20)).await.expect("served before the edit");
    }
    for id in cluster.ids() {
        seqsvr_cluster_tests::wait_for(
            "every member to have applied the layout record",
            || async { cluster.status(id).await.and_then(|s| s.recorded_layout) },
        )
        .await;
    }

    let alloc = ProcKey::Alloc(SetId(0), 0);
    cluster.kill9_proc(alloc);
    // Every file is edited, but only the AllocSvr starts again: the members keep the layout
    // they run with (and recorded).
    cluster.edit_config(|c| c.section_size = 50);
    cluster.start_proc(alloc);

    // Asks for the uid until the AllocSvr has exited: no answer may come.
    let client = Arc::new(client);
    let done = Arc::new(AtomicBool::new(false));
    let asking = tokio::spawn({
        let (client, done) = (client.clone(), done.clone());
        async move {
            let mut served = Vec::new();
            while !done.load(Ordering::Relaxed) {
                if let Ok(value) = client.next(UID, Duration::from_millis(500)).await {
                    served.push(value);
                }
            }
            served
        }
    });
    let status = cluster.wait_exit(alloc).await;
    done.store(true, Ordering::Relaxed);
    let served = asking.await.expect("no panic");
    assert!(
        served.is_empty(),
        "uid {UID} was served {served:?} (last before the edit: {last}) by an AllocSvr whose file \
         says section_size 50 while the set recorded 100"
    );
    assert_eq!(status.code(), Some(1), "the AllocSvr exited {status}, expected exit 1");
    let log = cluster.log_of(alloc);
    assert!(log.contains("this AllocSvr stops"), "its log must say why it stops:\n{log}");
    assert!(
        log.contains("section_size 100") && log.contains("section_size 50"),
        "its refusal must name both layouts:\n{log}"
    );
}
