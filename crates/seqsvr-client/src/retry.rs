//! The one retry policy of seqsvr's clients: the SDK ([`crate::seq`]), the store client
//! ([`crate::store`]) and the AllocSvr's background loops (`allocsvr/src/lease.rs`) all back off
//! and follow redirects by the rules here, so a change of policy is made once.
//!
//! - **Back-off**: exponential from [`RetryPolicy::min`], doubling, capped at
//!   [`RetryPolicy::max`], with *equal jitter*: each wait is drawn uniformly from
//!   `[base / 2, base]`. The jitter keeps clients that failed together (a leader change, an
//!   AllocSvr restart) from retrying in lockstep; the floor of `base / 2` keeps a bound on how
//!   often one client retries (full jitter could retry at once, again and again).
//! - **Redirects** (a non-leader's leader hint, a NOT_OWNER answer with a newer route table) are
//!   followed at once, but at most [`RetryPolicy::redirects_max`] in a row: then the loop backs
//!   off like any other retry (after which the budget is full again). Two members that each name
//!   the other, or an owner that keeps answering NOT_OWNER, cost a few RPCs per back-off, never
//!   a busy loop.
//! - **Deadlines**: a wait is slept only if the caller's deadline leaves room for the longest
//!   it can be and for an attempt after it ([`Backoff::delay_before`]); otherwise the loop
//!   returns the last error at once instead of sleeping into the deadline.
//! - **What is retried**: [`retryable`].

use std::time::Duration;
use tokio::time::Instant;
use tonic::Code;

/// How a client retries. Every loop uses [`RetryPolicy::STANDARD`] (an AllocSvr's registration
/// caps it at the heartbeat period with [`RetryPolicy::capped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first wait, before jitter.
    pub min: Duration,
    /// The wait doubles up to this, before jitter.
    pub max: Duration,
    /// Redirects followed at once, in a row, before backing off (route tables and leader hints
    /// can lag a hand-over by a little; more than this in a row is a loop).
    pub redirects_max: u32,
}

impl RetryPolicy {
    /// 20 ms doubling to 500 ms (jittered to 10–20 ms, 20–40 ms, … 250–500 ms), 4 redirects
    /// per round.
    pub const STANDARD: RetryPolicy = RetryPolicy {
        min: Duration::from_millis(20),
        max: Duration::from_millis(500),
        redirects_max: 4,
    };

    /// This policy with no wait longer than `cap` (nor a first wait longer than it).
    pub fn capped(self, cap: Duration) -> RetryPolicy {
        let max = self.max.min(cap);
        RetryPolicy { min: self.min.min(max), max, ..self }
    }

    /// A fresh back-off, jittered from a per-process random source.
    pub fn backoff(self) -> Backoff {
        Backoff::with_rng(self, fastrand::Rng::new())
    }

    /// A fresh back-off whose jitter is drawn from `seed`: the same seed draws the same waits
    /// (for tests).
    pub fn backoff_seeded(self, seed: u64) -> Backoff {
        Backoff::with_rng(self, fastrand::Rng::with_seed(seed))
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::STANDARD
    }
}

/// The state of one retry loop: the next wait and the redirects left in this round.
#[derive(Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    /// The next wait before jitter: the jittered wait lies in `[base / 2, base]`.
    base: Duration,
    /// Redirects followed since the last wait.
    redirects: u32,
    rng: fastrand::Rng,
}

impl Backoff {
    fn with_rng(policy: RetryPolicy, rng: fastrand::Rng) -> Backoff {
        Backoff { policy, base: policy.min, redirects: 0, rng }
    }

    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// The next wait before jitter (the longest the next wait can be).
    pub fn base(&self) -> Duration {
        self.base
    }

    /// Draws the next wait (uniform in `[base / 2, base]`), doubles the base up to the cap, and
    /// starts a new round: the redirect budget is full again. For loops without a deadline (they
    /// run until told to stop); loops with one use [`Backoff::delay_before`] or [`Backoff::wait`].
    pub fn next_delay(&mut self) -> Duration {
        let base = self.base;
        let half = base / 2;
        let spread = u64::try_from((base - half).as_nanos()).unwrap_or(u64::MAX);
        let delay = half + Duration::from_nanos(self.rng.u64(0..=spread));
        self.base = (base * 2).min(self.policy.max).max(self.policy.min);
        self.redirects = 0;
        delay
    }

    /// The next wait if the deadline `until` leaves room for it and for an attempt after it;
    /// `None`: no room, give up now with the last error (nothing is drawn then). Room means
    /// more than the base (the longest the wait can be, so the jitter never carries a sleep
    /// into the deadline) plus `min` (the least time worth giving the attempt after it; it
    /// also absorbs the timer's rounding).
    pub fn delay_before(&mut self, until: Instant, now: Instant) -> Option<Duration> {
        let left = until.saturating_duration_since(now);
        if left <= self.base + self.policy.min {
            return None;
        }
        Some(self.next_delay())
    }

    /// Sleeps the next wait if the deadline leaves room ([`Backoff::delay_before`]); false: no
    /// room (nothing slept), the caller returns its last error.
    pub async fn wait(&mut self, until: Instant) -> bool {
        match self.delay_before(until, Instant::now()) {
            Some(delay) => {
                tokio::time::sleep(delay).await;
                true
            }
            None => false,
        }
    }

    /// Takes one redirect from this round's budget: true = follow it at once; false = the
    /// budget is spent, back off first.
    pub fn redirect(&mut self) -> bool {
        if self.redirects < self.policy.redirects_max {
            self.redirects += 1;
            true
        } else {
            false
        }
    }

    /// After a success, for loops that outlive one call: the next failure waits `min` again.
    pub fn reset(&mut self) {
        self.base = self.policy.min;
        self.redirects = 0;
    }
}

/// Whether a failed attempt is worth another one (on the same server or, for the store,
/// another member), within the caller's deadline. Every code not listed as retried is the
/// server's final answer and goes back to the caller at once.
///
/// Retried:
/// - `UNAVAILABLE`: the canonical "try again": a member or AllocSvr that is down, not the
///   leader, without a lease or quorum, in a hand-over, overloaded, shutting down; a refused
///   connection; an attempt that timed out on our side (the loops map their own per-attempt
///   timeout to it). Both servers map every transient condition to it.
/// - `DEADLINE_EXCEEDED`: one *attempt's* time ran out (its `grpc-timeout`, or a wait on the
///   server); the caller's own deadline is enforced by the loop, not by this code.
/// - `CANCELLED`: never the caller's cancel. A caller cancels by dropping the call's future,
///   which ends the loop before any status is seen, so nothing is retried. A `CANCELLED`
///   *status* comes from below: tonic reports an attempt's expired `grpc-timeout`
///   (`TimeoutExpired`), a connection closed under a call (hyper's "canceled") and an h2
///   `RST_STREAM(CANCEL)` (a server dropping the call as it stops) as `CANCELLED`. All three are
///   one attempt's failure.
/// - `UNKNOWN`: what tonic reports for transport failures it cannot classify (an h2 or I/O error
///   mid-call). Neither server ever answers it on purpose (`storesvr::service::to_status` and
///   the AllocSvr's `serve` map every error to a specific code), so it is not a final answer.
///
/// Not retried: `INVALID_ARGUMENT`, `OUT_OF_RANGE` (the request is wrong), `NOT_FOUND` (an
/// unknown registration: the AllocSvr must register again, not repeat the call),
/// `FAILED_PRECONDITION` (fenced, refused; NOT_OWNER is handled as a redirect by the SDK before
/// this is asked), `RESOURCE_EXHAUSTED`, `ALREADY_EXISTS`, `ABORTED`, `PERMISSION_DENIED`,
/// `UNAUTHENTICATED`, `UNIMPLEMENTED` (a server that does not know the call), `INTERNAL` and
/// `DATA_LOSS` (a bug: repeating it hides it), and `OK`.
///
/// `RESOURCE_EXHAUSTED` goes back to the caller at once, never retried here: it is either final
/// (a section at the `max_seq` ceiling) or load shedding (the SDK's own coalescing queue full,
/// an AllocSvr's `alloc.max_waiting_calls` reached, a connection past its concurrent calls).
/// (A message over its service's size limit is `OUT_OF_RANGE`, not retried either.) Shedding exists to take load off a saturated
/// server; a client library that retried it within the deadline would put the load straight
/// back, from every client at once. The caller knows whether the call can wait and backs off
/// (each message says what to do).
pub fn retryable(code: Code) -> bool {
    matches!(code, Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// The base doubles from min and stops at max; every wait lies in `[base / 2, base]`.
    #[test]
    fn the_backoff_grows_by_doubling_and_is_capped() {
        let mut b = RetryPolicy::STANDARD.backoff_seeded(1);
        let bases: Vec<u64> = (0..8)
            .map(|_| {
                let base = b.base();
                let d = b.next_delay();
                assert!(base / 2 <= d && d <= base, "{d:?} outside [{:?}, {base:?}]", base / 2);
                u64::try_from(base.as_millis()).unwrap()
            })
            .collect();
        assert_eq!(bases, [20, 40, 80, 160, 320, 500, 500, 500]);
        b.reset();
        assert_eq!(b.base(), 20 * MS, "a success starts again from min");
        // A cap below the policy's max (the AllocSvr's registration, capped at the heartbeat)
        // caps both ends.
        let capped = RetryPolicy::STANDARD.capped(100 * MS);
        assert_eq!((capped.min, capped.max), (20 * MS, 100 * MS));
        let tiny = RetryPolicy::STANDARD.capped(5 * MS);
        assert_eq!((tiny.min, tiny.max), (5 * MS, 5 * MS));
        let mut b = tiny.backoff_seeded(2);
        assert!((0..5).all(|_| b.next_delay() <= 5 * MS));
    }

    /// The jitter stays within `[base / 2, base]`, covers that range, differs from draw to
    /// draw and from seed to seed, and one seed always draws the same waits.
    #[test]
    fn the_jitter_stays_in_bounds_and_differs_across_draws() {
        let draws = |seed: u64| -> Vec<Duration> {
            let mut b = RetryPolicy::STANDARD.backoff_seeded(seed);
            (0..200)
                .map(|_| {
                    b.reset();
                    b.next_delay()
                })
                .collect()
        };
        let a = draws(7);
        assert!(a.iter().all(|d| (10 * MS..=20 * MS).contains(d)), "{a:?}");
        let mut distinct = a.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() > 150, "only {} distinct waits in 200 draws", distinct.len());
        let (lo, hi) = (a.iter().min().unwrap(), a.iter().max().unwrap());
        assert!(*lo < 12 * MS && *hi > 18 * MS, "the draws cover [10, 20] ms: {lo:?}..{hi:?}");
        assert_eq!(a, draws(7), "a seed draws the same waits");
        assert_ne!(a, draws(8), "another seed draws other waits");
        // Two unseeded back-offs (two callers) do not wait in lockstep.
        let (mut x, mut y) = (RetryPolicy::STANDARD.backoff(), RetryPolicy::STANDARD.backoff());
        let xs: Vec<_> = (0..6).map(|_| x.next_delay()).collect();
        let ys: Vec<_> = (0..6).map(|_| y.next_delay()).collect();
        assert_ne!(xs, ys);
    }

    /// A wait is granted only if the deadline is further than the longest the wait can be plus
    /// `min`, so no draw ever ends past the deadline; with no room nothing is drawn.
    #[test]
    fn no_wait_ends_past_the_deadline() {
        let now = Instant::now();
        for seed in 0..50 {
            for rounds in 0..8 {
                for left_ms in [0, 1, 5, 20, 39, 40, 41, 60, 61, 100, 519, 520, 521, 2000] {
                    let mut b = RetryPolicy::STANDARD.backoff_seeded(seed);
                    (0..rounds).for_each(|_| {
                        b.next_delay();
                    });
                    let base = b.base();
                    let left = left_ms * MS;
                    match b.delay_before(now + left, now) {
                        Some(d) => {
                            assert!(d + 20 * MS < left, "{d:?} with {left_ms} ms left");
                            assert!(left > base + 20 * MS);
                        }
                        None => assert!(left <= base + 20 * MS, "gave up with {left_ms} ms left"),
                    }
                }
            }
        }
        // No room: nothing drawn, the base stays.
        let mut b = RetryPolicy::STANDARD.backoff_seeded(3);
        assert_eq!(b.delay_before(now + 40 * MS, now), None);
        assert_eq!(b.base(), 20 * MS);
        assert!(b.delay_before(now + 41 * MS, now).is_some());
        assert_eq!(b.delay_before(now, now + 5 * MS), None, "a deadline in the past");
    }

    /// A loop that waits until told there is no room ends within its deadline, and `wait`
    /// returns at once when there is no room.
    #[tokio::test]
    async fn a_waiting_loop_ends_within_its_deadline() {
        let started = Instant::now();
        let until = started + 300 * MS;
        let mut b = RetryPolicy::STANDARD.backoff();
        let mut waits = 0;
        while b.wait(until).await {
            waits += 1;
            assert!(Instant::now() < until, "slept past the deadline after {waits} waits");
        }
        assert!((3..=6).contains(&waits), "{waits} waits in 300 ms");
        let before = Instant::now();
        assert!(!b.wait(before + 10 * MS).await);
        assert!(before.elapsed() < 5 * MS, "no room: no sleep");
    }

    /// `redirects_max` redirects are followed per round; a wait refills the budget.
    #[test]
    fn the_redirect_budget_is_enforced_per_round() {
        let mut b = RetryPolicy::STANDARD.backoff_seeded(4);
        let round = |b: &mut Backoff| (0..10).take_while(|_| b.redirect()).count();
        assert_eq!(round(&mut b), 4);
        assert!(!b.redirect(), "still spent until a wait");
        b.next_delay();
        assert_eq!(round(&mut b), 4, "a wait starts a new round");
        let now = Instant::now();
        assert_eq!(b.delay_before(now, now), None);
        assert!(!b.redirect(), "no wait (no room), no new budget");
        let none = RetryPolicy { redirects_max: 0, ..RetryPolicy::STANDARD };
        assert!(!none.backoff_seeded(5).redirect());
    }

    /// Every gRPC code, retried or not.
    #[test]
    fn the_retryable_codes() {
        let table = [
            (Code::Ok, false),
            (Code::Cancelled, true),
            (Code::Unknown, true),
            (Code::InvalidArgument, false),
            (Code::DeadlineExceeded, true),
            (Code::NotFound, false),
            (Code::AlreadyExists, false),
            (Code::PermissionDenied, false),
            (Code::ResourceExhausted, false),
            (Code::FailedPrecondition, false),
            (Code::Aborted, false),
            (Code::OutOfRange, false),
            (Code::Unimplemented, false),
            (Code::Internal, false),
            (Code::Unavailable, true),
            (Code::DataLoss, false),
            (Code::Unauthenticated, false),
        ];
        for (code, retried) in table {
            assert_eq!(retryable(code), retried, "{code:?}");
        }
        assert_eq!(table.len(), 17, "every code of the gRPC spec");
    }
}
