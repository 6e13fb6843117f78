//! The public `SeqService`: the allocation path, top to bottom.
//!
//! uid → validate → lock → lease still valid? → `AllocTable::next_batch` → answer; or, when the
//! section is loading or waits for an advance, wake the advancer and wait (outside the lock)
//! until something changes or the deadline passes. Errors are [`AllocError`]s; they become gRPC
//! statuses in [`crate::rpc::to_status`], at the edge of each RPC.

use crate::forward::Unreachable;
use crate::metrics::Rpc;
use crate::rpc::{
    batch_deadline, call_deadline, to_status, AllocError, HeldUntilSent, NotOwner, RequestId,
    WaitSlot,
};
use crate::state::{Inner, Shared};
use seqsvr_core::alloc::SeqError;
use seqsvr_core::teeth::Tooth;
use seqsvr_proto::v1::{self as pb};
use seqsvr_server::BootInstant;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

#[derive(Clone)]
pub struct SeqServer {
    pub shared: Arc<Shared>,
}

impl SeqServer {
    /// The batch's size, and every uid in this set, or (`may_forward`) in a set a hop can reach.
    fn check_uids(&self, uids: &[u64], may_forward: bool) -> Result<(), AllocError> {
        let c = &self.shared.config;
        if uids.is_empty() {
            return Err(AllocError::EmptyBatch);
        }
        if uids.len() > c.tuning.max_batch_uids {
            let (n, max) = (uids.len(), c.tuning.max_batch_uids);
            return Err(AllocError::BatchTooLarge { n, max });
        }
        for &uid in uids.iter().filter(|&&u| u < c.uid_begin || u >= c.uid_end) {
            if !may_forward {
                let (set, begin, end) = (c.set_id, c.uid_begin, c.uid_end);
                return Err(AllocError::UidOutsideSet { uid, set, begin, end });
            }
            self.shared.forward.check_reachable(uid).map_err(|why| match why {
                Unreachable::OutsideCluster { sets } => {
                    let (set, begin, end) = (c.set_id, c.uid_begin, c.uid_end);
                    AllocError::UidOutsideCluster { uid, set, begin, end, sets }
                }
                Unreachable::NoSeeds { set } => AllocError::NoSeedsFor { uid, set },
            })?;
        }
        Ok(())
    }

    /// May this call be forwarded to the owner of its uids? Not when its caller marked it
    /// `seqsvr-no-forward` (the SDK, and an AllocSvr forwarding a call: one hop at most).
    fn may_forward<T>(&self, request: &Request<T>) -> bool {
        !seqsvr_proto::no_forward(request.metadata())
    }

    /// For each of `uids`: is it served elsewhere (another set's uid, or a section our route
    /// table gives another AllocSvr)? A section the table gives nobody is served here (the call
    /// waits, or is answered, as before). One look under the lock; our table goes to the
    /// forwarder when it is newer than the one it has.
    fn elsewhere(&self, uids: &[u64]) -> Vec<bool> {
        let c = &self.shared.config;
        let inner = self.shared.lock();
        let own = inner.alloc_id.map(|a| a.0);
        let elsewhere = uids
            .iter()
            .map(|&uid| {
                if uid < c.uid_begin || uid >= c.uid_end {
                    return true;
                }
                let owner = inner.route.owner_of_section(uid / c.section_size);
                owner.is_some_and(|e| Some(e.alloc_id) != own)
            })
            .collect();
        let forward = &self.shared.forward;
        if forward.wants_own(inner.route.version) {
            let table = inner.route.clone();
            drop(inner);
            forward.learn_own(table);
        }
        elsewhere
    }

    /// A `Next` or `Current` of `uid` at its owner (one hop), holding a wait slot meanwhile.
    async fn forward_one(
        &self,
        rpc: Rpc,
        uid: u64,
        route_version: u64,
        deadline: Instant,
        request_id: &RequestId,
    ) -> Result<(u64, Option<pb::RouteTable>), AllocError> {
        let _slot = WaitSlot::take(&self.shared)?;
        self.shared.metrics.forwarded(rpc);
        tracing::debug!(rpc = rpc.label(), request_id = %request_id, uid, "forwarded to the owner");
        let allocate = rpc != Rpc::Current;
        let answer = self.shared.forward.one(allocate, uid, route_version, deadline).await;
        answer.map_err(|status| AllocError::Forwarded(Box::new(crate::forward::for_caller(status))))
    }

    /// A batch some of whose uids are served elsewhere (`elsewhere`): ours served here, the
    /// others by their owners through one hop, at once; the values in request order (the
    /// repeats of a uid all go one way, in order, so they still increase). `independent` (a
    /// `NextStream` batch, or a `NextBatch` that asks it): a uid not served now, here or
    /// there, is answered 0; otherwise the call fails if either part does (the other part's
    /// values are then gaps, never repeats).
    #[allow(clippy::too_many_arguments)]
    async fn next_batch_split(
        &self,
        rpc: Rpc,
        uids: &[u64],
        elsewhere: &[bool],
        independent: bool,
        route_version: u64,
        deadline: Instant,
        waited: &mut bool,
        request_id: &RequestId,
    ) -> Result<(Vec<u64>, Option<pb::RouteTable>), AllocError> {
        let _slot = WaitSlot::take(&self.shared)?;
        self.shared.metrics.forwarded(rpc);
        let (here, there): (Vec<usize>, Vec<usize>) = (0..uids.len()).partition(|&i| !elsewhere[i]);
        let pick = |idx: &[usize]| idx.iter().map(|&i| uids[i]).collect::<Vec<u64>>();
        let (here_uids, there_uids) = (pick(&here), pick(&there));
        tracing::debug!(rpc = rpc.label(), request_id = %request_id, here = here.len(),
            forwarded = there.len(), "batch split: part forwarded to the owners");
        let forward = &self.shared.forward;
        let local = async {
            if here_uids.is_empty() {
                return Ok((Vec::new(), None));
            }
            let served = if independent {
                self.serve(deadline, route_version, waited, request_id, |inner| {
                    Ok(inner.table.next_each(&here_uids))
                })
                .await
            } else {
                self.serve(deadline, route_version, waited, request_id, |inner| {
                    inner.table.next_batch(&here_uids)
                })
                .await
            };
            match served {
                // Moved away meanwhile (nothing was taken: all or nothing): to the owner too.
                Err(AllocError::NotOwner(_)) => forward
                    .next_batch(&here_uids, route_version, deadline)
                    .await
                    .map_err(|status| {
                        AllocError::Forwarded(Box::new(crate::forward::for_caller(status)))
                    }),
                other => other,
            }
        };
        let remote = async {
            if there_uids.is_empty() {
                return Ok((Vec::new(), None));
            }
            forward.next_batch(&there_uids, route_version, deadline).await.map_err(|status| {
                AllocError::Forwarded(Box::new(crate::forward::for_caller(status)))
            })
        };
        let (local, remote) = tokio::join!(local, remote);
        let (local, remote) = if independent {
            // Not served now: 0, to be asked alone.
            let zeros = |n: usize| (vec![0; n], None);
            (
                local.unwrap_or_else(|_| zeros(here.len())),
                remote.unwrap_or_else(|_| zeros(there.len())),
            )
        } else {
            (local?, remote?)
        };
        let ((here_values, here_table), (there_values, there_table)) = (local, remote);
        assert!(
            here_values.len() == here.len() && there_values.len() == there.len(),
            "the table and the SDK answer one value per uid"
        );
        let mut values = vec![0; uids.len()];
        for (&i, v) in here.iter().zip(here_values).chain(there.iter().zip(there_values)) {
            values[i] = v;
        }
        Ok((values, there_table.or(here_table)))
    }

    fn request_id<T>(&self, request: &Request<T>) -> RequestId {
        RequestId::of(&self.shared, request)
    }

    fn deadline<T>(&self, request: &Request<T>) -> Instant {
        call_deadline(request, self.shared.config.tuning.request_timeout_ms)
    }

    /// Runs `op` under the lock until it succeeds, fails for good, or the deadline passes. The
    /// common case answers on the first try and registers for no notification.
    /// `waited` is set when the first look could not answer (for the metrics).
    async fn serve<T>(
        &self,
        deadline: Instant,
        route_version: u64,
        waited: &mut bool,
        request_id: &RequestId,
        op: impl Fn(&mut Inner) -> Result<T, SeqError>,
    ) -> Result<(T, Option<pb::RouteTable>), AllocError> {
        if let Attempt::Done(result) = self.attempt(route_version, request_id, &op) {
            return result;
        }
        let _slot = WaitSlot::take(&self.shared)?;
        *waited = true;
        loop {
            // Register interest before looking again, so a change between the look and the
            // wait cannot be missed.
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let why = match self.attempt(route_version, request_id, &op) {
                Attempt::Done(result) => return result,
                Attempt::Wait(why) => why,
            };
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(why);
            }
        }
    }

    /// One look under the lock: an answer (value or final error), or why it has to wait.
    fn attempt<T>(
        &self,
        route_version: u64,
        request_id: &RequestId,
        op: &impl Fn(&mut Inner) -> Result<T, SeqError>,
    ) -> Attempt<T> {
        let mut inner = self.shared.lock();
        if inner.stopping {
            return Attempt::Done(Err(AllocError::Stopping));
        }
        if !Tooth::NoAllocLeaseCheck.on() && !inner.lease_valid(BootInstant::now()) {
            return Attempt::Wait(AllocError::NoLease);
        }
        match op(&mut inner) {
            Ok(v) => {
                if inner.table.has_wanted() {
                    // Prefetch: start the advance now, not at the advancer's next poll.
                    self.shared.wake_advancer.notify_one();
                }
                let route = (route_version < inner.route.version).then(|| inner.route.clone());
                Attempt::Done(Ok((v, route)))
            }
            Err(SeqError::NotOwned(section)) => {
                if inner.routed_here(section, inner.alloc_id) {
                    Attempt::Wait(AllocError::HandOver(section))
                } else if route_version > inner.route.version {
                    // The client knows a newer table than ours, and it routed the section here:
                    // our table (and grant) lag. NOT_OWNER with our older table would send it
                    // straight back; learn the newer state from the store instead.
                    self.shared.wake_heartbeat.notify_one();
                    let (ours, theirs) = (inner.route.version, route_version);
                    Attempt::Wait(AllocError::CatchingUp { section, ours, theirs })
                } else {
                    Attempt::Done(Err(AllocError::NotOwner(NotOwner::of(section, &inner.route))))
                }
            }
            Err(SeqError::Loading(section)) => Attempt::Wait(AllocError::Loading(section)),
            Err(SeqError::Exhausted(section)) => {
                tracing::debug!(%section, "waits for an advance");
                self.shared.note_advance_cause(request_id);
                self.shared.wake_advancer.notify_one();
                Attempt::Wait(AllocError::WaitsForAdvance(section))
            }
            // Final: no advance can help, so the caller must not wait or retry.
            Err(e @ SeqError::Ceiling(_)) => Attempt::Done(Err(AllocError::Ceiling(e))),
        }
    }
}

impl SeqServer {
    /// Counts a finished call in the metrics: outcome, values handed out, latency, waiting.
    fn observe<R>(
        &self,
        rpc: Rpc,
        id: &RequestId,
        started: std::time::Instant,
        waited: bool,
        result: &Result<Response<R>, Status>,
        values: impl Fn(&R) -> usize,
    ) {
        let (code, n) = match result {
            Ok(r) => (tonic::Code::Ok, values(r.get_ref())),
            Err(status) => (status.code(), 0),
        };
        self.observe_outcome(rpc, id, started, waited, code, n);
    }

    fn observe_outcome(
        &self,
        rpc: Rpc,
        id: &RequestId,
        started: std::time::Instant,
        waited: bool,
        code: tonic::Code,
        n: usize,
    ) {
        let took = started.elapsed();
        self.shared.metrics.call(rpc, code, n, took, waited);
        tracing::debug!(rpc = rpc.label(), request_id = %id, ?code, values = n, waited,
            took_us = took.as_micros() as u64, "call answered");
    }
}

/// Batches one `NextStream` stream serves at once. A batch waits only while this AllocSvr's
/// lease is being renewed (a uid it cannot serve now is answered 0 at once); the others are
/// answered at once. With this many in hand the stream reads no further, so a client that sends
/// faster is held back by HTTP/2 flow control, not by memory here. The replies queue holds as
/// many again.
const STREAM_BATCHES_IN_HAND: usize = 16;

/// `NextStream` streams one client connection may hold open at once; one more is refused with
/// RESOURCE_EXHAUSTED. The SDK keeps one per connection. A stream stays open, and counted,
/// until the transport drops its reply body ([`StreamHold`]): a client that neither reads nor
/// resets a stream keeps it, with the reply the transport holds for it and tonic's encoding
/// buffer (a reply's size or two), however long ago its serving task ended; without this cap
/// one connection could pin 1 024 of them (`SETTINGS_MAX_CONCURRENT_STREAMS`), and a few
/// connections all of `alloc.max_streams`.
pub const MAX_STREAMS_PER_CONNECTION: usize = 16;

/// One `NextStream`'s place among `alloc.max_streams` and among its connection's
/// [`MAX_STREAMS_PER_CONNECTION`], shared by its serving task and its reply stream
/// ([`StreamReplies`], which tonic's reply body owns): given back once both are gone, so a
/// stream whose body the transport still holds (its client reads nothing and resets nothing)
/// stays counted after its task ended.
pub struct StreamHold {
    _slot: tokio::sync::OwnedSemaphorePermit,
    connection: Option<(Arc<Shared>, std::net::SocketAddr)>,
}

impl StreamHold {
    /// A place for a new stream from `remote`, or the limit it is past.
    fn take(
        shared: &Arc<Shared>,
        remote: Option<std::net::SocketAddr>,
    ) -> Result<StreamHold, AllocError> {
        let full = || shared.metrics.budget(crate::metrics::Budget::Streams).full.increment(1);
        // The connection's count first: a connection past its cap takes no global slot.
        if let Some(addr) = remote {
            let mut open = shared.streams_per_connection.lock().unwrap_or_else(|e| e.into_inner());
            let count = open.entry(addr).or_insert(0);
            if *count >= MAX_STREAMS_PER_CONNECTION {
                full();
                return Err(AllocError::TooManyStreamsOnConnection {
                    max: MAX_STREAMS_PER_CONNECTION,
                });
            }
            *count += 1;
        }
        let connection = remote.map(|addr| (shared.clone(), addr));
        match shared.stream_slots.clone().try_acquire_owned() {
            Ok(slot) => Ok(StreamHold { _slot: slot, connection }),
            Err(_) => {
                StreamHold::uncount(connection);
                full();
                Err(AllocError::TooManyStreams { max: shared.config.tuning.max_streams })
            }
        }
    }

    /// Gives a stream's place among its connection's back.
    fn uncount(connection: Option<(Arc<Shared>, std::net::SocketAddr)>) {
        if let Some((shared, addr)) = connection {
            let mut open = shared.streams_per_connection.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(count) = open.get_mut(&addr) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    open.remove(&addr);
                }
            }
        }
    }
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        StreamHold::uncount(self.connection.take());
    }
}

/// The remote address of the connection a request came on (over TLS from its verified peer's
/// record, in plaintext from tonic's), if the transport tells it.
fn remote_of<T>(request: &Request<T>) -> Option<std::net::SocketAddr> {
    request
        .extensions()
        .get::<seqsvr_tls::PeerIdentity>()
        .and_then(|peer| peer.remote_addr)
        .or_else(|| request.remote_addr())
}

/// A batch's place in the stream budgets, from when it was read until the transport takes its
/// reply (or the stream ends): `alloc.max_bytes_per_stream` of its stream and
/// `alloc.max_stream_bytes` of all ([`seqsvr_core::config::AllocTuning::stream_batch_bytes`]
/// of them, and the route table its reply carries). Given back when dropped.
pub struct StreamCharge {
    _own: tokio::sync::OwnedSemaphorePermit,
    _all: tokio::sync::OwnedSemaphorePermit,
}

/// The replies of one `NextStream` between its serving task and the transport: the task puts
/// them in (at most [`STREAM_BATCHES_IN_HAND`]), the transport takes them ([`StreamReplies`]),
/// each one's charge given back as it is taken. What is queued belongs to the task: when it
/// ends, however it ends, the replies still queued are dropped with their charges, so a stream
/// whose client reads nothing holds nothing once it has ended (the transport keeps only the
/// stream's HTTP/2 state until the client resets it or closes its connection).
#[derive(Default)]
struct ReplyQueue {
    state: std::sync::Mutex<Queued>,
    /// Woken when the transport takes a reply, or drops the stream.
    taken: tokio::sync::Notify,
}

#[derive(Default)]
struct Queued {
    replies: std::collections::VecDeque<(pb::NextStreamReply, Option<StreamCharge>)>,
    /// Since when the reply at the front has waited to be taken: since it was queued, or since
    /// the transport took the one before it, whichever came later.
    front_since: Option<Instant>,
    /// No more replies come: after the queued ones the stream ends, with `last` if any.
    ended: bool,
    last: Option<Status>,
    /// The transport's task, waiting for a reply.
    reader: Option<std::task::Waker>,
    /// The transport dropped the stream (the client reset it, or its connection closed).
    reader_gone: bool,
}

impl ReplyQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        // Every change under it is complete before it is let go.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, reply: pb::NextStreamReply, charge: Option<StreamCharge>) {
        let mut queued = self.lock();
        if queued.replies.is_empty() {
            queued.front_since = Some(Instant::now());
        }
        queued.replies.push_back((reply, charge));
        let reader = queued.reader.take();
        drop(queued);
        if let Some(reader) = reader {
            reader.wake();
        }
    }

    /// Replies queued, when the front one will have waited `limit` (none queued: None), and
    /// whether the transport dropped the stream.
    fn look(&self, limit: Duration) -> (usize, Option<Instant>, bool) {
        let queued = self.lock();
        (queued.replies.len(), queued.front_since.map(|t| t + limit), queued.reader_gone)
    }

    /// No more replies: the stream ends after the queued ones (with `last`, unless an end was
    /// given before), or at once with `drop_queued` (the queued replies and their charges are
    /// dropped now).
    fn end(&self, last: Option<Status>, drop_queued: bool) {
        let mut queued = self.lock();
        let dropped = if drop_queued {
            queued.front_since = None;
            std::mem::take(&mut queued.replies)
        } else {
            Default::default()
        };
        if !queued.ended {
            (queued.ended, queued.last) = (true, last);
        }
        let reader = queued.reader.take();
        drop(queued);
        drop(dropped);
        if let Some(reader) = reader {
            reader.wake();
        }
    }
}

/// Ends its stream's replies when the serving task ends, however it ends (returned, panicked,
/// or the runtime stopped): the replies still queued are dropped.
struct EndsStream(Arc<ReplyQueue>);

impl Drop for EndsStream {
    fn drop(&mut self) {
        self.0.end(None, true);
    }
}

/// The replies of one `NextStream` as tonic takes them to the transport: each one's charge is
/// given back as it is taken; dropped (the client is gone), the replies still queued go too.
pub struct StreamReplies {
    queue: Arc<ReplyQueue>,
    /// Dropped with the reply body, i.e. once the transport is done with the stream.
    _hold: Arc<StreamHold>,
}

impl futures::Stream for StreamReplies {
    type Item = Result<pb::NextStreamReply, Status>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let mut queued = self.queue.lock();
        if let Some((reply, charge)) = queued.replies.pop_front() {
            queued.front_since = (!queued.replies.is_empty()).then(Instant::now);
            drop(queued);
            drop(charge);
            self.queue.taken.notify_one();
            return Poll::Ready(Some(Ok(reply)));
        }
        if queued.ended {
            return Poll::Ready(queued.last.take().map(Err));
        }
        if !queued.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            queued.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for StreamReplies {
    fn drop(&mut self) {
        let dropped = {
            let mut queued = self.queue.lock();
            queued.reader_gone = true;
            std::mem::take(&mut queued.replies)
        };
        drop(dropped);
        self.queue.taken.notify_one();
    }
}

/// A batch read while the stream budgets had no room for it: the stream reads nothing more
/// until they do, or until the batch's deadline passes (then it is answered RESOURCE_EXHAUSTED).
struct Held {
    batch: pb::NextStreamRequest,
    deadline: Instant,
    charge: std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<StreamCharge, AllocError>> + Send>,
    >,
}

/// The budgets of one stream: its own and every stream's.
struct StreamBudgets {
    own: Arc<tokio::sync::Semaphore>,
    max_own: usize,
    all: Arc<tokio::sync::Semaphore>,
    max_all: usize,
}

impl StreamBudgets {
    /// `bytes` of both at once, if both have them.
    fn try_charge(&self, bytes: u32) -> Option<StreamCharge> {
        let own = self.own.clone().try_acquire_many_owned(bytes).ok()?;
        let all = self.all.clone().try_acquire_many_owned(bytes).ok()?;
        Some(StreamCharge { _own: own, _all: all })
    }

    /// `bytes` of both, waiting for them until `deadline` (the stream's own first: it frees up
    /// as its client reads replies).
    fn charge_by(
        &self,
        bytes: u32,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<StreamCharge, AllocError>> + Send + 'static {
        let (own, all) = (self.own.clone(), self.all.clone());
        let (max_own, max_all) = (self.max_own, self.max_all);
        async move {
            let own = tokio::time::timeout_at(deadline, own.acquire_many_owned(bytes))
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or(AllocError::StreamFull { max: max_own })?;
            let all = tokio::time::timeout_at(deadline, all.acquire_many_owned(bytes))
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or(AllocError::StreamBytesFull { max: max_all })?;
            Ok(StreamCharge { _own: own, _all: all })
        }
    }
}

impl SeqServer {
    /// Serves one `NextStream` until the client closes its side, the stream breaks, or this
    /// AllocSvr stops serving (then the batches in hand are answered, and the stream ends once
    /// their replies are taken). A stream whose client takes no reply for `request_timeout_ms`
    /// while one waits for it ends at once with RESOURCE_EXHAUSTED, whatever it has in hand: its
    /// queued replies and their charges are dropped, so it cannot pin them, or the waiting
    /// places they hold, for ever. `_hold` is its place among `alloc.max_streams` and its
    /// connection's streams (the reply stream holds it too, until the transport drops it).
    ///
    /// Memory: each batch read holds its bytes of this stream's `alloc.max_bytes_per_stream`
    /// and of every stream's `alloc.max_stream_bytes` until the transport takes its reply or
    /// the stream ends. When either has no room the stream reads nothing more (HTTP/2 flow
    /// control then holds the client back) until it has, or until the batch read last passes
    /// its deadline (it is answered RESOURCE_EXHAUSTED).
    async fn serve_stream(
        self,
        mut incoming: tonic::Streaming<pb::NextStreamRequest>,
        queue: Arc<ReplyQueue>,
        _hold: Arc<StreamHold>,
        may_forward: bool,
    ) {
        use futures::StreamExt as _;
        let _ends = EndsStream(queue.clone());
        let tuning = &self.shared.config.tuning;
        let stall_limit = Duration::from_millis(tuning.request_timeout_ms);
        let budgets = StreamBudgets {
            own: Arc::new(tokio::sync::Semaphore::new(tuning.max_bytes_per_stream)),
            max_own: tuning.max_bytes_per_stream,
            all: self.shared.budgets.stream_bytes.clone(),
            max_all: tuning.max_stream_bytes,
        };
        let mut stop = self.shared.streams_stop.subscribe();
        let stopped = async move {
            let _ = stop.wait_for(|&stopped| stopped).await;
        };
        tokio::pin!(stopped);
        // Wakes the task when the reply at the front may have waited too long (armed at most
        // once per `stall_limit` while replies wait; looked at again when it fires).
        let mut stall_timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        let mut armed: Option<Instant> = None;
        let mut serving = futures::stream::FuturesUnordered::new();
        let mut held: Option<Held> = None;
        let mut reading = true;
        let mut broke = None;
        loop {
            let (queued, stall_at, reader_gone) = queue.look(stall_limit);
            if reader_gone {
                return; // the client is gone
            }
            if let Some(at) = stall_at {
                if at <= Instant::now() {
                    let waited_ms = stall_limit.as_millis() as u64;
                    self.shared
                        .budgets
                        .streams_stalled
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::info!(
                        replies = queued,
                        batches = serving.len(),
                        waited_ms,
                        "a NextStream client took no reply for alloc.request_timeout_ms: its \
                         stream ends, and the replies it did not take are dropped"
                    );
                    queue.end(
                        Some(Status::resource_exhausted(format!(
                            "this NextStream's client took no reply for {waited_ms} ms \
                         (alloc.request_timeout_ms) while {queued} waited: the stream ended and \
                         those replies were dropped; read replies as they arrive, or send fewer \
                         batches at once"
                        ))),
                        true,
                    );
                    return;
                }
                if armed.is_none_or(|a| at < a) {
                    stall_timer.as_mut().reset(at);
                    armed = Some(at);
                }
            }
            if !reading && held.is_none() && serving.is_empty() && queued == 0 {
                break;
            }
            // Only this task puts replies in, so with room a reply always fits.
            let room = queued < STREAM_BATCHES_IN_HAND;
            tokio::select! {
                biased;
                () = &mut stall_timer, if armed.is_some() => armed = None,
                Some((reply, charge)) = serving.next(), if room && !serving.is_empty() => {
                    queue.push(reply, charge);
                }
                _ = &mut stopped, if reading => reading = false,
                charged = async { held.as_mut().expect("guarded").charge.as_mut().await },
                    if held.is_some() => {
                    let Held { batch, deadline, .. } = held.take().expect("guarded");
                    serving.push(self.serve_batch(batch, deadline, charged, may_forward));
                }
                message = incoming.message(),
                    if reading && held.is_none() && serving.len() < STREAM_BATCHES_IN_HAND => {
                    match message {
                        Ok(Some(batch)) => {
                            let timeout_ms = tuning.request_timeout_ms;
                            let deadline = batch_deadline(batch.timeout_ms, timeout_ms);
                            // A batch over max_batch_uids (refused unserved), or with a route
                            // table bigger than that, counts as the most one stream may hold
                            // (validated to fit a u32).
                            let bytes = tuning.stream_batch_bytes(batch.uids.len())
                                + self.route_table_bytes(batch.route_version);
                            let bytes = bytes.min(tuning.max_bytes_per_stream) as u32;
                            match budgets.try_charge(bytes) {
                                Some(charge) => {
                                    serving.push(self.serve_batch(
                                        batch,
                                        deadline,
                                        Ok(charge),
                                        may_forward,
                                    ))
                                }
                                None => {
                                    self.note_stream_held(bytes);
                                    let charge = Box::pin(budgets.charge_by(bytes, deadline));
                                    held = Some(Held { batch, deadline, charge });
                                }
                            }
                        }
                        Ok(None) => reading = false,
                        Err(status) => {
                            // Malformed (a message over the limit) or the connection broke:
                            // what is in hand is still answered if the client can hear it,
                            // then the stream ends with this status.
                            tracing::debug!(error = %status, "NextStream stream broke");
                            broke = Some(status);
                            reading = false;
                        }
                    }
                }
                () = queue.taken.notified() => {} // room, or the front reply was taken
            }
        }
        queue.end(broke, false);
    }

    /// The bytes of the route table a reply to a client at `route_version` carries: ours, when
    /// theirs is older (as `attempt` decides), else none.
    fn route_table_bytes(&self, route_version: u64) -> usize {
        let inner = self.shared.lock();
        if route_version < inner.route.version {
            prost::Message::encoded_len(&inner.route)
        } else {
            0
        }
    }

    /// A `NextBatch` call's place in `alloc.max_stream_bytes` (its uids and the route table its
    /// reply may carry), held until the transport has taken the reply; RESOURCE_EXHAUSTED at
    /// once without room (a call waiting for it would hold its request and a task).
    fn batch_charge(&self, uids: usize, route_version: u64) -> Result<HeldUntilSent, AllocError> {
        let tuning = &self.shared.config.tuning;
        let bytes = tuning.stream_batch_bytes(uids) + self.route_table_bytes(route_version);
        let bytes = bytes.min(tuning.max_bytes_per_stream);
        let budgets = &self.shared.budgets;
        match budgets.stream_bytes.clone().try_acquire_many_owned(bytes as u32) {
            Ok(charge) => Ok(HeldUntilSent::new(charge)),
            Err(_) => {
                self.shared.metrics.budget(crate::metrics::Budget::StreamBytes).full.increment(1);
                let (in_use, max) = (budgets.stream_bytes_in_use(), budgets.max_stream_bytes);
                tracing::debug!(
                    bytes,
                    in_use,
                    max,
                    "NextBatch refused: alloc.max_stream_bytes reached"
                );
                Err(AllocError::BatchBytesFull { bytes, in_use, max })
            }
        }
    }

    /// A stream stops reading: its batch read last finds no room in the stream budgets.
    fn note_stream_held(&self, bytes: u32) {
        use std::sync::atomic::Ordering;
        self.shared.budgets.stream_reads_held.fetch_add(1, Ordering::Relaxed);
        self.shared.metrics.budget(crate::metrics::Budget::StreamBytes).full.increment(1);
        tracing::debug!(
            bytes,
            in_use = self.shared.budgets.stream_bytes_in_use(),
            "a NextStream stream stops reading until its batches' replies are taken"
        );
    }

    /// One batch of a `NextStream`: served as a `NextBatch` with `independent` set, by
    /// `deadline`, if it got its place in the stream budgets (`charged`). Answers the reply and
    /// the charge, which the reply holds until the transport takes it.
    async fn serve_batch(
        &self,
        batch: pb::NextStreamRequest,
        deadline: Instant,
        charged: Result<StreamCharge, AllocError>,
        may_forward: bool,
    ) -> (pb::NextStreamReply, Option<StreamCharge>) {
        let started = std::time::Instant::now();
        let mut waited = false;
        let id = RequestId::next_ours(&self.shared);
        let span = tracing::debug_span!("call", rpc = "next_stream", request_id = %id);
        let (admitted, charge) = match charged {
            Ok(charge) => (Ok(()), Some(charge)),
            Err(e) => (Err(e), None),
        };
        let result = async {
            admitted?;
            self.check_uids(&batch.uids, may_forward)?;
            self.shared.metrics.batch(batch.uids.len());
            let elsewhere = if may_forward { self.elsewhere(&batch.uids) } else { Vec::new() };
            if elsewhere.contains(&true) {
                let (uids, version) = (&batch.uids, batch.route_version);
                return self
                    .next_batch_split(
                        Rpc::NextStream,
                        uids,
                        &elsewhere,
                        true,
                        version,
                        deadline,
                        &mut waited,
                        &id,
                    )
                    .await;
            }
            self.serve(deadline, batch.route_version, &mut waited, &id, |inner| {
                Ok(inner.table.next_each(&batch.uids))
            })
            .await
        }
        .instrument(span)
        .await;
        let batch_id = batch.batch_id;
        drop(batch);
        let reply = match result {
            Ok((seqs, route_table)) => {
                let served = seqs.iter().filter(|&&v| v != 0).count();
                self.observe_outcome(
                    Rpc::NextStream,
                    &id,
                    started,
                    waited,
                    tonic::Code::Ok,
                    served,
                );
                pb::NextStreamReply { batch_id, seqs, route_table, code: 0, message: String::new() }
            }
            Err(error) => {
                let status = to_status(error);
                self.observe_outcome(Rpc::NextStream, &id, started, waited, status.code(), 0);
                pb::NextStreamReply {
                    batch_id,
                    seqs: Vec::new(),
                    route_table: seqsvr_proto::route_table_of(&status),
                    code: status.code() as i32,
                    message: status.message().to_string(),
                }
            }
        };
        (reply, charge)
    }
}

/// What one look under the lock decided.
enum Attempt<T> {
    Done(Result<(T, Option<pb::RouteTable>), AllocError>),
    /// Not now: why, should the deadline pass first.
    Wait(AllocError),
}

#[tonic::async_trait]
impl pb::seq_service_server::SeqService for SeqServer {
    async fn next(
        &self,
        request: Request<pb::NextRequest>,
    ) -> Result<Response<pb::NextResponse>, Status> {
        let started = std::time::Instant::now();
        let mut waited = false;
        let id = self.request_id(&request);
        let span = tracing::debug_span!("call", rpc = "next", request_id = %id);
        let result = async {
            let deadline = self.deadline(&request);
            let may_forward = self.may_forward(&request);
            let r = request.into_inner();
            self.check_uids(&[r.uid], may_forward)?;
            let forward = || self.forward_one(Rpc::Next, r.uid, r.route_version, deadline, &id);
            if may_forward && self.elsewhere(&[r.uid])[0] {
                let (seq, route_table) = forward().await?;
                return Ok(Response::new(pb::NextResponse { seq, route_table }));
            }
            let served = self
                .serve(deadline, r.route_version, &mut waited, &id, |inner| inner.table.next(r.uid))
                .await;
            let (seq, route_table) = match served {
                Err(AllocError::NotOwner(_)) if may_forward => forward().await?,
                served => served?,
            };
            Ok(Response::new(pb::NextResponse { seq, route_table }))
        }
        .instrument(span)
        .await
        .map_err(to_status);
        self.observe(Rpc::Next, &id, started, waited, &result, |_| 1);
        result
    }

    async fn next_batch(
        &self,
        request: Request<pb::NextBatchRequest>,
    ) -> Result<Response<pb::NextBatchResponse>, Status> {
        let started = std::time::Instant::now();
        let mut waited = false;
        let id = self.request_id(&request);
        let span = tracing::debug_span!("call", rpc = "next_batch", request_id = %id);
        let result = async {
            let deadline = self.deadline(&request);
            let may_forward = self.may_forward(&request);
            let r = request.into_inner();
            self.check_uids(&r.uids, may_forward)?;
            let charge = self.batch_charge(r.uids.len(), r.route_version)?;
            self.shared.metrics.batch(r.uids.len());
            let elsewhere = if may_forward { self.elsewhere(&r.uids) } else { Vec::new() };
            let (seqs, route_table) = if elsewhere.contains(&true) {
                self.next_batch_split(
                    Rpc::NextBatch,
                    &r.uids,
                    &elsewhere,
                    r.independent,
                    r.route_version,
                    deadline,
                    &mut waited,
                    &id,
                )
                .await?
            } else if r.independent {
                self.serve(deadline, r.route_version, &mut waited, &id, |inner| {
                    Ok(inner.table.next_each(&r.uids))
                })
                .await?
            } else {
                let served = self
                    .serve(deadline, r.route_version, &mut waited, &id, |inner| {
                        inner.table.next_batch(&r.uids)
                    })
                    .await;
                match served {
                    // Moved away since the look (all or nothing: none was taken).
                    Err(AllocError::NotOwner(_)) if may_forward => {
                        let everywhere_else = vec![true; r.uids.len()];
                        self.next_batch_split(
                            Rpc::NextBatch,
                            &r.uids,
                            &everywhere_else,
                            false,
                            r.route_version,
                            deadline,
                            &mut waited,
                            &id,
                        )
                        .await?
                    }
                    served => served?,
                }
            };
            let reply = Response::new(pb::NextBatchResponse { seqs, route_table });
            Ok(HeldUntilSent::on(reply, Some(charge)))
        }
        .instrument(span)
        .await
        .map_err(to_status);
        // `next_each` answers 0 for a uid it could not serve now.
        self.observe(Rpc::NextBatch, &id, started, waited, &result, |r| {
            r.seqs.iter().filter(|&&v| v != 0).count()
        });
        result
    }

    async fn current(
        &self,
        request: Request<pb::CurrentRequest>,
    ) -> Result<Response<pb::CurrentResponse>, Status> {
        let started = std::time::Instant::now();
        let mut waited = false;
        let id = self.request_id(&request);
        let span = tracing::debug_span!("call", rpc = "current", request_id = %id);
        let result = async {
            let deadline = self.deadline(&request);
            let may_forward = self.may_forward(&request);
            let r = request.into_inner();
            self.check_uids(&[r.uid], may_forward)?;
            let forward = || self.forward_one(Rpc::Current, r.uid, r.route_version, deadline, &id);
            if may_forward && self.elsewhere(&[r.uid])[0] {
                let (seq, route_table) = forward().await?;
                return Ok(Response::new(pb::CurrentResponse { seq, route_table }));
            }
            let served = self
                .serve(deadline, r.route_version, &mut waited, &id, |inner| {
                    inner.table.current(r.uid)
                })
                .await;
            let (seq, route_table) = match served {
                Err(AllocError::NotOwner(_)) if may_forward => forward().await?,
                served => served?,
            };
            Ok(Response::new(pb::CurrentResponse { seq, route_table }))
        }
        .instrument(span)
        .await
        .map_err(to_status);
        self.observe(Rpc::Current, &id, started, waited, &result, |_| 0);
        result
    }

    type NextStreamStream = StreamReplies;

    async fn next_stream(
        &self,
        request: Request<tonic::Streaming<pb::NextStreamRequest>>,
    ) -> Result<Response<Self::NextStreamStream>, Status> {
        let hold =
            Arc::new(StreamHold::take(&self.shared, remote_of(&request)).map_err(to_status)?);
        let may_forward = self.may_forward(&request);
        let queue = Arc::new(ReplyQueue::default());
        let serving = self.clone().serve_stream(
            request.into_inner(),
            queue.clone(),
            hold.clone(),
            may_forward,
        );
        tokio::spawn(serving);
        Ok(Response::new(StreamReplies { queue, _hold: hold }))
    }

    async fn get_route_table(
        &self,
        _: Request<pb::GetRouteTableRequest>,
    ) -> Result<Response<pb::GetRouteTableResponse>, Status> {
        let route = self.shared.lock().route.clone();
        Ok(Response::new(pb::GetRouteTableResponse { route_table: Some(route) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AllocConfig;
    use pb::seq_service_server::SeqService as _;
    use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId};
    use seqsvr_core::section::SectionRange;
    use std::collections::BTreeMap;

    /// An AllocSvr (alloc 1) with a valid lease that owns section 1 (uids 10..20) at epoch 1,
    /// loaded at `max_seq`, and route table v3 in which alloc 2 owns section 0.
    fn server(max_seq: u64) -> SeqServer {
        server_with(max_seq, |_| {})
    }

    /// `server(max_seq)` with `tune` applied to the config first.
    fn server_with(max_seq: u64, tune: impl FnOnce(&mut AllocConfig)) -> SeqServer {
        let mut config = AllocConfig::for_tests();
        tune(&mut config);
        // A plaintext test AllocSvr: its (never dialled) store channels say so.
        seqsvr_client::tls::use_plaintext();
        let shared = crate::state::Shared::new(config).unwrap();
        {
            let mut inner = shared.lock();
            inner.alloc_id = Some(AllocId(1));
            inner.extend_lease(BootInstant::now() + Duration::from_secs(60));
            let runs = [(SectionRange::new(SectionId(1), SectionId(2)).unwrap(), LeaseEpoch(1))];
            let loads = inner.table.grant(&runs);
            inner.table.loaded(&loads[0], &BTreeMap::from([(SectionId(1), max_seq)]));
            let entry = |begin, end, alloc| pb::RouteEntry {
                section_begin: begin,
                section_end: end,
                alloc_id: alloc,
                addr: format!("alloc-{alloc}:1"),
            };
            inner.route = pb::RouteTable {
                set_id: 1,
                version: 3,
                uid_begin: 0,
                uid_end: 100,
                section_size: 10,
                entries: vec![entry(0, 1, 2), entry(1, 2, 1)],
            };
        }
        SeqServer { shared }
    }

    /// A `Next` as the SDK sends it: marked `seqsvr-no-forward` (answered here, NOT_OWNER for
    /// another AllocSvr's uid; forwarding has tests of its own in `forward/tests.rs`).
    fn next(uid: u64, route_version: u64) -> Request<pb::NextRequest> {
        let mut r = Request::new(pb::NextRequest { uid, route_version });
        r.set_timeout(Duration::from_millis(300));
        r.metadata_mut().insert(seqsvr_proto::NO_FORWARD_METADATA, "1".parse().unwrap());
        r
    }

    /// `NextStream` over loopback: each batch is served as an independent `NextBatch` and
    /// answered under its own id; a batch that fails (a uid outside the set) is answered with
    /// its code and leaves the stream serving; a stream over `alloc.max_streams` is refused;
    /// once the AllocSvr stops serving, the stream answers what it holds and ends, so a
    /// graceful shutdown does not wait for the client.
    #[tokio::test]
    async fn a_stream_serves_batches_until_the_allocsvr_stops() {
        let s = server_with(1_000, |c| c.tuning.max_streams = 1);
        s.shared.lock().table.advanced(SectionId(1), LeaseEpoch(1), Some(2_000));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = s.shared.clone();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(crate::seq_service(shared.clone()))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let mut client =
            pb::seq_service_client::SeqServiceClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
        let (requests, outgoing) = tokio::sync::mpsc::channel(4);
        let mut replies = client
            .next_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await
            .unwrap()
            .into_inner();
        // alloc.max_streams = 1: a second stream is refused while the first is open.
        let (_unused, idle) = tokio::sync::mpsc::channel(1);
        let refused = client
            .next_stream(tokio_stream::wrappers::ReceiverStream::new(idle))
            .await
            .expect_err("over alloc.max_streams");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().contains("alloc.max_streams"), "{}", refused.message());
        let batch = |batch_id, uids: Vec<u64>| pb::NextStreamRequest {
            batch_id,
            uids,
            route_version: 3,
            timeout_ms: 2_000,
        };
        let hang_guard = Duration::from_secs(10);
        let mut next_reply = async || {
            tokio::time::timeout(hang_guard, replies.message()).await.expect("no hang").unwrap()
        };
        requests.send(batch(7, vec![15, 15, 5])).await.unwrap();
        let r = next_reply().await.expect("a reply");
        // Uid 5's section is alloc 2's: 0, to be asked alone (which gets NOT_OWNER).
        assert_eq!((r.batch_id, r.code, r.seqs), (7, 0, vec![1_001, 1_002, 0]));
        requests.send(batch(8, vec![15, 500])).await.unwrap();
        let r = next_reply().await.expect("a reply");
        assert_eq!((r.batch_id, r.code), (8, tonic::Code::InvalidArgument as i32), "{r:?}");
        assert!(r.message.contains("outside set"), "{}", r.message);
        assert!(r.seqs.is_empty());
        requests.send(batch(9, vec![15])).await.unwrap();
        let r = next_reply().await.expect("a reply");
        assert_eq!(
            (r.batch_id, r.code, r.seqs),
            (9, 0, vec![1_003]),
            "the failed batch took nothing"
        );
        // An older route version gets the table along.
        let mut old = batch(10, vec![15]);
        old.route_version = 2;
        requests.send(old).await.unwrap();
        let r = next_reply().await.expect("a reply");
        assert_eq!(r.route_table.map(|t| t.version), Some(3));
        // Stop serving, as `lease::hand_back` does: the stream ends though the client keeps
        // its side open.
        shared.lock().stopping = true;
        shared.streams_stop.send_replace(true);
        assert!(next_reply().await.is_none(), "the stream ended");
        drop(requests);
    }

    /// Issue 30 (4): a `NextStream` client that sends many batches and reads no replies holds
    /// at most `alloc.max_bytes_per_stream` of the AllocSvr's memory: once its batches and
    /// replies fill it, the stream reads nothing more (flow control holds the client back).
    /// Another client's stream is still served from `alloc.max_stream_bytes`, and everything
    /// is given back once the silent client is gone.
    #[tokio::test]
    async fn a_stream_client_that_reads_nothing_holds_at_most_its_stream_budget() {
        let batch_uids = 1_000;
        let tuning = AllocConfig::for_tests().tuning;
        let per_batch = tuning.stream_batch_bytes(batch_uids);
        let s = server_with(1_000, |c| {
            c.tuning.max_batch_uids = batch_uids;
            c.tuning.max_bytes_per_stream = 4 * per_batch;
            c.tuning.max_stream_bytes = 8 * per_batch;
        });
        s.shared.lock().table.advanced(SectionId(1), LeaseEpoch(1), Some(1 << 40));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(crate::seq_service(s.shared.clone()))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let url = format!("http://{addr}");
        // The silent client: small HTTP/2 windows, so its unread replies soon stop the
        // transport from taking more.
        let silent = tonic::transport::Endpoint::from_shared(url.clone())
            .unwrap()
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .connect()
            .await
            .unwrap();
        let batch = |batch_id, uids: Vec<u64>| pb::NextStreamRequest {
            batch_id,
            uids,
            route_version: 3,
            timeout_ms: 1_000,
        };
        let sent = 200;
        let (requests, outgoing) = tokio::sync::mpsc::channel(sent);
        for id in 0..sent as u64 {
            requests.try_send(batch(id, vec![15; batch_uids])).unwrap();
        }
        let unread = pb::seq_service_client::SeqServiceClient::new(silent)
            .next_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await
            .unwrap();
        let budgets = &s.shared.budgets;
        let held = || budgets.stream_reads_held.load(std::sync::atomic::Ordering::Relaxed);
        let guard = Instant::now() + Duration::from_secs(10);
        while held() == 0 && budgets.stream_bytes_in_use() <= 4 * per_batch {
            assert!(Instant::now() < guard, "the stream never filled its budget");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let in_use = budgets.stream_bytes_in_use();
        assert!(
            in_use <= 4 * per_batch,
            "the silent stream holds {in_use} bytes, over alloc.max_bytes_per_stream ({})",
            4 * per_batch
        );
        assert!(held() >= 1, "the stream stopped reading");
        // Another client is served meanwhile.
        let mut other =
            pb::seq_service_client::SeqServiceClient::connect(url.clone()).await.unwrap();
        let (more, outgoing) = tokio::sync::mpsc::channel(1);
        let mut replies = other
            .next_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await
            .unwrap()
            .into_inner();
        more.send(batch(1, vec![15])).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(10), replies.message())
            .await
            .expect("no hang")
            .unwrap()
            .expect("a reply");
        assert_eq!((reply.batch_id, reply.code, reply.seqs.len()), (1, 0, 1), "{reply:?}");
        assert!(budgets.stream_bytes_in_use() <= 8 * per_batch);
        // The silent client goes: its batches and replies are given back.
        drop((unread, requests, more, replies));
        let guard = Instant::now() + Duration::from_secs(10);
        while budgets.stream_bytes_in_use() > 0 {
            assert!(
                Instant::now() < guard,
                "{} bytes never given back",
                budgets.stream_bytes_in_use()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `s` served as `allocsvr` serves it (`seq_service`, the connection limits) on a local
    /// port: its URL.
    async fn serve_url(s: &SeqServer) -> String {
        let limits = seqsvr_server::grpc::ConnectionLimits::SERVER;
        let router = limits
            .apply(tonic::transport::Server::builder())
            .add_service(crate::seq_service(s.shared.clone()));
        crate::rpc::test_support::serve(router).await
    }

    /// A `NextStream` batch of `n` times uid 15 (section 1, ours) at our route version, with a
    /// deadline of 10 s.
    fn stream_batch(batch_id: u64, n: usize) -> pb::NextStreamRequest {
        pb::NextStreamRequest { batch_id, uids: vec![15; n], route_version: 3, timeout_ms: 10_000 }
    }

    /// A `NextStream` on `channel` that has sent `batches` (the sender kept, so the client's
    /// side stays open), its replies unread.
    async fn unread_stream(
        channel: &tonic::transport::Channel,
        batches: Vec<pb::NextStreamRequest>,
    ) -> (tokio::sync::mpsc::Sender<pb::NextStreamRequest>, tonic::Streaming<pb::NextStreamReply>)
    {
        let (requests, outgoing) = tokio::sync::mpsc::channel(batches.len().max(1));
        for b in batches {
            requests.try_send(b).expect("room for every batch");
        }
        let replies = pb::seq_service_client::SeqServiceClient::new(channel.clone())
            .next_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await
            .expect("a stream")
            .into_inner();
        (requests, replies)
    }

    /// Red-team H1: a `NextStream` client that fills its stream budget and then neither reads
    /// nor sends, its connection and streams left open, does not hold the budget for good:
    /// once it has taken no reply for `request_timeout_ms` its stream ends (RESOURCE_EXHAUSTED,
    /// which it reads once it reads again) and every byte comes back. Two such streams holding
    /// all of `alloc.max_stream_bytes` keep a third client out only until then.
    #[tokio::test]
    async fn a_stream_client_that_stops_reading_and_sending_gives_its_budget_back() {
        use crate::rpc::test_support::{silent_channel, until};
        let batch_uids = 10_000;
        let per_batch = AllocConfig::for_tests().tuning.stream_batch_bytes(batch_uids);
        // Values above 2^40: 6 bytes each, a reply of ~60 KB, so a 64 KiB window holds ~one.
        let s = server_with(1 << 40, |c| {
            c.tuning.max_batch_uids = batch_uids;
            c.tuning.request_timeout_ms = 2_000;
            c.tuning.max_bytes_per_stream = 4 * per_batch;
            c.tuning.max_stream_bytes = 8 * per_batch; // two streams' worth
        });
        s.shared.lock().table.advanced(SectionId(1), LeaseEpoch(1), Some(1 << 41));
        let url = serve_url(&s).await;
        let batch = stream_batch;
        // Two silent streams on one connection, 8 batches each (more than their budget), then
        // nothing more: neither closes its side.
        let silent = silent_channel(&url).await;
        let mut open = Vec::new();
        for _ in 0..2 {
            open.push(
                unread_stream(&silent, (0..8).map(|id| batch(id, batch_uids)).collect()).await,
            );
        }
        let budgets = &s.shared.budgets;
        until("the silent streams hold all of alloc.max_stream_bytes", || {
            budgets.stream_bytes_in_use() == 8 * per_batch
        })
        .await;
        // A third client is refused while they hold it all, and served once they ended.
        let third = tonic::transport::Channel::from_shared(url.clone()).unwrap().connect().await;
        let (more, mut replies) = unread_stream(&third.unwrap(), Vec::new()).await;
        let guard = Instant::now() + Duration::from_secs(20);
        for (refused, id) in (0..).enumerate() {
            assert!(Instant::now() < guard, "kept out for good: {refused} batches refused");
            more.send(batch(id, 1)).await.unwrap();
            let reply = tokio::time::timeout(Duration::from_secs(10), replies.message()).await;
            let reply = reply.expect("no hang").expect("no error").expect("a reply");
            if reply.code == 0 {
                break;
            }
            assert_eq!(reply.code, tonic::Code::ResourceExhausted as i32, "{reply:?}");
        }
        drop((more, replies));
        until("every byte is given back, the silent connection still open", || {
            budgets.stream_bytes_in_use() == 0
        })
        .await;
        // The silent client, reading at last (both streams: the replies of one may fill the
        // connection's window), learns why its streams ended.
        let ends = open.into_iter().map(|(requests, mut unread)| async move {
            let ended = loop {
                match unread.message().await {
                    Ok(Some(_)) => continue, // a reply the transport had taken
                    other => break other,
                }
            };
            drop(requests);
            ended
        });
        let ends = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(ends));
        for ended in ends.await.expect("no hang") {
            let status = ended.expect_err("the stream ended with a status");
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
            assert!(status.message().contains("alloc.request_timeout_ms"), "{}", status.message());
        }
    }

    /// Issue 30, the long hostile run: a `NextStream` whose client neither reads nor resets it
    /// stays counted among `alloc.max_streams` after the stall rule ended its serving task,
    /// until the client drops it: the transport still holds its reply body (the reply it took,
    /// tonic's encoding buffer), which the limit must bound. One connection holds at most
    /// `MAX_STREAMS_PER_CONNECTION` streams; another connection is still served.
    #[tokio::test]
    async fn a_stream_nobody_reads_stays_counted_until_its_client_drops_it() {
        use crate::rpc::test_support::{silent_channel, until};
        let batch_uids = 10_000;
        // Values above 2^40: 6 bytes each, a reply of ~60 KB, more than a 64 KiB window
        // holds for all the streams of the connection.
        let s = server_with(1 << 40, |c| {
            c.tuning.max_batch_uids = batch_uids;
            c.tuning.request_timeout_ms = 500;
        });
        s.shared.lock().table.advanced(SectionId(1), LeaseEpoch(1), Some(1 << 41));
        let url = serve_url(&s).await;
        let batch = stream_batch;
        let shared = &s.shared;
        let open_streams =
            || shared.config.tuning.max_streams - shared.stream_slots.available_permits();
        let stalled =
            || shared.budgets.streams_stalled.load(std::sync::atomic::Ordering::Relaxed) as usize;
        let silent = silent_channel(&url).await;
        let mut unread = Vec::new();
        for _ in 0..MAX_STREAMS_PER_CONNECTION {
            unread.push(
                unread_stream(&silent, (0..4).map(|id| batch(id, batch_uids)).collect()).await,
            );
        }
        until("every silent stream's task ended by the stall rule", || {
            stalled() == MAX_STREAMS_PER_CONNECTION
        })
        .await;
        assert_eq!(open_streams(), MAX_STREAMS_PER_CONNECTION, "still held by the transport");
        // One more on the same connection is refused; another connection is served.
        let mut same = pb::seq_service_client::SeqServiceClient::new(silent.clone());
        let (_idle, outgoing) = tokio::sync::mpsc::channel(1);
        let refused = same
            .next_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await
            .expect_err("over the connection's streams");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().contains("this connection holds"), "{}", refused.message());
        let other = tonic::transport::Channel::from_shared(url.clone()).unwrap().connect().await;
        let (more, mut replies) = unread_stream(&other.unwrap(), vec![batch(1, 1)]).await;
        let reply = tokio::time::timeout(Duration::from_secs(10), replies.message()).await;
        let reply = reply.expect("no hang").expect("no error").expect("a reply");
        assert_eq!(reply.code, 0, "{reply:?}");
        assert_eq!(open_streams(), MAX_STREAMS_PER_CONNECTION + 1);
        // Dropped by their clients (reset), every stream is given back, and no count is left.
        drop(unread);
        drop((more, replies));
        until("every stream is given back", || open_streams() == 0).await;
        until("no connection is counted", || {
            shared.streams_per_connection.lock().unwrap().is_empty()
        })
        .await;
    }

    /// Red-team M7: a `NextStream` batch whose route version is older than ours is charged for
    /// the route table its reply carries, not only 16 B a uid: a silent stream of such batches
    /// holds at least a table per reply it has not taken.
    #[tokio::test]
    async fn a_stream_reply_with_the_route_table_is_charged_for_it() {
        use crate::rpc::test_support::{silent_channel, until};
        let s = server_with(1_000, |c| c.uid_end = 10_000);
        let table_bytes = {
            let mut inner = s.shared.lock();
            inner.table.advanced(SectionId(1), LeaseEpoch(1), Some(1 << 40));
            inner.route.uid_end = 10_000;
            inner.route.entries = (0..1_000)
                .map(|section| {
                    let alloc_id = if section == 1 { 1 } else { 2 };
                    pb::RouteEntry {
                        section_begin: section,
                        section_end: section + 1,
                        alloc_id,
                        addr: format!("alloc-{alloc_id}.seqsvr.example:7000"),
                    }
                })
                .collect();
            prost::Message::encoded_len(&inner.route)
        };
        assert!(table_bytes > 20_000, "a 1000-entry table: {table_bytes} bytes");
        let url = serve_url(&s).await;
        let silent = silent_channel(&url).await;
        let stale = |batch_id| pb::NextStreamRequest {
            batch_id,
            uids: vec![15],
            route_version: 2,
            timeout_ms: 10_000,
        };
        let (_requests, _unread) = unread_stream(&silent, (0..30).map(stale).collect()).await;
        let budgets = &s.shared.budgets;
        until("the unread replies are charged for their tables", || {
            budgets.stream_bytes_in_use() >= 10 * table_bytes
        })
        .await;
    }

    /// Red-team M6: a `NextBatch` reply holds its bytes of `alloc.max_stream_bytes` until the
    /// transport has taken it, not only until its handler returned: a client that reads none
    /// of its replies holds them counted.
    #[tokio::test]
    async fn a_next_batch_reply_holds_its_bytes_until_the_client_has_read_it() {
        use crate::rpc::test_support::{call_unread, silent_channel, until};
        let batch_uids = 10_000;
        let per_call = AllocConfig::for_tests().tuning.stream_batch_bytes(batch_uids);
        let s = server_with(1 << 40, |c| c.tuning.max_batch_uids = batch_uids);
        s.shared.lock().table.advanced(SectionId(1), LeaseEpoch(1), Some(1 << 41));
        let url = serve_url(&s).await;
        let silent = silent_channel(&url).await;
        let path = format!("/{}/NextBatch", crate::SEQ_SERVICE);
        let calls = 20;
        let mut unread = Vec::new();
        for _ in 0..calls {
            let request = pb::NextBatchRequest {
                uids: vec![15; batch_uids],
                route_version: 3,
                independent: true,
            };
            unread.push(
                call_unread::<_, pb::NextBatchResponse>(silent.clone(), &path, request).await,
            );
        }
        // Every handler has returned (its reply's headers arrived); the replies are not read.
        let in_use = s.shared.budgets.stream_bytes_in_use();
        assert!(
            in_use >= (calls - 2) * per_call,
            "{in_use} bytes held by {calls} unread replies of {per_call} bytes"
        );
        // All at once: the replies of one may fill the connection's window.
        let read = unread.into_iter().map(|mut reply| async move { reply.message().await });
        let read = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(read));
        for reply in read.await.expect("no hang") {
            assert_eq!(reply.expect("no error").expect("the reply").seqs.len(), batch_uids);
        }
        until("the bytes come back once the replies are read", || {
            s.shared.budgets.stream_bytes_in_use() == 0
        })
        .await;
    }

    /// A client with a table newer than ours must not get our older table back (it would be
    /// sent straight back here): the AllocSvr waits for its heartbeat instead, and asks for one
    /// at once. A client with an older or equal table gets NOT_OWNER with ours.
    #[tokio::test]
    async fn a_shutting_down_alloc_serves_nothing_even_with_a_valid_lease() {
        let s = server(1_000);
        let current = || Request::new(pb::CurrentRequest { uid: 15, route_version: 3 });
        assert_eq!(s.current(current()).await.expect("serves before").get_ref().seq, 1_000);
        s.shared.lock().stopping = true;
        let e = s.current(current()).await.expect_err("refused once stopping");
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert!(e.message().contains("shutting down"), "{}", e.message());
    }

    #[tokio::test]
    async fn not_owner_never_answers_a_client_with_an_older_table() {
        let s = server(0);
        let status = s.next(next(5, 4)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(seqsvr_proto::route_table_of(&status).is_none());
        let woken =
            tokio::time::timeout(Duration::from_millis(100), s.shared.wake_heartbeat.notified())
                .await;
        assert!(woken.is_ok(), "a heartbeat was asked for");
        for version in [1, 3] {
            let status = s.next(next(5, version)).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
            let table = seqsvr_proto::route_table_of(&status).expect("a table");
            assert_eq!(table.version, 3);
        }
    }

    /// A section whose values reached the ceiling answers RESOURCE_EXHAUSTED at once, from
    /// `next`, from an all-or-nothing batch, and (as 0) from an independent batch.
    #[tokio::test]
    async fn a_section_at_the_ceiling_answers_resource_exhausted_at_once() {
        let s = server(18_446_744_073_709_550_000);
        let started = tokio::time::Instant::now();
        let status = s.next(next(15, 3)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("ceiling of max_seq 2^63"), "{}", status.message());
        let batch = |independent| {
            let mut r = Request::new(pb::NextBatchRequest {
                uids: vec![15, 16],
                route_version: 3,
                independent,
            });
            r.set_timeout(Duration::from_millis(300));
            r
        };
        let status = s.next_batch(batch(false)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        let each = s.next_batch(batch(true)).await.unwrap().into_inner();
        assert_eq!(each.seqs, vec![0, 0]);
        assert!(started.elapsed() < Duration::from_millis(250), "no wait for the deadline");
        assert!(!s.shared.lock().table.has_wanted(), "nothing for the advancer to do");
    }

    // Tests written for survivors of the mutation run (docs/reliability/mutants.md).

    /// `server(100)` with an advance of section 1 committed: `next(15)` serves 101.
    fn serving() -> SeqServer {
        let s = server(100);
        {
            let mut inner = s.shared.lock();
            assert_eq!(inner.table.next(15), Err(SeqError::Exhausted(SectionId(1))));
            let wanted = inner.table.take_wanted(10);
            inner.table.advanced(SectionId(1), LeaseEpoch(1), Some(wanted[0].max_seq.0));
        }
        s
    }

    /// I3 at the AllocSvr: without a valid lease (lapsed, or revoked) it hands out nothing,
    /// however ready its sections are, and answers UNAVAILABLE (retryable) at the deadline.
    #[tokio::test]
    async fn no_value_is_served_without_a_valid_lease() {
        let s = serving();
        assert_eq!(s.next(next(15, 3)).await.unwrap().get_ref().seq, 101, "serves with a lease");
        if Tooth::NoAllocLeaseCheck.on() {
            return;
        }
        let now = BootInstant::now().since_boot();
        let lapsed = BootInstant::from_since_boot(now - Duration::from_millis(1));
        for until in [Some(lapsed), None] {
            s.shared.lock().lease_until = until;
            let started = Instant::now();
            let status = s.next(next(15, 3)).await.unwrap_err();
            assert!(started.elapsed() >= Duration::from_millis(200), "waits for its deadline");
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            assert!(status.message().contains("no valid lease"), "{}", status.message());
            let mut current = Request::new(pb::CurrentRequest { uid: 15, route_version: 3 });
            current.set_timeout(Duration::from_millis(300));
            let status = s.current(current).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            assert_eq!(s.shared.lock().table.current(15), Ok(101), "nothing handed out");
        }
    }

    /// `GetRouteTable` answers the newest table this AllocSvr knows.
    #[tokio::test]
    async fn get_route_table_answers_ours() {
        let s = serving();
        let r = s.get_route_table(Request::new(pb::GetRouteTableRequest {})).await.unwrap();
        let table = r.into_inner().route_table.expect("a table");
        assert_eq!((table.version, table.entries.len()), (3, 2));
    }

    /// A reply carries our route table exactly when the client's is older.
    #[tokio::test]
    async fn a_reply_carries_the_route_table_only_to_a_client_with_an_older_one() {
        let s = serving();
        let r = s.next(next(15, 2)).await.unwrap().into_inner();
        assert_eq!(r.route_table.map(|t| t.version), Some(3));
        for version in [3, 4] {
            let r = s.next(next(15, version)).await.unwrap().into_inner();
            assert_eq!(r.route_table, None, "client at v{version}");
        }
    }

    /// Bad input is INVALID_ARGUMENT: an empty batch, a batch over `max_batch_uids`, a uid
    /// outside the set's `[uid_begin, uid_end)`; the limits themselves are accepted. NOT_OWNER
    /// names the owner of the section from the route table, if any.
    #[tokio::test]
    async fn requests_outside_the_limits_are_invalid_arguments() {
        use tonic::Code;
        let s = serving();
        let max = s.shared.config.tuning.max_batch_uids;
        let batch = |uids: Vec<u64>| {
            let mut r =
                Request::new(pb::NextBatchRequest { uids, route_version: 3, independent: true });
            r.set_timeout(Duration::from_millis(300));
            r
        };
        assert_eq!(s.next_batch(batch(vec![])).await.unwrap_err().code(), Code::InvalidArgument);
        let over = s.next_batch(batch(vec![15; max + 1])).await.unwrap_err();
        assert_eq!(over.code(), Code::InvalidArgument, "{over:?}");
        let at_max = s.next_batch(batch(vec![15; max])).await.unwrap().into_inner();
        assert_eq!(at_max.seqs.len(), max);
        assert_eq!(s.next(next(100, 3)).await.unwrap_err().code(), Code::InvalidArgument);
        // uids 0 and 99 are the set's edges: valid, but their sections are not served here.
        for (uid, owner) in
            [(0, "alloc 2 at alloc-2:1"), (25, "not assigned"), (99, "not assigned")]
        {
            let status = s.next(next(uid, 3)).await.unwrap_err();
            assert_eq!(status.code(), Code::FailedPrecondition, "uid {uid}: {status:?}");
            assert!(status.message().contains(&format!("owner: {owner}")), "{}", status.message());
        }
    }

    // Limits on every input (issue 12, item 4).

    /// `server_with(..)` without a lease: every call waits for one until its deadline.
    fn waiting_server(tune: impl FnOnce(&mut AllocConfig)) -> SeqServer {
        let s = server_with(1_000, tune);
        s.shared.lock().lease_until = None;
        s
    }

    /// At most `alloc.max_waiting_calls` calls wait at once; one more is refused at once with
    /// RESOURCE_EXHAUSTED, and the places come back when the waiting calls end.
    #[tokio::test]
    async fn calls_past_max_waiting_calls_are_refused_at_once() {
        if Tooth::NoAllocLeaseCheck.on() {
            return;
        }
        let s = waiting_server(|c| c.tuning.max_waiting_calls = 2);
        let waiting: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move { s.next(next(15, 3)).await })
            })
            .collect();
        let until = Instant::now() + Duration::from_secs(2);
        while s.shared.waiting_calls.load(std::sync::atomic::Ordering::Acquire) < 2 {
            assert!(Instant::now() < until, "the two calls never waited");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let started = Instant::now();
        let refused = s.next(next(15, 3)).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().contains("max_waiting_calls"), "{}", refused.message());
        assert!(started.elapsed() < Duration::from_millis(100), "refused without waiting");
        for call in waiting {
            let status = call.await.unwrap().unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        }
        assert_eq!(s.shared.waiting_calls.load(std::sync::atomic::Ordering::Acquire), 0);
        let status = s.next(next(15, 3)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "waits again: {status:?}");
    }

    /// A caller's `grpc-timeout` longer than `alloc.request_timeout_ms` is clamped to it: a
    /// call asking for an hour is answered after the configured 200 ms.
    #[tokio::test]
    async fn a_long_grpc_timeout_is_clamped_to_request_timeout_ms() {
        if Tooth::NoAllocLeaseCheck.on() {
            return;
        }
        let s = waiting_server(|c| c.tuning.request_timeout_ms = 200);
        let mut r = Request::new(pb::NextRequest { uid: 15, route_version: 3 });
        r.set_timeout(Duration::from_secs(3600));
        let started = Instant::now();
        let answered = tokio::time::timeout(Duration::from_secs(3), s.next(r)).await;
        let status = answered.expect("answered at request_timeout_ms, not after an hour");
        assert_eq!(status.unwrap_err().code(), tonic::Code::Unavailable);
        assert!(started.elapsed() >= Duration::from_millis(190), "{:?}", started.elapsed());
    }

    /// Serves `s` as `allocsvr` does (`seq_service` + `limits`) on a local port; returns a
    /// client of it.
    async fn serve_over_tcp(
        s: &SeqServer,
        limits: seqsvr_server::grpc::ConnectionLimits,
    ) -> pb::seq_service_client::SeqServiceClient<tonic::transport::Channel> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = limits
            .apply(tonic::transport::Server::builder())
            .add_service(crate::seq_service(s.shared.clone()));
        tokio::spawn(
            router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        pb::seq_service_client::SeqServiceClient::new(channel)
    }

    /// A `SeqService` request over `seq_request_max_bytes(max_batch_uids)` is refused by the
    /// transport with OUT_OF_RANGE before the handler sees it (the handler would have counted a
    /// request id and answered INVALID_ARGUMENT); one within the limit is served.
    #[tokio::test]
    async fn an_oversized_seq_request_never_reaches_the_handler() {
        let s = server_with(100, |c| c.tuning.max_batch_uids = 10);
        let mut client = serve_over_tcp(&s, seqsvr_server::grpc::ConnectionLimits::SERVER).await;
        let limit = seqsvr_proto::seq_request_max_bytes(10);
        assert!(limit < 128 * 1024, "derived from max_batch_uids, not the old 256 MiB");
        // uid 15 is one byte as a varint: limit + 1 of them is over the limit.
        let uids = vec![15u64; limit + 1];
        let request = pb::NextBatchRequest { uids, route_version: 3, independent: true };
        let ids_before = s.shared.next_request_id.load(std::sync::atomic::Ordering::Relaxed);
        let refused = client.next_batch(request).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
        let ids_after = s.shared.next_request_id.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(ids_before, ids_after, "the handler never ran");
        let within = pb::CurrentRequest { uid: 15, route_version: 3 };
        assert_eq!(client.current(within).await.unwrap().get_ref().seq, 100, "served");
    }

    /// Past `max_calls_per_connection` handlers running for one connection, a call is refused
    /// at once with RESOURCE_EXHAUSTED (load shedding), not queued behind them.
    #[tokio::test]
    async fn calls_past_the_per_connection_limit_are_shed() {
        if Tooth::NoAllocLeaseCheck.on() {
            return;
        }
        let s = waiting_server(|c| c.tuning.request_timeout_ms = 1_000);
        let limits = seqsvr_server::grpc::ConnectionLimits {
            max_calls_per_connection: 2,
            ..seqsvr_server::grpc::ConnectionLimits::SERVER
        };
        let client = serve_over_tcp(&s, limits).await;
        let call = |client: &pb::seq_service_client::SeqServiceClient<_>| {
            let mut client = client.clone();
            async move { client.next(pb::NextRequest { uid: 15, route_version: 3 }).await }
        };
        let waiting: Vec<_> = (0..2).map(|_| tokio::spawn(call(&client))).collect();
        let until = Instant::now() + Duration::from_secs(2);
        while s.shared.waiting_calls.load(std::sync::atomic::Ordering::Acquire) < 2 {
            assert!(Instant::now() < until, "the two calls never waited");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let started = Instant::now();
        let shed = call(&client).await.unwrap_err();
        assert_eq!(shed.code(), tonic::Code::ResourceExhausted, "{shed:?}");
        assert!(started.elapsed() < Duration::from_millis(500), "refused without waiting");
        for w in waiting {
            assert_eq!(w.await.unwrap().unwrap_err().code(), tonic::Code::Unavailable);
        }
    }
    // ---- The profiling harness of docs/benchmarks/profile.md ----

    fn env_or(name: &str, default: u64) -> u64 {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    }

    /// User + system CPU time (µs) of this process's threads whose name starts with `prefix`
    /// (from /proc, in clock ticks of 10 ms).
    fn cpu_us_of_threads(prefix: &str) -> u64 {
        let mut total = 0;
        for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
            if !stat[open + 1..close].starts_with(prefix) {
                continue;
            }
            let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
            let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
            total += (ticks(11) + ticks(12)) * 10_000;
        }
        total
    }

    /// Not a test: the profiling harness of `docs/benchmarks/profile.md` (run it with
    /// `--ignored --nocapture`). Serves this `SeqService` (one AllocSvr that owns every section
    /// of uids `[0, 10^7)`, with a `max_seq` far away, so no store is involved) on loopback and
    /// drives it through the SDK: `SEQSVR_PROFILE_CALLERS` (64) callers calling `next` on
    /// uniform uids of `[0, SEQSVR_PROFILE_UIDS)` (100,000: `seqbench --uids 100000`, all in
    /// section 0) for `SEQSVR_PROFILE_SECS` (10) seconds, the SDK and the server each on a
    /// runtime of 2 threads of its own ("prof-sdk", "prof-srv": a profiler tells them apart).
    /// Prints calls/s and the CPU time per call of each side. `SEQSVR_PROFILE_IN_FLIGHT`: the
    /// SDK's `max_in_flight` (its default without it); `SEQSVR_PROFILE_NO_STREAM=1`: batches as
    /// `NextBatch` RPCs instead of messages on a `NextStream`. With `SEQSVR_PROFILE_CLUSTER`
    /// naming a cluster file with `[tls]` (`data/local/cluster.toml` of the dev cluster), both
    /// ends speak mutual TLS as in the cluster: the server with `certs/alloc-0-1.*` and the
    /// role check, the SDK with `certs/client.*`.
    #[test]
    #[ignore]
    fn profile_the_sdk_against_the_serve_path() {
        use seqsvr_tls::ServeExt as _;
        let (callers, secs) =
            (env_or("SEQSVR_PROFILE_CALLERS", 64), env_or("SEQSVR_PROFILE_SECS", 10));
        let (sections, section_size) = (100u64, 100_000u64);
        let cluster = std::env::var_os("SEQSVR_PROFILE_CLUSTER").map(std::path::PathBuf::from);
        let tls = cluster.as_ref().map(|file| {
            let text = std::fs::read_to_string(file).expect("the cluster file");
            let config = seqsvr_core::config::ClusterConfig::from_toml_str(&text).expect("parses");
            let tls = config.tls.expect("a [tls] section");
            let certs = file.parent().expect("a directory").join("certs");
            seqsvr_client::tls::use_cluster_identity(
                Some(&tls),
                file,
                Some(&certs.join("client.pem")),
                Some(&certs.join("client.key")),
            )
            .expect("the client identity");
            seqsvr_tls::TlsSetup::from_cluster(
                Some(&tls),
                file,
                Some(&certs.join("alloc-0-1.pem")),
                Some(&certs.join("alloc-0-1.key")),
                seqsvr_tls::ServerKind::AllocSvr,
                false,
            )
            .expect("the server setup")
            .expect("TLS")
        });
        if tls.is_none() {
            seqsvr_client::tls::use_plaintext();
        }
        let runtime = |name: &str| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name(name)
                .enable_all()
                .build()
                .expect("a runtime")
        };
        let (srv, sdk) = (runtime("prof-srv"), runtime("prof-sdk"));
        let listener = srv.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("a port");
        let addr = listener.local_addr().expect("an address").to_string();
        let mut config = AllocConfig::for_tests();
        (config.uid_end, config.section_size) = (sections * section_size, section_size);
        let shared = srv.block_on(async { crate::state::Shared::new(config) }).expect("shared");
        {
            let mut inner = shared.lock();
            inner.alloc_id = Some(AllocId(1));
            inner.extend_lease(BootInstant::now() + Duration::from_secs(3600));
            let run = SectionRange::new(SectionId(0), SectionId(sections)).expect("a range");
            let loads = inner.table.grant(&[(run, LeaseEpoch(1))]);
            inner.table.loaded(&loads[0], &BTreeMap::new());
            for s in 0..sections {
                inner.table.advanced(SectionId(s), LeaseEpoch(1), Some(1 << 40));
            }
            inner.route = pb::RouteTable {
                set_id: 1,
                version: 1,
                uid_begin: 0,
                uid_end: sections * section_size,
                section_size,
                entries: vec![pb::RouteEntry {
                    section_begin: 0,
                    section_end: sections,
                    alloc_id: 1,
                    addr: addr.clone(),
                }],
            };
        }
        let served = shared.clone();
        srv.spawn(async move {
            seqsvr_server::grpc::ConnectionLimits::SERVER
                .apply(tonic::transport::Server::builder())
                .tcp_nodelay(true)
                .layer(seqsvr_tls::auth_layer(tls.as_ref()))
                .add_service(crate::seq_service(served))
                .serve_maybe_tls(listener, tls.as_ref(), std::future::pending())
                .await
        });
        let uids = env_or("SEQSVR_PROFILE_UIDS", 100_000).clamp(1, sections * section_size);
        let (calls, took, rpcs) = sdk.block_on(async move {
            let defaults = seqsvr_client::seq::SeqClientOptions::default();
            let options = seqsvr_client::seq::SeqClientOptions {
                max_in_flight: match env_or("SEQSVR_PROFILE_IN_FLIGHT", 0) as usize {
                    0 => defaults.max_in_flight,
                    n => n,
                },
                stream: env_or("SEQSVR_PROFILE_NO_STREAM", 0) == 0,
                ..defaults
            };
            let client = seqsvr_client::seq::SeqClient::connect_with(
                &[addr],
                Duration::from_secs(10),
                options,
            )
            .await
            .expect("connected");
            let client = Arc::new(client);
            // Warm up (connection, first touch of the sections), then the timed window.
            for uid in (0..uids).step_by(section_size as usize) {
                client.next(uid, Duration::from_secs(5)).await.expect("a value");
            }
            let before = (cpu_us_of_threads("prof-sdk"), cpu_us_of_threads("prof-srv"));
            let (started, rpcs_before) = (std::time::Instant::now(), client.coalesced_rpcs());
            let until = started + Duration::from_secs(secs);
            let tasks: Vec<_> = (0..callers)
                .map(|c| {
                    let client = client.clone();
                    tokio::spawn(async move {
                        let (mut x, mut n) = (0x9E37_79B9_7F4A_7C15u64 ^ (c + 1), 0u64);
                        while std::time::Instant::now() < until {
                            for _ in 0..16 {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                client
                                    .next(x % uids, Duration::from_secs(5))
                                    .await
                                    .expect("a value");
                                n += 1;
                            }
                        }
                        n
                    })
                })
                .collect();
            let mut calls = 0;
            for t in tasks {
                calls += t.await.expect("a caller");
            }
            let took = started.elapsed();
            let after = (cpu_us_of_threads("prof-sdk"), cpu_us_of_threads("prof-srv"));
            (calls, took, (client.coalesced_rpcs() - rpcs_before, before, after))
        });
        let (rpcs, before, after) = rpcs;
        let per_call = |b: u64, a: u64| (a - b) as f64 / calls as f64;
        println!(
            "PROFILE tls={} callers={callers} calls={calls} calls/s={:.0} calls/rpc={:.1} \
             sdk_cpu_us/call={:.2} srv_cpu_us/call={:.2}",
            cluster.is_some(),
            calls as f64 / took.as_secs_f64(),
            calls as f64 / rpcs.max(1) as f64,
            per_call(before.0, after.0),
            per_call(before.1, after.1),
        );
    }
}
