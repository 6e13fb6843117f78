"""The asyncio client against in-process fake AllocSvrs: routing, NOT_OWNER, retries,
coalescing, batches, ids."""

import asyncio
import struct
import time

import grpc
import pytest

import seqsvr
from fakes import Counter, eventually, not_owner, serving, table
from seqsvr.v1 import seq_pb2 as pb

C = grpc.StatusCode


async def test_an_older_route_table_is_never_installed():
    c = seqsvr.AsyncClient(seqsvr.Options(seeds=["127.0.0.1:1"], plaintext=True))
    c.learn_routes(table(0, 5, (0, 100, "a")))
    c.learn_routes(table(0, 4, (0, 100, "old")), table(0, 5, (0, 100, "same version")))
    assert [(t.version, t.entries[0].addr) for t in c.route_tables()] == [(5, "a")]
    c.learn_routes(table(1, 1, (100, 200, "b")), table(0, 6, (0, 100, "new")))
    assert [(t.set_id, t.version, t.entries[0].addr) for t in c.route_tables()] == [(0, 6, "new"), (1, 1, "b")]
    await c.close()


async def test_not_owner_installs_the_newer_table_and_goes_to_the_owner(fakes, plaintext):
    a, b = await fakes(2)
    counter = Counter()
    old = table(0, 1, (0, 100, a.addr))
    new = table(0, 2, (0, 50, a.addr), (50, 100, b.addr))
    serving(a, counter, new)
    a.table = old  # a hands out the old table first: the client learns a owns everything
    serving(b, counter, new)
    c = await plaintext(a.addr, coalescing=False)
    assert c.route_tables()[0].version == 1
    # uid 700 is in section 70: b's in v2. a answers NOT_OWNER with v2; the client goes to b.
    assert await c.next(700) == 1
    assert c.route_tables()[0].version == 2
    assert a.calls["Next"] == 1 and b.calls["Next"] == 1
    assert await c.next(700) == 2
    assert a.calls["Next"] == 1 and b.calls["Next"] == 2, "the second call goes to the owner directly"
    assert c.stats().redirects == 1
    for f in (a, b):
        for method, n in f.calls.items():
            assert f.no_forward[method] == n, f"every call is marked seqsvr-no-forward: {method} on {f.addr}"

    # An older table riding on a later reply is not installed.
    async def nxt(r, context):
        return pb.NextResponse(seq=counter.take(r.uid), route_table=table(0, 1, (0, 100, a.addr)))

    b.next = nxt
    assert await c.next(700) == 3
    assert c.route_tables()[0].version == 2


async def test_retries_are_bounded_by_the_deadline(fakes, plaintext):
    (f,) = await fakes(1)

    async def unavailable(r, context):
        await context.abort(C.UNAVAILABLE, "no lease")

    f.next = unavailable
    f.table = table(0, 1, (0, 100, f.addr))
    c = await plaintext(f.addr, coalescing=False)
    start = time.monotonic()
    with pytest.raises(seqsvr.Unavailable) as info:
        await c.next(7, timeout=0.4)
    assert time.monotonic() - start < 0.4, "the call returned only after its deadline"
    assert f.calls["Next"] >= 3, f"{f.calls['Next']} attempts in 400 ms"
    e = info.value
    assert e.code == C.UNAVAILABLE and e.message == "no lease" and e.hint
    assert isinstance(e, seqsvr.SeqsvrError)

    async def exhausted(r, context):
        await context.abort(C.RESOURCE_EXHAUSTED, "too many waiting calls")

    f.next = exhausted
    before = f.calls["Next"]
    with pytest.raises(seqsvr.ResourceExhausted):
        await c.next(7)
    assert f.calls["Next"] == before + 1, "a final code returns after one attempt"

    # The caller's cancel ends the loop at once.
    f.next = unavailable
    after = f.calls["Next"]
    task = asyncio.ensure_future(c.next(7, timeout=30))
    await eventually(lambda: f.calls["Next"] > after, "an attempt")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_default_timeout_bounds_a_call(fakes, plaintext):
    (f,) = await fakes(1)

    async def unavailable(r, context):
        await context.abort(C.UNAVAILABLE, "no lease")

    f.next = unavailable
    f.table = table(0, 1, (0, 100, f.addr))
    c = await plaintext(f.addr, coalescing=False, default_timeout=0.3)
    start = time.monotonic()
    with pytest.raises(seqsvr.Unavailable):
        await c.next(7)
    assert time.monotonic() - start < 0.3


async def test_a_not_owner_loop_ends_within_the_deadline(fakes, plaintext):
    a, b = await fakes(2)
    version = [1]

    def bounce(to):
        async def nxt(r, context):
            version[0] += 1
            await not_owner(context, table(0, version[0], (0, 100, to.addr)))
        return nxt

    a.next, b.next = bounce(b), bounce(a)
    a.table = table(0, 1, (0, 100, a.addr))
    c = await plaintext(a.addr, coalescing=False)
    start = time.monotonic()
    with pytest.raises(seqsvr.NotOwner) as info:
        await c.next(1, timeout=0.3)
    assert time.monotonic() - start < 0.3
    assert info.value.code == C.FAILED_PRECONDITION and isinstance(info.value, seqsvr.FailedPrecondition)
    s = c.stats()
    assert s.retries > 0 and 0 < s.redirects <= seqsvr.STANDARD_RETRY.redirects_max * (s.retries + 1)


async def test_a_uid_outside_every_set_is_invalid_argument(fakes, plaintext):
    (f,) = await fakes(1)
    serving(f, Counter(), table(0, 1, (0, 100, f.addr)))
    c = await plaintext(f.addr)
    for call in (c.next(5000), c.current(5000), c.next_batch([1, 5000])):
        with pytest.raises(seqsvr.InvalidArgument) as info:
            await call
        assert "outside every set" in info.value.message and info.value.hint
    with pytest.raises(seqsvr.InvalidArgument):
        await c.next_batch([])
    assert f.calls["Next"] == 0 and f.calls["NextBatch"] == 0


async def test_coalesced_calls_keep_their_order_and_get_their_own_values(fakes, plaintext):
    (f,) = await fakes(1)
    counter = Counter()
    serving(f, counter, table(0, 1, (0, 100, f.addr)))
    release = asyncio.Event()
    batches = []

    async def batch(r, context):
        batches.append(list(r.uids))
        assert r.independent
        if len(batches) == 1:
            await release.wait()
        return pb.NextBatchResponse(seqs=[counter.take(u) for u in r.uids])

    f.next_batch = batch
    c = await plaintext(f.addr, max_in_flight=1)
    first = asyncio.ensure_future(c.next(1))
    await eventually(lambda: len(batches) == 1, "the first batch sent")
    uids = [3, 4, 3, 5, 3]
    rest = []
    for uid in uids:  # queued in this order while the one slot is taken
        rest.append(asyncio.ensure_future(c.next(uid)))
        await asyncio.sleep(0)
    peer = c._peers[f.addr]
    await eventually(lambda: len(peer.queue) == len(uids), "queued")
    release.set()
    assert await first == 1
    got = await asyncio.gather(*rest)
    assert batches == [[1], uids], "one NextBatch for the queued calls, in queue order"
    assert got == [1, 1, 2, 1, 3], "each caller gets its own entry; a repeated uid increases in queue order"
    assert c.stats().coalesced_rpcs == 2 and f.calls["Next"] == 0


async def test_at_most_max_in_flight_coalesced_rpcs_per_alloc(fakes, plaintext):
    (f,) = await fakes(1)
    counter = Counter()
    serving(f, counter, table(0, 1, (0, 100, f.addr)))
    release = asyncio.Event()
    running = [0]
    most = [0]

    async def batch(r, context):
        running[0] += 1
        most[0] = max(most[0], running[0])
        await release.wait()
        running[0] -= 1
        return pb.NextBatchResponse(seqs=[counter.take(u) for u in r.uids])

    f.next_batch = batch
    c = await plaintext(f.addr, max_in_flight=2, max_coalesced=3)
    calls = []
    for i in range(20):
        calls.append(asyncio.ensure_future(c.next(i % 7)))
        await asyncio.sleep(0)
    peer = c._peers[f.addr]
    await eventually(lambda: running[0] == 2 and len(peer.queue) > 0, "two RPCs in flight, the rest queued")
    assert f.calls["NextBatch"] == 2
    release.set()
    got = await asyncio.gather(*calls)
    assert most[0] == 2
    assert f.calls["NextBatch"] == c.stats().coalesced_rpcs >= 20 // 3
    per_uid = {}
    for i, v in enumerate(got):
        per_uid.setdefault(i % 7, []).append(v)
    for uid, values in per_uid.items():
        assert sorted(values) == list(range(1, len(values) + 1)), f"uid {uid}: {values}"


async def test_a_full_queue_refuses_at_once_and_a_zero_is_asked_alone(fakes, plaintext):
    (f,) = await fakes(1)
    counter = Counter()
    serving(f, counter, table(0, 1, (0, 100, f.addr)))
    release = asyncio.Event()
    batches = [0]

    async def batch(r, context):
        batches[0] += 1
        if batches[0] == 1:
            await release.wait()
        return pb.NextBatchResponse(seqs=[0] * len(r.uids))  # none served at once

    f.next_batch = batch
    c = await plaintext(f.addr, max_in_flight=1, max_queued=2)
    peer = c._peers[f.addr]
    calls = [asyncio.ensure_future(c.next(5))]
    await eventually(lambda: batches[0] == 1, "the first batch sent")
    for i in (1, 2):
        calls.append(asyncio.ensure_future(c.next(5)))
        await eventually(lambda: len(peer.queue) == i, "queued")
    with pytest.raises(seqsvr.ResourceExhausted) as info:
        await c.next(5)
    assert info.value.hint and "max_queued" in info.value.message
    release.set()
    assert sorted(await asyncio.gather(*calls)) == [1, 2, 3]
    assert f.calls["Next"] == 3, "the three 0s asked alone"


async def test_next_batch_keeps_order_and_regroups_after_a_hand_over(fakes, plaintext):
    a, b = await fakes(2)
    counter = Counter()
    t1 = table(0, 1, (0, 50, a.addr), (50, 100, b.addr))
    serving(a, counter, t1)
    serving(b, counter, t1)
    c = await plaintext(a.addr)
    uids = [5, 700, 5, 300, 700, 5]
    assert await c.next_batch(uids) == [1, 1, 2, 1, 2, 3]
    assert a.calls["NextBatch"] == 1 and b.calls["NextBatch"] == 1
    # Section 30 (uid 300) moves from a to b: a answers NOT_OWNER with v2 for its group.
    t2 = table(0, 2, (0, 30, a.addr), (30, 31, b.addr), (31, 50, a.addr), (50, 100, b.addr))
    serving(a, counter, t2)
    serving(b, counter, t2)
    assert await c.next_batch(uids) == [4, 3, 5, 2, 4, 6]
    assert c.route_tables()[0].version == 2
    assert c.stats().redirects == 1


async def test_current_follows_not_owner(fakes, plaintext):
    a, b = await fakes(2)
    t2 = table(0, 2, (0, 100, b.addr))

    async def cur_a(r, context):
        await not_owner(context, t2)

    async def cur_b(r, context):
        return pb.CurrentResponse(seq=41)

    a.current, b.current = cur_a, cur_b
    a.table = table(0, 1, (0, 100, a.addr))
    c = await plaintext(a.addr)
    assert await c.current(9) == 41
    assert b.no_forward["Current"] == 1


async def test_no_transport_is_refused():
    with pytest.raises(seqsvr.FailedPrecondition) as info:
        seqsvr.AsyncClient(seqsvr.Options(seeds=["127.0.0.1:1"]))
    assert "plaintext" in info.value.hint
    with pytest.raises(seqsvr.InvalidArgument):
        seqsvr.AsyncClient(seqsvr.Options(seeds=[], plaintext=True))


async def test_connect_fails_when_no_seed_answers():
    start = time.monotonic()
    with pytest.raises(seqsvr.Unavailable) as info:
        await seqsvr.AsyncClient.connect(seqsvr.Options(seeds=["127.0.0.1:1"], plaintext=True), timeout=0.5)
    assert time.monotonic() - start < 0.5
    assert "127.0.0.1:1" in info.value.message


def _ids64(ids):
    return struct.pack(f">{len(ids)}Q", *ids)


async def test_a_malformed_ids_answer_is_internal(fakes, plaintext):
    (f,) = await fakes(1)
    f.table = table(0, 1, (0, 100, f.addr))
    answers = [
        pb.NextIdsResponse(ids64_packed=_ids64([3, 2, 4]), worker_id=1),  # not increasing
        pb.NextIdsResponse(ids64_packed=_ids64([1, 2]), worker_id=1),  # too few
        pb.NextIdsResponse(ids64_packed=b"\x00" * 9),  # not a multiple of 8
        pb.NextIdsResponse(ids64_packed=_ids64([1, 2, 3]), ids128_packed=b"\x00" * 16),  # both widths
    ]

    async def ids(r, context):
        return answers.pop(0)

    f.next_ids = ids
    c = await plaintext(f.addr)
    for _ in range(4):
        with pytest.raises(seqsvr.Internal):
            await c.next_ids("snowflake", 3)

    async def good(r, context):
        assert r.packed_ids64 and r.packed_ids128 and r.count == 3 and r.business == 7
        return pb.NextIdsResponse(ids64_packed=_ids64([10, 11, 12]), worker_id=9)

    f.next_ids = good
    got = await c.next_ids("weibo", 3, business=7)
    assert got.ids == [10, 11, 12] and got.worker_id == 9 and got.width == 64

    async def wide(r, context):
        ids = [(1 << 100) + 1, (1 << 100) + 2]
        return pb.NextIdsResponse(ids128_packed=b"".join(i.to_bytes(16, "big") for i in ids), worker_id=2)

    f.next_ids = wide
    got = await c.next_ids("uuidv7", 2)
    assert got.ids == [(1 << 100) + 1, (1 << 100) + 2] and got.width == 128
    with pytest.raises(seqsvr.InvalidArgument):
        await c.next_ids("snowflake", 0)


async def test_id_calls_skip_a_failing_alloc_and_return_a_final_code(fakes, plaintext):
    a, b = await fakes(2)
    a.table = table(0, 1, (0, 50, a.addr), (50, 100, b.addr))

    async def down(r, context):
        await context.abort(C.UNAVAILABLE, "no worker id yet")

    async def up(r, context):
        return pb.NextIdsResponse(ids64_packed=_ids64([5]), worker_id=3)

    a.next_ids, b.next_ids = down, up
    c = await plaintext(a.addr)
    for _ in range(4):
        got = await c.next_ids("snowflake", 1)
        assert got.worker_id == 3
    assert b.calls["NextIds"] == 4

    async def unknown(r, context):
        await context.abort(C.NOT_FOUND, "no id scheme no-such")

    b.next_ids = unknown
    a.next_ids = unknown
    before = a.calls["NextIds"] + b.calls["NextIds"]
    with pytest.raises(seqsvr.NotFound) as info:
        await c.next_ids("no-such", 1)
    assert info.value.message == "no id scheme no-such"
    assert a.calls["NextIds"] + b.calls["NextIds"] == before + 1


async def test_session_ids_go_to_the_owner_named_by_not_owner(fakes, plaintext):
    from seqsvr.errors import ROUTE_TABLE_METADATA, SESSION_UID_METADATA

    a, b = await fakes(2)
    t = table(0, 1, (0, 50, a.addr), (50, 100, b.addr))
    a.table = t

    async def elsewhere(r, context):
        await context.abort(C.FAILED_PRECONDITION, "NOT_OWNER: the session's section is served elsewhere",
                            trailing_metadata=((ROUTE_TABLE_METADATA, t.SerializeToString()), (SESSION_UID_METADATA, "777")))

    async def owner(r, context):
        assert r.session_id == "group-42" and r.session_type == 1 and not r.HasField("session_hash")
        return pb.NextIdsResponse(ids128_packed=(5).to_bytes(16, "big") + (6).to_bytes(16, "big"), session_uid=777)

    a.next_ids, b.next_ids = elsewhere, owner
    c = await plaintext(a.addr)
    s = seqsvr.Session(type=1, id="group-42")
    for _ in range(3):
        got = await c.next_session_ids("rongcloud", 2, s)
        assert got.ids == [5, 6] and got.session_uid == 777
    assert b.calls["NextIds"] == 3
    assert a.calls["NextIds"] <= 1, "after the first answer the owner is asked directly"
    with pytest.raises(seqsvr.InvalidArgument):
        await c.next_session_ids("rongcloud", 1, seqsvr.Session(type=16, id="x"))


@pytest.mark.parametrize("coalescing", [True, False])
async def test_a_hung_alloc_ends_the_call_by_its_deadline(fakes, plaintext, coalescing):
    (f,) = await fakes(1)
    f.table = table(0, 1, (0, 100, f.addr))
    hang = asyncio.Event()

    async def never(r, context):
        await hang.wait()

    f.next = f.next_batch = never
    c = await plaintext(f.addr, coalescing=coalescing)
    start = time.monotonic()
    with pytest.raises(seqsvr.DeadlineExceeded) as info:
        await c.next(3, timeout=0.5)
    # Well under the 3 s an attempt not bounded by what is left of the call would take.
    assert time.monotonic() - start < 2.0, "the attempt is bounded by what is left of the call"
    assert info.value.hint
    hang.set()


async def test_a_closed_client_refuses_calls(fakes, plaintext):
    (f,) = await fakes(1)
    serving(f, Counter(), table(0, 1, (0, 100, f.addr)))
    c = await plaintext(f.addr)
    assert await c.next(1) == 1
    await c.close()
    with pytest.raises(seqsvr.Cancelled):
        await c.next(1)
    # Every call, not only next: each fails at once with the SDK's own CANCELLED instead of
    # retrying it until its deadline (30 s here; the bound of 10 s only catches that).
    calls = {
        "next_batch": c.next_batch([1, 2], timeout=30),
        "next_ids": c.next_ids("snowflake", 1, timeout=30),
        "next_session_ids": c.next_session_ids("rongcloud", 1, seqsvr.Session(1, "chat"), timeout=30),
    }
    for name, call in calls.items():
        with pytest.raises(seqsvr.Cancelled, match="closed"):
            await asyncio.wait_for(call, 10)


async def test_calls_resume_at_the_new_owner_after_the_owner_dies(fakes, plaintext):
    """The owner stops answering (its server is gone): calls fail over to the AllocSvr the
    newer table names, learnt by a route refresh, and every caller's values keep increasing."""
    a, b = await fakes(2)
    counter = Counter()
    serving(a, counter, table(0, 1, (0, 100, a.addr)))
    b.table = table(0, 1, (0, 100, a.addr))
    c = await plaintext(a.addr, b.addr)
    stop = asyncio.Event()
    seen = {}

    async def caller(n):
        last = 0
        while not stop.is_set():
            v = await c.next(5 + n % 2, timeout=5)
            assert v > last
            last = v
            seen[n] = seen.get(n, 0) + 1

    tasks = [asyncio.ensure_future(caller(n)) for n in range(4)]
    await eventually(lambda: sum(seen.values()) > 50, "calls at the first owner")
    await a.stop()  # the owner is gone; b takes over with a newer table
    serving(b, counter, table(0, 2, (0, 100, b.addr)))
    before = sum(seen.values())
    await eventually(lambda: b.calls["NextBatch"] + b.calls["Next"] > 20 and sum(seen.values()) > before + 50,
                     "calls resumed at the new owner")
    stop.set()
    await asyncio.gather(*tasks)
    assert c.route_tables()[0].version == 2 and c.stats().retries > 0
