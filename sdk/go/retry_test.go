package seqsvr

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

const ms = time.Millisecond

// The base doubles from Min and stops at Max; every wait lies in [base/2, base]; Reset starts
// again from Min (the Rust policy's test, case for case).
func TestTheBackoffGrowsByDoublingAndIsCapped(t *testing.T) {
	b := StandardRetry.SeededBackoff(1)
	var bases []int64
	for i := 0; i < 8; i++ {
		base := b.Base()
		d := b.NextDelay()
		if d < base/2 || d > base {
			t.Fatalf("%v outside [%v, %v]", d, base/2, base)
		}
		bases = append(bases, int64(base/ms))
	}
	if fmt.Sprint(bases) != "[20 40 80 160 320 500 500 500]" {
		t.Fatalf("bases %v", bases)
	}
	b.Reset()
	if b.Base() != 20*ms {
		t.Fatal("a success starts again from Min")
	}
}

// The jitter stays within [base/2, base], covers that range, and one seed draws the same
// waits while two unseeded back-offs do not wait in lockstep.
func TestTheJitterStaysInBoundsAndDiffers(t *testing.T) {
	draws := func(b *Backoff) []time.Duration {
		out := make([]time.Duration, 200)
		for i := range out {
			b.Reset()
			out[i] = b.NextDelay()
		}
		return out
	}
	a := draws(StandardRetry.SeededBackoff(7))
	lo, hi := a[0], a[0]
	distinct := map[time.Duration]bool{}
	for _, d := range a {
		if d < 10*ms || d > 20*ms {
			t.Fatalf("%v outside [10, 20] ms", d)
		}
		if d < lo {
			lo = d
		}
		if d > hi {
			hi = d
		}
		distinct[d] = true
	}
	if len(distinct) < 150 || lo >= 12*ms || hi <= 18*ms {
		t.Fatalf("%d distinct waits, %v..%v", len(distinct), lo, hi)
	}
	if fmt.Sprint(a) != fmt.Sprint(draws(StandardRetry.SeededBackoff(7))) {
		t.Fatal("a seed draws the same waits")
	}
	if fmt.Sprint(draws(StandardRetry.NewBackoff())) == fmt.Sprint(draws(StandardRetry.NewBackoff())) {
		t.Fatal("two callers wait in lockstep")
	}
}

// A wait is granted only if the deadline is further than the longest the wait can be plus
// Min, so no wait ever ends past the deadline; with no room nothing is drawn.
func TestNoWaitEndsPastTheDeadline(t *testing.T) {
	now := time.Now()
	for seed := int64(0); seed < 50; seed++ {
		for rounds := 0; rounds < 8; rounds++ {
			for _, left := range []time.Duration{0, 1, 5, 20, 39, 40, 41, 60, 61, 100, 519, 520, 521, 2000} {
				b := StandardRetry.SeededBackoff(seed)
				for i := 0; i < rounds; i++ {
					b.NextDelay()
				}
				base := b.Base()
				d, ok := b.DelayBefore(now.Add(left*ms), now)
				if ok && !(d+20*ms < left*ms && left*ms > base+20*ms) {
					t.Fatalf("%v with %v ms left", d, left)
				}
				if !ok && left*ms > base+20*ms {
					t.Fatalf("gave up with %v ms left (base %v)", left, base)
				}
			}
		}
	}
	b := StandardRetry.SeededBackoff(3)
	if _, ok := b.DelayBefore(now.Add(40*ms), now); ok || b.Base() != 20*ms {
		t.Fatal("no room: nothing drawn, the base stays")
	}
	if _, ok := b.DelayBefore(now.Add(41*ms), now); !ok {
		t.Fatal("room")
	}
	if _, ok := b.DelayBefore(now, now.Add(5*ms)); ok {
		t.Fatal("a deadline in the past")
	}
}

// A loop that waits until told there is no room returns before its deadline; Wait returns at
// once when there is no room, and when its context ends.
func TestAWaitingLoopEndsBeforeItsDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*ms)
	defer cancel()
	until, _ := ctx.Deadline()
	b := StandardRetry.NewBackoff()
	waits := 0
	for b.Wait(ctx, until) {
		waits++
	}
	if ctx.Err() != nil || waits < 3 {
		t.Fatalf("slept into the deadline (%v) or too few waits (%d)", ctx.Err(), waits)
	}
	done, stop := context.WithCancel(context.Background())
	stop()
	if StandardRetry.NewBackoff().Wait(done, time.Now().Add(time.Hour)) {
		t.Fatal("a cancelled context ends the wait")
	}
}

// RedirectsMax redirects are followed per round; a wait refills the budget.
func TestTheRedirectBudgetIsEnforcedPerRound(t *testing.T) {
	b := StandardRetry.SeededBackoff(4)
	round := func() int {
		n := 0
		for n < 10 && b.Redirect() {
			n++
		}
		return n
	}
	if round() != 4 || b.Redirect() {
		t.Fatal("4 per round")
	}
	b.NextDelay()
	if round() != 4 {
		t.Fatal("a wait starts a new round")
	}
	now := time.Now()
	if _, ok := b.DelayBefore(now, now); ok || b.Redirect() {
		t.Fatal("no wait (no room), no new budget")
	}
}

// Every gRPC code, retried or not: the Rust policy's table.
func TestTheRetryableCodes(t *testing.T) {
	retried := map[codes.Code]bool{codes.Canceled: true, codes.Unknown: true, codes.DeadlineExceeded: true, codes.Unavailable: true}
	for code := codes.OK; code <= codes.Unauthenticated; code++ {
		if Retryable(code) != retried[code] {
			t.Fatalf("%v", code)
		}
	}
}
