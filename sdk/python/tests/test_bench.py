"""The pure parts of examples/bench.py (the SDK benchmark's load generator): the Zipf sampler,
the quantiles, the flags, and the Redis batcher over a fake client."""

import asyncio
import importlib.util
import math
import os
import random
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("seqsvr_bench", os.path.join(HERE, "..", "examples", "bench.py"))
bench = importlib.util.module_from_spec(_spec)
sys.modules["seqsvr_bench"] = bench
_spec.loader.exec_module(bench)


class FixedRng:
    """A random.Random stand-in whose random() returns the given values in turn."""

    def __init__(self, *values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def test_zipf_cdf_is_the_normalised_harmonic_sum():
    n = 1000
    z = bench.Zipf(n)
    h = sum(1 / k for k in range(1, n + 1))
    assert len(z.cdf) == n
    assert z.cdf[-1] == 1.0
    assert z.cdf[0] == pytest.approx(1 / h, rel=1e-12)
    assert z.cdf[9] == pytest.approx(sum(1 / k for k in range(1, 11)) / h, rel=1e-12)
    assert all(a < b for a, b in zip(z.cdf, z.cdf[1:]))


def test_zipf_rank0_is_the_first_rank_whose_cdf_reaches_u():
    z = bench.Zipf(4)  # cdf = [12, 18, 22, 25] / 25
    assert z.cdf == pytest.approx([12 / 25, 18 / 25, 22 / 25, 1.0])
    assert z.rank0(FixedRng(0.0)) == 0
    assert z.rank0(FixedRng(z.cdf[0])) == 0  # cdf[k] >= u, as Go's sort.SearchFloat64s
    assert z.rank0(FixedRng(math.nextafter(z.cdf[0], 1))) == 1
    assert z.rank0(FixedRng(0.8)) == 2
    assert z.rank0(FixedRng(math.nextafter(1.0, 0))) == 3
    assert bench.Zipf(1).rank0(random.Random(1)) == 0
    with pytest.raises(ValueError):
        bench.Zipf(0)


def test_zipf_draws_follow_one_over_k():
    n, draws = 10, 200_000
    z = bench.Zipf(n)
    rng = random.Random(7)
    counts = [0] * n
    for _ in range(draws):
        counts[z.rank0(rng)] += 1
    h = sum(1 / k for k in range(1, n + 1))
    for k in range(1, n + 1):
        expected = draws / (k * h)
        # Within 5 standard deviations of the binomial count.
        assert abs(counts[k - 1] - expected) < 5 * math.sqrt(expected), (k, counts)


def test_quantiles_pick_the_element_at_p_times_len_minus_one_in_whole_microseconds():
    assert bench.quantile_us([], 0.5) == 0
    lat = [i * 1000 for i in range(1, 1001)]  # 1..1000 µs
    assert bench.quantile_us(lat, 0.5) == 500  # lat[int(0.5 * 999)] = lat[499]
    assert bench.quantile_us(lat, 0.99) == 990  # lat[989]
    assert bench.quantile_us(lat, 0.999) == 999  # lat[998]
    assert bench.quantile_us(lat, 1) == 1000
    assert bench.quantile_us([1999], 0.5) == 1  # truncated, as Go's Duration.Microseconds
    assert bench.quantile_us([5_000], 0.999) == 5


def test_flags_default_as_the_go_bench():
    a = bench.parse_args([])
    assert (a.target, a.concurrency, a.seconds, a.uids, a.uid_base, a.dist, a.no_coalesce, a.timeout, a.event_loop) == \
        ("seqsvr", 64, 10, 100_000, 0, "uniform", False, 3.0, "asyncio")
    assert a.redis_url == "redis://127.0.0.1:6379"
    a = bench.parse_args(["--target", "redis", "--dist", "zipf", "--timeout", "500ms", "--no-coalesce", "--uid-base", "4100000"])
    assert (a.target, a.dist, a.timeout, a.no_coalesce, a.uid_base) == ("redis", "zipf", 0.5, True, 4_100_000)
    assert bench.parse_duration("2") == 2.0 and bench.parse_duration("1.5s") == 1.5 and bench.parse_duration("2m") == 120
    for bad in (["--dist", "pareto"], ["--concurrency", "0"], ["--seconds", "0"], ["--target", "memcached"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


class FakePipeline:
    def __init__(self, server):
        self.server, self.keys = server, []

    def incr(self, key):
        self.keys.append(key)

    async def execute(self, raise_on_error=True):
        self.server.bursts.append(list(self.keys))
        out = []
        for k in self.keys:
            if k == "seq:666":
                out.append(RuntimeError("WRONGTYPE"))
            else:
                self.server.values[k] = self.server.values.get(k, 0) + 1
                out.append(self.server.values[k])
        await asyncio.sleep(0)
        return out


class FakeRedis:
    def __init__(self):
        self.bursts, self.values = [], {}

    def pipeline(self, transaction=True):
        assert transaction is False
        return FakePipeline(self)


async def test_the_redis_batcher_sends_what_is_queued_as_one_pipeline_and_answers_in_order():
    fake = FakeRedis()
    b = bench.RedisBatcher(fake)
    b.start()
    try:
        got = await asyncio.gather(*(b.incr(uid) for uid in [1, 2, 1, 3, 1]))
        assert got == [1, 1, 2, 1, 3]
        assert fake.bursts == [["seq:1", "seq:2", "seq:1", "seq:3", "seq:1"]]
        got = await asyncio.gather(b.incr(2), b.incr(666), return_exceptions=True)
        assert got[0] == 2 and isinstance(got[1], RuntimeError)
        assert len(fake.bursts) == 2 and b.bursts == 2
    finally:
        await b.close()
