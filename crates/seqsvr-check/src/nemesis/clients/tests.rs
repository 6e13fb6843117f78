use super::*;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use seqsvr_core::ids::SetId;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn every_kind_of_client_runs_from_three_clients_on_and_sdk_clients_keep_half() {
    let mix = |n: usize| (0..n).map(|c| client_kind(c, n)).collect::<Vec<_>>();
    use ClientKind::*;
    assert_eq!(mix(1), [Sdk]);
    assert_eq!(mix(2), [Sdk, Plain]);
    assert_eq!(mix(3), [Sdk, Plain, Http1]);
    assert_eq!(mix(4), [Sdk, Plain, Sdk, Http1]);
    assert_eq!(mix(8), [Sdk, Plain, Sdk, Http1, Sdk, Plain, Sdk, Http2]);
    for n in 4..=40 {
        let kinds = mix(n);
        let count = |k: ClientKind| kinds.iter().filter(|&&x| x == k).count();
        assert!(count(Sdk) * 2 >= n, "{n} clients: {kinds:?}");
        assert!(count(Plain) >= 1 && count(Http1) >= 1, "{n} clients: {kinds:?}");
        assert_eq!(count(Http2) >= 1, n >= 8, "{n} clients: {kinds:?}");
    }
}

#[test]
fn with_two_sets_of_two_allocsvrs_each_one_has_a_plain_or_http_client() {
    let set = |id: u64, allocs: [&str; 2]| SetConfig {
        id: SetId(id),
        uid_begin: id * 100,
        uid_end: id * 100 + 100,
        stores: Vec::new(),
        allocs: allocs.iter().map(|a| a.to_string()).collect(),
    };
    let sets = [set(0, ["a0", "a1"]), set(1, ["b0", "b1"])];
    let used: Vec<&str> = (0..8)
        .filter(|&c| client_kind(c, 8) != ClientKind::Sdk)
        .flat_map(|c| alloc_for(c, &sets))
        .collect();
    assert_eq!(used, ["a0", "a1", "b0", "b1"]);
    assert_eq!(alloc_for(1, &[]), None);
}

#[test]
fn an_answer_is_one_value_per_uid_asked_in_order_or_malformed() {
    let body = |v: Value| v.to_string().into_bytes();
    let good = body(serde_json::json!({"values": [
        {"uid": "42", "seq": "13"}, {"uid": "42", "seq": "14"}, {"uid": "7", "seq": "1"}
    ]}));
    assert_eq!(values_of(&[42, 42, 7], 200, &good).unwrap(), [13, 14, 1]);
    let malformed = |uids: &[u64], answer: Value| match values_of(uids, 200, &body(answer)) {
        Err(CallError::Malformed(why)) => why,
        other => panic!("not malformed: {other:?}"),
    };
    let one = |uid: Value, seq: Value| serde_json::json!({"values": [{"uid": uid, "seq": seq}]});
    assert!(malformed(&[42, 7], one("42".into(), "1".into())).contains("1 values for 2 uids"));
    assert!(malformed(&[42], serde_json::json!({"values": []})).contains("0 values for 1 uids"));
    assert!(malformed(&[42], one("43".into(), "1".into())).contains("for uid 43, uid 42 was asked"));
    let swapped =
        serde_json::json!({"values": [{"uid": "7", "seq": "1"}, {"uid": "42", "seq": "2"}]});
    assert!(malformed(&[42, 7], swapped).contains("values[0] is for uid 7"));
    assert!(malformed(&[42], one("42".into(), 13.into())).contains("values[0].seq"));
    assert!(malformed(&[42], one("42".into(), "-1".into())).contains("values[0].seq"));
    assert!(malformed(&[42], one("42".into(), "18446744073709551616".into())).contains("seq"));
    assert!(malformed(&[42], one(42.into(), "1".into())).contains("values[0].uid"));
    assert!(malformed(&[42], serde_json::json!({"seqs": ["1"]})).contains("no \"values\""));
    let error_body = serde_json::json!({"code": "UNAVAILABLE", "message": "x"});
    assert!(malformed(&[42], error_body).contains("no \"values\""));
    match values_of(&[42], 200, b"<html>") {
        Err(CallError::Malformed(why)) => assert!(why.contains("not JSON"), "{why}"),
        other => panic!("not malformed: {other:?}"),
    }
}

#[test]
fn an_error_answer_is_its_body_s_code_and_anything_else_unknown() {
    let body = serde_json::json!({
        "code": "UNAVAILABLE", "message": "no lease", "hint": "retry"
    });
    let s = status_of(503, body.to_string().as_bytes());
    assert_eq!(s.code(), Code::Unavailable);
    assert_eq!(s.message(), "HTTP 503: no lease (hint: retry)");
    let refused = serde_json::json!({"code": "INVALID_ARGUMENT", "message": "uids: empty"});
    let s = status_of(400, refused.to_string().as_bytes());
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(matches!(outcome_of(Err(s.into())), Outcome::Fail { .. }));
    for (http, body) in [
        (502, &b"<html>bad gateway</html>"[..]),
        (500, br#"{"code": "NO_SUCH_CODE", "message": "x"}"#),
        (500, br#"{"code": "OK", "message": "x"}"#),
        (503, br#"{"code": "UNAVAILABLE"}"#),
    ] {
        let s = status_of(http, body);
        assert_eq!(s.code(), Code::Unknown, "{http} {}", String::from_utf8_lossy(body));
        assert!(matches!(outcome_of(Err(s.into())), Outcome::Unknown { .. }));
    }
    for code in (0..=16).map(Code::from_i32) {
        assert_eq!(code_of_name(seqsvr_tls::http_error::code_name(code)), Some(code));
    }
}

#[test]
fn only_a_refusal_is_failed_and_a_malformed_answer_is_malformed() {
    for status in [
        Status::unavailable("HTTP: no answer: connection closed"),
        Status::deadline_exceeded("HTTP: no answer within 3000 ms"),
        Status::internal("x"),
        Status::unknown("HTTP 502 without an error body"),
    ] {
        let outcome = outcome_of(Err(status.into()));
        assert!(matches!(outcome, Outcome::Unknown { .. }), "{outcome:?}");
    }
    let refused = outcome_of(Err(Status::invalid_argument("bad").into()));
    assert_eq!(refused, Outcome::Fail { code: "InvalidArgument".into() });
    let malformed = outcome_of(Err(CallError::Malformed("2 values for 1 uids".into())));
    assert_eq!(malformed, Outcome::Malformed { reason: "2 values for 1 uids".into() });
    assert_eq!(outcome_of(Ok(vec![3])), Outcome::Ok { values: vec![3] });
}

#[test]
fn calls_and_violations_are_counted_per_kind_of_client() {
    let op = |client: u32, outcome: Outcome| Operation {
        client,
        set: 0,
        uids: vec![1],
        invoke_ns: 0,
        complete_ns: 1,
        outcome,
    };
    let ok = |client: u32, value: u64| op(client, Outcome::Ok { values: vec![value] });
    let kinds = [ClientKind::Sdk, ClientKind::Http1, ClientKind::Http1];
    let ops = [
        ok(0, 1),
        ok(1, 1), // the same value as client 0's: one violation of both kinds
        op(2, Outcome::Unknown { reason: "x".into() }),
        op(2, Outcome::Malformed { reason: "x".into() }), // one of http1's alone
        ok(u32::MAX, 7),                                  // a fault's own call
    ];
    let report = crate::history::check(&ops);
    let by = calls_by_kind(&ops, &kinds, &report.violations);
    assert_eq!(by.len(), 2);
    let http = &by[&ClientKind::Http1];
    assert_eq!(
        (http.clients, http.ok, http.unknown, http.malformed, http.violations),
        (2, 1, 1, 1, 2)
    );
    assert_eq!((by[&ClientKind::Sdk].ok, by[&ClientKind::Sdk].violations), (1, 1));
    assert!(silent_kinds(&by).is_none());
    let silent = calls_by_kind(&ops[2..3], &kinds, &[]);
    let e = silent_kinds(&silent).expect("two kinds without a value");
    assert_eq!(e.to_string(), "client kinds without one successful call: sdk, http1");
    assert!(table_rows(&by).contains("| calls of http1 clients (2) | 1 ok, 0 failed, 1 unknown"));
}

/// What the test server does with a request.
enum Act {
    /// Answers one value per uid, each the uid plus 1000.
    Answer,
    /// Answers with the uids swapped (for a batch) or one uid more.
    WrongUids,
    /// Answers an error.
    Error(u16, &'static str),
    /// Waits until `n` requests wait here, then answers.
    Meet(Arc<tokio::sync::Barrier>),
    /// Fails the request (the connection closes, or its stream is reset), no answer.
    Drop,
}

/// Per request: the number of its connection (from 1) and its timeout header.
type Seen = Arc<Mutex<Vec<(usize, Option<String>)>>>;

/// A plaintext HTTP/1.1 or HTTP/2 server on loopback that acts on each request as its script
/// says (then [`Act::Answer`]), counting connections and keeping each request's connection
/// number and timeout header.
struct Server {
    addr: String,
    script: Arc<Mutex<VecDeque<Act>>>,
    connections: Arc<AtomicUsize>,
    seen: Seen,
}

impl Server {
    async fn start(version: HttpVersion) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = Server {
            addr,
            script: Arc::default(),
            connections: Arc::default(),
            seen: Arc::default(),
        };
        let (script, connections, seen) =
            (server.script.clone(), server.connections.clone(), server.seen.clone());
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let conn = connections.fetch_add(1, Ordering::SeqCst) + 1;
                let (script, seen) = (script.clone(), seen.clone());
                let service = hyper::service::service_fn(move |req| {
                    let (script, seen) = (script.clone(), seen.clone());
                    async move { serve(req, conn, &script, &seen).await }
                });
                let io = TokioIo::new(tcp);
                tokio::spawn(async move {
                    let _ = match version {
                        HttpVersion::Http1 => {
                            hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service)
                                .await
                        }
                        HttpVersion::Http2 => {
                            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .serve_connection(io, service)
                                .await
                        }
                    };
                });
            }
        });
        server
    }

    fn then(&self, act: Act) {
        self.script.lock().unwrap().push_back(act);
    }

    fn client(&self, version: HttpVersion) -> HttpClient {
        HttpClient::with_target(HttpTarget::plaintext(&self.addr), version)
    }
}

async fn serve(
    req: http::Request<hyper::body::Incoming>,
    conn: usize,
    script: &Mutex<VecDeque<Act>>,
    seen: &Mutex<Vec<(usize, Option<String>)>>,
) -> Result<http::Response<Full<Bytes>>, std::io::Error> {
    let timeout = req.headers().get(TIMEOUT_HEADER).and_then(|v| v.to_str().ok()).map(String::from);
    seen.lock().unwrap().push((conn, timeout));
    let body = req.into_body().collect().await.map_err(std::io::Error::other)?.to_bytes();
    let json: Value = serde_json::from_slice(&body).map_err(std::io::Error::other)?;
    let mut uids: Vec<String> = json["uids"]
        .as_array()
        .map(|a| a.iter().filter_map(|u| u.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let act = script.lock().unwrap().pop_front().unwrap_or(Act::Answer);
    let answer = |status: u16, body: String| {
        let mut response = http::Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        Ok(response)
    };
    match act {
        Act::Answer => {}
        Act::WrongUids if uids.len() > 1 => uids.swap(0, 1),
        Act::WrongUids => uids.push("1".into()),
        Act::Error(status, body) => return answer(status, body.into()),
        Act::Meet(barrier) => {
            barrier.wait().await;
        }
        Act::Drop => return Err(std::io::Error::other("dropped on purpose")),
    }
    let values: Vec<Value> = uids
        .iter()
        .map(|u| {
            let seq = u.parse::<u64>().unwrap_or(0) + 1000;
            serde_json::json!({"uid": u, "seq": seq.to_string()})
        })
        .collect();
    answer(200, serde_json::json!({ "values": values }).to_string())
}

const DEADLINE: Duration = Duration::from_secs(3);

/// Over HTTP/1.1 and HTTP/2 against real sockets: calls share a kept-alive connection and carry
/// the deadline; an error answer is its code and keeps the connection; a failed connection is
/// dropped and the next call opens a new one; a wrong answer is malformed.
#[tokio::test]
async fn http_calls_keep_their_connection_reconnect_after_an_error_and_check_answers() {
    for version in [HttpVersion::Http1, HttpVersion::Http2] {
        let server = Server::start(version).await;
        let client = server.client(version);
        assert_eq!(client.next_batch(&[5], DEADLINE).await.unwrap(), [1005]);
        assert_eq!(client.next_batch(&[6, 5], DEADLINE).await.unwrap(), [1006, 1005]);
        server.then(Act::Error(503, r#"{"code": "UNAVAILABLE", "message": "no lease"}"#));
        match client.next_batch(&[5], DEADLINE).await {
            Err(CallError::Status(s)) => assert_eq!(s.code(), Code::Unavailable, "{s:?}"),
            other => panic!("{version:?}: {other:?}"),
        }
        assert_eq!(server.connections.load(Ordering::SeqCst), 1, "{version:?}: kept alive");
        server.then(Act::Drop);
        let dropped = client.next_batch(&[5], DEADLINE).await;
        match &dropped {
            Err(CallError::Status(s)) => assert_eq!(s.code(), Code::Unavailable, "{s:?}"),
            other => panic!("{version:?}: {other:?}"),
        }
        assert!(matches!(outcome_of(dropped), Outcome::Unknown { .. }));
        assert_eq!(client.next_batch(&[7], DEADLINE).await.unwrap(), [1007]);
        assert_eq!(server.connections.load(Ordering::SeqCst), 2, "{version:?}: a new one");
        server.then(Act::WrongUids);
        assert!(matches!(
            client.next_batch(&[8, 9], DEADLINE).await,
            Err(CallError::Malformed(why)) if why.contains("values[0] is for uid 9")
        ));
        server.then(Act::WrongUids);
        assert!(matches!(
            LoadClient::Http(Arc::new(server.client(version))).next(8, DEADLINE).await,
            Err(CallError::Malformed(why)) if why.contains("2 values for 1 uids")
        ));
        let seen = server.seen.lock().unwrap();
        assert!(seen.iter().all(|(_, t)| t.as_deref() == Some("3000")), "{seen:?}");
        let on_first: Vec<usize> = seen.iter().map(|(c, _)| *c).take(4).collect();
        assert_eq!(on_first, [1, 1, 1, 1], "{version:?}");
    }
}

/// Two callers of one client at once each have a connection: the server answers neither until
/// both requests are in (one HTTP/1.1 connection shared by both would never get there).
#[tokio::test]
async fn concurrent_callers_of_one_client_never_share_a_connection_at_once() {
    for version in [HttpVersion::Http1, HttpVersion::Http2] {
        let server = Server::start(version).await;
        let client = server.client(version);
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        server.then(Act::Meet(barrier.clone()));
        server.then(Act::Meet(barrier));
        let (a, b) = tokio::join!(
            client.next_batch(&[1], DEADLINE * 10),
            client.next_batch(&[2], DEADLINE * 10)
        );
        assert_eq!((a.unwrap(), b.unwrap()), (vec![1001], vec![1002]), "{version:?}");
        assert_eq!(server.connections.load(Ordering::SeqCst), 2, "{version:?}");
        // Both went back to the pool: the next two calls at once open nothing new.
        let (a, b) =
            tokio::join!(client.next_batch(&[1], DEADLINE), client.next_batch(&[2], DEADLINE));
        assert!(a.is_ok() && b.is_ok());
        assert_eq!(server.connections.load(Ordering::SeqCst), 2, "{version:?}");
    }
}
