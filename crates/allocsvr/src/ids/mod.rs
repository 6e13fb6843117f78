//! Globally unique, time-ordered ids (issue 10): the AllocSvr's `IdService`.
//!
//! Each id scheme with worker ids (`snowflake`, `uid-generator`, `weibo`, `uuidv7`) is served
//! under a **worker id leased from the set's store** (`AcquireWorker`) for as long as this
//! AllocSvr's registration holds its lease: heartbeats list the worker ids held, and the store's
//! arbiter frees one only once its holder's lease must be over. The per-worker state machine is
//! pure (`seqsvr_core::idscheme::Generator`); `workers.rs` feeds it the wall clock and keeps the
//! worker's **high-water mark** in the store ahead of what it issues (`ReserveTime`), so:
//!
//! - a new holder of a worker id (after a restart, a failover, with the clock set back) starts
//!   strictly above every time an earlier holder may have used: no id is issued twice;
//! - while running, a clock that steps back never makes the issued time go back: the generator
//!   keeps issuing in the last unit, borrows later units up to `ids.max_ahead_ms` ahead of the
//!   clock and never above the reserved mark, then waits (counted, logged);
//! - ids are issued only under the same lease check as sequence numbers (`Inner::lease_valid`),
//!   so one worker id's ids strictly increase in real time across holders.
//!
//! Everything that issues runs under the AllocSvr's one state lock (`state::Inner`), so the
//! graceful stop (`lease::hand_back` sets `stopping` under it) ends issuing before the
//! registration is released.
//!
//! # Layout
//! - this file: the [`IdServer`] and its RPCs: `NextIds` (the checks of every request, then
//!   the issuer of the scheme) and `Decode`;
//! - `workers.rs`: issuing under a leased worker id (lease, high-water reservations, the
//!   generator fed the wall clock);
//! - `sessions.rs`: `rongcloud` ids, issued by the owner of each session's section under a time
//!   mark reserved per section;
//! - `clock.rs`: what both issuers share: waiting for the clock, clock-back events, a layout run
//!   out, the back-off after a failed reservation.
//!
//! The slots they issue from (the worker id per scheme, the section slots of `rongcloud`) are
//! state under the lock: `state/id_slots.rs`. Errors are `rpc::AllocError`s, made statuses by
//! `rpc::to_status` in the RPCs here.

mod clock;
mod sessions;
mod workers;

use crate::config::SchemeSetup;
use crate::rpc::{call_deadline, to_status, AllocError, HeldUntilSent, WaitSlot};
use crate::state::Shared;
use seqsvr_core::decode::DecodedId;
use seqsvr_core::idscheme::Scheme;
use seqsvr_proto::v1 as pb;
use std::sync::Arc;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

/// The `IdService` of one AllocSvr.
/// A `NextIds` call's places in `alloc.max_ids_in_flight`: in the big calls' half (a call of
/// more than [`clock::CHUNK`] ids), and in the whole.
type IdsHeld = (Option<tokio::sync::OwnedSemaphorePermit>, tokio::sync::OwnedSemaphorePermit);

pub struct IdServer {
    pub shared: Arc<Shared>,
}

impl IdServer {
    /// `count` ids of `alloc.max_ids_in_flight`, given back when dropped; RESOURCE_EXHAUSTED at
    /// once if they are not free (a call waiting for them would hold its request and a task).
    fn ids_in_flight(&self, count: u32) -> Result<IdsHeld, AllocError> {
        let budgets = &self.shared.budgets;
        // A big call first takes its place in the big calls' half (at most all of it).
        let big = if count as usize > clock::CHUNK {
            let want = count.min(budgets.max_big_ids as u32);
            Some(budgets.big_ids.clone().try_acquire_many_owned(want).map_err(|_| {
                let metrics = &self.shared.metrics;
                metrics.budget(crate::metrics::Budget::IdsInFlight).full.increment(1);
                let max = budgets.max_big_ids;
                let in_use = max.saturating_sub(budgets.big_ids.available_permits());
                tracing::debug!(count, in_use, max, "NextIds refused: big calls hold their half");
                AllocError::BigIdsInFlight { count, in_use, max }
            })?)
        } else {
            None
        };
        let all = budgets.ids.clone().try_acquire_many_owned(count).map_err(|_| {
            let metrics = &self.shared.metrics;
            metrics.budget(crate::metrics::Budget::IdsInFlight).full.increment(1);
            let (in_use, max) = (budgets.ids_in_use(), budgets.max_ids);
            tracing::debug!(count, in_use, max, "NextIds refused: alloc.max_ids_in_flight reached");
            AllocError::IdsInFlight { count, in_use, max }
        })?;
        Ok((big, all))
    }

    fn setup(&self, name: &str) -> Result<&SchemeSetup, AllocError> {
        let ids = &self.shared.ids;
        ids.schemes.get(name).ok_or_else(|| {
            let known = ids.schemes.keys().cloned().collect();
            AllocError::UnknownScheme { name: name.to_string(), known }
        })
    }
}

impl IdServer {
    /// `NextIds` up to its answer: the request's checks, then the scheme's issuer. Answers the
    /// reply and its ids' place in `alloc.max_ids_in_flight`, which the reply holds until the
    /// transport has taken it (`rpc.rs::HeldUntilSent`).
    async fn answer_next_ids(
        &self,
        request: Request<pb::NextIdsRequest>,
    ) -> Result<(pb::NextIdsResponse, HeldUntilSent), AllocError> {
        let deadline = call_deadline(&request, self.shared.config.tuning.request_timeout_ms);
        let may_forward = !seqsvr_proto::no_forward(request.metadata());
        let r = request.into_inner();
        let setup = self.setup(&r.scheme)?;
        let layout = &setup.layout;
        let max = self.shared.ids.max_count;
        if r.count == 0 || r.count > max {
            return Err(AllocError::BadCount { count: r.count, max });
        }
        layout
            .usable_at(self.shared.ids.clock.now_ms())
            .map_err(|error| AllocError::SchemeUnusable { name: r.scheme.clone(), error })?;
        let left_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64;
        let share = clock::ahead_share(setup.max_ahead_units, r.count as usize);
        let reachable = setup.ids_within(left_ms, share);
        if u64::from(r.count) > reachable {
            return Err(AllocError::CountUnreachable {
                count: r.count,
                name: r.scheme.clone(),
                left_ms,
                reachable,
                per_unit: layout.max_sequence().saturating_add(1),
            });
        }
        // Held until the reply is sent: the ids (and the reply they become) count in
        // `alloc.max_ids_in_flight` before any is allocated, and until the client has them.
        let in_flight = HeldUntilSent::new(self.ids_in_flight(r.count)?);
        if layout.scheme() == Scheme::RongCloud {
            let issued = sessions::next_ids(&self.shared, &r, setup, deadline).await;
            let (session_uid, out) = match issued {
                // Another AllocSvr's session: to its owner, one hop (`forward.rs`).
                Err(
                    AllocError::SessionNotOwner { uid, .. } | AllocError::SessionOtherSet { uid },
                ) if may_forward => {
                    let _slot = WaitSlot::take_for_ids(&self.shared)?;
                    self.shared.metrics.forwarded_sessions.increment(1);
                    tracing::debug!(scheme = %r.scheme, session_uid = uid,
                        "session call forwarded to the owner");
                    let response = self.shared.forward.session_ids(&r, uid, deadline).await;
                    let response = response.map_err(|status| {
                        AllocError::Forwarded(Box::new(crate::forward::for_caller(status)))
                    })?;
                    return Ok((response, in_flight));
                }
                issued => issued?,
            };
            self.shared.metrics.ids_issued.increment(out.len() as u64);
            let mut response = pb::NextIdsResponse { session_uid, ..Default::default() };
            seqsvr_proto::put_ids128(&mut response, &out, r.packed_ids128);
            return Ok((response, in_flight));
        }
        if r.session_type != 0 || !r.session_id.is_empty() || r.session_hash.is_some() {
            return Err(AllocError::NoSessionFields { name: r.scheme.clone() });
        }
        let business_max = layout.max_value(seqsvr_core::idscheme::Part::Business);
        if r.business > business_max {
            return Err(if business_max == 0 {
                AllocError::NoBusiness { name: r.scheme.clone() }
            } else {
                AllocError::BusinessTooLarge { business: r.business, max: business_max }
            });
        }
        let want = r.count as usize;
        let (worker_id, out) =
            workers::next_ids(&self.shared, &r.scheme, setup, r.business, want, deadline).await?;
        self.shared.metrics.ids_issued.increment(out.len() as u64);
        let mut response = pb::NextIdsResponse { worker_id, ..Default::default() };
        if layout.scheme().id_bits() <= 64 {
            seqsvr_proto::put_ids64(&mut response, out.iter().map(|&id| id as u64), r.packed_ids64);
        } else {
            seqsvr_proto::put_ids128(&mut response, &out, r.packed_ids128);
        }
        Ok((response, in_flight))
    }

    /// `Decode`: the fields of an id (or of its text) of a scheme.
    fn answer_decode(&self, r: pb::DecodeIdRequest) -> Result<pb::DecodeIdResponse, AllocError> {
        let layout = &self.setup(&r.scheme)?.layout;
        let invalid = |e: &dyn std::fmt::Display| AllocError::InvalidId(e.to_string());
        let id = if r.text.is_empty() {
            u128::from(r.id)
        } else {
            layout.parse(&r.text).map_err(|e| invalid(&e))?
        };
        // The same fields and text the SDK's pure decode gives, so both answers agree.
        let decoded = seqsvr_core::decode::decode_id(layout, id).map_err(|e| invalid(&e))?;
        Ok(decode_response(&decoded))
    }
}

/// The answer the `Decode` RPC gives for a decoded id.
fn decode_response(d: &DecodedId) -> pb::DecodeIdResponse {
    pb::DecodeIdResponse {
        time_units: d.time_units,
        unix_ms: d.unix_ms,
        time_rfc3339: d.time_rfc3339.clone(),
        worker: d.worker.unwrap_or(0),
        business: d.fields.business,
        session_type: d.fields.session_type,
        session_hash: d.fields.session_hash,
        sequence: d.fields.sequence,
        rand: d.fields.rand,
        text: d.text.clone(),
        layout: d.layout_text(),
    }
}

#[tonic::async_trait]
impl pb::id_service_server::IdService for IdServer {
    async fn next_ids(
        &self,
        request: Request<pb::NextIdsRequest>,
    ) -> Result<Response<pb::NextIdsResponse>, Status> {
        let (reply, in_flight) = self.answer_next_ids(request).await.map_err(to_status)?;
        Ok(HeldUntilSent::on(Response::new(reply), Some(in_flight)))
    }

    async fn decode(
        &self,
        request: Request<pb::DecodeIdRequest>,
    ) -> Result<Response<pb::DecodeIdResponse>, Status> {
        self.answer_decode(request.into_inner()).map(Response::new).map_err(to_status)
    }
}

#[cfg(test)]
mod tests {
    //! The id service driven without a cluster: a worker id (or a `rongcloud` section) installed
    //! by hand, a high-water mark far ahead (no store is asked), and a wall clock that stands
    //! still until the test moves it, so "waits for the clock" is a state, not a timing.

    use super::*;
    use crate::config::{AllocConfig, IdSetup, WallClock};
    use crate::state::id_slots::WorkerSlot;
    use pb::id_service_server::IdService as _;
    use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId};
    use seqsvr_core::idscheme::{Generator, LayoutSpec};
    use seqsvr_core::section::SectionRange;
    use seqsvr_server::BootInstant;
    use std::collections::BTreeMap;
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    use tonic::Code;

    /// The fixed clock's reading (2026-11-30), a snowflake unit (ms) boundary.
    const NOW_MS: u64 = 1_796_000_000_000;

    /// An AllocSvr (alloc 1, a valid lease) serving `snowflake` (4,096 ids a ms) under worker
    /// id 3 whose generator may run `max_ahead_units` ms ahead of the fixed clock, and
    /// `rongcloud` with every session routed to section 1 (uids 10..20), served at epoch 1.
    fn id_server(
        max_ahead_units: u64,
        tune: impl FnOnce(&mut AllocConfig),
    ) -> (IdServer, WallClock) {
        let clock = WallClock::fixed(NOW_MS);
        let setup = |scheme: Scheme| {
            let layout = LayoutSpec::of(scheme).load(NOW_MS).expect("the layout loads");
            SchemeSetup {
                fingerprint: layout.fingerprint(),
                layout,
                max_ahead_units,
                reserve_units: max_ahead_units + 1,
                session_uids: 10..20,
            }
        };
        let mut config = AllocConfig::for_tests();
        config.ids = IdSetup {
            schemes: BTreeMap::from([
                ("snowflake".to_string(), setup(Scheme::Snowflake)),
                ("rongcloud".to_string(), setup(Scheme::RongCloud)),
            ]),
            max_count: 100_000,
            clock: clock.clone(),
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
            inner.table.loaded(&loads[0], &BTreeMap::from([(SectionId(1), 0)]));
            let layout = &shared.ids.schemes["snowflake"].layout;
            let now = layout.units_at(NOW_MS);
            let generator = Generator::new(layout, now - 1, max_ahead_units).expect("fits");
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
        (IdServer { shared }, clock)
    }

    fn ask(count: u32, timeout_ms: u64) -> Request<pb::NextIdsRequest> {
        let scheme = "snowflake".into();
        let mut r = Request::new(pb::NextIdsRequest { scheme, count, ..Default::default() });
        r.set_timeout(Duration::from_millis(timeout_ms));
        r
    }

    async fn next_ids(s: &IdServer, count: u32, timeout_ms: u64) -> Result<Vec<u64>, Status> {
        let answer = s.next_ids(ask(count, timeout_ms)).await?.into_inner();
        Ok(seqsvr_proto::ids64_of(&answer).expect("well-formed ids"))
    }

    /// `count` ids, the call spawned (it is to wait for the clock).
    fn spawn_next_ids(
        s: &IdServer,
        count: u32,
    ) -> tokio::task::JoinHandle<Result<Vec<u64>, Status>> {
        let s = IdServer { shared: s.shared.clone() };
        tokio::spawn(async move { next_ids(&s, count, 10_000).await })
    }

    /// Waits (a hang guard, not a timing) until `done` holds.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let guard = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < guard, "never: {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// `NextIds` calls waiting now (`alloc.max_waiting_id_calls`).
    fn waiting(s: &IdServer) -> usize {
        s.shared.waiting_id_calls.load(Ordering::Acquire)
    }

    /// Issue 30 (3a): an id call that waits (here for the clock) takes one of
    /// `alloc.max_waiting_id_calls`; with none left, one more that would wait is refused at
    /// once with RESOURCE_EXHAUSTED, and the place comes back when the waiting call ends.
    #[tokio::test]
    async fn id_calls_past_max_waiting_id_calls_are_refused_at_once() {
        let (s, clock) = id_server(1, |c| c.tuning.max_waiting_id_calls = 1);
        // Units NOW and NOW + 1 (as far ahead as the generator may go) used up.
        assert_eq!(next_ids(&s, 4_096, 1_000).await.expect("served").len(), 4_096);
        assert_eq!(next_ids(&s, 4_096, 1_000).await.expect("served").len(), 4_096);
        let first = spawn_next_ids(&s, 1);
        // In flight (its id counted) and not done: it waits for the clock (the runtime runs
        // one task at a time, so it went as far as its wait).
        until("the third call is in flight", || s.shared.budgets.ids_in_use() == 1).await;
        let refused = next_ids(&s, 1, 300).await.expect_err("no wait slot left");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().contains("alloc.max_waiting_id_calls"), "{}", refused.message());
        assert_eq!(waiting(&s), 1, "the waiting call holds the slot");
        clock.set(NOW_MS + 2);
        assert_eq!(first.await.expect("no panic").expect("served once the clock moved").len(), 1);
        assert_eq!(waiting(&s), 0, "the place came back");
    }

    /// A `NextIds` of one id of `rongcloud` session (1, 7), routed to section 1.
    fn session(timeout_ms: u64) -> Request<pb::NextIdsRequest> {
        let mut r = Request::new(pb::NextIdsRequest {
            scheme: "rongcloud".into(),
            count: 1,
            session_type: 1,
            session_hash: Some(7),
            ..Default::default()
        });
        r.set_timeout(Duration::from_millis(timeout_ms));
        r
    }

    /// A store leader that answers every `ReserveSessionTime` (the mark was `before_ms`, is
    /// now what was asked), and nothing else; its address.
    async fn session_store(before_ms: u64) -> String {
        use pb::store_service_server::{StoreService, StoreServiceServer};
        struct Store(u64);
        fn no<T>() -> Result<Response<T>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
        #[tonic::async_trait]
        impl StoreService for Store {
            async fn advance_max_seq(
                &self,
                _: Request<pb::AdvanceMaxSeqRequest>,
            ) -> Result<Response<pb::AdvanceMaxSeqResponse>, Status> {
                no()
            }
            async fn get_max_seq(
                &self,
                _: Request<pb::GetMaxSeqRequest>,
            ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
                no()
            }
            async fn load_sections(
                &self,
                _: Request<pb::LoadSectionsRequest>,
            ) -> Result<Response<pb::GetMaxSeqResponse>, Status> {
                no()
            }
            async fn register_alloc(
                &self,
                _: Request<pb::RegisterAllocRequest>,
            ) -> Result<Response<pb::RegisterAllocResponse>, Status> {
                no()
            }
            async fn heartbeat(
                &self,
                _: Request<pb::HeartbeatRequest>,
            ) -> Result<Response<pb::HeartbeatResponse>, Status> {
                no()
            }
            async fn release_alloc(
                &self,
                _: Request<pb::ReleaseAllocRequest>,
            ) -> Result<Response<pb::ReleaseAllocResponse>, Status> {
                no()
            }
            async fn acquire_worker(
                &self,
                _: Request<pb::AcquireWorkerRequest>,
            ) -> Result<Response<pb::AcquireWorkerResponse>, Status> {
                no()
            }
            async fn reserve_time(
                &self,
                _: Request<pb::ReserveTimeRequest>,
            ) -> Result<Response<pb::ReserveTimeResponse>, Status> {
                no()
            }
            async fn reserve_session_time(
                &self,
                request: Request<pb::ReserveSessionTimeRequest>,
            ) -> Result<Response<pb::ReserveSessionTimeResponse>, Status> {
                let after_ms = request.into_inner().up_to_ms;
                Ok(Response::new(pb::ReserveSessionTimeResponse { before_ms: self.0, after_ms }))
            }
        }
        let router = tonic::transport::Server::builder()
            .add_service(StoreServiceServer::new(Store(before_ms)));
        let url = crate::rpc::test_support::serve(router).await;
        url.trim_start_matches("http://").to_string()
    }

    /// Red-team H2: the first `rongcloud` call of a section that is refused a wait slot
    /// (`alloc.max_waiting_id_calls` full) leaves no "first reservation in flight" mark behind:
    /// once a slot is free, the next call installs the section and is served (it would
    /// otherwise wait for an install nobody makes, and end INSTALL_SLOW, for good).
    #[tokio::test]
    async fn a_first_session_call_refused_a_wait_slot_leaves_the_section_installable() {
        let store = session_store(NOW_MS - 1_000).await;
        let (s, clock) = id_server(1, |c| {
            c.tuning.max_waiting_id_calls = 1;
            c.stores = vec![(seqsvr_core::ids::NodeId(1), store)];
        });
        // The only wait slot: a snowflake call waiting for the clock.
        assert_eq!(next_ids(&s, 4_096, 1_000).await.expect("served").len(), 4_096);
        assert_eq!(next_ids(&s, 4_096, 1_000).await.expect("served").len(), 4_096);
        let first = spawn_next_ids(&s, 1);
        until("a snowflake call waits for the clock", || waiting(&s) == 1).await;
        let refused = s.next_ids(session(300)).await.expect_err("no wait slot for its install");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().contains("alloc.max_waiting_id_calls"), "{}", refused.message());
        let installing = s.shared.lock().ids.sessions.installing.clone();
        assert!(installing.is_empty(), "a refused call left {installing:?} behind");
        clock.set(NOW_MS + 2);
        assert_eq!(first.await.expect("no panic").expect("served").len(), 1);
        let served = s.next_ids(session(2_000)).await.expect("the section installs and serves");
        let ids = seqsvr_proto::ids128_of(served.get_ref()).expect("well-formed ids");
        assert_eq!(ids.len(), 1);
    }

    /// Red-team L8: `NextIds` calls waiting for the clock take places of their own
    /// (`alloc.max_waiting_id_calls`): with all of them taken, a sequence call that waits for
    /// an advance still gets one of `alloc.max_waiting_calls` (it waits, and ends UNAVAILABLE
    /// at its deadline, as no advance comes here), not RESOURCE_EXHAUSTED.
    #[tokio::test]
    async fn id_calls_waiting_for_the_clock_leave_sequence_calls_their_places() {
        let (s, clock) = id_server(1, |c| {
            c.tuning.max_waiting_calls = 1;
            c.tuning.max_waiting_id_calls = 1;
        });
        assert_eq!(next_ids(&s, 4_096, 1_000).await.expect("served").len(), 4_096);
        assert_eq!(next_ids(&s, 4_096, 1_000).await.expect("served").len(), 4_096);
        let first = spawn_next_ids(&s, 1);
        // In flight and not done: it waits for the clock (the runtime runs one task at a time,
        // so it went as far as its wait).
        until("a snowflake call waits for the clock", || s.shared.budgets.ids_in_use() == 1).await;
        // Section 1 is loaded at max_seq 0: uid 15 waits for an advance.
        use pb::seq_service_server::SeqService as _;
        let seq = crate::service::SeqServer { shared: s.shared.clone() };
        let mut next = Request::new(pb::NextRequest { uid: 15, route_version: 0 });
        next.set_timeout(Duration::from_millis(300));
        let status = seq.next(next).await.expect_err("no advance comes");
        assert_eq!(status.code(), Code::Unavailable, "it waited: {status:?}");
        assert!(status.message().contains("higher max_seq"), "{}", status.message());
        clock.set(NOW_MS + 2);
        assert_eq!(first.await.expect("no panic").expect("served").len(), 1);
    }

    /// Red-team M6: a `NextIds` reply holds its ids of `alloc.max_ids_in_flight` until the
    /// transport has taken it, not only until its handler returned: a client (64 KiB windows)
    /// that reads none of 20 replies of 100,000 ids holds them counted, and they come back
    /// once it reads them.
    #[tokio::test]
    async fn a_next_ids_reply_holds_its_ids_until_the_client_has_read_it() {
        use crate::rpc::test_support::{call_unread, silent_channel, until};
        let (s, _clock) = id_server(2_000, |c| c.tuning.max_ids_in_flight = 10_000_000);
        let router = seqsvr_server::grpc::ConnectionLimits::SERVER
            .apply(tonic::transport::Server::builder())
            .add_service(crate::id_service(s.shared.clone()));
        let url = crate::rpc::test_support::serve(router).await;
        let silent = silent_channel(&url).await;
        let path = format!("/{}/NextIds", crate::ID_SERVICE);
        let (calls, count) = (20usize, 100_000u32);
        let mut unread = Vec::new();
        for _ in 0..calls {
            let request = ask(count, 3_000).into_inner();
            unread
                .push(call_unread::<_, pb::NextIdsResponse>(silent.clone(), &path, request).await);
        }
        // Every handler has returned (its reply's headers arrived); the replies are not read.
        let in_use = s.shared.budgets.ids_in_use();
        let unsent = (calls - 2) * count as usize;
        assert!(in_use >= unsent, "{in_use} ids held by {calls} unread replies of {count}");
        // All at once: the replies of one may fill the connection's window.
        let read = unread.into_iter().map(|mut reply| async move { reply.message().await });
        let read = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(read));
        for reply in read.await.expect("no hang") {
            let reply = reply.expect("no error").expect("the reply");
            assert_eq!(seqsvr_proto::ids64_of(&reply).expect("ids").len(), count as usize);
        }
        until("the ids come back once the replies are read", || s.shared.budgets.ids_in_use() == 0)
            .await;
    }

    /// The same for a `rongcloud` call: one waiting for its section's first reservation holds
    /// the only wait slot, and another is refused at once.
    #[tokio::test]
    async fn a_session_call_that_waits_takes_a_wait_slot() {
        let (s, _clock) = id_server(1, |c| c.tuning.max_waiting_id_calls = 1);
        // Another call's first reservation of section 1 is in flight: these calls wait for it.
        let key = ("rongcloud".to_string(), SectionId(1), LeaseEpoch(1));
        s.shared.lock().ids.sessions.installing.insert(key);
        let shared = s.shared.clone();
        let first = tokio::spawn({
            let r = session(10_000);
            async move { IdServer { shared }.next_ids(r).await }
        });
        until("the session call is in flight", || s.shared.budgets.ids_in_use() == 1).await;
        let refused = s.next_ids(session(300)).await.expect_err("no wait slot left");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().contains("alloc.max_waiting_id_calls"), "{}", refused.message());
        assert_eq!(waiting(&s), 1, "the waiting call holds the slot");
        first.abort();
        until("the aborted call gave its place back", || waiting(&s) == 0).await;
    }

    /// Issue 30 (3b): the ids of every call in flight count in `alloc.max_ids_in_flight` before
    /// any is allocated; a call that does not fit is refused at once with RESOURCE_EXHAUSTED
    /// (not left to wait, holding its request), and the ids come back with the answer.
    #[tokio::test]
    async fn calls_past_max_ids_in_flight_are_refused_at_once() {
        let (s, clock) = id_server(1, |c| c.tuning.max_ids_in_flight = 5_000);
        assert_eq!(next_ids(&s, 4_096, 1_000).await.expect("served").len(), 4_096);
        assert_eq!(next_ids(&s, 4_096, 1_000).await.expect("served").len(), 4_096);
        assert_eq!(s.shared.budgets.ids_in_use(), 0, "answered calls hold nothing");
        let waits = spawn_next_ids(&s, 4_000);
        until("the call of 4000 waits for the clock", || waiting(&s) == 1).await;
        assert_eq!(s.shared.budgets.ids_in_use(), 4_000);
        let refused = next_ids(&s, 1_001, 1_000).await.expect_err("4000 + 1001 > 5000");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        let message = refused.message();
        assert!(
            message.contains("alloc.max_ids_in_flight") && message.contains("4000"),
            "{message}"
        );
        clock.set(NOW_MS + 2);
        assert_eq!(waits.await.expect("no panic").expect("served").len(), 4_000);
        assert_eq!(s.shared.budgets.ids_in_use(), 0, "given back with the answer");
        assert_eq!(next_ids(&s, 1_001, 1_000).await.expect("fits now").len(), 1_001);
    }

    /// Calls of more than a chunk hold at most half of `alloc.max_ids_in_flight` between them:
    /// while they wait (a slow layout waits long), calls of at most a chunk still find room.
    /// Without the half, the big calls fill the whole budget and the small one is refused.
    #[tokio::test]
    async fn big_calls_hold_at_most_half_of_the_ids_in_flight() {
        let (s, _clock) = id_server(1, |c| c.tuning.max_ids_in_flight = 20_000);
        let first = s.ids_in_flight(8_000).expect("fits the big half");
        let refused = to_status(s.ids_in_flight(8_000).expect_err("the big half has 2000 left"));
        assert_eq!(refused.code(), Code::ResourceExhausted);
        // The message names the half it does not fit in, with its figures, and the way out.
        let message = refused.message();
        assert!(message.contains("hold 8000 of the 10000"), "{message}");
        assert!(message.contains("at most 4096 per call"), "{message}");
        let smalls: Vec<_> =
            (0..2).map(|_| s.ids_in_flight(4_096).expect("small calls use the rest")).collect();
        assert_eq!(s.shared.budgets.ids_in_use(), 8_000 + 2 * 4_096);
        drop((first, smalls));
        assert_eq!(s.shared.budgets.ids_in_use(), 0);
        let whole = s.ids_in_flight(15_000).expect("a call over the half takes all of it");
        assert!(s.ids_in_flight(5_000).is_err(), "no big room left");
        assert!(s.ids_in_flight(4_096).is_ok(), "small room left");
        drop(whole);
    }

    /// Issue 30 (3c): a caller asking for many ids cannot take the whole lead on the clock. The
    /// big call (5 units' worth, as far ahead as the generator may go) issues in chunks up to
    /// half the lead and waits for the clock; a small call meanwhile is answered at once from
    /// the other half, its ids between the big call's early chunks and its later ones.
    #[tokio::test]
    async fn a_small_call_is_answered_while_a_big_one_waits_for_the_clock() {
        let (s, clock) = id_server(4, |_| {});
        let per_unit = 4_096;
        let big = spawn_next_ids(&s, 5 * per_unit);
        until("the big call waits for the clock (or is done)", || {
            waiting(&s) == 1 || big.is_finished()
        })
        .await;
        let small = next_ids(&s, 10, 1_000).await.expect("the small call is answered at once");
        assert!(!big.is_finished(), "the big call waits for the clock");
        clock.set(NOW_MS + 100);
        let big = big.await.expect("no panic").expect("served once the clock moved");
        assert_eq!((big.len(), small.len()), (5 * per_unit as usize, 10));
        assert!(big.windows(2).all(|w| w[0] < w[1]) && small.windows(2).all(|w| w[0] < w[1]));
        // Units NOW .. NOW + 2 (half the lead) before the small call, the rest after.
        let early = 3 * per_unit as usize;
        assert!(big[early - 1] < small[0] && small[9] < big[early], "interleaved in order");
    }

    /// `Decode` answers what the SDK's pure decoder reads from the same id, field by field,
    /// and refuses an id of the wrong form with INVALID_ARGUMENT.
    #[tokio::test]
    async fn decode_answers_the_pure_decoders_fields() {
        let (s, _clock) = id_server(4, |_| {});
        let ids = next_ids(&s, 1, 1_000).await.expect("an id");
        let request = |id: u64, text: &str| {
            Request::new(pb::DecodeIdRequest { scheme: "snowflake".into(), id, text: text.into() })
        };
        let answer = s.decode(request(ids[0], "")).await.expect("decoded").into_inner();
        let layout = &s.shared.ids.schemes["snowflake"].layout;
        let pure =
            seqsvr_core::decode::decode_id(layout, u128::from(ids[0])).expect("the pure decode");
        assert_eq!(answer, decode_response(&pure));
        assert_eq!((answer.worker, answer.text.clone()), (3, ids[0].to_string()));
        assert!(answer.layout.starts_with("sign 1 + time 41 + worker 10 + sequence 12; ms since "));
        let by_text = s.decode(request(0, &answer.text)).await.expect("by text").into_inner();
        assert_eq!(by_text, answer);
        let bad = s.decode(request(0, "not-an-id")).await.expect_err("refused");
        assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    }
}
