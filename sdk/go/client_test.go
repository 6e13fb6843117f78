package seqsvr

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/seqsvr/seqsvr/sdk/go/seqsvrpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A table is installed only if its version is above the one held for its set: an older one,
// or another of the same version, never replaces it.
func TestAnOlderRouteTableIsNeverInstalled(t *testing.T) {
	c, err := newClient(Options{Seeds: []string{"a:1"}, Plaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	c.install(table(0, 5, 0, 100, "new"))
	c.install(table(0, 3, 0, 100, "old"))
	c.install(table(0, 5, 0, 100, "same version"))
	c.install(table(1, 1, 100, 200, "b"))
	tables := c.RouteTables()
	if len(tables) != 2 || tables[0].GetVersion() != 5 || tables[0].GetEntries()[0].GetAddr() != "new" {
		t.Fatalf("tables %v", tables)
	}
	c.install(table(0, 6, 0, 100, "newer"))
	if got := c.RouteTables()[0].GetEntries()[0].GetAddr(); got != "newer" {
		t.Fatalf("newer table not installed: %s", got)
	}
	// Sorted by uid range whatever order the sets came in.
	if c.RouteTables()[1].GetSetId() != 1 {
		t.Fatalf("not sorted: %v", c.RouteTables())
	}
}

func TestGroupingFollowsTheCurrentTable(t *testing.T) {
	v1 := table(0, 1, 0, 10, "a")
	uids := []uint64{1, 15, 2, 15, 33}
	g, _, ok := groupByOwner([]*pb.RouteTable{v1}, uids, []int{0, 1, 2, 3, 4})
	if !ok || len(g.routed) != 1 || fmt.Sprint(g.routed[0].idx) != "[0 1 2 3 4]" {
		t.Fatalf("%+v", g)
	}
	// Section 1 moved to b, section 3 has no owner for now.
	v2 := table(0, 2, 0, 1, "a", 1, 2, "b")
	g, _, _ = groupByOwner([]*pb.RouteTable{v2}, uids, []int{1, 2, 3, 4})
	if len(g.routed) != 2 || g.routed[0].addr != "b" || fmt.Sprint(g.routed[0].idx) != "[1 3]" ||
		g.routed[1].addr != "a" || fmt.Sprint(g.routed[1].idx) != "[2]" || fmt.Sprint(g.unrouted) != "[4]" {
		t.Fatalf("%+v %+v %+v", g.routed[0], g.routed[1], g.unrouted)
	}
	if _, missing, ok := groupByOwner([]*pb.RouteTable{v1}, []uint64{1, 1000}, []int{0, 1}); ok || missing != 1000 {
		t.Fatalf("no table has uid 1000: %v %v", missing, ok)
	}
}

// counter is a fake AllocSvr's per-uid sequences (in request order within a batch).
type counter struct {
	mu   sync.Mutex
	seqs map[uint64]uint64
}

func (c *counter) next(uid uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seqs == nil {
		c.seqs = map[uint64]uint64{}
	}
	c.seqs[uid]++
	return c.seqs[uid]
}

// serving is a fake that serves Next and NextBatch from one counter, with table t.
func serving(t *testing.T, tbl func(addr string) *pb.RouteTable) (*fakeAlloc, *counter) {
	var n counter
	f := &fakeAlloc{}
	f.next = func(_ context.Context, r *pb.NextRequest) (*pb.NextResponse, error) {
		return &pb.NextResponse{Seq: n.next(r.GetUid())}, nil
	}
	f.nextBatch = func(_ context.Context, r *pb.NextBatchRequest) (*pb.NextBatchResponse, error) {
		out := make([]uint64, len(r.GetUids()))
		for i, uid := range r.GetUids() {
			out[i] = n.next(uid)
		}
		return &pb.NextBatchResponse{Seqs: out}, nil
	}
	serveFake(t, f)
	f.setTable(tbl(f.addr))
	return f, &n
}

// A NOT_OWNER answer brings the newer table: it is installed and the call goes to the owner
// it names, directly; every call is marked seqsvr-no-forward. An older table riding on a later
// reply is not installed.
func TestNotOwnerInstallsTheNewerTableAndGoesToTheOwner(t *testing.T) {
	owner, _ := serving(t, func(string) *pb.RouteTable { return nil })
	v2 := table(0, 2, 0, 100, owner.addr)
	owner.setTable(v2)
	stale := &fakeAlloc{}
	stale.next = func(ctx context.Context, _ *pb.NextRequest) (*pb.NextResponse, error) {
		return nil, notOwner(ctx, v2)
	}
	stale.nextBatch = func(ctx context.Context, _ *pb.NextBatchRequest) (*pb.NextBatchResponse, error) {
		return nil, notOwner(ctx, v2)
	}
	serveFake(t, stale)
	stale.setTable(table(0, 1, 0, 100, stale.addr))

	c := plaintext(t, Options{}, stale.addr)
	for _, coalesce := range []bool{true, false} {
		c.opts.DisableCoalescing = !coalesce
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		seq, err := c.Next(ctx, 42)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if seq == 0 {
			t.Fatal("no value")
		}
	}
	if v := c.tableFor(42).GetVersion(); v != 2 {
		t.Fatalf("route table v%d, want v2", v)
	}
	if c.Stats().Redirects != 1 {
		t.Fatalf("redirects %d: one NOT_OWNER, then the owner directly", c.Stats().Redirects)
	}
	// The owner answers with an older table: not installed.
	owner.next = func(_ context.Context, r *pb.NextRequest) (*pb.NextResponse, error) {
		return &pb.NextResponse{Seq: 99, RouteTable: table(0, 1, 0, 100, stale.addr)}, nil
	}
	c.opts.DisableCoalescing = true
	if _, err := c.Next(context.Background(), 42); err != nil {
		t.Fatal(err)
	}
	if got := c.tableFor(42); got.GetVersion() != 2 || got.GetEntries()[0].GetAddr() != owner.addr {
		t.Fatalf("an older table was installed: %v", got)
	}
	for _, f := range []*fakeAlloc{stale, owner} {
		for _, m := range []string{"Next", "NextBatch", "GetRouteTable"} {
			if calls, marked := f.callsOf(m); calls != marked {
				t.Fatalf("%s: %d calls, %d marked seqsvr-no-forward", m, calls, marked)
			}
		}
	}
	if calls, _ := owner.callsOf("Next"); calls < 2 {
		t.Fatalf("the owner answered %d Next", calls)
	}
}

// A call that keeps failing with a retryable code returns its last error before its context's
// deadline (the back-off never sleeps into it) after retrying with back-offs; a final code
// returns at once, after one attempt.
func TestRetriesAreBoundedByTheDeadline(t *testing.T) {
	f := &fakeAlloc{}
	f.next = func(context.Context, *pb.NextRequest) (*pb.NextResponse, error) {
		return nil, status.Error(codes.Unavailable, "no lease")
	}
	serveFake(t, f)
	f.setTable(table(0, 1, 0, 100, f.addr))
	c := plaintext(t, Options{DisableCoalescing: true}, f.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := c.Next(ctx, 7)
	if ctx.Err() != nil {
		t.Fatalf("the call returned only after its deadline: %v", err)
	}
	if Code(err) != codes.Unavailable {
		t.Fatalf("want the last UNAVAILABLE, got %v", err)
	}
	if calls, _ := f.callsOf("Next"); calls < 3 {
		t.Fatalf("%d attempts in 400 ms", calls)
	}
	var e *Error
	if !errors.As(err, &e) || e.Message != "no lease" || e.Hint == "" {
		t.Fatalf("the error carries the server's message and a hint: %#v", err)
	}

	f.next = func(context.Context, *pb.NextRequest) (*pb.NextResponse, error) {
		return nil, status.Error(codes.ResourceExhausted, "too many waiting calls")
	}
	before, _ := f.callsOf("Next")
	_, err = c.Next(context.Background(), 7)
	after, _ := f.callsOf("Next")
	if Code(err) != codes.ResourceExhausted || after != before+1 {
		t.Fatalf("a final code: %v after %d attempts", err, after-before)
	}

	// The caller's cancel ends the loop at once with CANCELLED.
	f.next = func(context.Context, *pb.NextRequest) (*pb.NextResponse, error) {
		return nil, status.Error(codes.Unavailable, "no lease")
	}
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		for n, _ := f.callsOf("Next"); n <= after; n, _ = f.callsOf("Next") {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err = c.Next(ctx, 7); Code(err) != codes.Canceled {
		t.Fatalf("cancelled: %v", err)
	}
}

// Two AllocSvrs that each answer NOT_OWNER naming the other, with ever newer tables: the call
// follows a few redirects, then backs off, and ends before its deadline.
func TestANotOwnerLoopEndsWithinTheDeadline(t *testing.T) {
	var mu sync.Mutex
	version := uint64(1)
	a, b := &fakeAlloc{}, &fakeAlloc{}
	bounce := func(to **fakeAlloc) func(ctx context.Context, r *pb.NextRequest) (*pb.NextResponse, error) {
		return func(ctx context.Context, _ *pb.NextRequest) (*pb.NextResponse, error) {
			mu.Lock()
			version++
			v := version
			mu.Unlock()
			return nil, notOwner(ctx, table(0, v, 0, 100, (*to).addr))
		}
	}
	a.next, b.next = bounce(&b), bounce(&a)
	serveFake(t, a)
	serveFake(t, b)
	a.setTable(table(0, 1, 0, 100, a.addr))
	c := plaintext(t, Options{DisableCoalescing: true}, a.addr)
	// 2 s: the loop stops once less than a back-off and an attempt are left, half a second
	// before the deadline at the capped back-off, so a loaded machine cannot push it past.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Next(ctx, 1)
	if ctx.Err() != nil || Code(err) != codes.FailedPrecondition {
		t.Fatalf("ended after the deadline (%v) or not with the NOT_OWNER: %v", ctx.Err(), err)
	}
	s := c.Stats()
	if s.Retries == 0 || s.Redirects == 0 || s.Redirects > uint64(StandardRetry.RedirectsMax)*(s.Retries+1) {
		t.Fatalf("redirects %d, back-offs %d", s.Redirects, s.Retries)
	}
}

// gate holds a fake's NextBatch answers until released, recording each batch's uids.
type gate struct {
	mu      sync.Mutex
	batches [][]uint64
	release chan struct{}
}

// Concurrent Next calls to one AllocSvr are coalesced into one NextBatch (independent
// entries), in the order they were queued; each caller gets the value of its own entry, and
// a repeated uid gets increasing values in queue order.
func TestCoalescedCallsKeepTheirOrderAndGetTheirOwnValues(t *testing.T) {
	g := &gate{release: make(chan struct{})}
	f, _ := serving(t, func(addr string) *pb.RouteTable { return table(0, 1, 0, 100, addr) })
	var n counter
	f.nextBatch = func(_ context.Context, r *pb.NextBatchRequest) (*pb.NextBatchResponse, error) {
		if !r.GetIndependent() {
			return nil, status.Error(codes.Internal, "a coalesced batch has independent entries")
		}
		g.mu.Lock()
		g.batches = append(g.batches, r.GetUids())
		first := len(g.batches) == 1
		g.mu.Unlock()
		if first {
			<-g.release
		}
		out := make([]uint64, len(r.GetUids()))
		for i, uid := range r.GetUids() {
			out[i] = n.next(uid)*1000 + uint64(i) // the entry's index, to check who got what
		}
		return &pb.NextBatchResponse{Seqs: out}, nil
	}
	c := plaintext(t, Options{MaxInFlight: 1}, f.addr)
	p, _ := c.peer(f.addr)

	type got struct {
		uid, seq uint64
		err      error
	}
	results := make(chan got, 64)
	call := func(uid uint64) {
		seq, err := c.Next(context.Background(), uid)
		results <- got{uid, seq, err}
	}
	go call(0) // the first batch, held at the fake
	eventually(t, "the first batch at the fake", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.batches) == 1 })
	// Queued one at a time, so the queue order is known: 1, 2, 3, 1, 4, 1.
	order := []uint64{1, 2, 3, 1, 4, 1}
	for i, uid := range order {
		go call(uid)
		eventually(t, "queued", func() bool { return len(p.queue) == i+1 })
	}
	close(g.release)
	byUID := map[uint64][]uint64{}
	for range append(order, 0) {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		byUID[r.uid] = append(byUID[r.uid], r.seq)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.batches) != 2 || fmt.Sprint(g.batches[1]) != fmt.Sprint(order) {
		t.Fatalf("batches %v, want [0] then %v", g.batches, order)
	}
	// Entry i of the second batch answered i (+ 1000 × the uid's count): each caller has the
	// value of its own entry.
	want := map[uint64][]uint64{0: {1000}, 1: {1000, 2003, 3005}, 2: {1001}, 3: {1002}, 4: {1004}}
	for uid, seqs := range byUID {
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		if fmt.Sprint(seqs) != fmt.Sprint(want[uid]) {
			t.Fatalf("uid %d got %v, want %v", uid, seqs, want[uid])
		}
	}
	if c.Stats().CoalescedRPCs != 2 {
		t.Fatalf("coalesced RPCs %d", c.Stats().CoalescedRPCs)
	}
}

// Past MaxQueued calls waiting for one AllocSvr, a call fails at once with RESOURCE_EXHAUSTED
// (not retried); an entry answered 0 (not served at once) is asked again alone.
func TestAFullQueueRefusesAtOnceAndAZeroIsAskedAlone(t *testing.T) {
	release := make(chan struct{})
	f, n := serving(t, func(addr string) *pb.RouteTable { return table(0, 1, 0, 100, addr) })
	var batches int
	var mu sync.Mutex
	f.nextBatch = func(_ context.Context, r *pb.NextBatchRequest) (*pb.NextBatchResponse, error) {
		mu.Lock()
		batches++
		first := batches == 1
		mu.Unlock()
		if first {
			<-release
		}
		return &pb.NextBatchResponse{Seqs: make([]uint64, len(r.GetUids()))}, nil // all 0
	}
	c := plaintext(t, Options{MaxInFlight: 1, MaxQueued: 2}, f.addr)
	p, _ := c.peer(f.addr)
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() { _, err := c.Next(context.Background(), 5); errs <- err }()
		if i == 0 {
			eventually(t, "the first batch sent", func() bool { mu.Lock(); defer mu.Unlock(); return batches == 1 })
		} else {
			i := i
			eventually(t, "queued", func() bool { return len(p.queue) == i })
		}
	}
	_, err := c.Next(context.Background(), 5)
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.ResourceExhausted || e.Hint == "" {
		t.Fatalf("want RESOURCE_EXHAUSTED with a hint, got %v", err)
	}
	close(release)
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if calls, _ := f.callsOf("Next"); calls != 3 {
		t.Fatalf("the three 0s asked alone: %d Next", calls)
	}
	if got := n.next(5); got != 4 {
		t.Fatalf("uid 5 served %d times alone", got-1)
	}
}

// NextBatch keeps order and repeats across two AllocSvrs and regroups after a hand-over that
// splits a group (the moved part answered NOT_OWNER with the new table).
func TestNextBatchKeepsOrderAndRegroupsAfterAHandOver(t *testing.T) {
	var n counter
	serve := func(f *fakeAlloc, owns func(uid uint64) bool, newer func() *pb.RouteTable) {
		f.nextBatch = func(ctx context.Context, r *pb.NextBatchRequest) (*pb.NextBatchResponse, error) {
			for _, uid := range r.GetUids() {
				if !owns(uid) {
					return nil, notOwner(ctx, newer())
				}
			}
			out := make([]uint64, len(r.GetUids()))
			for i, uid := range r.GetUids() {
				out[i] = n.next(uid)
			}
			return &pb.NextBatchResponse{Seqs: out}, nil
		}
		serveFake(t, f)
	}
	a, b := &fakeAlloc{}, &fakeAlloc{}
	var v2 *pb.RouteTable
	serve(a, func(uid uint64) bool { return uid < 10 }, func() *pb.RouteTable { return v2 })
	serve(b, func(uid uint64) bool { return uid >= 10 }, func() *pb.RouteTable { return v2 })
	v2 = table(0, 2, 0, 1, a.addr, 1, 10, b.addr)
	a.setTable(table(0, 1, 0, 10, a.addr)) // a still thinks it owns everything
	c := plaintext(t, Options{}, a.addr)
	uids := []uint64{15, 3, 15, 4, 3, 20}
	got, err := c.NextBatch(context.Background(), uids)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1 1 2 1 2 1]" {
		t.Fatalf("values %v for %v", got, uids)
	}
	if _, err := c.NextBatch(context.Background(), nil); Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty batch: %v", err)
	}
	if _, err := c.NextBatch(context.Background(), []uint64{1, 5000}); Code(err) != codes.InvalidArgument {
		t.Fatalf("a uid outside every set: %v", err)
	}
}

// Without TLS and without Plaintext nothing is dialled: FAILED_PRECONDITION with a hint.
func TestNoTransportIsRefused(t *testing.T) {
	_, err := Connect(context.Background(), Options{Seeds: []string{"127.0.0.1:1"}})
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.FailedPrecondition || e.Hint == "" {
		t.Fatalf("%v", err)
	}
	if _, err := Connect(context.Background(), Options{Plaintext: true}); Code(err) != codes.InvalidArgument {
		t.Fatalf("no seeds: %v", err)
	}
}

// A NextIds answer that breaks the service's promises is INTERNAL, never handed on.
func TestAMalformedIdsAnswerIsInternal(t *testing.T) {
	be := func(ids ...uint64) []byte {
		var out []byte
		for _, id := range ids {
			for s := 56; s >= 0; s -= 8 {
				out = append(out, byte(id>>uint(s)))
			}
		}
		return out
	}
	bad := []*pb.NextIdsResponse{
		{Ids: []uint64{1, 2}},
		{Ids: []uint64{1, 3, 3}},
		{Ids: []uint64{5, 4, 6}},
		{Ids128: [][]byte{make([]byte, 16), make([]byte, 15), make([]byte, 16)}},
		{},
		{Ids: []uint64{1, 2, 3}, Ids128: [][]byte{make([]byte, 16)}},
		{Ids128Packed: make([]byte, 47)},
		{Ids64Packed: make([]byte, 23)},
		{Ids64Packed: be(1, 3, 3)},
		{Ids64Packed: be(3, 2, 1)},
		{Ids: []uint64{1, 2, 3}, Ids64Packed: be(4, 5, 6)},
	}
	for i, r := range bad {
		if _, err := idsOf("x", r, 3); err == nil || err.Code != codes.Internal {
			t.Fatalf("#%d: %v", i, err)
		}
	}
	good, err := idsOf("x", &pb.NextIdsResponse{Ids64Packed: be(1, 2, 1<<63), WorkerId: 9}, 3)
	if err != nil || fmt.Sprint(good.U64) != "[1 2 9223372036854775808]" || good.WorkerID != 9 {
		t.Fatalf("%v %v", good, err)
	}
}

// Id calls go round-robin, skip an AllocSvr that fails retryably, and return a final code at
// once.
func TestIdCallsSkipAFailingAllocSvr(t *testing.T) {
	down := &fakeAlloc{nextIds: func(context.Context, *pb.NextIdsRequest) (*pb.NextIdsResponse, error) {
		return nil, status.Error(codes.Unavailable, "no worker id yet")
	}}
	var mu sync.Mutex
	next := uint64(1)
	up := &fakeAlloc{nextIds: func(_ context.Context, r *pb.NextIdsRequest) (*pb.NextIdsResponse, error) {
		if r.GetScheme() != "orders" {
			return nil, status.Error(codes.NotFound, "no scheme")
		}
		mu.Lock()
		defer mu.Unlock()
		out := &pb.NextIdsResponse{WorkerId: 3}
		for i := uint32(0); i < r.GetCount(); i++ {
			out.Ids = append(out.Ids, next)
			next++
		}
		return out, nil
	}}
	serveFake(t, down)
	serveFake(t, up)
	down.setTable(table(0, 1, 0, 100, down.addr))
	c := plaintext(t, Options{}, down.addr, up.addr)
	var all []uint64
	for i := 0; i < 4; i++ {
		ids, err := c.NextIDs(context.Background(), "orders", 2)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ids.U64...)
	}
	if fmt.Sprint(all) != "[1 2 3 4 5 6 7 8]" {
		t.Fatalf("%v", all)
	}
	if n, _ := down.callsOf("NextIds"); n < 1 {
		t.Fatal("the failing one was never asked in its turn")
	}
	before, _ := up.callsOf("NextIds")
	if _, err := c.NextIDs(context.Background(), "nope", 1); Code(err) != codes.NotFound {
		t.Fatalf("%v", err)
	}
	if after, _ := up.callsOf("NextIds"); after != before+1 {
		t.Fatalf("a final code asked %d times", after-before)
	}
}

// A closed client fails every call at once with CANCELLED "the client is closed": the SDK's
// own CANCELLED is not retried as a cut connection's is (before, each call retried until its
// deadline, here 30 s).
func TestACallOnAClosedClientFailsAtOnce(t *testing.T) {
	f := &fakeAlloc{}
	f.next = func(context.Context, *pb.NextRequest) (*pb.NextResponse, error) {
		return &pb.NextResponse{Seq: 1}, nil
	}
	f.nextBatch = func(_ context.Context, r *pb.NextBatchRequest) (*pb.NextBatchResponse, error) {
		return &pb.NextBatchResponse{Seqs: make([]uint64, len(r.GetUids()))}, nil
	}
	f.nextIds = func(context.Context, *pb.NextIdsRequest) (*pb.NextIdsResponse, error) {
		return nil, status.Error(codes.Unavailable, "no worker id")
	}
	serveFake(t, f)
	f.setTable(table(0, 1, 0, 100, f.addr))
	for _, coalescing := range []bool{true, false} {
		c := plaintext(t, Options{DisableCoalescing: !coalescing}, f.addr)
		if _, err := c.Next(context.Background(), 7); err != nil {
			t.Fatalf("before the close: %v", err)
		}
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		calls := map[string]func() error{
			"Next":      func() error { _, err := c.Next(ctx, 7); return err },
			"NextBatch": func() error { _, err := c.NextBatch(ctx, []uint64{7, 8}); return err },
			"NextIDs":   func() error { _, err := c.NextIDs(ctx, "snowflake", 1); return err },
		}
		for name, call := range calls {
			err := call()
			if ctx.Err() != nil {
				t.Fatalf("%s (coalescing %v) returned only at its deadline: %v", name, coalescing, err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != codes.Canceled || !strings.Contains(e.Message, "closed") {
				t.Fatalf("%s (coalescing %v): want CANCELLED the client is closed, got %v", name, coalescing, err)
			}
		}
		cancel()
	}
}
