//! t31 (issue 31, item 2): the HTTP/JSON API of a real AllocSvr, over the mutual TLS of a real
//! cluster, as an application's `curl` calls it: `POST /v1/seq/next` and `GET /v1/seq/{uid}`
//! over HTTP/1.1 and HTTP/2 (keep-alive connections on the gRPC port), every value strictly
//! above the last one handed out for its uid, through HTTP or through the SDK; `/readyz` says
//! serving; a call without a client certificate gets no answer.

use seqsvr_check::http::{HttpConn, HttpTarget, HttpVersion};
use seqsvr_cluster_tests::{Cluster, ClusterOptions, ProcKey};
use seqsvr_core::ids::SetId;
use serde_json::json;
use std::collections::BTreeMap;

/// `(uid, seq)` of a `POST /v1/seq/next` answer, in order.
fn values(body: &serde_json::Value) -> Vec<(u64, u64)> {
    let number = |v: &serde_json::Value| -> u64 {
        v.as_str().expect("a decimal string").parse().expect("digits")
    };
    let values = body["values"].as_array().expect("values");
    values.iter().map(|v| (number(&v["uid"]), number(&v["seq"]))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_json_next_and_current_over_mutual_tls() {
    let cluster = Cluster::start(ClusterOptions { allocs_per_set: 1, ..ClusterOptions::default() });
    let client = cluster.seq_client().await;
    cluster.wait_serving(&client).await;
    let addr = cluster.proc(ProcKey::Alloc(SetId(0), 0)).addr.clone();
    let identity = cluster.client_tls_of("client").expect("a TLS cluster");
    let target = HttpTarget::with_identity(&addr, &identity).expect("a client configuration");
    let (a, b) = (42u64, 99_999u64);
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    let check = |last: &mut BTreeMap<u64, u64>, uid: u64, seq: u64| {
        let before = last.insert(uid, seq).unwrap_or(0);
        assert!(seq > before, "uid {uid}: {seq} after {before}");
    };
    for version in [HttpVersion::Http1, HttpVersion::Http2] {
        let mut conn = HttpConn::connect(&target, version).await.expect("connected");
        let ready = conn.get("/readyz").await.expect("answered");
        assert_eq!((ready.status, ready.json()), (200, json!({"status": "SERVING"})));
        for round in 0..20 {
            let body = json!({"uids": [a.to_string(), a.to_string(), b]});
            let reply = conn.post_json("/v1/seq/next", &body).await.expect("answered");
            assert_eq!(reply.status, 200, "{version:?} round {round}: {reply:?}");
            let got = values(&reply.json());
            assert_eq!(got.iter().map(|(u, _)| *u).collect::<Vec<_>>(), [a, a, b]);
            for (uid, seq) in got {
                check(&mut last, uid, seq);
            }
            // The SDK's gRPC calls and HTTP's draw from one table.
            let sdk = client.next(a, seqsvr_check::cluster::WAIT_MAX).await.expect("served");
            check(&mut last, a, sdk);
            let reply = conn.get(&format!("/v1/seq/{a}")).await.expect("answered");
            assert_eq!(reply.status, 200, "{reply:?}");
            assert_eq!(reply.json(), json!({"uid": a.to_string(), "seq": last[&a].to_string()}));
        }
    }
    let pki = seqsvr_check::cluster::test_pki();
    let ca = std::fs::read(pki.join("cluster-ca.pem")).expect("the cluster CA");
    let anonymous = HttpTarget::tls(&addr, &ca, None, "alloc.seqsvr").expect("a configuration");
    let refused = match HttpConn::connect(&anonymous, HttpVersion::Http1).await {
        Err(e) => e,
        Ok(mut conn) => conn.get(&format!("/v1/seq/{a}")).await.expect_err("no answer"),
    };
    assert!(!refused.is_empty());
}
