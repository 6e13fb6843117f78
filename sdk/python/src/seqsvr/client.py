"""The asyncio client (:class:`AsyncClient`, on grpc.aio): routing, retries, coalescing.

It behaves as the Go SDK (sdk/go) and the Rust SDK (crates/seqsvr-client) do:

- Routing: it keeps each set's route table, learnt from the seeds and from the tables that ride
  on replies, and calls each uid's owner directly, marked ``seqsvr-no-forward: 1``. An AllocSvr
  that does not own the uid answers NOT_OWNER with its table (``seqsvr-route-table-bin``): the
  client installs it if it is newer and retries at the owner. A table is never replaced by an
  older one.
- Retries: :mod:`seqsvr.retry` (UNAVAILABLE, DEADLINE_EXCEEDED of one attempt, CANCELLED from
  below and UNKNOWN, with jittered exponential back-off; NOT_OWNER followed at once up to 4
  times in a row), the whole call bounded by its ``timeout=`` (default
  ``Options.default_timeout``, 5 s); one attempt takes at most 3 s.
- Coalescing: concurrent ``next`` calls bound for one AllocSvr wait in its queue and ride one
  NextBatch RPC (independent entries, in queue order): at most ``max_in_flight`` RPCs per
  AllocSvr at a time and ``max_coalesced`` calls per RPC; a queue of ``max_queued`` calls is
  full and one more fails at once with RESOURCE_EXHAUSTED. An entry the AllocSvr cannot serve
  at once comes back 0 and is asked again alone.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import struct
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import grpc
import grpc.aio

from .config import Options, session_uid
from .decode import RONGCLOUD, SESSION_HASHES, SESSION_TYPES, session_hash_of
from .errors import (NO_FORWARD_METADATA, Cancelled, DeadlineExceeded, FailedPrecondition, Internal,
                     InvalidArgument, ResourceExhausted, SeqsvrError, Unavailable, Unknown, from_rpc,
                     retryable)
from .retry import STANDARD_RETRY
from .v1 import seq_pb2 as pb
from .v1 import seq_pb2_grpc as pb_grpc

__all__ = ["AsyncClient", "IDs", "Session", "Stats", "connect"]

C = grpc.StatusCode

#: One attempt's longest time (an AllocSvr that accepts connections but never answers must not
#: eat the whole deadline); the Rust SDK's ATTEMPT_TIMEOUT_MAX.
ATTEMPT_TIMEOUT_MAX = 3.0
#: When asking several AllocSvrs for route tables at once, how long the others may still answer
#: after the first table arrived.
SEED_GRACE = 0.2
#: A route refresh between two rounds of an id call takes at most this.
REFRESH_TIMEOUT_MAX = 0.5
#: The most NOT_OWNER redirects one session call follows before it backs off.
SESSION_REDIRECTS_MAX = 8
#: The most session uids a client remembers.
SESSION_UIDS_MAX = 1 << 16
# Message size limits of SeqService (seqsvr-proto's SEQ_REQUEST_MAX_BYTES, REPLY_MAX_BYTES).
SEQ_REQUEST_MAX_BYTES = 4 << 20
REPLY_MAX_BYTES = 16 << 20

_NO_FORWARD = ((NO_FORWARD_METADATA, "1"),)


@dataclass
class Stats:
    """What the client did so far (the Go SDK's Stats): public calls made (``calls``) and those
    that failed (``failed``); ``redirects``: attempts repeated at once after a NOT_OWNER named
    the owner; ``retries``: attempts repeated after a back-off; ``route_refreshes``:
    GetRouteTable RPCs; ``route_tables_installed``: newer tables installed; ``coalesced_rpcs``:
    RPCs that carried coalesced ``next`` calls."""

    calls: int = 0
    failed: int = 0
    redirects: int = 0
    retries: int = 0
    route_refreshes: int = 0
    route_tables_installed: int = 0
    coalesced_rpcs: int = 0


@dataclass
class IDs:
    """One ``next_ids`` answer: strictly increasing ``ids`` (ints; 64-bit for snowflake,
    uid-generator, weibo and js53, 128-bit for uuidv7 and rongcloud: ``width``), the
    ``worker_id`` every id carries (0 for rongcloud) and, for rongcloud, the ``session_uid`` the
    session is routed by."""

    ids: List[int]
    worker_id: int
    session_uid: int = 0
    width: int = 64

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        return iter(self.ids)

    def __getitem__(self, i):
        return self.ids[i]


@dataclass(frozen=True)
class Session:
    """A rongcloud session: its ``type`` (0..=15) and its ``id``, as text (hashed as the
    AllocSvrs hash it: :func:`seqsvr.decode.session_hash_of`) or, with ``id`` empty, as the
    22-bit ``hash`` itself."""

    type: int
    id: str = ""
    hash: int = 0

    def session_hash(self) -> int:
        return session_hash_of(self.id) if self.id else self.hash

    def key(self) -> int:
        """type << 22 | hash (raises InvalidArgument when either does not fit)."""
        h = self.session_hash()
        if not (0 <= self.type < SESSION_TYPES) or not (0 <= h < SESSION_HASHES):
            raise InvalidArgument(C.INVALID_ARGUMENT,
                                  f"session type {self.type} and hash {h} must be below {SESSION_TYPES} and {SESSION_HASHES}")
        return self.type << 22 | h


class _Pending:
    __slots__ = ("uid", "version", "until", "fut")

    def __init__(self, uid: int, version: int, until: float, fut: asyncio.Future):
        self.uid, self.version, self.until, self.fut = uid, version, until, fut


class _Peer:
    """One AllocSvr as this client talks to it: its channel, stubs and coalescing queue."""

    def __init__(self, addr: str, channel: grpc.aio.Channel):
        self.addr = addr
        self.channel = channel
        self.seq = pb_grpc.SeqServiceStub(channel)
        self.ids = pb_grpc.IdServiceStub(channel)
        self.queue: collections.deque[_Pending] = collections.deque()
        self.wakeup = asyncio.Event()
        self.coalescer: Optional[asyncio.Task] = None


def _expire(fut: "asyncio.Future", addr: str) -> None:
    """A coalesced call's timer: its attempt ended with no answer from ``addr``."""
    if not fut.done():
        fut.set_exception(DeadlineExceeded(
            C.DEADLINE_EXCEEDED, f"no coalesced answer from {addr} within the attempt's time"))


def _attempt_timeout(until: float) -> float:
    """How long one attempt may take: what is left, at most ATTEMPT_TIMEOUT_MAX."""
    return min(until - time.monotonic(), ATTEMPT_TIMEOUT_MAX)


def _table_of(reply) -> Optional[pb.RouteTable]:
    return reply.route_table if reply.HasField("route_table") else None


def _table_in(tables: Sequence[pb.RouteTable], uid: int) -> Optional[pb.RouteTable]:
    for t in tables:
        if t.uid_begin <= uid < t.uid_end:
            return t
    return None


def _owner_of(t: pb.RouteTable, uid: int) -> Optional[pb.RouteEntry]:
    """The entry naming the owner of uid's section in t (None for a section in a gap); a section
    size of 0 counts as 1 (seqsvr-proto's route.rs)."""
    section = uid // (t.section_size or 1)
    entries = t.entries
    lo, hi = 0, len(entries)
    while lo < hi:  # the first entry ending above the section
        mid = (lo + hi) // 2
        if entries[mid].section_end > section:
            hi = mid
        else:
            lo = mid + 1
    if lo < len(entries) and entries[lo].section_begin <= section < entries[lo].section_end:
        return entries[lo]
    for e in entries:  # a table not sorted by section
        if e.section_begin <= section < e.section_end:
            return e
    return None


def _owner_addr(t: Optional[pb.RouteTable], uid: int) -> str:
    if t is None or not (t.uid_begin <= uid < t.uid_end):
        return ""
    e = _owner_of(t, uid)
    return e.addr if e is not None else ""


def _deadline_error(last: Optional[SeqsvrError]) -> SeqsvrError:
    return last if last is not None else DeadlineExceeded(C.DEADLINE_EXCEEDED, "the deadline passed")


def _ids_of(addr: str, r: pb.NextIdsResponse, count: int) -> IDs:
    """Checks a NextIds answer against what was asked and what the service promises: count ids,
    all of one width, strictly increasing. Anything else is a server bug (INTERNAL), never
    handed on: a repeated or reordered id could be handed out twice."""

    def bad(what: str) -> Internal:
        return Internal(C.INTERNAL, f"{addr} answered NextIds wrongly: {what}")

    n64 = len(r.ids) + (len(r.ids64_packed) + 7) // 8
    n128 = len(r.ids128) + (len(r.ids128_packed) + 15) // 16
    out = IDs(ids=[], worker_id=r.worker_id, session_uid=r.session_uid)
    if n64 and n128:
        raise bad("both 64-bit and 128-bit ids")
    if not n64 and not n128:
        raise bad(f"no ids for a count of {count}")
    if n64:
        packed = r.ids64_packed
        if not packed:
            out.ids = list(r.ids)
        elif len(r.ids):
            raise bad("both ids and ids64_packed hold ids")
        elif len(packed) % 8:
            raise bad(f"ids64_packed has {len(packed)} bytes, not a multiple of 8")
        else:
            out.ids = list(struct.unpack(f">{len(packed) // 8}Q", packed))
    else:
        out.width = 128
        packed = r.ids128_packed
        if not packed:
            for pos, raw in enumerate(r.ids128):
                if len(raw) != 16:
                    raise bad(f"ids128[{pos}] has {len(raw)} bytes, not 16")
                out.ids.append(int.from_bytes(raw, "big"))
        elif len(r.ids128):
            raise bad("both ids128 and ids128_packed hold ids")
        elif len(packed) % 16:
            raise bad(f"ids128_packed has {len(packed)} bytes, not a multiple of 16")
        else:
            halves = struct.unpack(f">{len(packed) // 8}Q", packed)
            out.ids = [halves[i] << 64 | halves[i + 1] for i in range(0, len(halves), 2)]
    if len(out.ids) != count:
        raise bad(f"{len(out.ids)} ids for a count of {count}")
    for i in range(1, len(out.ids)):
        if out.ids[i] <= out.ids[i - 1]:
            raise bad(f"id #{i} ({out.ids[i]}) is not above the one before it ({out.ids[i - 1]})")
    return out


async def _unary(method, request, timeout: float, *, metadata=_NO_FORWARD):
    """One unary RPC; a gRPC failure comes out as a SeqsvrError with what its trailers carry."""
    try:
        return await method(request, timeout=max(timeout, 0.001), metadata=metadata)
    except grpc.RpcError as e:
        raise from_rpc(e) from None


class AsyncClient:
    """The SDK on asyncio: per-uid sequences (:meth:`next`, :meth:`next_batch`, :meth:`current`)
    and globally unique ids (:meth:`next_ids`, :meth:`next_session_ids`) from a seqsvr cluster.

    Make one with ``await AsyncClient.connect(options)`` (or :func:`connect`), use it from one
    event loop, and ``await client.close()`` at the end (or ``async with``). Every call takes
    ``timeout=`` (seconds, the whole call, retries included; default
    ``options.default_timeout``) and raises a :class:`seqsvr.SeqsvrError` subclass on failure.
    """

    def __init__(self, options: Options):
        """Checks the options and builds the client without dialling anything (use :meth:`connect`)."""
        seeds: List[str] = []
        for s in options.seeds:
            if s and s not in seeds:
                seeds.append(s)
        if not seeds:
            raise InvalidArgument(C.INVALID_ARGUMENT, "no seed addresses: give one AllocSvr per set")
        if options.max_coalesced < 1 or options.max_in_flight < 1 or options.max_queued < 1:
            raise InvalidArgument(C.INVALID_ARGUMENT, "max_coalesced, max_in_flight and max_queued must be at least 1")
        if options.default_timeout <= 0:
            raise InvalidArgument(C.INVALID_ARGUMENT, "default_timeout must be above 0 seconds")
        channel_options = [
            ("grpc.max_receive_message_length", REPLY_MAX_BYTES),
            ("grpc.max_send_message_length", SEQ_REQUEST_MAX_BYTES),
            # Reconnect soon after an AllocSvr comes back (gRPC's default waits up to 2 minutes).
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
            ("grpc.min_reconnect_backoff_ms", int(ATTEMPT_TIMEOUT_MAX * 1000)),
        ]
        if options.tls is not None and options.plaintext:
            raise InvalidArgument(C.INVALID_ARGUMENT, "both tls and plaintext given: choose one")
        if options.tls is not None:
            creds, name = options.tls.credentials()
            # The AllocSvrs' addresses are IPs; their certificates name alloc.<server_name>:
            # that is the name checked (as the Go SDK's tls.Config.ServerName does).
            channel_options.append(("grpc.ssl_target_name_override", name))
            self._creds: Optional[grpc.ChannelCredentials] = creds
        elif options.plaintext:
            self._creds = None
        else:
            raise FailedPrecondition(
                C.FAILED_PRECONDITION, "no transport chosen: the SDK never falls back to plaintext",
                "give Options.tls (the application's certificate and key, e.g. from ClusterFile.options) or, "
                "for a cluster served in plaintext (--insecure), set Options.plaintext")
        channel_options.extend(options.channel_options)
        self._channel_options = channel_options
        self._opts = options
        self._seeds = seeds
        self._tables: List[pb.RouteTable] = []
        self._peers: Dict[str, _Peer] = {}
        self._closed = False
        self._tasks: set = set()
        self._cursor = itertools.count(1)
        self._sessions: Dict[Tuple[str, int], int] = {}
        self._stats = Stats()

    # -- life cycle ---------------------------------------------------------------------------

    @classmethod
    async def connect(cls, options: Options, *, timeout: Optional[float] = None) -> "AsyncClient":
        """Learns the route tables from the seeds (one per set is enough) and returns the client.
        Raises :class:`seqsvr.Unavailable` if no seed answered within ``timeout`` (default
        ``options.default_timeout``), at once :class:`seqsvr.FailedPrecondition` if the options
        choose no transport."""
        c = cls(options)
        until = c._until(timeout)
        b = STANDARD_RETRY.new_backoff()
        try:
            while True:
                errs = await c._refresh_from(c._seeds, until)
                if c._tables:
                    return c
                if not await b.wait(until):
                    raise Unavailable(C.UNAVAILABLE, "no seed answered with a route table: " + "; ".join(errs),
                                      "check the seed addresses and that the AllocSvrs run; with TLS, that the CA "
                                      "and server name are the cluster's and the certificate one it knows")
        except BaseException:
            await c.close()
            raise

    async def close(self) -> None:
        """Ends the client's connections and coalescing tasks; calls still waiting fail with
        CANCELLED."""
        if self._closed:
            return
        self._closed = True
        for p in self._peers.values():
            if p.coalescer is not None:
                p.coalescer.cancel()
            while p.queue:
                call = p.queue.popleft()
                if not call.fut.done():
                    call.fut.set_exception(Cancelled(C.CANCELLED, "the client is closed"))
        for t in list(self._tasks):
            t.cancel()
        for p in list(self._peers.values()):
            await p.channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _until(self, timeout: Optional[float]) -> float:
        if timeout is None:
            timeout = self._opts.default_timeout
        return time.monotonic() + timeout

    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    def _peer(self, addr: str) -> _Peer:
        """The AllocSvr at addr (the same one for every table and call that names it)."""
        p = self._peers.get(addr)
        if p is not None:
            return p
        if self._closed:
            raise Cancelled(C.CANCELLED, "the client is closed")
        try:
            if self._creds is not None:
                channel = grpc.aio.secure_channel(addr, self._creds, options=self._channel_options)
            else:
                channel = grpc.aio.insecure_channel(addr, options=self._channel_options)
        except Exception as e:
            raise InvalidArgument(C.INVALID_ARGUMENT, f"cannot dial {addr!r}: {e}") from None
        p = _Peer(addr, channel)
        self._peers[addr] = p
        return p

    # -- route tables -------------------------------------------------------------------------

    def stats(self) -> Stats:
        """The client's counters so far (a copy)."""
        return Stats(**vars(self._stats))

    def route_tables(self) -> List[pb.RouteTable]:
        """The route tables known now, one per set, by uid range."""
        return list(self._tables)

    def learn_routes(self, *tables: pb.RouteTable) -> None:
        """Keeps each table that is newer than the one held for its set (a table learnt
        elsewhere); a table never goes back."""
        for t in tables:
            self._install(t)

    def _install(self, t: Optional[pb.RouteTable]) -> None:
        """Keeps t if its version is above the one held for its set: a table never goes back."""
        if t is None:
            return
        for i, held in enumerate(self._tables):
            if held.set_id == t.set_id:
                if held.version >= t.version:
                    return
                self._tables[i] = t
                self._stats.route_tables_installed += 1
                return
        self._tables.append(t)
        self._tables.sort(key=lambda x: x.uid_begin)
        self._stats.route_tables_installed += 1

    def _route_of(self, uid: int) -> Optional[Tuple[str, int]]:
        """Where uid is served and its set's table version; None if no table has uid's set;
        raises Unavailable if its section has no owner yet."""
        t = _table_in(self._tables, uid)
        if t is None:
            return None
        a = _owner_addr(t, uid)
        if a:
            return a, t.version
        raise Unavailable(C.UNAVAILABLE, f"no AllocSvr serves uid {uid}'s section yet (route table v{t.version} of set {t.set_id})")

    def _outside(self, uid: int) -> InvalidArgument:
        sets = ", ".join(f"set {t.set_id} [{t.uid_begin}, {t.uid_end})" for t in self._tables)
        return InvalidArgument(C.INVALID_ARGUMENT, f"uid {uid} is outside every set of the cluster ({sets})",
                               "give a uid of one of the cluster's sets")

    async def _locate(self, uid: int, until: float) -> Tuple[_Peer, int]:
        """_route_of, learning the tables from the seeds first if no table has uid's set."""
        r = self._route_of(uid)
        if r is None:
            await self._refresh_from(self._seeds, until)
            r = self._route_of(uid)
        if r is None:
            raise self._outside(uid)
        return self._peer(r[0]), r[1]

    async def _refresh_from(self, addrs: Iterable[str], until: float) -> List[str]:
        """Asks every address at once for its route table and installs what comes back; once one
        table arrived the others get SEED_GRACE more. Returns the failures."""
        addrs = list(addrs)
        left = _attempt_timeout(until)
        if left <= 0 or not addrs:
            return []

        async def ask(addr: str):
            self._stats.route_refreshes += 1
            try:
                p = self._peer(addr)
                r = await _unary(p.seq.GetRouteTable, pb.GetRouteTableRequest(), left)
            except SeqsvrError as e:
                return addr, None, e
            return addr, _table_of(r), None

        pending = {self._spawn(ask(a)) for a in addrs}
        errs: List[str] = []
        grace: Optional[float] = None
        try:
            while pending:
                wait = None if grace is None else max(0.0, grace - time.monotonic())
                done, pending = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    errs.append(f"{len(pending)} more did not answer in time")
                    break
                for t in done:
                    addr, table, err = t.result()
                    if err is not None:
                        errs.append(f"{addr}: {err.code.name}: {err.message}")
                    elif table is None:
                        errs.append(f"{addr}: empty route table")
                    else:
                        self._install(table)
                        if grace is None:
                            grace = time.monotonic() + SEED_GRACE
        finally:
            for t in pending:
                t.cancel()
        return errs

    async def _refresh_for(self, uids: Iterable[int], until: float) -> None:
        """Refreshes the tables of the uids' sets from every AllocSvr in them and the seeds."""
        addrs: List[str] = []
        for uid in uids:
            t = _table_in(self._tables, uid)
            if t is not None:
                for e in t.entries:
                    if e.addr and e.addr not in addrs:
                        addrs.append(e.addr)
        for s in self._seeds:
            if s not in addrs:
                addrs.append(s)
        await self._refresh_from(addrs, until)

    # -- sequences ----------------------------------------------------------------------------

    async def _call(self, uid: int, timeout: Optional[float], attempt) -> int:
        self._stats.calls += 1
        try:
            return await self._call_attempts(uid, self._until(timeout), attempt)
        except BaseException:
            self._stats.failed += 1
            raise

    def _raise_if_closed(self) -> None:
        """Every retry loop asks first: once closed, a call fails at once with CANCELLED (the
        SDK's own, not the retryable CANCELLED of a cut connection)."""
        if self._closed:
            raise Cancelled(C.CANCELLED, "the client is closed")

    async def _call_attempts(self, uid: int, until: float,
                             attempt: Callable[[_Peer, int, float], Awaitable[Tuple[int, Optional[pb.RouteTable]]]]) -> int:
        """The retry loop shared by next and current: the Rust SDK's call_attempts."""
        if not isinstance(uid, int) or uid < 0 or uid >> 64:
            raise InvalidArgument(C.INVALID_ARGUMENT, f"uid {uid!r} is not an unsigned 64-bit integer")
        b = STANDARD_RETRY.new_backoff()
        last: Optional[SeqsvrError] = None
        while True:
            self._raise_if_closed()
            try:
                p, version = await self._locate(uid, until)
            except SeqsvrError as e:
                if e.code == C.INVALID_ARGUMENT:
                    raise
                last = e
            else:
                t = _attempt_timeout(until)
                if t <= 0:
                    raise _deadline_error(last)
                try:
                    value, table = await attempt(p, version, time.monotonic() + t)
                    self._install(table)
                    return value
                except SeqsvrError as aerr:
                    if aerr.code == C.FAILED_PRECONDITION and aerr.route_table is not None:
                        self._install(aerr.route_table)
                        # At once, a few times in a row; then back off like any retry.
                        if b.redirect():
                            self._stats.redirects += 1
                            continue
                        last = aerr
                    elif retryable(aerr.code):
                        last = aerr
                    else:
                        raise
            if not await b.wait(until):
                raise _deadline_error(last)
            self._stats.retries += 1
            await self._refresh_for([uid], until)

    async def next(self, uid: int, *, timeout: Optional[float] = None) -> int:
        """The next sequence of ``uid``: above every value returned for uid by a call that
        completed before this one started. Retried within ``timeout`` as :mod:`seqsvr.retry`
        says. Concurrent calls bound for one AllocSvr ride one NextBatch RPC (unless
        ``options.coalescing`` is off)."""

        async def attempt(p: _Peer, version: int, attempt_until: float):
            if self._opts.coalescing:
                try:
                    seq = await self._next_coalesced(p, uid, version, attempt_until)
                except SeqsvrError as e:
                    # INVALID_ARGUMENT: e.g. more calls than the AllocSvr takes in one batch: ask alone.
                    if e.code != C.INVALID_ARGUMENT:
                        raise
                else:
                    if seq > 0:
                        return seq, None
                    # Not servable at once (hand-over, waiting for an advance): ask alone, and
                    # let the AllocSvr wait for it.
            r = await _unary(p.seq.Next, pb.NextRequest(uid=uid, route_version=version), attempt_until - time.monotonic())
            return r.seq, _table_of(r)

        return await self._call(uid, timeout, attempt)

    async def current(self, uid: int, *, timeout: Optional[float] = None) -> int:
        """``uid``'s current sequence without allocating: at least every value handed out for it
        and below the next one; 0 if its section never allocated anything."""

        async def attempt(p: _Peer, version: int, attempt_until: float):
            r = await _unary(p.seq.Current, pb.CurrentRequest(uid=uid, route_version=version), attempt_until - time.monotonic())
            return r.seq, _table_of(r)

        return await self._call(uid, timeout, attempt)

    async def next_batch(self, uids: Sequence[int], *, timeout: Optional[float] = None) -> List[int]:
        """The next sequence of each uid, in order; a repeated uid gets increasing values in batch
        order. One NextBatch RPC per AllocSvr involved, each all-or-nothing; the whole batch is
        not (a part that failed leaves only gaps, never repeats). Each retry regroups the uids
        not answered yet by their owners in the current tables."""
        self._stats.calls += 1
        try:
            return await self._next_batch(list(uids), self._until(timeout))
        except BaseException:
            self._stats.failed += 1
            raise

    def _group(self, uids: List[int], pending: List[int]):
        """Groups pending (indices into uids) by the owner of each uid's section: ([(addr,
        version, [indices])] in order of first appearance, unrouted indices), or None with the
        first uid no table covers."""
        groups: Dict[str, list] = {}
        unrouted: List[int] = []
        for i in pending:
            uid = uids[i]
            t = _table_in(self._tables, uid)
            if t is None:
                return None, uid
            e = _owner_of(t, uid)
            if e is None or not e.addr:
                unrouted.append(i)
                continue
            g = groups.get(e.addr)
            if g is None:
                g = groups[e.addr] = [e.addr, t.version, []]
            g[1] = min(g[1], t.version)
            g[2].append(i)
        return (list(groups.values()), unrouted), None

    async def _next_batch(self, uids: List[int], until: float) -> List[int]:
        if not uids:
            raise InvalidArgument(C.INVALID_ARGUMENT, "empty batch", "give at least one uid")
        for uid in uids:
            if not isinstance(uid, int) or uid < 0 or uid >> 64:
                raise InvalidArgument(C.INVALID_ARGUMENT, f"uid {uid!r} is not an unsigned 64-bit integer")
        out = [0] * len(uids)
        pending = list(range(len(uids)))
        b = STANDARD_RETRY.new_backoff()
        while True:
            self._raise_if_closed()
            gs, missing = self._group(uids, pending)
            if gs is None:
                # Learns the tables, or says the uid is outside every set.
                try:
                    await self._locate(missing, until)
                except SeqsvrError as e:
                    if e.code == C.INVALID_ARGUMENT:
                        raise
                gs, missing = self._group(uids, pending)
                if gs is None:
                    raise Unavailable(C.UNAVAILABLE, f"uid {missing}: no route table has its set yet; retry")
            routed, unrouted = gs
            t = _attempt_timeout(until)
            if t <= 0:
                raise _deadline_error(None)

            async def send(g):
                addr, version, idx = g
                p = self._peer(addr)
                r = await _unary(p.seq.NextBatch, pb.NextBatchRequest(uids=[uids[i] for i in idx], route_version=version), t)
                return list(r.seqs), _table_of(r)

            results = await asyncio.gather(*(send(g) for g in routed), return_exceptions=True)
            wait: Optional[SeqsvrError] = None
            redirected: Optional[SeqsvrError] = None
            if unrouted:
                wait = Unavailable(C.UNAVAILABLE, f"no AllocSvr serves uid {uids[unrouted[0]]}'s section yet")
            answered = set()
            for (addr, _, idx), r in zip(routed, results):
                if isinstance(r, BaseException):
                    if not isinstance(r, SeqsvrError):
                        raise r
                    if r.code == C.FAILED_PRECONDITION and r.route_table is not None:
                        self._install(r.route_table)
                        redirected = r
                    elif retryable(r.code):
                        wait = r
                    else:
                        raise r
                    continue
                seqs, table = r
                if len(seqs) != len(idx):
                    raise Internal(C.INTERNAL, f"{addr} answered {len(seqs)} values for {len(idx)} uids")
                self._install(table)
                for k, i in enumerate(idx):
                    out[i] = seqs[k]
                    answered.add(i)
            pending = [i for i in pending if i not in answered]
            if not pending:
                return out
            if wait is None and redirected is not None and b.redirect():
                self._stats.redirects += 1
                continue  # regroup at once by the tables the redirects brought
            last = wait if wait is not None else redirected
            if not await b.wait(until):
                raise _deadline_error(last)
            self._stats.retries += 1
            await self._refresh_for([uids[i] for i in pending], until)

    # -- coalescing ---------------------------------------------------------------------------

    async def _next_coalesced(self, p: _Peer, uid: int, version: int, attempt_until: float) -> int:
        """Queues uid for p's next coalesced RPC and waits for its value; 0 = not served at once
        (the caller asks alone). A full queue fails at once with RESOURCE_EXHAUSTED."""
        if self._closed:
            raise Cancelled(C.CANCELLED, "the client is closed")
        if p.coalescer is None:
            p.coalescer = self._spawn(self._coalesce(p))
        if len(p.queue) >= self._opts.max_queued:
            raise ResourceExhausted(
                C.RESOURCE_EXHAUSTED,
                f"{self._opts.max_queued} calls already wait for a coalesced RPC to {p.addr} (Options.max_queued)",
                "the AllocSvr answers slower than calls arrive: back off before retrying, or raise "
                "Options.max_queued or max_in_flight")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        p.queue.append(_Pending(uid, version, attempt_until, fut))
        p.wakeup.set()
        # One timer that fails the future at the attempt's end, not asyncio.wait_for: wait_for
        # wraps every call in another future and callbacks, a tenth of a coalesced call's CPU.
        timer = loop.call_at(loop.time() + max(attempt_until - time.monotonic(), 0.0),
                             _expire, fut, p.addr)
        try:
            return await fut
        finally:
            timer.cancel()

    async def _coalesce(self, p: _Peer) -> None:
        """p's coalescing task: once one of max_in_flight slots is free, it takes every call
        waiting (up to max_coalesced) and sends them as one NextBatch with independent entries,
        in queue order; calls pile up in the queue meanwhile."""
        slots = asyncio.Semaphore(self._opts.max_in_flight)
        while not self._closed:
            await slots.acquire()
            while not p.queue:
                p.wakeup.clear()
                await p.wakeup.wait()
            batch: List[_Pending] = []
            while p.queue and len(batch) < self._opts.max_coalesced:
                call = p.queue.popleft()
                if not call.fut.done():  # callers that gave up are left out
                    batch.append(call)
            if not batch:
                slots.release()
                continue
            t = self._spawn(self._send_coalesced(p, batch))
            t.add_done_callback(lambda _t: slots.release())

    async def _send_coalesced(self, p: _Peer, batch: List[_Pending]) -> None:
        """Sends one coalesced NextBatch and hands each caller its answer: its value (0: not
        served at once), or the RPC's error for all of them."""
        self._stats.coalesced_rpcs += 1
        until = max(c.until for c in batch)
        version = min(c.version for c in batch)

        def answer_all(err: SeqsvrError) -> None:
            for c in batch:
                if not c.fut.done():
                    c.fut.set_exception(err.copy())

        timeout = until - time.monotonic()
        if timeout <= 0:
            answer_all(DeadlineExceeded(C.DEADLINE_EXCEEDED, "the deadline passed before the batch was sent"))
            return
        try:
            r = await _unary(p.seq.NextBatch, pb.NextBatchRequest(uids=[c.uid for c in batch], route_version=version,
                                                                  independent=True), timeout)
        except SeqsvrError as e:
            answer_all(e)
            return
        except asyncio.CancelledError:
            answer_all(Cancelled(C.CANCELLED, "the client is closed"))
            raise
        except Exception as e:  # not a gRPC status (e.g. a call on a closed channel): still answered
            answer_all(Unknown(C.UNKNOWN, f"the coalesced RPC to {p.addr} failed: {type(e).__name__}: {e}"))
            return
        seqs = r.seqs
        if len(seqs) != len(batch):
            answer_all(Internal(C.INTERNAL, f"{p.addr} answered {len(seqs)} values for {len(batch)} uids"))
            return
        self._install(_table_of(r))
        for c, s in zip(batch, seqs):
            if not c.fut.done():
                c.fut.set_result(s)

    # -- ids ----------------------------------------------------------------------------------

    def _addresses(self) -> List[str]:
        """Every AllocSvr known now: the seeds, then those the route tables name."""
        out = list(self._seeds)
        for t in self._tables:
            for e in t.entries:
                if e.addr and e.addr not in out:
                    out.append(e.addr)
        return out

    def _round_robin(self) -> List[str]:
        all_ = self._addresses()
        start = next(self._cursor) % len(all_)
        return all_[start:] + all_[:start]

    async def _id_call(self, until: float, attempt: Callable[[_Peer, float], Awaitable]):
        """The retry loop of the id calls: rounds over the known AllocSvrs, starting one further
        each call; after a round in which every one failed, back off and refresh the routes."""
        b = STANDARD_RETRY.new_backoff()
        while True:
            self._raise_if_closed()
            failures: List[str] = []
            last: Optional[SeqsvrError] = None
            for addr in self._round_robin():
                t = _attempt_timeout(until)
                if t <= 0:
                    break
                try:
                    p = self._peer(addr)
                    return await attempt(p, t)
                except SeqsvrError as e:
                    if not retryable(e.code):
                        raise
                    failures.append(f"{addr}: {e.code.name}: {e.message}")
                    last = e
            if last is None:
                raise DeadlineExceeded(C.DEADLINE_EXCEEDED,
                                       f"the deadline passed before an AllocSvr could be asked ({'; '.join(failures)})")
            if not await b.wait(until):
                raise type(last)(last.code, f"no AllocSvr answered in time; last round: {'; '.join(failures)}", last.hint)
            await self._refresh_from(self._addresses(), min(until, time.monotonic() + REFRESH_TIMEOUT_MAX))

    async def next_ids(self, scheme: str, count: int, *, business: int = 0,
                       timeout: Optional[float] = None) -> IDs:
        """``count`` new ids of ``scheme`` (a name of the cluster config's ``[ids.schemes]``) from
        one AllocSvr, strictly increasing, with the worker id they carry. ``business``: weibo's
        business number (0..=31). Any AllocSvr serves any scheme: calls go round-robin over every
        AllocSvr known; a retryable failure goes to the next one at once, and after a round in
        which every one failed the client backs off, refreshes the routes and tries another
        round. Other codes are final (NOT_FOUND: no such scheme; INVALID_ARGUMENT: a count or
        field that does not fit; RESOURCE_EXHAUSTED: every worker id held, or the time field ran
        out)."""
        if count <= 0:
            raise InvalidArgument(C.INVALID_ARGUMENT, f"count {count}: ask for at least one id")
        if count >> 32:
            raise InvalidArgument(C.INVALID_ARGUMENT, f"count {count} does not fit in 32 bits")
        req = pb.NextIdsRequest(scheme=scheme, count=count, business=business, packed_ids64=True, packed_ids128=True)

        async def attempt(p: _Peer, t: float):
            r = await _unary(p.ids.NextIds, req, t)
            return _ids_of(p.addr, r, count)

        return await self._id_call(self._until(timeout), attempt)

    async def decode_on_server(self, scheme: str, text: str, *, timeout: Optional[float] = None) -> pb.DecodeIdResponse:
        """Asks an AllocSvr to decode ``text`` (:func:`seqsvr.decode` does the same without a
        server, given the layout)."""

        async def attempt(p: _Peer, t: float):
            return await _unary(p.ids.Decode, pb.DecodeIdRequest(scheme=scheme, text=text), t)

        return await self._id_call(self._until(timeout), attempt)

    def _session_uid(self, scheme: str, key: int) -> Optional[int]:
        """The uid rongcloud session key of scheme is routed by, if known: what the AllocSvrs
        answered first, else the cluster config's rule."""
        uid = self._sessions.get((scheme, key))
        if uid is not None:
            return uid
        s = (self._opts.ids or {}).get(scheme)
        if s is None or s.scheme != RONGCLOUD:
            return None
        begin, end = s.session_uids()
        if begin >= end:
            return None
        return session_uid(begin, end, key)

    def _session_owner(self, scheme: str, key: int) -> str:
        uid = self._session_uid(scheme, key)
        if uid is None:
            return ""
        return _owner_addr(_table_in(self._tables, uid), uid)

    def _remember_session(self, scheme: str, key: int, uid: int) -> None:
        if len(self._sessions) >= SESSION_UIDS_MAX:
            self._sessions.clear()
        self._sessions[(scheme, key)] = uid

    async def next_session_ids(self, scheme: str, count: int, session: Session, *,
                               timeout: Optional[float] = None) -> IDs:
        """``count`` new rongcloud ids of ``session``, strictly increasing (and above every id the
        session had before), from the owner of the session's section. The client asks the owner
        directly once it knows the session's uid (from the cluster config, or an earlier answer)
        and that uid's route; otherwise any AllocSvr, which answers NOT_OWNER with the uid and its
        route table. Retries as :meth:`next_ids`, within ``timeout``."""
        if count <= 0:
            raise InvalidArgument(C.INVALID_ARGUMENT, f"count {count}: ask for at least one id")
        if count >> 32:
            raise InvalidArgument(C.INVALID_ARGUMENT, f"count {count} does not fit in 32 bits")
        key = session.key()
        req = pb.NextIdsRequest(scheme=scheme, count=count, session_type=session.type, packed_ids128=True)
        if session.id:
            req.session_id = session.id
        else:
            req.session_hash = session.hash
        until = self._until(timeout)
        b = STANDARD_RETRY.new_backoff()
        redirects = 0
        while True:
            self._raise_if_closed()
            owner = self._session_owner(scheme, key)
            addrs = [owner] if owner and redirects < SESSION_REDIRECTS_MAX else self._round_robin()
            failures: List[str] = []
            last_code, last_hint = C.UNAVAILABLE, ""
            redirected = False
            for addr in addrs:
                t = _attempt_timeout(until)
                if t <= 0:
                    break
                try:
                    p = self._peer(addr)
                    r = await _unary(p.ids.NextIds, req, t)
                except SeqsvrError as e:
                    if e.is_not_owner:
                        if e.session_uid is not None:
                            self._remember_session(scheme, key, e.session_uid)
                        self._install(e.route_table)
                        redirects += 1
                        redirected = redirects <= SESSION_REDIRECTS_MAX
                        failures.append(f"{addr}: {e.message}")
                        owner = self._session_owner(scheme, key)
                        if redirected and owner and owner != addr:
                            break  # ask the owner now
                        continue
                    if not retryable(e.code):
                        raise
                    last_code, last_hint = e.code, e.hint
                    failures.append(f"{addr}: {e.code.name}: {e.message}")
                    continue
                self._remember_session(scheme, key, r.session_uid)
                return _ids_of(addr, r, count)
            if redirected:
                continue
            if not await b.wait(until):
                from .errors import error_for
                raise error_for(last_code, f"no owner of the session answered in time; last round: {'; '.join(failures)}", last_hint)
            redirects = 0
            await self._refresh_from(self._addresses(), min(until, time.monotonic() + REFRESH_TIMEOUT_MAX))


async def connect(options: Options, *, timeout: Optional[float] = None) -> AsyncClient:
    """``await AsyncClient.connect(options, timeout=timeout)``."""
    return await AsyncClient.connect(options, timeout=timeout)
