"""The retry policy (the Go and Rust SDKs' rules, case for case)."""

import time

import grpc
import pytest

from seqsvr import STANDARD_RETRY, RetryPolicy, retryable


def test_the_backoff_grows_by_doubling_and_is_capped():
    b = STANDARD_RETRY.new_backoff(seed=1)
    bases = []
    for _ in range(8):
        bases.append(round(b.base, 3))
        delay = b.next_delay()
        assert bases[-1] / 2 <= delay <= bases[-1]
    assert bases == [0.02, 0.04, 0.08, 0.16, 0.32, 0.5, 0.5, 0.5]
    b.reset()
    assert b.base == STANDARD_RETRY.min_s


def test_the_jitter_stays_in_bounds_and_differs():
    one = [STANDARD_RETRY.new_backoff(seed=7).next_delay() for _ in range(3)]
    assert one[0] == one[1] == one[2], "one seed draws the same waits"
    draws = [STANDARD_RETRY.new_backoff().next_delay() for _ in range(200)]
    assert all(0.010 <= d <= 0.020 for d in draws)
    assert min(draws) < 0.0125 and max(draws) > 0.0175, "the jitter covers [base/2, base]"
    assert len(set(draws)) > 150, "unseeded back-offs do not wait in lockstep"


def test_no_wait_ends_past_the_deadline():
    b = RetryPolicy().new_backoff(seed=3)
    now = 0.0
    assert b.delay_before(until=now + 0.040, now=now) is None, "base 20 ms + min 20 ms: no room"
    assert b.base == 0.020, "nothing drawn without room"
    d = b.delay_before(until=now + 0.041, now=now)
    assert d is not None and now + d < now + 0.041
    for _ in range(50):
        until = now + 0.6
        d = b.delay_before(until=until, now=now)
        if d is None:
            break
        assert now + d + b.policy.min_s <= until
        now += d


async def test_a_waiting_loop_ends_before_its_deadline():
    b = STANDARD_RETRY.new_backoff()
    until = time.monotonic() + 0.3
    waits = 0
    while await b.wait(until):
        waits += 1
    assert time.monotonic() < until and waits >= 2


def test_the_redirect_budget_is_enforced_per_round():
    b = STANDARD_RETRY.new_backoff(seed=1)
    assert [b.redirect() for _ in range(5)] == [True] * 4 + [False]
    b.next_delay()
    assert b.redirect(), "a wait refills the budget"


@pytest.mark.parametrize("code", list(grpc.StatusCode))
def test_the_retryable_codes(code):
    C = grpc.StatusCode
    assert retryable(code) == (code in (C.UNAVAILABLE, C.DEADLINE_EXCEEDED, C.CANCELLED, C.UNKNOWN))
