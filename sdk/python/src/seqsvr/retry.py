"""The retry policy of every call: the Go (and Rust) SDK's, rule for rule.

- Back-off: exponential from ``min_s``, doubling, capped at ``max_s``, with equal jitter: each
  wait is drawn uniformly from [base/2, base]. The jitter keeps clients that failed together
  from retrying in lockstep; the floor of base/2 bounds how often one client retries.
- Redirects (a NOT_OWNER answer with a newer route table) are followed at once, at most
  ``redirects_max`` in a row; then the loop backs off like any other retry (after which the
  budget is full again).
- Deadlines: a wait is slept only if the call's deadline leaves room for the longest it can be
  and for an attempt after it (base + min); otherwise the call raises its last error at once
  instead of sleeping into the deadline.
- What is retried: :func:`seqsvr.errors.retryable` (UNAVAILABLE, DEADLINE_EXCEEDED of one
  attempt, CANCELLED from below, UNKNOWN).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from typing import Optional

__all__ = ["RetryPolicy", "Backoff", "STANDARD_RETRY"]


#: The jitter of every unseeded back-off. Seeding a ``random.Random()`` reads the OS's entropy
#: and costs ~16 µs, a third of a coalesced call's client CPU, paid on every call before any
#: retry; the module's generator is shared (jitter needs no independence between calls).
_SHARED_RNG = random.Random()
# A forked worker (gunicorn, multiprocessing) reseeds it from the OS, as the random module does
# its own: else workers forked from one parent, failing together, would retry in lockstep.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SHARED_RNG.seed)


@dataclass(frozen=True)
class RetryPolicy:
    """How a call retries. ``min_s``: the first wait before jitter; ``max_s``: the cap of the
    doubling wait; ``redirects_max``: redirects followed at once, in a row, before backing off."""

    min_s: float = 0.020
    max_s: float = 0.500
    redirects_max: int = 4

    def new_backoff(self, seed: Optional[int] = None) -> "Backoff":
        """A fresh back-off; with ``seed``, its jitter is drawn from it (one seed, the same waits)."""
        return Backoff(self, random.Random(seed) if seed is not None else _SHARED_RNG)


#: The policy of every call: 20 ms doubling to 500 ms (jittered to 10-20 ms, 20-40 ms, ...
#: 250-500 ms), 4 redirects per round.
STANDARD_RETRY = RetryPolicy()


class Backoff:
    """The state of one retry loop: the next wait and the redirects left in this round."""

    def __init__(self, policy: RetryPolicy, rng: random.Random):
        self.policy = policy
        self.base = policy.min_s
        self.redirects = 0
        self._rng = rng

    def next_delay(self) -> float:
        """Draws the next wait (uniform in [base/2, base]), doubles the base up to max and starts
        a new round (the redirect budget is full again)."""
        base = self.base
        delay = self._rng.uniform(base / 2, base)
        self.base = max(self.policy.min_s, min(base * 2, self.policy.max_s))
        self.redirects = 0
        return delay

    def delay_before(self, until: float, now: Optional[float] = None) -> Optional[float]:
        """The next wait if the deadline ``until`` (time.monotonic() seconds) leaves room for it
        and an attempt after it (more than base + min left at ``now``); None if not (nothing is
        drawn)."""
        if now is None:
            now = time.monotonic()
        if until - now <= self.base + self.policy.min_s:
            return None
        return self.next_delay()

    async def wait(self, until: float) -> bool:
        """Sleeps the next wait if the deadline leaves room; False: no room (the caller raises
        its last error)."""
        delay = self.delay_before(until)
        if delay is None:
            return False
        await asyncio.sleep(delay)
        return True

    def redirect(self) -> bool:
        """Takes one redirect from this round's budget: True = follow it at once; False = the
        budget is spent, back off first."""
        if self.redirects < self.policy.redirects_max:
            self.redirects += 1
            return True
        return False

    def reset(self) -> None:
        """Starts again from min (for loops that outlive one call)."""
        self.base = self.policy.min_s
        self.redirects = 0
