"""The blocking wrapper: calls from several threads share one client and are coalesced."""

import threading

import pytest

import seqsvr
from fakes import Counter, FakeAlloc, serving, table
from seqsvr.v1 import seq_pb2 as pb


def test_the_sync_client_serves_threads_and_coalesces():
    # The fake runs on a loop thread of its own.

    import asyncio

    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        f = asyncio.run_coroutine_threadsafe(FakeAlloc().start(), loop).result()
        counter = Counter()
        serving(f, counter, table(0, 1, (0, 100, f.addr)))
        release = threading.Event()
        batches = []

        async def batch(r, context):
            batches.append(list(r.uids))
            if len(batches) == 1:
                await loop.run_in_executor(None, release.wait)
            return pb.NextBatchResponse(seqs=[counter.take(u) for u in r.uids])

        f.next_batch = batch
        with seqsvr.Client(seqsvr.Options(seeds=[f.addr], plaintext=True, max_in_flight=1), timeout=5) as c:
            results = []
            lock = threading.Lock()

            def call(uid):
                v = c.next(uid, timeout=10)
                with lock:
                    results.append((uid, v))

            first = threading.Thread(target=call, args=(1,))
            first.start()
            while not batches:
                threading.Event().wait(0.001)
            threads = [threading.Thread(target=call, args=(2,)) for _ in range(10)]
            for th in threads:
                th.start()
            peer = c.async_client._peers[f.addr]
            while len(peer.queue) < 10:
                threading.Event().wait(0.001)
            release.set()
            for th in [first] + threads:
                th.join()
            assert sorted(v for uid, v in results if uid == 2) == list(range(1, 11))
            assert batches == [[1], [2] * 10], "ten threads' calls rode one NextBatch"
            assert c.next_batch([3, 3, 1]) == [1, 2, 2]
            assert c.stats().coalesced_rpcs == 2
            with pytest.raises(seqsvr.InvalidArgument):
                c.next(5000)
        asyncio.run_coroutine_threadsafe(f.stop(), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join()
