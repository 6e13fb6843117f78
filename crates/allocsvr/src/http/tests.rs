//! The HTTP/JSON API over real sockets, served as `allocsvr` serves it (the gRPC services and
//! the API in one router, HTTP/1.1 accepted, the auth layer, `serve_maybe_tls`), called with
//! HTTP/1.1 and HTTP/2 clients (`seqsvr_check::http`). The AllocSvr holds a valid lease on
//! section 1 (uids 10..20 of set 1's [0, 100)) and worker id 3 of `snowflake` under a clock
//! that stands still; no store is ever asked.

use super::*;
use crate::config::{AllocConfig, IdSetup, SchemeSetup, WallClock};
use crate::state::id_slots::WorkerSlot;
use seqsvr_check::http::{HttpConn, HttpReply, HttpTarget, HttpVersion};
use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId};
use seqsvr_core::idscheme::{Generator, LayoutSpec, Scheme};
use seqsvr_core::section::SectionRange;
use seqsvr_server::BootInstant;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// The fixed clock's reading (2026-11-30), a snowflake unit (ms) boundary.
const NOW_MS: u64 = 1_796_000_000_000;

const BOTH: [HttpVersion; 2] = [HttpVersion::Http1, HttpVersion::Http2];

/// An AllocSvr (alloc 1 of set 1) with a valid lease serving section 1 (uids 10..20) from an
/// advance already committed, and `snowflake` under worker id 3; `tune` applied to its config.
fn alloc(tune: impl FnOnce(&mut AllocConfig)) -> Arc<Shared> {
    let clock = WallClock::fixed(NOW_MS);
    let layout = LayoutSpec::of(Scheme::Snowflake).load(NOW_MS).expect("the layout loads");
    let snowflake = SchemeSetup {
        fingerprint: layout.fingerprint(),
        layout,
        max_ahead_units: 1,
        reserve_units: 2,
        session_uids: 10..20,
    };
    let mut config = AllocConfig::for_tests();
    config.ids = IdSetup {
        schemes: BTreeMap::from([("snowflake".to_string(), snowflake)]),
        max_count: 1_000,
        clock,
    };
    tune(&mut config);
    seqsvr_client::tls::use_plaintext(); // its store client is never dialled
    let shared = Shared::new(config).expect("the state");
    {
        let mut inner = shared.lock();
        inner.alloc_id = Some(AllocId(1));
        inner.extend_lease(BootInstant::now() + Duration::from_secs(60));
        let run = SectionRange::new(SectionId(1), SectionId(2)).expect("a range");
        let loads = inner.table.grant(&[(run, LeaseEpoch(1))]);
        inner.table.loaded(&loads[0], &BTreeMap::from([(SectionId(1), 100)]));
        // A first call wants an advance; the test commits it, as the store would.
        assert!(inner.table.next(15).is_err(), "nothing before an advance");
        let wanted = inner.table.take_wanted(10);
        inner.table.advanced(SectionId(1), LeaseEpoch(1), Some(wanted[0].max_seq.0));
        let layout = &shared.ids.schemes["snowflake"].layout;
        let now = layout.units_at(NOW_MS);
        let generator = Generator::new(layout, now - 1, 1).expect("fits");
        let slot = WorkerSlot {
            worker: 3,
            generator,
            high_water: now + 1_000_000, // far ahead: no reservation is needed or sent
            acquired_at: BootInstant::now(),
            incarnation: 0,
            reserving: false,
            reserve_after: None,
            logged_clock_back: 0,
        };
        inner.ids.slots.insert("snowflake".into(), slot);
    }
    shared
}

/// A running server: its address, its health, and its state.
struct Served {
    addr: SocketAddr,
    health: seqsvr_server::grpc::Health,
    shared: Arc<Shared>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// `shared` served as `allocsvr::run` serves it, over `tls` (None: plaintext).
async fn serve(shared: Arc<Shared>, tls: Option<seqsvr_tls::TlsSetup>) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let services = [crate::SEQ_SERVICE, crate::ID_SERVICE];
    let (health, health_service) = seqsvr_server::grpc::Health::new(&services).await;
    let grpc = tonic::service::Routes::new(health_service)
        .add_service(crate::seq_service(shared.clone()))
        .add_service(crate::id_service(shared.clone()));
    let router = seqsvr_server::grpc::ConnectionLimits::SERVER
        .apply(tonic::transport::Server::builder())
        .accept_http1(true)
        .layer(seqsvr_tls::auth_layer(tls.as_ref()))
        .add_routes(beside(grpc, shared.clone(), health.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        use seqsvr_tls::ServeExt as _;
        let stopped = async {
            let _ = stopped.await;
        };
        router.serve_maybe_tls(listener, tls.as_ref(), stopped).await.expect("serves");
    });
    Served { addr, health, shared, _stop: stop }
}

async fn plain(s: &Served, version: HttpVersion) -> HttpConn {
    let target = HttpTarget::plaintext(&s.addr.to_string());
    HttpConn::connect(&target, version).await.expect("connected")
}

/// `uid`'s current value in the table (what a refused call must leave as it was).
fn current(s: &Served, uid: u64) -> u64 {
    s.shared.lock().table.current(uid).expect("served here")
}

fn seqs(reply: &HttpReply) -> Vec<(String, u64)> {
    let values = reply.json()["values"].as_array().cloned().unwrap_or_default();
    values
        .iter()
        .map(|v| {
            let seq = v["seq"].as_str().expect("seq is a string");
            (v["uid"].as_str().expect("uid is a string").to_string(), seq.parse().expect("digits"))
        })
        .collect()
}

/// An error answer's status and body fields.
fn error_of(reply: &HttpReply) -> (u16, String, String) {
    let body = reply.json();
    let field = |name: &str| body[name].as_str().unwrap_or_default().to_string();
    assert_eq!(reply.headers["content-type"], "application/json", "{reply:?}");
    (reply.status, field("code"), field("message"))
}

/// `POST /v1/seq/next` answers every uid in request order, a repeated uid increasing, every
/// number a string; numbers are taken on input; `GET /v1/seq/{uid}` answers the last value
/// without allocating. Over HTTP/1.1 and HTTP/2 on the same port, values keep increasing
/// across the two (one allocation table behind both).
#[tokio::test]
async fn seq_routes_answer_over_http1_and_http2_on_one_port() {
    let s = serve(alloc(|_| {}), None).await;
    let mut last = 0;
    for version in BOTH {
        let mut conn = plain(&s, version).await;
        let reply = conn.post_json("/v1/seq/next", &json!({"uids": ["15", 15, "16"]})).await;
        let reply = reply.expect("answered");
        assert_eq!(reply.status, 200, "{version:?}: {reply:?}");
        assert_eq!(reply.headers["content-type"], "application/json");
        let got = seqs(&reply);
        let uids: Vec<&str> = got.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(uids, ["15", "15", "16"]);
        assert!(last < got[0].1 && got[0].1 < got[1].1, "{version:?}: {got:?} after {last}");
        last = got[1].1;
        let reply = conn.get("/v1/seq/15").await.expect("answered");
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.json(), json!({"uid": "15", "seq": last.to_string()}));
        assert_eq!(current(&s, 15), last, "Current allocated nothing");
    }
}

/// A `POST /v1/seq/next` answer holds its bytes of `alloc.max_stream_bytes` until the client
/// has read it, as the `NextBatch` reply it stands for would (`rpc::HoldReplies`): an HTTP/2
/// client that reads nothing parks no uncounted answers. Fails when the handler drops the
/// budget with the gRPC answer.
#[tokio::test]
async fn a_seq_answer_holds_its_budget_until_read() {
    use http_body_util::BodyExt as _;
    let s = serve(alloc(|_| {}), None).await;
    let target = HttpTarget::plaintext(&s.addr.to_string());
    let conn = HttpConn::connect_with(&target, HttpVersion::Http2, Some(65_535)).await;
    let mut conn = conn.expect("connected");
    // 5,000 values of about 25 bytes: more than the 64 KiB HTTP/2 window of an unread stream.
    let body = json!({ "uids": vec!["15"; 5_000] }).to_string();
    let headers = [("content-type", "application/json")];
    let unread = conn.send_unread("POST", "/v1/seq/next", &headers, body).await;
    let unread = unread.expect("answered");
    assert_eq!(unread.status(), 200);
    let held = || s.shared.budgets.stream_bytes_in_use();
    assert!(held() > 0, "the unread answer holds its budget");
    let read = unread.into_body().collect().await.expect("the body").to_bytes();
    assert!(read.len() > 64 * 1024, "{} bytes", read.len());
    let guard = tokio::time::Instant::now() + Duration::from_secs(20);
    while held() > 0 {
        assert!(tokio::time::Instant::now() < guard, "never given back once read");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Every bad input of `POST /v1/seq/next` and `GET /v1/seq/{uid}` (issue 31, item 4) is
/// answered with its status, its gRPC code's name and a message saying what is wrong; none
/// changes anything.
#[tokio::test]
async fn bad_seq_requests_get_their_status_and_change_nothing() {
    let s = serve(alloc(|c| c.tuning.max_batch_uids = 100), None).await;
    let before = (current(&s, 15), current(&s, 16));
    let max_body = json_request_max_bytes(100);
    let many: Vec<&str> = vec!["15"; 101];
    let huge = format!("{{\"uids\": [\"15\"{}]}}", ", \"15\"".repeat(max_body / 6));
    let cases: Vec<(&str, String, &str, u16, &str, &str)> = vec![
        (
            "non-numeric",
            json!({"uids": ["abc"]}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "uids[0]: \"abc\" is not a decimal number",
        ),
        (
            "negative string",
            json!({"uids": ["15", "-1"]}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "uids[1]: \"-1\" is negative",
        ),
        (
            "negative number",
            json!({"uids": [-1]}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "uids[0]: -1 is negative",
        ),
        (
            "fraction",
            json!({"uids": [1.5]}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "is not an integer",
        ),
        (
            "past 2^53",
            json!({"uids": [9_007_199_254_740_993u64]}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "above 2^53 − 1",
        ),
        (
            "past 2^64",
            json!({"uids": ["18446744073709551616"]}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "above 2^64 − 1",
        ),
        (
            "outside every set",
            json!({"uids": ["15", "100"]}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "uid 100 is outside set 1's uids [0, 100)",
        ),
        (
            "empty batch",
            json!({"uids": []}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "empty batch",
        ),
        (
            "oversized batch",
            json!({ "uids": many }).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "batch of 101 uids exceeds the limit of 100",
        ),
        (
            "malformed JSON",
            "{\"uids\": [\"15\"".into(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "the body is not this route's JSON",
        ),
        (
            "no uids",
            "{}".into(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "missing field `uids`",
        ),
        (
            "unknown field",
            json!({"uids": ["15"], "uid": "16"}).to_string(),
            "application/json",
            400,
            "INVALID_ARGUMENT",
            "unknown field `uid`",
        ),
        (
            "wrong content type",
            json!({"uids": ["15"]}).to_string(),
            "application/x-www-form-urlencoded",
            415,
            "INVALID_ARGUMENT",
            "is not JSON",
        ),
    ];
    for version in BOTH {
        let mut conn = plain(&s, version).await;
        for (what, body, content_type, status, code, words) in &cases {
            let headers = [("content-type", *content_type)];
            let reply = conn.send("POST", "/v1/seq/next", &headers, body.clone()).await;
            let reply = reply.unwrap_or_else(|e| panic!("{what}: {e}"));
            let (got_status, got_code, message) = error_of(&reply);
            assert_eq!((got_status, got_code.as_str()), (*status, *code), "{what}: {message}");
            assert!(message.contains(words), "{what}: {message}");
        }
        let no_type = conn.send("POST", "/v1/seq/next", &[], "{\"uids\": [\"15\"]}").await;
        assert_eq!(error_of(&no_type.expect("answered")).0, 415, "no content type");
        for (path, status, words) in [
            ("/v1/seq/abc", 400, "uid: \"abc\" is not a decimal number"),
            ("/v1/seq/-3", 400, "uid: \"-3\" is negative"),
            ("/v1/seq/100", 400, "outside set 1's uids"),
            ("/v1/nope", 404, "no route GET /v1/nope"),
        ] {
            let (got, _, message) = error_of(&conn.get(path).await.expect("answered"));
            assert_eq!(got, status, "{path}: {message}");
            assert!(message.contains(words), "{path}: {message}");
        }
        let reply = conn.send("DELETE", "/v1/seq/15", &[], "").await.expect("answered");
        assert_eq!(error_of(&reply).0, 405);
        let headers = [("content-type", "application/json"), ("seqsvr-timeout-ms", "soon")];
        let reply = conn.send("POST", "/v1/seq/next", &headers, "{\"uids\": [\"15\"]}").await;
        let (status, _, message) = error_of(&reply.expect("answered"));
        assert_eq!(status, 400, "{message}");
        assert!(message.contains("Seqsvr-Timeout-Ms \"soon\""), "{message}");
        // Last: refused unread (the connection may close after the answer).
        let headers = [("content-type", "application/json")];
        let reply = conn.send("POST", "/v1/seq/next", &headers, huge.clone()).await;
        let (status, code, message) = error_of(&reply.expect("answered"));
        assert_eq!((status, code.as_str()), (413, "OUT_OF_RANGE"), "{message}");
        assert!(message.contains(&format!("limit of {max_body} bytes")), "{message}");
    }
    assert_eq!((current(&s, 15), current(&s, 16)), before, "nothing was allocated");
}

/// The HTTP handler builds the gRPC request: the caller's `x-request-id` is the call's (no id
/// of ours is drawn), and `Seqsvr-Timeout-Ms` is its deadline: a call that must wait (no
/// lease) is answered 503 when it passes, not after `request_timeout_ms` (a minute here).
#[tokio::test]
async fn the_request_id_and_the_deadline_reach_the_grpc_method() {
    let s = serve(alloc(|c| c.tuning.request_timeout_ms = 60_000), None).await;
    let mut conn = plain(&s, HttpVersion::Http1).await;
    let ours = || s.shared.next_request_id.load(std::sync::atomic::Ordering::Relaxed);
    let drawn = ours();
    conn.get("/v1/seq/15").await.expect("answered");
    assert_eq!(ours(), drawn + 1, "no request id given: one of ours");
    conn.send("GET", "/v1/seq/15", &[("x-request-id", "req-7")], "").await.expect("answered");
    assert_eq!(ours(), drawn + 1, "the caller's request id was the call's");
    if seqsvr_core::teeth::Tooth::NoAllocLeaseCheck.on() {
        return;
    }
    s.shared.lock().lease_until = None;
    let call = conn.send("GET", "/v1/seq/15", &[("seqsvr-timeout-ms", "200")], "");
    // A hang guard, far below request_timeout_ms: only the caller's deadline ends the wait.
    let reply = tokio::time::timeout(Duration::from_secs(30), call).await;
    let reply = reply.expect("answered at the caller's deadline").expect("answered");
    let (status, code, message) = error_of(&reply);
    assert_eq!((status, code.as_str()), (503, "UNAVAILABLE"), "{message}");
    assert!(message.contains("no valid lease"), "{message}");
}

/// `POST /v1/ids/{scheme}/next` answers `count` ids of the scheme as strings, increasing, with
/// the worker id; its bad inputs are refused with the id service's words.
#[tokio::test]
async fn ids_next_answers_and_refuses_as_the_id_service() {
    let s = serve(alloc(|_| {}), None).await;
    for version in BOTH {
        let mut conn = plain(&s, version).await;
        let reply = conn.post_json("/v1/ids/snowflake/next", &json!({"count": 3})).await;
        let reply = reply.expect("answered");
        assert_eq!(reply.status, 200, "{reply:?}");
        let body = reply.json();
        assert_eq!((&body["scheme"], &body["worker_id"]), (&json!("snowflake"), &json!(3)));
        let ids: Vec<u64> = body["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|id| id.as_str().expect("a string").parse().expect("decimal"))
            .collect();
        assert_eq!(ids.len(), 3);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert!(body.get("session_uid").is_none(), "{body}");
        for (body, status, code, words) in [
            (json!({"count": 0}), 400, "INVALID_ARGUMENT", "count 0 must be within [1, 1000]"),
            (json!({"count": "1001"}), 400, "INVALID_ARGUMENT", "count 1001 must be within"),
            (json!({"count": 5_000_000_000u64}), 400, "INVALID_ARGUMENT", "count 5000000000"),
            (json!({"count": "many"}), 400, "INVALID_ARGUMENT", "count: \"many\" is not"),
            (json!({}), 400, "INVALID_ARGUMENT", "missing field `count`"),
            (json!({"count": 1, "session": "s-1"}), 400, "INVALID_ARGUMENT", "no session fields"),
        ] {
            let reply = conn.post_json("/v1/ids/snowflake/next", &body).await;
            let (got, got_code, message) = error_of(&reply.expect("answered"));
            assert_eq!((got, got_code.as_str()), (status, code), "{body}: {message}");
            assert!(message.contains(words), "{body}: {message}");
        }
        let reply = conn.post_json("/v1/ids/orders/next", &json!({"count": 1})).await;
        let (status, code, message) = error_of(&reply.expect("answered"));
        assert_eq!((status, code.as_str()), (404, "NOT_FOUND"), "{message}");
        assert!(message.contains("no id scheme named \"orders\""), "{message}");
    }
}

/// `GET /v1/ids/{scheme}/decode/{id}` answers what `seqctl id decode --json` prints (the same
/// `DecodedView`); an id that is not the scheme's is 400, an unknown scheme 404.
#[tokio::test]
async fn ids_decode_answers_as_seqctl_prints() {
    let s = serve(alloc(|_| {}), None).await;
    let mut conn = plain(&s, HttpVersion::Http1).await;
    let reply = conn.post_json("/v1/ids/snowflake/next", &json!({"count": 1})).await;
    let id = reply.expect("answered").json()["ids"][0].as_str().expect("an id").to_string();
    let reply = conn.get(&format!("/v1/ids/snowflake/decode/{id}")).await.expect("answered");
    assert_eq!(reply.status, 200, "{reply:?}");
    let layout = &s.shared.ids.schemes["snowflake"].layout;
    let decoded = seqsvr_core::decode::decode(layout, &id).expect("decodes");
    let seqctl = serde_json::to_value(seqsvr_core::decode::DecodedView::new("snowflake", &decoded));
    assert_eq!(reply.json(), seqctl.expect("serialises"));
    assert_eq!((&reply.json()["worker"], &reply.json()["id"]), (&json!(3), &json!(id)));
    for (path, status, code) in [
        ("/v1/ids/snowflake/decode/not-an-id", 400, "INVALID_ARGUMENT"),
        ("/v1/ids/orders/decode/1", 404, "NOT_FOUND"),
    ] {
        let (got, got_code, message) = error_of(&conn.get(path).await.expect("answered"));
        assert_eq!((got, got_code.as_str()), (status, code), "{path}: {message}");
    }
}

/// `/healthz` answers while the process is up; `/readyz` follows gRPC health as `observe`
/// sets it: 503 until the lease is seen valid, 200 then, 503 again once it lapses.
#[tokio::test]
async fn readyz_follows_the_lease_as_grpc_health_does() {
    let s = serve(alloc(|_| {}), None).await;
    let mut conn = plain(&s, HttpVersion::Http1).await;
    assert_eq!(conn.get("/healthz").await.expect("answered").json(), json!({"status": "UP"}));
    let readyz = conn.get("/readyz").await.expect("answered");
    assert_eq!(error_of(&readyz).0, 503, "not serving before observe has looked");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let observing =
        tokio::spawn(crate::observe::observe(s.shared.clone(), s.health.clone(), stop_rx));
    until_readyz(&mut conn, 200, "serving once the valid lease was seen").await;
    s.shared.lock().lease_until = None;
    until_readyz(&mut conn, 503, "not serving once the lease lapsed").await;
    let _ = stop.send(true);
    let _ = observing.await;
}

/// Asks `/readyz` until it answers `status` (a hang guard of 20 s, not a timing).
async fn until_readyz(conn: &mut HttpConn, status: u16, what: &str) {
    let guard = tokio::time::Instant::now() + Duration::from_secs(20);
    while conn.get("/readyz").await.expect("answered").status != status {
        assert!(tokio::time::Instant::now() < guard, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The routes `proto/http-api.yaml` documents are exactly [`ROUTES`], and the server serves
/// each (a documented route is never "no route" nor "method not allowed").
#[tokio::test]
async fn the_openapi_document_lists_the_served_routes() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto/http-api.yaml");
    let text = std::fs::read_to_string(path).expect("proto/http-api.yaml");
    let documented = openapi_routes(&text);
    let mut served: Vec<(String, String)> =
        ROUTES.iter().map(|(m, p)| (m.as_str().to_string(), p.to_string())).collect();
    served.sort();
    assert_eq!(documented, served, "proto/http-api.yaml and http::ROUTES differ");
    let s = serve(alloc(|_| {}), None).await;
    let mut conn = plain(&s, HttpVersion::Http1).await;
    for (method, template) in &documented {
        let path = template.replace("{uid}", "15").replace("{scheme}", "snowflake");
        let path = path.replace("{id}", "1");
        let headers = [("content-type", "application/json")];
        let reply = conn.send(method, &path, &headers, "{}").await.expect("answered");
        let code = reply.json()["code"].as_str().unwrap_or_default().to_string();
        assert!(
            reply.status != 405
                && !(reply.status == 404 && code == "NOT_FOUND" && {
                    let m = reply.json()["message"].as_str().unwrap_or_default().to_string();
                    m.starts_with("no route")
                }),
            "{method} {path} is documented but not served: {reply:?}"
        );
    }
}

/// `(METHOD, path)` of every operation under `paths:` of an OpenAPI document written as ours
/// is: a path at two spaces of indent, its operations at four.
fn openapi_routes(text: &str) -> Vec<(String, String)> {
    let mut routes = Vec::new();
    let (mut in_paths, mut path) = (false, None::<String>);
    for line in text.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() {
            in_paths = line.trim_end() == "paths:";
            continue;
        }
        if !in_paths {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let key = line.trim().strip_suffix(':');
        match (indent, key) {
            (2, Some(p)) if p.starts_with('/') => path = Some(p.to_string()),
            (4, Some(m)) if ["get", "post", "put", "delete", "patch"].contains(&m) => {
                let p = path.clone().expect("an operation under a path");
                routes.push((m.to_ascii_uppercase(), p));
            }
            _ => {}
        }
    }
    routes.sort();
    routes
}

// ---- over mutual TLS ----

/// A PKI in a temp dir: a cluster CA (the AllocSvr's certificate) and a client CA
/// (applications, and here the identities under test), with `[tls]` naming them.
struct Pki {
    dir: tempfile::TempDir,
    tls: seqsvr_core::config::TlsConfig,
    cluster_ca: String,
    client_ca: seqsvr_tls::pki::Ca,
}

const TLS_SECTION: &str = r#"
section_size = 10
[[sets]]
id = 1
uid_begin = 0
uid_end = 100
stores = [{ id = 1, addr = "127.0.0.1:1" }]
[tls]
server_name = "seqsvr"
client_ca = "client-ca.pem"
store_ca = "cluster-ca.pem"
peer_ca = "cluster-ca.pem"
[tls.identities]
"app-1" = "client"
"admin" = "admin"
"alloc-1-1" = { role = "alloc", set = 1 }
"#;

impl Pki {
    fn new() -> Pki {
        use seqsvr_tls::pki::{issue, make_ca};
        let dir = tempfile::tempdir().expect("a temp dir");
        let cluster = make_ca("cluster", 2).expect("a CA");
        let client_ca = make_ca("clients", 2).expect("a CA");
        let names = ["alloc.seqsvr".to_string()];
        let (cert, key) = issue(&cluster, "alloc-1-1", &names, 2).expect("a certificate");
        for (name, text) in [
            ("server.pem", &cert),
            ("server.key", &key),
            ("cluster-ca.pem", &cluster.pem),
            ("client-ca.pem", &client_ca.pem),
        ] {
            std::fs::write(dir.path().join(name), text).expect("written");
        }
        let config = seqsvr_core::config::ClusterConfig::from_toml_str(TLS_SECTION);
        let tls = config.expect("a cluster file").tls.expect("[tls]");
        Pki { dir, tls, cluster_ca: cluster.pem.clone(), client_ca }
    }

    fn setup(&self) -> seqsvr_tls::TlsSetup {
        let path = |name: &str| self.dir.path().join(name);
        let files = seqsvr_tls::TlsFiles::resolve(
            &self.tls,
            self.dir.path(),
            path("server.pem"),
            path("server.key"),
        );
        seqsvr_tls::TlsSetup {
            config: Arc::new(self.tls.clone()),
            files,
            kind: seqsvr_tls::ServerKind::AllocSvr,
        }
    }

    /// A client presenting a certificate for `cn` from the client CA (None: no certificate).
    fn target(&self, addr: SocketAddr, cn: Option<&str>) -> HttpTarget {
        let leaf =
            cn.map(|cn| seqsvr_tls::pki::issue(&self.client_ca, cn, &[], 2).expect("a leaf"));
        let identity = leaf.as_ref().map(|(c, k)| (c.as_bytes(), k.as_bytes()));
        HttpTarget::tls(&addr.to_string(), self.cluster_ca.as_bytes(), identity, "alloc.seqsvr")
            .expect("a client configuration")
    }
}

/// Over mutual TLS: an application certificate is served over HTTP/1.1 and HTTP/2; no
/// certificate gets no answer at all; an `alloc` identity (not a client) and an identity
/// `[tls.identities]` does not list are refused 403 with the JSON error, though the latter may
/// ask the probes (any verified certificate); none of the refused calls ran.
#[tokio::test]
async fn over_mutual_tls_only_clients_and_admins_reach_the_api() {
    let pki = Pki::new();
    let s = serve(alloc(|_| {}), Some(pki.setup())).await;
    let next = json!({"uids": ["15"]});
    let mut last = 0;
    for version in BOTH {
        for who in ["app-1", "admin"] {
            let target = pki.target(s.addr, Some(who));
            let mut conn = HttpConn::connect(&target, version).await.expect("connected");
            let reply = conn.post_json("/v1/seq/next", &next).await.expect("answered");
            assert_eq!(reply.status, 200, "{who} {version:?}: {reply:?}");
            let seq = seqs(&reply)[0].1;
            assert!(seq > last, "{seq} after {last}");
            last = seq;
        }
    }
    let drawn = s.shared.next_request_id.load(std::sync::atomic::Ordering::Relaxed);
    for version in BOTH {
        let target = pki.target(s.addr, None);
        let refused = match HttpConn::connect(&target, version).await {
            Err(e) => e,
            // TLS 1.3: the client's handshake ends before the server has checked it; the
            // server's refusal arrives as the connection's end.
            Ok(mut conn) => conn.post_json("/v1/seq/next", &next).await.expect_err("refused"),
        };
        assert!(!refused.is_empty(), "{version:?}");
        for (who, words) in [
            ("alloc-1-1", "needs role client or admin"),
            ("stranger", "identity \"stranger\" may not call v1/seq/next"),
        ] {
            let target = pki.target(s.addr, Some(who));
            let mut conn = HttpConn::connect(&target, version).await.expect("connected");
            let reply = conn.post_json("/v1/seq/next", &next).await.expect("answered");
            let (status, code, message) = error_of(&reply);
            assert_eq!((status, code.as_str()), (403, "PERMISSION_DENIED"), "{message}");
            assert!(message.contains(words), "{who}: {message}");
        }
        let target = pki.target(s.addr, Some("stranger"));
        let mut conn = HttpConn::connect(&target, version).await.expect("connected");
        assert_eq!(conn.get("/healthz").await.expect("answered").status, 200);
    }
    let after = s.shared.next_request_id.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(after, drawn, "no refused call reached the service");
    assert_eq!(current(&s, 15), last, "nothing allocated by a refused call");
}

/// `--probe-addr`: plaintext, no certificate asked; `/healthz` and `/readyz` answer as on the
/// API's port (readiness follows the same health), every other path is 404 there — the API
/// (`/v1/...`) is never served without the TLS port's certificate — and the listener stops
/// with its stop signal.
#[tokio::test]
async fn the_probe_address_answers_only_the_probes_without_a_certificate() {
    let s = serve(alloc(|_| {}), None).await;
    let before = current(&s, 15);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let probes = tokio::spawn(serve_probes(listener, s.health.clone(), stop_rx.clone()));
    for version in BOTH {
        let target = HttpTarget::plaintext(&addr.to_string());
        let mut conn = HttpConn::connect(&target, version).await.expect("connected");
        assert_eq!(conn.get("/healthz").await.expect("answered").json(), json!({"status": "UP"}));
        assert_eq!(error_of(&conn.get("/readyz").await.expect("answered")).0, 503);
        for path in ["/v1/seq/15", "/v1/ids/snowflake/decode/1", "/metrics", "/"] {
            let (status, code, message) = error_of(&conn.get(path).await.expect("answered"));
            assert_eq!((status, code.as_str()), (404, "NOT_FOUND"), "{path}: {message}");
        }
        let (status, ..) = error_of(
            &conn.post_json("/v1/seq/next", &json!({"uids": ["15"]})).await.expect("answered"),
        );
        assert_eq!(status, 404, "POST /v1/seq/next is not served on the probe address");
    }
    assert_eq!(current(&s, 15), before, "nothing was allocated");
    let observing =
        tokio::spawn(crate::observe::observe(s.shared.clone(), s.health.clone(), stop_rx));
    let target = HttpTarget::plaintext(&addr.to_string());
    let mut conn = HttpConn::connect(&target, HttpVersion::Http1).await.expect("connected");
    until_readyz(&mut conn, 200, "serving on the probe address once the lease was seen").await;
    let _ = stop.send(true);
    let _ = observing.await;
    tokio::time::timeout(Duration::from_secs(20), probes).await.expect("stops").expect("no panic");
}

/// A body that never all arrives is answered 408 once `alloc.request_timeout_ms` has passed,
/// and the call is gone: without the limit the request held its buffer and one of the
/// connection's calls until the client left.
#[tokio::test]
async fn a_body_that_never_ends_is_refused_after_the_request_timeout() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let s = serve(alloc(|c| c.tuning.request_timeout_ms = 200), None).await;
    let before = current(&s, 15);
    let mut tcp = tokio::net::TcpStream::connect(s.addr).await.expect("connected");
    let head = "POST /v1/seq/next HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\n\
                content-length: 100\r\n\r\n{\"uids\": [\"15\"";
    tcp.write_all(head.as_bytes()).await.expect("sent");
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // A hang guard, not a timing: the answer comes after 200 ms, or never without the limit.
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while !String::from_utf8_lossy(&answer).contains("}") {
            let n = tcp.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
    });
    read.await.expect("answered before the hang guard");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("DEADLINE_EXCEEDED") && answer.contains("alloc.request_timeout_ms"));
    assert_eq!(current(&s, 15), before, "nothing was allocated");
}
