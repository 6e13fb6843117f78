//! t95 (control persistence): a member's applied control state (AllocSvr registry, assignment
//! with lease epochs, route version) survives its restart. Every store member is killed and
//! restarted; the new leader's control state must be the one applied before, or newer: lease
//! epochs and the route version never go back (I4; clients refuse an older route table).
//! The `SEQSVR_TEETH=no-control-persist` build (applied control changes not written) must fail here.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions};
use seqsvr_core::ids::SetId;
use seqsvr_proto::v1 as pb;
use std::collections::BTreeMap;
use std::time::Duration;

/// Section → (owner, lease epoch).
fn owners(l: &pb::LeasesResponse) -> BTreeMap<u64, (u64, u64)> {
    l.runs
        .iter()
        .flat_map(|r| {
            (r.section_begin..r.section_end).map(move |s| (s, (r.alloc_id, r.lease_epoch)))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_every_store_member_keeps_the_applied_control_state() {
    let options = ClusterOptions { allocs_per_set: 2, n_sections: 20, ..ClusterOptions::default() };
    let mut cluster = Cluster::start(options);
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;

    // Move section 0 back and forth, so its lease epoch and the route version are well above
    // what a fresh control state would reach again.
    let store = cluster.store_client();
    let l = wait_for("leases", || async { cluster.leases(SetId(0)).await.ok() }).await;
    let ids: Vec<u64> = l.allocs.iter().map(|a| a.alloc_id).collect();
    assert_eq!(ids.len(), 2, "two AllocSvrs registered: {l:?}");
    let mut owner = owners(&l).get(&0).expect("section 0 assigned").0;
    for _ in 0..8 {
        owner = if owner == ids[0] { ids[1] } else { ids[0] };
        let request =
            pb::MoveSectionsRequest { section_begin: 0, section_end: 1, to_alloc_id: owner };
        store
            .admin(
                Duration::from_secs(20),
                |mut c, _| async move { c.move_sections(request).await },
            )
            .await
            .expect("move section 0");
    }
    cluster.wait_serving(&client).await;
    let before =
        wait_for("leases before the restart", || async { cluster.leases(SetId(0)).await.ok() })
            .await;
    for uid in [0, 150, 1_999] {
        client.next(uid, Duration::from_secs(20)).await.expect("served before the restart");
    }

    for id in cluster.ids() {
        cluster.kill9(id);
    }
    for id in cluster.ids() {
        cluster.start_member(id);
    }
    cluster.wait_leader().await;
    let after = wait_for("leases from the restarted leader", || async {
        cluster.leases(SetId(0)).await.ok()
    })
    .await;

    assert!(
        after.route_version >= before.route_version,
        "I4: the route version went back from {} to {} across a restart of every member \
         (control state not persisted?)",
        before.route_version,
        after.route_version
    );
    let (old, new) = (owners(&before), owners(&after));
    for (section, &(alloc, epoch)) in &old {
        let now = new.get(section).copied();
        assert!(
            now.is_some_and(|(_, e)| e >= epoch),
            "I4: section {section} was owned by alloc {alloc} at lease epoch {epoch} before the \
             restart, and is {now:?} (owner, epoch) after it (control state not persisted?)"
        );
    }
    let registered: Vec<u64> = after.allocs.iter().map(|a| a.alloc_id).collect();
    for id in &ids {
        assert!(registered.contains(id), "alloc {id} lost its registration: {registered:?}");
    }
    // And the set serves again.
    cluster.wait_serving(&client).await;
    for uid in [0, 150, 1_999] {
        client.next(uid, Duration::from_secs(20)).await.expect("served after the restart");
    }
}
