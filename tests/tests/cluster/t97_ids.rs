//! t97 (ids, issue 10): globally unique, time-ordered ids from the AllocSvrs. Every scheme with
//! worker ids is served by two AllocSvrs at once (each under its own worker id leased from the
//! set's store), bad requests are refused and change nothing, an AllocSvr restarted with kill -9
//! goes on with a worker id whose ids are above everything issued before, and worker ids are
//! reused across many restarts from a pool of two. The id checker (`seqsvr_check::ids`) checks
//! every answer: no id twice, each worker id's ids increasing in real time.

use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, IdRecorder, ProcKey};
use seqsvr_core::ids::SetId;
use seqsvr_proto::v1 as pb;
use std::collections::BTreeSet;
use tonic::Code;

const SERVED: [&str; 5] = ["snowflake", "uid-generator", "weibo", "uuidv7", "js53"];

/// Waits until the AllocSvr at `addr` answers `NextIds` for `scheme` (it has a lease and a
/// worker id); answers its worker id.
async fn wait_ids(rec: &IdRecorder, addr: &str, scheme: &str) -> u64 {
    wait_for("the AllocSvr to serve ids", || async {
        rec.next_ids(addr, scheme, 10, 0).await.ok().map(|(worker, _)| worker)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheme_is_served_unique_and_ordered_per_worker_id() {
    let mut cluster =
        Cluster::start(ClusterOptions { allocs_per_set: 2, ..ClusterOptions::default() });
    let rec = IdRecorder::default();
    let a_key = ProcKey::Alloc(SetId(0), 0);
    let a = cluster.proc(a_key).addr.clone();
    let b = cluster.proc(ProcKey::Alloc(SetId(0), 1)).addr.clone();
    for scheme in SERVED {
        let wa = wait_ids(&rec, &a, scheme).await;
        let wb = wait_ids(&rec, &b, scheme).await;
        assert_ne!(wa, wb, "{scheme}: two AllocSvrs hold one worker id");
        for round in 0..20u64 {
            let business = if scheme == "weibo" { round % 32 } else { 0 };
            for addr in [&a, &b] {
                let (_, ids) = rec.served_ids(addr, scheme, 100, business).await;
                assert_eq!(ids.len(), 100);
                if scheme == "js53" {
                    let safe = u128::from(seqsvr_core::idscheme::JS_MAX_SAFE_INTEGER);
                    assert!(ids.iter().all(|&id| id <= safe), "js53 above 2^53 - 1: {ids:?}");
                }
            }
        }
    }

    // Refusals say why and issue nothing.
    // Marked no-forward: this AllocSvr's own answers (forwarding is t98's).
    let mut channel = pb::id_service_client::IdServiceClient::with_interceptor(
        seqsvr_client::store::alloc_channel(&a).expect("channel"),
        seqsvr_client::seq::NoForward,
    );
    let ask = |scheme: &str, count, business| pb::NextIdsRequest {
        scheme: scheme.into(),
        count,
        business,
        ..Default::default()
    };
    let e = channel.next_ids(ask("nope", 1, 0)).await.expect_err("unknown scheme");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("snowflake"), "names the configured schemes: {e:?}");
    for (request, what) in [
        (ask("snowflake", 0, 0), "count 0"),
        (ask("snowflake", 100_001, 0), "count above ids.max_count"),
        (ask("snowflake", 1, 1), "a business number for a scheme without one"),
        (ask("weibo", 1, 32), "a business number of 6 bits"),
    ] {
        let e = channel.next_ids(request).await.expect_err(what);
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
    }

    // 128-bit ids come packed in one buffer when asked (as the SDK asks), else one field per
    // id (what SDKs from before `packed_ids128` read).
    for packed in [false, true] {
        let request = pb::NextIdsRequest { packed_ids128: packed, ..ask("uuidv7", 3, 0) };
        let r = channel.next_ids(request).await.expect("uuidv7").into_inner();
        let fields = (r.ids128.len(), r.ids128_packed.len());
        assert_eq!(fields, if packed { (0, 48) } else { (3, 0) }, "packed: {packed}");
        let ids = seqsvr_proto::ids128_of(&r).expect("16 bytes each");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing: {ids:x?}");
    }
    // So do 64-bit ids (8 bytes each), else a varint each (SDKs from before `packed_ids64`).
    for packed in [false, true] {
        let request = pb::NextIdsRequest { packed_ids64: packed, ..ask("snowflake", 3, 0) };
        let r = channel.next_ids(request).await.expect("snowflake").into_inner();
        let fields = (r.ids.len(), r.ids64_packed.len());
        assert_eq!(fields, if packed { (0, 24) } else { (3, 0) }, "packed: {packed}");
        let ids = seqsvr_proto::ids64_of(&r).expect("8 bytes each");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing: {ids:x?}");
    }

    // Decode, by the AllocSvr, agrees with the answer.
    let (worker, ids) = rec.next_ids(&a, "snowflake", 1, 0).await.expect("snowflake");
    let decoded = channel
        .decode(pb::DecodeIdRequest {
            scheme: "snowflake".into(),
            text: String::new(),
            id: ids[0] as u64,
        })
        .await
        .expect("decode")
        .into_inner();
    assert_eq!(decoded.worker, worker);
    assert_eq!(decoded.text, ids[0].to_string());
    let (_, uuids) = rec.next_ids(&a, "uuidv7", 1, 0).await.expect("uuidv7");
    let uuid_layout = seqsvr_core::idscheme::LayoutSpec::of(seqsvr_core::idscheme::Scheme::UuidV7)
        .load(1_796_000_000_000)
        .expect("the uuidv7 layout");
    let text = uuid_layout.format(uuids[0]).expect("a uuidv7");
    let decoded = channel
        .decode(pb::DecodeIdRequest { scheme: "uuidv7".into(), text: text.clone(), id: 0 })
        .await
        .expect("decode a uuid")
        .into_inner();
    assert_eq!(decoded.text, text);
    let e = channel
        .decode(pb::DecodeIdRequest { scheme: "uuidv7".into(), text: "not-a-uuid".into(), id: 0 })
        .await
        .expect_err("bad text");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // The store's view: one holder per leased worker id.
    let leases = cluster.leases(SetId(0)).await.expect("leases");
    let held: BTreeSet<(String, u64)> = leases
        .workers
        .iter()
        .filter(|w| w.alloc_id != 0)
        .map(|w| (w.scheme.clone(), w.worker_id))
        .collect();
    assert_eq!(held.len(), 10, "5 schemes × 2 AllocSvrs: {:?}", leases.workers);

    // kill -9 and restart: the new process leases a worker id and issues above everything
    // issued before with it (the checker's G2 across holders).
    cluster.kill9_proc(a_key);
    cluster.start_proc(a_key);
    for scheme in SERVED {
        wait_ids(&rec, &a, scheme).await;
        for _ in 0..10 {
            rec.served_ids(&a, scheme, 100, 0).await;
        }
    }
    let report = rec.assert_no_violation();
    assert!(report.n_ids > 5 * 40 * 100, "{report:?}");
}

/// Worker ids are reused, never exhausted: one AllocSvr restarted (kill -9) 12 times with a
/// pool of 2 worker ids per set. Each restart's registration gets one once the previous
/// holder's lease must be over, above its high-water mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_ids_are_reused_across_restarts_from_a_pool_of_two() {
    let mut ids = seqsvr_cluster_tests::test_ids_config();
    ids.schemes.retain(|name, _| name == "snowflake");
    ids.schemes.get_mut("snowflake").expect("snowflake").workers_per_set = Some(2);
    let mut cluster =
        Cluster::start(ClusterOptions { allocs_per_set: 1, ids, ..ClusterOptions::default() });
    let key = ProcKey::Alloc(SetId(0), 0);
    let addr = cluster.proc(key).addr.clone();
    let rec = IdRecorder::default();
    let mut used = Vec::new();
    for _ in 0..12 {
        let worker = wait_ids(&rec, &addr, "snowflake").await;
        for _ in 0..5 {
            rec.served_ids(&addr, "snowflake", 200, 0).await;
        }
        used.push(worker);
        cluster.kill9_proc(key);
        cluster.start_proc(key);
    }
    assert!(used.iter().all(|&w| w < 2), "worker ids outside set 0's pool [0, 2): {used:?}");
    let report = rec.assert_no_violation();
    assert_eq!(report.by_scheme["snowflake"].workers, 2, "both reused: {used:?}");
}

/// `rongcloud` (seed 000): each session's ids come from the owner of its uid's section, in two
/// sets with two AllocSvrs each. The SDK, given only the AllocSvr addresses, follows NOT_OWNER
/// to each owner; any other AllocSvr refuses the session with its uid; bad session fields are
/// refused; after the owner of a session's section is killed (kill -9), its next owner issues
/// above everything issued before. The checker: no id twice, each session's ids increasing in
/// real time, every id carrying the session it was asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rongcloud_sessions_are_served_by_their_sections_owner() {
    use seqsvr_client::ids::{IdClient, Session, SessionId};
    let mut cluster =
        Cluster::start(ClusterOptions { sets: 2, allocs_per_set: 2, ..ClusterOptions::default() });
    let keys: Vec<ProcKey> =
        (0..2).flat_map(|set| (0..2).map(move |i| ProcKey::Alloc(SetId(set), i))).collect();
    let addrs: Vec<String> = keys.iter().map(|k| cluster.proc(*k).addr.clone()).collect();
    let client = IdClient::new(&addrs).expect("a client");
    let rec = IdRecorder::default();
    let sessions: Vec<Session> = (0..12u32)
        .map(|i| Session { session_type: i % 16, id: SessionId::Text(format!("group-{i}")) })
        .collect();
    let config = &cluster.config.ids.schemes["rongcloud"];
    let uids: BTreeSet<u64> =
        sessions.iter().map(|s| config.session_uid(s.key().expect("fits"))).collect();
    let sets: BTreeSet<u64> =
        uids.iter().filter_map(|&u| cluster.config.set_for_uid(u)).map(|s| s.id.0).collect();
    assert_eq!(sets.len(), 2, "the sessions spread over both sets: {uids:?}");
    for round in 0..10 {
        for session in &sessions {
            let ids = rec.next_session_ids(&client, "rongcloud", 20, session).await;
            assert_eq!(ids.unwrap_or_else(|e| panic!("round {round}: {e:?}")).len(), 20);
        }
    }

    // Asked directly, exactly one AllocSvr serves a session; the others name its uid.
    let ask = |session_type, session_id: &str, session_hash, business| pb::NextIdsRequest {
        scheme: "rongcloud".into(),
        count: 1,
        business,
        session_type,
        session_id: session_id.into(),
        session_hash,
        packed_ids128: true,
        packed_ids64: false,
    };
    let uid0 = config.session_uid(sessions[0].key().expect("fits"));
    let mut owner = None;
    for (key, addr) in keys.iter().zip(&addrs) {
        let mut channel = pb::id_service_client::IdServiceClient::with_interceptor(
            seqsvr_client::store::alloc_channel(addr).expect("channel"),
            seqsvr_client::seq::NoForward,
        );
        match channel.next_ids(ask(0, "group-0", None, 0)).await {
            Ok(_) => {
                assert!(owner.replace(*key).is_none(), "two AllocSvrs serve one session");
            }
            Err(e) => {
                assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
                assert!(e.message().starts_with("NOT_OWNER"), "{e:?}");
                let named = e
                    .metadata()
                    .get(seqsvr_proto::SESSION_UID_METADATA)
                    .map(|v| v.to_str().unwrap());
                assert_eq!(named, Some(uid0.to_string().as_str()), "{e:?}");
            }
        }
        for (request, what) in [
            (ask(0, "group-0", None, 1), "a business number"),
            (ask(16, "group-0", None, 0), "a session type of 5 bits"),
            (ask(0, "", Some(1 << 22), 0), "a session hash of 23 bits"),
            (ask(0, "group-0", Some(7), 0), "both a session id and a hash"),
            (ask(0, "", None, 0), "no session at all"),
        ] {
            let e = channel.next_ids(request).await.expect_err(what);
            assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
        }
        let mut with_session = ask(1, "group-0", None, 0);
        with_session.scheme = "snowflake".into();
        let e = channel.next_ids(with_session).await.expect_err("snowflake has no session");
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    }
    let owner = owner.expect("one AllocSvr serves group-0");

    // kill -9 the owner: its sections (and sessions) move after its lease; ids go on above.
    cluster.kill9_proc(owner);
    for session in &sessions {
        let ids = rec.next_session_ids(&client, "rongcloud", 20, session).await;
        assert_eq!(ids.expect("served by the next owner").len(), 20);
    }
    cluster.start_proc(owner);
    for session in &sessions {
        rec.next_session_ids(&client, "rongcloud", 20, session).await.expect("served");
    }
    let report = rec.assert_no_violation();
    assert_eq!(report.n_ids, 12 * 12 * 20, "{report:?}");
}
