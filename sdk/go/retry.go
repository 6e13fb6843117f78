package seqsvr

import (
	"context"
	"math/rand"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// RetryPolicy is how the SDK retries: the Rust SDK's policy (crates/seqsvr-client/src/retry.rs),
// rule for rule.
//
//   - Back-off: exponential from Min, doubling, capped at Max, with equal jitter: each wait is
//     drawn uniformly from [base/2, base]. The jitter keeps clients that failed together from
//     retrying in lockstep; the floor of base/2 bounds how often one client retries.
//   - Redirects (a NOT_OWNER answer with a newer route table) are followed at once, at most
//     RedirectsMax in a row; then the loop backs off like any other retry (after which the
//     budget is full again).
//   - Deadlines: a wait is slept only if the call's deadline leaves room for the longest it can
//     be and for an attempt after it (base + Min); otherwise the call returns its last error at
//     once instead of sleeping into the deadline.
//   - What is retried: Retryable.
type RetryPolicy struct {
	// Min is the first wait, before jitter.
	Min time.Duration
	// Max caps the doubling wait, before jitter.
	Max time.Duration
	// RedirectsMax is how many redirects are followed at once, in a row, before backing off.
	RedirectsMax int
}

// StandardRetry is the policy of every call: 20 ms doubling to 500 ms (jittered to 10–20 ms,
// 20–40 ms, ... 250–500 ms), 4 redirects per round.
var StandardRetry = RetryPolicy{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond, RedirectsMax: 4}

// Retryable reports whether a failed attempt is worth another one within the call's deadline:
// UNAVAILABLE (the canonical "try again": hand-over, no lease, no quorum, a server down or
// refusing connections, an attempt's own timeout), DEADLINE_EXCEEDED (one attempt's time ran
// out; the call's deadline is the loop's), CANCELLED (from below: a connection closed under a
// call; a caller's own cancel ends the loop before this is asked) and UNKNOWN (transport
// failures gRPC cannot classify). Every other code is the server's final answer; in particular
// RESOURCE_EXHAUSTED (load shedding, or a limit) goes back to the caller at once: retrying it
// would put the load straight back.
func Retryable(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return true
	}
	return false
}

// Backoff is the state of one retry loop: the next wait and the redirects left in this round.
// Not safe for concurrent use (one per call).
type Backoff struct {
	policy    RetryPolicy
	base      time.Duration
	redirects int
	rng       *rand.Rand // nil: draws from the per-process source
}

var (
	sharedMu   sync.Mutex
	sharedRand = rand.New(rand.NewSource(time.Now().UnixNano()))
)

// NewBackoff is a fresh back-off jittered from a per-process random source (two calls draw
// different waits). It seeds nothing: seeding a math/rand source costs ~10 µs, which every
// call paid before its first attempt (43% of a coalesced Next's CPU), though most calls
// never wait.
func (p RetryPolicy) NewBackoff() *Backoff {
	return &Backoff{policy: p, base: p.Min}
}

// SeededBackoff is a back-off whose jitter is drawn from seed: one seed draws the same waits.
func (p RetryPolicy) SeededBackoff(seed int64) *Backoff {
	return &Backoff{policy: p, base: p.Min, rng: rand.New(rand.NewSource(seed))}
}

// Base is the next wait before jitter (the longest the next wait can be).
func (b *Backoff) Base() time.Duration { return b.base }

// NextDelay draws the next wait (uniform in [base/2, base]), doubles the base up to Max and
// starts a new round (the redirect budget is full again).
func (b *Backoff) NextDelay() time.Duration {
	base := b.base
	half := base / 2
	var jitter int64
	if b.rng != nil {
		jitter = b.rng.Int63n(int64(base-half) + 1)
	} else {
		sharedMu.Lock()
		jitter = sharedRand.Int63n(int64(base-half) + 1)
		sharedMu.Unlock()
	}
	delay := half + time.Duration(jitter)
	next := base * 2
	if next > b.policy.Max {
		next = b.policy.Max
	}
	if next < b.policy.Min {
		next = b.policy.Min
	}
	b.base = next
	b.redirects = 0
	return delay
}

// DelayBefore is the next wait if the deadline `until` leaves room for it and an attempt after
// it: more than base + Min left at `now`. ok is false when there is no room (nothing is drawn).
func (b *Backoff) DelayBefore(until, now time.Time) (delay time.Duration, ok bool) {
	left := until.Sub(now)
	if left <= b.base+b.policy.Min {
		return 0, false
	}
	return b.NextDelay(), true
}

// Wait sleeps the next wait if ctx's deadline leaves room (DelayBefore with the deadline);
// false: no room, or ctx ended while sleeping: the caller returns its last error.
func (b *Backoff) Wait(ctx context.Context, until time.Time) bool {
	delay, ok := b.DelayBefore(until, time.Now())
	if !ok {
		return false
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Redirect takes one redirect from this round's budget: true = follow it at once; false = the
// budget is spent, back off first.
func (b *Backoff) Redirect() bool {
	if b.redirects < b.policy.RedirectsMax {
		b.redirects++
		return true
	}
	return false
}

// Reset starts again from Min after a success (for loops that outlive one call).
func (b *Backoff) Reset() {
	b.base = b.policy.Min
	b.redirects = 0
}
