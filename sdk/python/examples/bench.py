"""A load generator for the Python SDK, the Python side of docs/benchmarks' SDK comparison (the
Go one is sdk/go/examples/bench/main.go: same flags, same workload, same one JSON line).

The workload of `seqbench run`: --concurrency callers, each a closed loop of one call after
another on a uid drawn from [--uid-base, --uid-base + --uids), uniform or Zipf s = 1, for
--seconds. The callers are asyncio tasks on ONE event loop (plain asyncio unless
--event-loop uvloop), so the SDK's AsyncClient coalesces their concurrent calls. It prints ONE
JSON line: values/s, the latency quantiles and the client's CPU µs per call (getrusage of this
process, user + system, every thread (grpc's C-core threads too), over the timed window only).

    --target seqsvr  the SDK as shipped (AsyncClient.next, concurrent calls coalesced into
                     NextBatch RPCs; --no-coalesce: Options(coalescing=False), one Next RPC
                     per call)
    --target redis   `INCR seq:{uid}` with redis-py (PyPI `redis`, redis.asyncio) on ONE
                     connection shared by every caller and pipelined: callers queue (key,
                     future); one batcher task takes everything queued, sends it as one
                     pipeline (transaction=False) and sets the futures. redis-py runs one
                     pipeline at a time on a connection, so a burst waits for the one before
                     it (the Go bench's redigo writer/reader pair keeps several in flight).

Run it with the SDK installed (sdk/python/build.sh's venv) from the repository's root:

    ~/.cache/seqsvr/python/venv/bin/python sdk/python/examples/bench.py --target seqsvr \\
        --config data/local/cluster.toml --cert data/local/certs/client.pem \\
        --key data/local/certs/client.key --uid-base 4000000 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import itertools
import json
import platform
import random
import re
import resource
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Awaitable, Callable, Dict, List, Optional, Sequence


#: The lines printed at the timed window's start and end (`seqbench sdks` reads the servers'
#: CPU time at each; crates/seqbench/src/sdks.rs).
WINDOW_START, WINDOW_END = "SEQBENCH_WINDOW start", "SEQBENCH_WINDOW end"


def cpu_seconds() -> float:
    """This process's CPU time so far, user + system (every thread)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Zipf:
    """Draws ranks 1..n with P(k) ∝ 1/k (rand_distr's Zipf(n, 1.0), which seqbench uses), by
    binary search in the cumulative distribution (as the Go bench does)."""

    def __init__(self, n: int):
        if n < 1:
            raise ValueError("n must be at least 1")
        cdf = list(itertools.accumulate(1.0 / k for k in range(1, n + 1)))
        total = cdf[-1]
        self.cdf = [c / total for c in cdf]

    def rank0(self, rng: random.Random) -> int:
        """A rank minus 1, in [0, n): the first k with cdf[k] >= u (Go's sort.SearchFloat64s)."""
        return min(bisect.bisect_left(self.cdf, rng.random()), len(self.cdf) - 1)


def quantile_us(sorted_ns: Sequence[int], p: float) -> int:
    """The p-quantile of sorted latencies in ns, in whole µs (truncated, as Go's
    Duration.Microseconds): the element at int(p * (len - 1)), 0 for none."""
    if not sorted_ns:
        return 0
    return sorted_ns[int(p * (len(sorted_ns) - 1))] // 1000


def parse_duration(text: str) -> float:
    """Seconds from a Go-style duration ("3s", "500ms", "1.5s", "2m") or a bare number of seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s|m|h)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration such as 3s or 500ms")
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]
    return float(m.group(1)) * scale


def pkg_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return ""


class RedisBatcher:
    """One redis-py connection shared by every caller: calls queue (key, future), one task sends
    everything queued as one pipeline (transaction=False) and sets each future from the reply in
    order; calls made meanwhile wait for the next burst."""

    def __init__(self, client):
        self.client = client
        self.queue: collections.deque = collections.deque()
        self.wakeup = asyncio.Event()
        self.task: Optional[asyncio.Task] = None
        self.bursts = 0

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def incr(self, uid: int) -> int:
        fut = asyncio.get_running_loop().create_future()
        self.queue.append(("seq:%d" % uid, fut))
        self.wakeup.set()
        return await fut

    async def _run(self) -> None:
        q = self.queue
        while True:
            while not q:
                self.wakeup.clear()
                await self.wakeup.wait()
            burst = list(q)
            q.clear()
            pipe = self.client.pipeline(transaction=False)
            for key, _ in burst:
                pipe.incr(key)
            self.bursts += 1
            try:
                replies = await pipe.execute(raise_on_error=False)
            except Exception as e:  # the connection failed: every call of the burst fails
                for _, fut in burst:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for (_, fut), r in zip(burst, replies):
                if fut.done():
                    continue
                if isinstance(r, BaseException):
                    fut.set_exception(r)
                else:
                    fut.set_result(int(r))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        for _, fut in self.queue:
            if not fut.done():
                fut.cancel()


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="SDK benchmark load generator (Python side)")
    ap.add_argument("--target", default="seqsvr", choices=["seqsvr", "redis"],
                    help="seqsvr (the SDK) or redis (INCR over one shared pipelined connection)")
    ap.add_argument("--config", default="data/local/cluster.toml", help="seqsvr: the cluster file")
    ap.add_argument("--cert", default="data/local/certs/client.pem", help="seqsvr: the application's certificate")
    ap.add_argument("--key", default="data/local/certs/client.key", help="seqsvr: its key")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379", help="redis: the server")
    ap.add_argument("--concurrency", type=int, default=64, help="callers")
    ap.add_argument("--seconds", type=float, default=10, help="how long the timed window lasts")
    ap.add_argument("--uids", type=int, default=100_000, help="uids drawn from [uid-base, uid-base + uids)")
    ap.add_argument("--uid-base", type=int, default=0, help="the first uid")
    ap.add_argument("--dist", default="uniform", help="uniform or zipf (s = 1, rank 1 = uid-base)")
    ap.add_argument("--no-coalesce", action="store_true", help="seqsvr: one Next RPC per call")
    ap.add_argument("--timeout", type=parse_duration, default=3.0,
                    help="each call's deadline (3s, 500ms or seconds; seqsvr only, as in the Go bench)")
    ap.add_argument("--event-loop", default="asyncio", choices=["asyncio", "uvloop"],
                    help="asyncio (default) or uvloop (needs PyPI uvloop)")
    a = ap.parse_args(argv)
    if a.concurrency < 1 or a.uids < 1 or a.seconds <= 0:
        ap.error("--concurrency and --uids must be at least 1, --seconds above 0")
    if a.dist not in ("uniform", "zipf"):
        ap.error(f"--dist {a.dist!r}: uniform or zipf")
    return a


async def run(a: argparse.Namespace) -> dict:
    z = Zipf(a.uids) if a.dist == "zipf" else None
    res: Dict[str, object] = {
        "sdk": "python", "target": a.target, "coalesce": False, "concurrency": a.concurrency, "dist": a.dist,
        "uids": a.uids, "uid_base": a.uid_base,
    }
    client = None
    batcher: Optional[RedisBatcher] = None
    redis_client = None
    redis_pool = None
    if a.target == "seqsvr":
        import seqsvr

        opts = seqsvr.from_cluster_file(a.config, a.cert, a.key, coalescing=not a.no_coalesce)
        res["coalesce"] = not a.no_coalesce
        client = await seqsvr.connect(opts, timeout=10)
        timeout = a.timeout

        def make_call() -> Callable[[int], Awaitable[int]]:
            nxt = client.next
            return lambda uid: nxt(uid, timeout=timeout)
    else:
        import redis
        import redis.asyncio as aredis
        from redis.utils import HIREDIS_AVAILABLE

        # max_connections=1: a second connection would fail with "Too many connections".
        redis_pool = aredis.ConnectionPool.from_url(a.redis_url, max_connections=1)
        redis_client = aredis.Redis(connection_pool=redis_pool)
        await redis_client.ping()
        batcher = RedisBatcher(redis_client)
        batcher.start()
        res["coalesce"] = True
        major_minor = ".".join(redis.__version__.split(".")[:2])
        parser = "hiredis parser" if HIREDIS_AVAILABLE else "pure-Python parser"
        res["redis_client"] = f"redis-py {major_minor} (asyncio, one connection, pipelined, {parser})"

        def make_call() -> Callable[[int], Awaitable[int]]:
            return batcher.incr

    calls = 0
    failed = 0
    first_err: List[str] = []
    lat: List[List[int]] = [[] for _ in range(a.concurrency)]
    window_ns = int(a.seconds * 1e9)
    begin = asyncio.Event()
    base, n = a.uid_base, a.uids

    async def worker(w: int) -> None:
        nonlocal calls, failed
        call = make_call()
        rng = random.Random(w + 1)
        mine = lat[w]
        now = time.perf_counter_ns
        await begin.wait()
        stop = now() + window_ns
        while True:
            start = now()
            if start >= stop:
                return
            uid = base + (z.rank0(rng) if z is not None else rng.randrange(n))
            try:
                await call(uid)
            except Exception as e:
                failed += 1
                if failed == 1:
                    first_err.append(f"{type(e).__name__}: {e}")
                continue
            calls += 1
            mine.append(now() - start)

    try:
        tasks = [asyncio.get_running_loop().create_task(worker(w)) for w in range(a.concurrency)]
        await asyncio.sleep(0)  # every worker waits at begin
        # The window's edges for `seqbench sdks`, which reads the servers' CPU at each.
        print(WINDOW_START, flush=True)
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        begin.set()
        await asyncio.gather(*tasks)
        elapsed, used = time.perf_counter() - t0, cpu_seconds() - cpu0
        print(WINDOW_END, flush=True)
        if client is not None:
            s = client.stats()
        if batcher is not None:
            res["redis_bursts"] = batcher.bursts
            info = await redis_client.info("clients")
            res["redis_connected_clients"] = info.get("connected_clients")
    finally:
        if client is not None:
            await client.close()
        if batcher is not None:
            await batcher.close()
            await redis_client.aclose()
            await redis_pool.disconnect()

    all_ns = sorted(itertools.chain.from_iterable(lat))
    res["seconds"] = elapsed
    res["calls"] = calls
    res["values"] = calls
    res["errors"] = failed
    if first_err:
        res["first_error"] = first_err[0]
    res["calls_per_s"] = calls / elapsed
    res["values_per_s"] = res["calls_per_s"]
    res["p50_us"], res["p99_us"], res["p999_us"], res["max_us"] = (quantile_us(all_ns, p) for p in (0.5, 0.99, 0.999, 1))
    res["client_cpu_us_per_call"] = used * 1e6 / calls if calls else 0.0
    res["client_cpu_cores"] = used / elapsed
    res["coalesced_rpcs"] = 0
    if client is not None:
        res["coalesced_rpcs"] = s.coalesced_rpcs
        if s.coalesced_rpcs:
            res["calls_per_coalesced_rpc"] = s.calls / s.coalesced_rpcs
    res["event_loop"] = a.event_loop
    res["python"] = platform.python_version()
    if a.target == "seqsvr":
        res["grpcio"] = pkg_version("grpcio")
    return res


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    if a.event_loop == "uvloop":
        import uvloop

        res = uvloop.run(run(a))
    else:
        res = asyncio.run(run(a))
    print(json.dumps(res, ensure_ascii=False), flush=True)
    return 0 if res["calls"] else 1


if __name__ == "__main__":
    sys.exit(main())
