//! t93: every store member killed with -9 at once and all restarted (1 set, 3 members, 2
//! AllocSvrs). Afterwards the replicas agree: at one common applied index (the leader's commit
//! index) every member holds the same `max_seq` for every section of the set and the same
//! membership and lease timing, none lower than before, and every value served before is within
//! the restored `max_seq` (I2). The AllocSvrs are paused (SIGSTOP) from the kill until the
//! comparison, which freezes the control state (nothing can move, register or settle without a
//! live AllocSvr): so every member, as leader in turn, must show exactly the registry,
//! assignment (owners, epochs, settled), route table, route version and lease it had before.
//! Then the AllocSvrs resume, serving resumes, and the whole history (before and after, one
//! clock) passes the I1 checker.

use seqsvr_cluster_tests::history::{check, Outcome};
use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey, RecordedLoad, WAIT_MAX};
use seqsvr_core::ids::{NodeId, SetId};
use seqsvr_proto::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn admin(addr: &str) -> pb::store_admin_client::StoreAdminClient<tonic::transport::Channel> {
    pb::store_admin_client::StoreAdminClient::new(
        seqsvr_client::store::channel(addr).expect("channel"),
    )
}

/// What one member's own state machine says, read at one applied index.
#[derive(Debug, Clone, PartialEq)]
struct MemberState {
    applied: u64,
    /// `max_seq` of every section of the set, in section order.
    max_seq: Vec<u64>,
    voters: Vec<u64>,
    learners: Vec<u64>,
    members: Vec<(u64, String, bool)>,
    lease: (u64, u64),
    n_sections_advanced: u64,
    sections: (u64, u64),
}

/// Member `id`'s state, or `None` if it did not answer or applied something meanwhile.
async fn member_state(
    cluster: &Cluster,
    id: NodeId,
) -> Option<(MemberState, pb::StoreStatusResponse)> {
    let before = cluster.status(id).await?;
    let mut client = admin(&cluster.member(id).addr);
    let sections: Vec<u64> = (before.section_begin..before.section_end).collect();
    let mut max_seq = Vec::with_capacity(sections.len());
    for chunk in sections.chunks(cluster.config.store.max_batch_sections) {
        let reply = client
            .local_max_seq(pb::GetMaxSeqRequest { sections: chunk.to_vec() })
            .await
            .ok()?
            .into_inner();
        if reply.read_index != before.applied_index {
            return None;
        }
        let got: Vec<u64> = reply.sections.iter().map(|s| s.section).collect();
        assert_eq!(got, chunk, "member {id}: LocalMaxSeq answers in request order");
        max_seq.extend(reply.sections.iter().map(|s| s.max_seq));
    }
    let after = cluster.status(id).await?;
    if after.applied_index != before.applied_index {
        return None;
    }
    let mut voters = after.voters.clone();
    voters.sort();
    let mut learners = after.learners.clone();
    learners.sort();
    let mut members: Vec<(u64, String, bool)> =
        after.members.iter().map(|m| (m.id, m.addr.clone(), m.learner)).collect();
    members.sort();
    let state = MemberState {
        applied: after.applied_index,
        max_seq,
        voters,
        learners,
        members,
        lease: (after.lease_ms, after.lease_margin_ms),
        n_sections_advanced: after.n_sections_advanced,
        sections: (after.section_begin, after.section_end),
    };
    Some((state, after))
}

/// Waits until every member has applied the same index, which is the leader's commit index
/// (nothing committed is left to apply anywhere), and returns each member's state there.
async fn converged(cluster: &Cluster) -> BTreeMap<NodeId, MemberState> {
    wait_for("every member to apply the leader's commit index", || async {
        let mut states = BTreeMap::new();
        let mut leader_commit = None;
        for id in cluster.ids() {
            let (state, status) = member_state(cluster, id).await?;
            if status.role == "leader" {
                leader_commit = Some(status.commit_index);
            }
            states.insert(id, state);
        }
        let commit = leader_commit?;
        states.values().all(|s| s.applied == commit).then_some(states)
    })
    .await
}

/// The control state a member shows while it leads: route table, assignment, registry, lease.
#[derive(Debug, Clone, PartialEq)]
struct ControlView {
    route_version: u64,
    route: Vec<(u64, u64, u64, String)>,
    runs: Vec<(u64, u64, u64, u64, bool)>,
    allocs: Vec<(u64, String, bool, bool)>,
    lease: (u64, u64),
}

/// Leases and RouteTable straight from the member at `addr` (the leader), if both describe the
/// same route version.
async fn control_view(addr: &str) -> Option<ControlView> {
    let mut client = admin(addr);
    let leases = client.leases(pb::LeasesRequest {}).await.ok()?.into_inner();
    let table = client.route_table(pb::GetRouteTableRequest {}).await.ok()?.into_inner();
    let table = table.route_table?;
    if table.version != leases.route_version {
        return None; // changed between the two reads
    }
    let mut allocs: Vec<(u64, String, bool, bool)> = leases
        .allocs
        .iter()
        .map(|a| (a.alloc_id, a.addr.clone(), a.draining, a.replaced))
        .collect();
    allocs.sort();
    Some(ControlView {
        route_version: leases.route_version,
        route: table
            .entries
            .iter()
            .map(|e| (e.section_begin, e.section_end, e.alloc_id, e.addr.clone()))
            .collect(),
        runs: leases
            .runs
            .iter()
            .map(|r| (r.section_begin, r.section_end, r.alloc_id, r.lease_epoch, r.settled))
            .collect(),
        allocs,
        lease: (leases.lease_ms, leases.lease_margin_ms),
    })
}

/// The control view of member `id` as leader (leadership is handed to it first).
async fn view_as_leader(cluster: &Cluster, id: NodeId) -> ControlView {
    let store = cluster.store_client();
    if cluster.wait_leader().await != id {
        store.transfer_leader(id, WAIT_MAX).await.expect("transfer leadership");
    }
    let addr = cluster.member(id).addr.clone();
    wait_for(&format!("member {id} to lead and show its control state"), || async {
        let s = cluster.status(id).await?;
        if s.role != "leader" {
            return None;
        }
        let view = control_view(&addr).await?;
        let after = cluster.status(id).await?;
        (after.role == "leader" && after.term == s.term).then_some(view)
    })
    .await
}

/// Waits until both AllocSvrs are registered, live, own sections, and every run is settled.
async fn wait_allocs_settled(cluster: &Cluster) -> pb::LeasesResponse {
    wait_for("both AllocSvrs registered with settled sections", || async {
        let l = cluster
            .store_client_of(SetId(0))
            .admin(Duration::from_secs(2), |mut c, _| async move {
                c.leases(pb::LeasesRequest {}).await
            })
            .await
            .ok()?;
        let live = l.allocs.iter().filter(|a| !a.expired && !a.replaced && a.n_sections > 0);
        (live.count() == 2 && !l.runs.is_empty() && l.runs.iter().all(|r| r.settled)).then_some(l)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_of_every_store_member_keeps_replicas_agreed_and_values_increasing() {
    let mut opts = ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() };
    opts.alloc.step = 100; // small: the load advances many sections several times
    let mut cluster = Cluster::start(opts);
    let client = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&client).await;
    wait_allocs_settled(&cluster).await;

    // Values before: uids spread over the set's sections.
    let set = cluster.config.sets[0].clone();
    let size = cluster.config.section_size;
    let stride = (set.uid_end - set.uid_begin) / 40;
    let uids: Vec<u64> = (0..40).map(|i| set.uid_begin + i * stride + i % 7).collect();
    let t0 = Instant::now();
    let load = RecordedLoad::start_at(t0, client.clone(), uids.clone(), 4);
    load.wait_progress("before the restart", 500).await;
    let mut history = load.finish().await;

    // The state before: with healthy AllocSvrs and no faults nothing moves, registers or
    // settles, so the control state read here is the one the members hold when they are killed.
    let before = converged(&cluster).await;
    let first = before.values().next().expect("members").clone();
    for (id, s) in &before {
        assert_eq!(s, &first, "member {id} disagrees before the restart");
    }
    let view_before = {
        let leader = cluster.wait_leader().await;
        let addr = cluster.member(leader).addr.clone();
        wait_for("the leader's control state", || control_view(&addr)).await
    };
    assert!(!view_before.allocs.is_empty() && !view_before.runs.is_empty(), "{view_before:?}");

    // kill -9 every member, then start them all again. The AllocSvrs are paused while the
    // store is down and until the comparison is done: a new leader counts every AllocSvr as
    // granted at its election, so both expire together and, with no live AllocSvr to move
    // sections to, nothing can move, register or settle: the control state must come back
    // exactly as it was.
    let ids = cluster.ids();
    for &id in &ids {
        cluster.kill9(id);
    }
    let allocs = [ProcKey::Alloc(SetId(0), 0), ProcKey::Alloc(SetId(0), 1)];
    for key in allocs {
        cluster.pause(key, true);
    }
    for &id in &ids {
        cluster.start_member(id);
    }
    cluster.wait_leader().await;

    // 1. Every member, at one applied index, holds the same state; nothing went back.
    let after = converged(&cluster).await;
    let first = after.values().next().expect("members").clone();
    for (id, s) in &after {
        assert_eq!(s, &first, "member {id} disagrees with member {} after the restart", ids[0]);
    }
    let old = before.values().next().expect("members");
    assert!(first.applied >= old.applied, "applied index went back");
    assert_eq!(first.lease, old.lease, "lease timing");
    assert_eq!(first.members, old.members, "membership");
    for (i, (new, old)) in first.max_seq.iter().zip(&old.max_seq).enumerate() {
        assert!(new >= old, "section {i}: max_seq {old} before the restart, {new} after");
    }
    let advanced = first.max_seq.iter().filter(|&&v| v > 0).count() as u64;
    assert_eq!(advanced, first.n_sections_advanced, "advanced sections counted consistently");
    assert!(advanced > 0);
    // I2: every value served before is within its section's restored max_seq.
    for op in &history {
        if let Outcome::Ok { values } = &op.outcome {
            let section = (op.uids[0] / size - first.sections.0) as usize;
            assert!(
                values[0] <= first.max_seq[section],
                "uid {} was served {} but section max_seq is {} after the restart",
                op.uids[0],
                values[0],
                first.max_seq[section]
            );
        }
    }

    // 2. Every member, as leader in turn, shows the control state from before the restart:
    //    registry, assignment (owners, epochs, settled), route table and version, lease.
    for &id in &ids {
        let view = view_as_leader(&cluster, id).await;
        assert_eq!(view, view_before, "member {id}'s control state after the restart");
    }
    assert_eq!(view_before.lease, first.lease, "Leases and Status agree on the lease");

    // 3. Serving resumes, and no value goes back (same clock as before the restart).
    for key in allocs {
        cluster.pause(key, false);
    }
    let load = RecordedLoad::start_at(t0, client.clone(), uids.clone(), 4);
    load.wait_progress("after the restart", 500).await;
    history.extend(load.finish().await);
    let report = check(&history);
    assert!(report.n_ok > 0);
    assert!(
        report.is_valid(),
        "{} violations, first: {:?}",
        report.violations.len(),
        &report.violations[..report.violations.len().min(3)]
    );
}
