//! t85: what an operator sees of a running cluster (1 set, 3 store members, 2 AllocSvrs).
//!
//! - Every process serves `/metrics` with its key series; under client load the AllocSvrs'
//!   call and value counters and the leader's commit index move, exactly one member reports
//!   itself leader, and the values counted are at least the values the client received.
//! - The Grafana dashboard (`config/grafana/seqsvr.json`) loads, and every series its panels
//!   query is one these processes export.
//! - gRPC health means something: with two store members stopped (SIGSTOP), the member left
//!   reports NOT_SERVING (no leader with a quorum) and so do both AllocSvrs once their leases
//!   lapse; after SIGCONT everything reports SERVING again.

use seqsvr_client::tls::Plane;
use seqsvr_cluster_tests::observe::{scrape, serving, Samples};
use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, ProcKey, RecordedLoad};
use seqsvr_core::ids::{NodeId, SetId};
use std::sync::Arc;
use std::time::Duration;

const ASK: Duration = Duration::from_secs(2);

const STORE_SERIES: &[&str] = &[
    "seqsvr_store_has_leader",
    "seqsvr_store_is_leader",
    "seqsvr_store_term",
    "seqsvr_store_leader_changes_total",
    "seqsvr_store_commit_index",
    "seqsvr_store_applied_index",
    "seqsvr_store_proposals_total",
    "seqsvr_store_proposals_pending",
    "seqsvr_store_proposal_apply_seconds_bucket",
    "seqsvr_store_synced_write_seconds_bucket",
    "seqsvr_store_allocsvrs_registered",
    "seqsvr_store_sections_unsettled",
];

const ALLOC_SERIES: &[&str] = &[
    "seqsvr_alloc_calls_total",
    "seqsvr_alloc_values_total",
    "seqsvr_alloc_request_duration_seconds_bucket",
    "seqsvr_alloc_waited_calls_total",
    "seqsvr_alloc_advances_total",
    "seqsvr_alloc_advance_duration_seconds_bucket",
    "seqsvr_alloc_sections",
    "seqsvr_alloc_lease_remaining_seconds",
    "seqsvr_alloc_lease_valid",
    "seqsvr_alloc_route_version",
    "seqsvr_alloc_sections_touched",
    "seqsvr_alloc_cur_seq_bytes",
    "seqsvr_alloc_offset_rebases_total",
    "seqsvr_alloc_batch_uids_bucket",
];

fn keys(cluster: &Cluster) -> (Vec<ProcKey>, Vec<ProcKey>) {
    let stores = cluster.ids().into_iter().map(|id| ProcKey::Store(SetId(0), id)).collect();
    let allocs = (0..2).map(|i| ProcKey::Alloc(SetId(0), i)).collect();
    (stores, allocs)
}

async fn scrape_all(cluster: &Cluster, keys: &[ProcKey]) -> Vec<Samples> {
    let mut out = Vec::new();
    for &key in keys {
        let addr = cluster.proc(key).metrics_addr.clone();
        out.push(scrape(&addr, ASK).await.unwrap_or_else(|e| panic!("scrape {key:?}: {e:#}")));
    }
    out
}

fn total(samples: &[Samples], name: &str, with: &[(&str, &str)]) -> f64 {
    samples.iter().map(|s| s.sum(name, with)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_exports_its_key_series_and_they_move_under_load() {
    let cluster = Cluster::start(ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() });
    let client = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&client).await;
    let (stores, allocs) = keys(&cluster);

    // Series are there, even those that have not counted anything yet.
    let before_stores = scrape_all(&cluster, &stores).await;
    let before_allocs = scrape_all(&cluster, &allocs).await;
    for (key, samples) in stores.iter().zip(&before_stores) {
        for name in STORE_SERIES {
            assert!(samples.has(name), "{key:?} does not export {name}: {:?}", samples.names());
        }
    }
    for (key, samples) in allocs.iter().zip(&before_allocs) {
        for name in ALLOC_SERIES {
            assert!(samples.has(name), "{key:?} does not export {name}: {:?}", samples.names());
        }
        assert_eq!(samples.sum("seqsvr_alloc_lease_valid", &[]), 1.0, "{key:?} holds a lease");
    }

    let set = cluster.config.sets[0].clone();
    let uids: Vec<u64> = (0..20).map(|i| set.uid_begin + i * 37).collect();
    let load = RecordedLoad::start(client.clone(), uids, 4);
    load.wait_progress("under load", 2_000).await;
    let history = load.finish().await;
    let received = history
        .iter()
        .filter(|op| matches!(op.outcome, seqsvr_cluster_tests::history::Outcome::Ok { .. }))
        .count() as f64;

    let after_allocs = scrape_all(&cluster, &allocs).await;
    let ok = |s: &[Samples]| total(s, "seqsvr_alloc_calls_total", &[("outcome", "ok")]);
    let values = |s: &[Samples]| total(s, "seqsvr_alloc_values_total", &[]);
    assert!(ok(&after_allocs) > ok(&before_allocs), "ok calls counted");
    assert!(
        values(&after_allocs) - values(&before_allocs) >= received,
        "values counted ({} → {}) cover the {received} values the client received",
        values(&before_allocs),
        values(&after_allocs)
    );

    // The set: one leader, everyone sees it, and its commit index moved with the advances.
    let leader = cluster.wait_leader().await;
    let at = |samples: &[Samples], id: NodeId, name: &str| {
        let i = stores.iter().position(|&k| k == ProcKey::Store(SetId(0), id)).expect("member");
        samples[i].sum(name, &[])
    };
    let after_stores = scrape_all(&cluster, &stores).await;
    assert_eq!(total(&after_stores, "seqsvr_store_is_leader", &[]), 1.0, "exactly one leader");
    assert_eq!(at(&after_stores, leader, "seqsvr_store_is_leader"), 1.0);
    assert!(
        at(&after_stores, leader, "seqsvr_store_commit_index")
            > at(&before_stores, leader, "seqsvr_store_commit_index"),
        "the leader's commit index moved under load"
    );
    assert!(
        at(&after_stores, leader, "seqsvr_store_proposals_total")
            > at(&before_stores, leader, "seqsvr_store_proposals_total"),
        "the leader counted the advances it proposed"
    );
    assert_eq!(at(&after_stores, leader, "seqsvr_store_allocsvrs_registered"), 2.0);

    // The dashboard queries only series that exist.
    let exported: std::collections::BTreeSet<String> = after_stores
        .iter()
        .chain(&after_allocs)
        .flat_map(|s| s.names().into_iter().map(String::from))
        .collect();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/grafana/seqsvr.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} queries nothing", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            let names = series_in(expr);
            assert!(!names.is_empty(), "panel {}: no seqsvr series in {expr}", panel["title"]);
            for name in names {
                assert!(
                    exported.contains(&name),
                    "panel {} queries {name}, not exported",
                    panel["title"]
                );
            }
        }
    }
}

/// The `seqsvr_…` series names a PromQL expression mentions.
fn series_in(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("seqsvr_") {
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_quorum_and_the_lease() {
    let cluster = Cluster::start(ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() });
    let client = Arc::new(cluster.seq_client().await);
    cluster.wait_serving(&client).await;
    let (stores, allocs) = keys(&cluster);
    let everyone: Vec<ProcKey> = stores.iter().chain(&allocs).copied().collect();

    let wait_health = |keys: Vec<ProcKey>, want: bool, what: &'static str| {
        let cluster = &cluster;
        async move {
            for key in keys {
                let addr = cluster.proc(key).addr.clone();
                wait_for(&format!("{key:?} {what}"), || async {
                    let (service, plane) = if matches!(key, ProcKey::Store(..)) {
                        ("seqsvr.v1.StoreService", Plane::Store)
                    } else {
                        ("seqsvr.v1.SeqService", Plane::Client)
                    };
                    let now = serving(&addr, plane, "", ASK).await.ok()?;
                    let named = serving(&addr, plane, service, ASK).await.ok()?;
                    (now == want && named == want).then_some(())
                })
                .await;
            }
        }
    };
    wait_health(everyone.clone(), true, "SERVING").await;

    // Two of three members stopped: the one left has no leader with a quorum, and the AllocSvrs'
    // leases lapse with nobody to renew them.
    let leader = cluster.wait_leader().await;
    let left = ProcKey::Store(SetId(0), leader);
    let stopped: Vec<ProcKey> = stores.iter().copied().filter(|&k| k != left).collect();
    for &key in &stopped {
        cluster.pause(key, true);
    }
    wait_health(vec![left], false, "NOT_SERVING without a quorum").await;
    wait_health(allocs.clone(), false, "NOT_SERVING once the lease lapsed").await;

    for &key in &stopped {
        cluster.pause(key, false);
    }
    wait_health(everyone, true, "SERVING again").await;
    cluster.wait_serving(&client).await;
}
