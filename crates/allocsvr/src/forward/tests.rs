//! Forwarding between two real AllocSvr services on loopback (plaintext): alloc 1 owns section
//! 1 (uids 10..20), alloc 2 owns section 0 (uids 0..10); section 2 (uids 20..30) is given by
//! each one's table to the other, and owned by neither (a table pointing in a circle).

use crate::config::{AllocConfig, ForwardSet, ForwardSetup};
use crate::service::SeqServer;
use crate::state::Shared;
use pb::seq_service_server::SeqService as _;
use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId, SetId};
use seqsvr_core::section::SectionRange;
use seqsvr_proto::v1 as pb;
use seqsvr_server::BootInstant;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Code, Request};

struct Pair {
    /// Alloc 1, which owns section 1.
    owner: Arc<Shared>,
    /// Alloc 2, which owns section 0; called by the tests.
    front: Arc<Shared>,
}

/// The table both hold (v3), with section 2 given to `circle_to`.
fn table(owner_addr: &str, front_addr: &str, circle_to: u64) -> pb::RouteTable {
    let addr = |alloc| if alloc == 1 { owner_addr } else { front_addr };
    let entry = |begin, end, alloc: u64| pb::RouteEntry {
        section_begin: begin,
        section_end: end,
        alloc_id: alloc,
        addr: addr(alloc).to_string(),
    };
    pb::RouteTable {
        set_id: 1,
        version: 3,
        uid_begin: 0,
        uid_end: 100,
        section_size: 10,
        entries: vec![entry(0, 1, 2), entry(1, 2, 1), entry(2, 3, circle_to)],
    }
}

/// One AllocSvr: `alloc` owns `section` at epoch 1, loaded at 1000 and advanced to 2000.
fn alloc(
    alloc: u64,
    section: u64,
    addr: &str,
    seeds: &[String],
    table: pb::RouteTable,
) -> Arc<Shared> {
    let mut config = AllocConfig::for_tests();
    config.addr = addr.to_string();
    config.tuning.request_timeout_ms = 1_000;
    config.forward = ForwardSetup {
        sets: vec![ForwardSet { id: SetId(1), uids: 0..100, allocs: seeds.to_vec() }],
        ids: Default::default(),
    };
    seqsvr_client::tls::use_plaintext();
    let shared = Shared::new(config).unwrap();
    {
        let mut inner = shared.lock();
        inner.alloc_id = Some(AllocId(alloc));
        inner.extend_lease(BootInstant::now() + Duration::from_secs(60));
        let range = SectionRange::new(SectionId(section), SectionId(section + 1)).unwrap();
        let loads = inner.table.grant(&[(range, LeaseEpoch(1))]);
        inner.table.loaded(&loads[0], &BTreeMap::from([(SectionId(section), 1_000)]));
        inner.table.advanced(SectionId(section), LeaseEpoch(1), Some(2_000));
        inner.route = table;
    }
    shared
}

async fn pair() -> Pair {
    let owner_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let owner_addr = owner_listener.local_addr().unwrap().to_string();
    let front_addr = front_listener.local_addr().unwrap().to_string();
    let seeds = [owner_addr.clone(), front_addr.clone()];
    // Section 2: the front's table sends it to the owner, the owner's back to the front.
    let owner = alloc(1, 1, &owner_addr, &seeds, table(&owner_addr, &front_addr, 2));
    let front = alloc(2, 0, &front_addr, &seeds, table(&owner_addr, &front_addr, 1));
    for (listener, shared) in [(owner_listener, owner.clone()), (front_listener, front.clone())] {
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(crate::seq_service(shared.clone()))
                .add_service(crate::id_service(shared))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
    }
    Pair { owner, front }
}

fn front(p: &Pair) -> SeqServer {
    SeqServer { shared: p.front.clone() }
}

fn timed<T>(message: T, no_forward: bool) -> Request<T> {
    let mut r = Request::new(message);
    r.set_timeout(Duration::from_millis(800));
    if no_forward {
        r.metadata_mut().insert(seqsvr_proto::NO_FORWARD_METADATA, "1".parse().unwrap());
    }
    r
}

/// A plain client with one address gets every uid served: a uid of the other AllocSvr is
/// answered by its owner (values continue where the owner's own answers are), its reply
/// carries the table, and a batch mixing both owners keeps request order and increasing
/// repeats. Fails without forwarding (NOT_OWNER).
#[tokio::test]
async fn a_call_for_another_owners_uid_is_answered_by_the_owner() {
    let p = pair().await;
    let s = front(&p);
    let r = s.next(timed(pb::NextRequest { uid: 15, route_version: 0 }, false)).await.unwrap();
    let r = r.into_inner();
    assert_eq!(r.seq, 1_001, "the owner's value");
    assert_eq!(r.route_table.map(|t| t.version), Some(3), "the owner's set's table rides along");
    // The owner itself, asked directly, goes on from there.
    let direct = SeqServer { shared: p.owner.clone() };
    let d = direct.next(timed(pb::NextRequest { uid: 15, route_version: 3 }, true)).await;
    assert_eq!(d.unwrap().into_inner().seq, 1_002);
    // Mixed batch: uid 5 is the front's own, 15 the owner's, repeated.
    let batch =
        pb::NextBatchRequest { uids: vec![15, 5, 15, 5], route_version: 0, independent: false };
    let b = s.next_batch(timed(batch, false)).await.unwrap().into_inner();
    assert_eq!(b.seqs, vec![1_003, 1_001, 1_004, 1_002]);
    // Current allocates nothing, here or there.
    let c = s.current(timed(pb::CurrentRequest { uid: 15, route_version: 0 }, false)).await;
    assert_eq!(c.unwrap().into_inner().seq, 1_004);
    let c = s.current(timed(pb::CurrentRequest { uid: 15, route_version: 0 }, false)).await;
    assert_eq!(c.unwrap().into_inner().seq, 1_004);
}

/// A caller that marks its call `seqsvr-no-forward` (the Rust SDK) gets NOT_OWNER with the
/// table, as before forwarding: the hop is the server's only when the caller leaves it so.
#[tokio::test]
async fn a_call_marked_no_forward_is_answered_not_owner() {
    let p = pair().await;
    let err = front(&p)
        .next(timed(pb::NextRequest { uid: 15, route_version: 0 }, true))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(seqsvr_proto::route_table_of(&err).map(|t| t.version), Some(3));
    assert_eq!(p.front.forward.hops_made(), 0, "nothing was forwarded");
}

/// Two tables that point at each other for section 2: the front forwards once, the owner
/// answers NOT_OWNER and never forwards on (no chain, no loop); the caller gets an error
/// (within its deadline: the SDK's redirects and retries are bounded by it), and the owner
/// made no hop at all.
#[tokio::test]
async fn a_forwarded_call_is_never_forwarded_again() {
    let p = pair().await;
    let err = front(&p)
        .next(timed(pb::NextRequest { uid: 25, route_version: 0 }, false))
        .await
        .unwrap_err();
    assert!(
        matches!(err.code(), Code::FailedPrecondition | Code::Unavailable | Code::DeadlineExceeded),
        "{err:?}"
    );
    assert!(p.front.forward.hops_made() > 0, "the front forwarded it");
    assert_eq!(p.owner.forward.hops_made(), 0, "the owner forwarded nothing");
}

/// A uid in no set of the cluster file is INVALID_ARGUMENT naming the sets, forwarded nowhere.
#[tokio::test]
async fn a_uid_outside_every_set_is_refused_without_a_hop() {
    let p = pair().await;
    let err = front(&p)
        .next(timed(pb::NextRequest { uid: 500, route_version: 0 }, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("every other set of the cluster file (set 1 [0, 100))"),
        "{}",
        err.message()
    );
    assert_eq!(p.front.forward.hops_made(), 0);
}

/// Forwarded calls wait in `alloc.max_waiting_calls` like any waiting call: with no slot
/// free, RESOURCE_EXHAUSTED at once and no hop.
#[tokio::test]
async fn a_forwarded_call_takes_a_wait_slot() {
    let p = pair().await;
    let s = front(&p);
    let max = p.front.config.tuning.max_waiting_calls;
    p.front.waiting_calls.store(max, std::sync::atomic::Ordering::SeqCst);
    let err =
        s.next(timed(pb::NextRequest { uid: 15, route_version: 0 }, false)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(p.front.forward.hops_made(), 0);
    p.front.waiting_calls.store(0, std::sync::atomic::Ordering::SeqCst);
    assert!(s.next(timed(pb::NextRequest { uid: 15, route_version: 0 }, false)).await.is_ok());
}

/// What the SDK answers a hop with is restated where it would mislead the caller: a NOT_OWNER
/// (with its table) or the SDK's "outside every set" become retryable UNAVAILABLE, an owner's
/// refusal of our identity is said as such; anything else passes as it came.
#[test]
fn hop_answers_are_restated_for_a_caller_that_did_not_route() {
    let not_owner = seqsvr_proto::with_route_table(
        tonic::Status::failed_precondition("NOT_OWNER: section 1 is served by alloc 1"),
        &table("a:1", "b:1", 1),
    );
    let s = super::for_caller(not_owner);
    assert_eq!(s.code(), Code::Unavailable);
    assert!(!s.metadata().contains_key(seqsvr_proto::ROUTE_TABLE_METADATA));
    let outside = tonic::Status::invalid_argument("uid 7 is outside every set of the cluster ()");
    assert_eq!(super::for_caller(outside).code(), Code::Unavailable);
    let refused = super::for_caller(tonic::Status::permission_denied("identity \"alloc-0-1\""));
    assert_eq!(refused.code(), Code::Unavailable);
    assert!(refused.message().contains("forwarding identity"), "{}", refused.message());
    let plain = tonic::Status::resource_exhausted("full");
    assert_eq!(super::for_caller(plain).code(), Code::ResourceExhausted);
    let timed_out = super::for_caller(tonic::Status::cancelled("Timeout expired"));
    assert_eq!(timed_out.code(), Code::DeadlineExceeded, "not HTTP 499 to a JSON caller");
    let final_precondition = tonic::Status::failed_precondition("layout differs");
    assert_eq!(super::for_caller(final_precondition).code(), Code::FailedPrecondition);
}
