//! t95 (recorded layout, issue 30): `max_seq` is kept per section number, so the map from uid
//! to section (`section_size` and the set's uid range) must never change under a set's data.
//! The set records it once it runs (`Command::RecordLayout`). Here uid 150 is served (section 1
//! of 100 uids), every process is stopped, and the cluster file is edited to a `section_size` of
//! 50 (uid 150 now in section 3, never advanced). The normal build refuses to start every store
//! member, naming both layouts. With `SEQSVR_TEETH=no-layout-check` the set starts and serves
//! uid 150 from section 3's lower `max_seq`: its value goes back.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey};
use seqsvr_core::ids::SetId;
use std::time::Duration;

const UID: u64 = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_section_size_is_refused_at_start() {
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
    // The layout is recorded (the set's commands version reached 2) before the edit.
    for id in cluster.ids() {
        let recorded = wait_for("every member to have applied the layout record", || async {
            cluster.status(id).await.and_then(|s| s.recorded_layout)
        })
        .await;
        assert_eq!((recorded.section_size, recorded.uid_begin, recorded.uid_end), (100, 0, 1_000));
    }

    let alloc = ProcKey::Alloc(SetId(0), 0);
    cluster.kill9_proc(alloc);
    for id in cluster.ids() {
        cluster.kill9(id);
    }
    cluster.edit_config(|c| c.section_size = 50);
    for id in cluster.ids() {
        cluster.start_member(id);
    }
    cluster.start_proc(alloc);
    let client = cluster.seq_client().await;

    // Either every member refused to start (the normal build), or the set serves the uid.
    let ids = cluster.ids();
    let served = wait_for("every member to refuse, or uid 150 to be served", || async {
        let refused = ids.iter().all(|&id| cluster.log_text(id).contains("refusing to start"));
        if refused {
            return Some(None);
        }
        client.next(UID, Duration::from_secs(2)).await.ok().map(Some)
    })
    .await;
    if let Some(value) = served {
        assert!(
            value > last,
            "I1 violated: uid {UID} was served {value} after {last}, under a section_size changed \
             from 100 to 50 (the layout check did not refuse it)"
        );
        panic!("the set served uid {UID} ({value}) under a changed section_size: it must refuse");
    }
    for id in ids {
        let status = cluster.wait_exit(ProcKey::Store(SetId(0), id)).await;
        assert!(!status.success(), "member {id} exited {status}, expected a failure");
        let log = cluster.log_text(id);
        assert!(
            log.contains("section_size 100") && log.contains("section_size 50"),
            "member {id}'s refusal must name both layouts:\n{log}"
        );
    }
}
