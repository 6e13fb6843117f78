package seqsvr

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/seqsvr/seqsvr/sdk/go/seqsvrpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

const (
	// attemptTimeoutMax bounds one attempt (an AllocSvr that accepts connections but never
	// answers must not eat the whole deadline); the Rust SDK's ATTEMPT_TIMEOUT_MAX.
	attemptTimeoutMax = 3 * time.Second
	// seedGrace: when asking several AllocSvrs for route tables at once, how long the others
	// may still answer after the first table arrived.
	seedGrace = 200 * time.Millisecond
	// Message size limits of SeqService (seqsvr-proto's SEQ_REQUEST_MAX_BYTES, REPLY_MAX_BYTES).
	seqRequestMaxBytes = 4 << 20
	replyMaxBytes      = 16 << 20
)

// Options say where the cluster is, how to reach it and how the client batches. Seeds and one
// of TLS and Plaintext are required; zero values elsewhere take the defaults.
type Options struct {
	// Seeds are AllocSvr addresses (host:port), at least one per set; the client learns the
	// rest from their route tables. ClusterFile.Options lists every set's allocs.
	Seeds []string
	// TLS is the application's mutual TLS identity. Required unless Plaintext is set.
	TLS *TLSFiles
	// Plaintext dials without TLS (a cluster whose servers run with --insecure). Never the
	// default: a client without TLS and without Plaintext refuses to connect.
	Plaintext bool
	// IDs is the cluster config's [ids] (ClusterFile.Options sets it): rongcloud sessions are
	// then sent to their owner from the first call.
	IDs *IDsConfig
	// DisableCoalescing sends each Next as its own RPC. By default concurrent Next calls bound
	// for one AllocSvr are coalesced into NextBatch RPCs.
	DisableCoalescing bool
	// MaxCoalesced is the most calls in one coalesced RPC (default 1000; keep it within the
	// AllocSvrs' max_batch_uids).
	MaxCoalesced int
	// MaxInFlight is how many coalesced RPCs one AllocSvr has from this client at a time
	// (default 2); calls arriving meanwhile wait in its queue for the next one.
	MaxInFlight int
	// MaxQueued is the most calls waiting in one AllocSvr's queue (default 100000); one more
	// fails at once with RESOURCE_EXHAUSTED instead of piling up in memory.
	MaxQueued int
	// DefaultTimeout bounds a call whose context has no deadline (default 5 s). A context's own
	// deadline always wins.
	DefaultTimeout time.Duration
	// DialOptions are added to every connection's (e.g. a custom dialer).
	DialOptions []grpc.DialOption
}

func (o *Options) fill() {
	if o.MaxCoalesced == 0 {
		o.MaxCoalesced = 1000
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 2
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = 100_000
	}
	if o.DefaultTimeout == 0 {
		o.DefaultTimeout = 5 * time.Second
	}
}

// Client is the SDK: per-uid sequences (Next, NextBatch, Current) and globally unique ids
// (NextIDs, NextSessionIDs) from a seqsvr cluster. Safe for concurrent use; one per process is
// enough. It keeps each set's route table, learnt from the seeds and refreshed from the tables
// that ride on replies, and calls each uid's owner directly (marked seqsvr-no-forward: an
// AllocSvr that does not own the uid answers NOT_OWNER with its table, which the client
// installs if newer and follows). Route tables never go back: a table is installed only if its
// version is above the one held for its set, whoever sent it.
type Client struct {
	seeds []string
	opts  Options
	dial  []grpc.DialOption

	mu     sync.RWMutex
	tables []*pb.RouteTable // one per set, sorted by uid_begin

	peersMu sync.Mutex
	peers   map[string]*peer
	closed  chan struct{}
	once    sync.Once

	cursor   uint64 // round-robin start of id calls (atomic)
	sessions sessionCache
	stats    counters
}

// peer is one AllocSvr as this client talks to it: its connection and coalescing queue.
type peer struct {
	addr  string
	conn  *grpc.ClientConn
	seq   pb.SeqServiceClient
	ids   pb.IdServiceClient
	queue chan *pending
	start sync.Once
}

// Stats are what the client did so far (ClientStats of the Rust SDK).
type Stats struct {
	// Calls are public calls made (Next, NextBatch, Current); Failed those that ended in an error.
	Calls, Failed uint64
	// Redirects are attempts repeated at once after a NOT_OWNER named the owner.
	Redirects uint64
	// Retries are attempts repeated after a back-off.
	Retries uint64
	// RouteRefreshes are GetRouteTable RPCs; RouteTablesInstalled newer tables installed.
	RouteRefreshes, RouteTablesInstalled uint64
	// CoalescedRPCs are the RPCs that carried coalesced Next calls.
	CoalescedRPCs uint64
}

type counters struct {
	calls, failed, redirects, retries, refreshes, installed, coalesced uint64
}

func bump(c *uint64) { atomic.AddUint64(c, 1) }

// Stats are the client's counters so far.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		Calls: atomic.LoadUint64(&s.calls), Failed: atomic.LoadUint64(&s.failed),
		Redirects: atomic.LoadUint64(&s.redirects), Retries: atomic.LoadUint64(&s.retries),
		RouteRefreshes: atomic.LoadUint64(&s.refreshes), RouteTablesInstalled: atomic.LoadUint64(&s.installed),
		CoalescedRPCs: atomic.LoadUint64(&s.coalesced),
	}
}

// noForward marks every call seqsvr-no-forward: 1 (the SDK follows the route tables itself).
func noForward(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(metadata.AppendToOutgoingContext(ctx, NoForwardMetadata, "1"), method, req, reply, cc, opts...)
}

// newClient checks the options and builds the client without dialling anything.
func newClient(opts Options) (*Client, error) {
	opts.fill()
	var seeds []string
	seen := map[string]bool{}
	for _, s := range opts.Seeds {
		if s != "" && !seen[s] {
			seen[s] = true
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil, newError(codes.InvalidArgument, "", "no seed addresses: give one AllocSvr per set")
	}
	if opts.MaxCoalesced < 0 || opts.MaxInFlight < 0 || opts.MaxQueued < 0 {
		return nil, newError(codes.InvalidArgument, "", "MaxCoalesced, MaxInFlight and MaxQueued must be at least 1 (0: the default)")
	}
	var transport grpc.DialOption
	switch {
	case opts.TLS != nil && opts.Plaintext:
		return nil, newError(codes.InvalidArgument, "", "both TLS and Plaintext given: choose one")
	case opts.TLS != nil:
		cfg, err := opts.TLS.config()
		if err != nil {
			return nil, err
		}
		transport = grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	case opts.Plaintext:
		transport = grpc.WithInsecure()
	default:
		return nil, newError(codes.FailedPrecondition,
			"give Options.TLS (the application's certificate and key, e.g. from ClusterFile.Options) or, for a cluster served in plaintext (--insecure), set Options.Plaintext",
			"no transport chosen: the SDK never falls back to plaintext")
	}
	dial := []grpc.DialOption{
		transport,
		grpc.WithUnaryInterceptor(noForward),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(replyMaxBytes), grpc.MaxCallSendMsgSize(seqRequestMaxBytes)),
		// Reconnect soon after an AllocSvr comes back (gRPC's default waits up to 2 minutes).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: attemptTimeoutMax,
		}),
	}
	dial = append(dial, opts.DialOptions...)
	return &Client{seeds: seeds, opts: opts, dial: dial, peers: map[string]*peer{}, closed: make(chan struct{})}, nil
}

// Connect learns the route tables from the seeds (one per set is enough) and returns the
// client. It fails if no seed answered before ctx's deadline (or Options.DefaultTimeout), and
// at once if the options choose no transport.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	c, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel, until := c.bound(ctx)
	defer cancel()
	b := StandardRetry.NewBackoff()
	for {
		errs := c.refreshFrom(ctx, c.seeds, until)
		if len(c.RouteTables()) > 0 {
			return c, nil
		}
		if !b.Wait(ctx, until) {
			c.Close()
			return nil, newError(codes.Unavailable, "check the seed addresses and that the AllocSvrs run; with TLS, that the CA and server name are the cluster's",
				"no seed answered with a route table: %s", strings.Join(errs, "; "))
		}
	}
}

// Close ends the client's connections and coalescing goroutines. Calls still running fail.
func (c *Client) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.peersMu.Lock()
		defer c.peersMu.Unlock()
		for _, p := range c.peers {
			p.conn.Close()
		}
	})
	return nil
}

// bound is ctx with a deadline (ctx's own, else Options.DefaultTimeout from now).
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc, time.Time) {
	if until, ok := ctx.Deadline(); ok {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, until
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.DefaultTimeout)
	until, _ := ctx.Deadline()
	return ctx, cancel, until
}

// attemptTimeout is how long one attempt may take: what is left, at most attemptTimeoutMax.
func attemptTimeout(until time.Time) time.Duration {
	left := time.Until(until)
	if left > attemptTimeoutMax {
		return attemptTimeoutMax
	}
	return left
}

// closedError is CANCELLED "the client is closed" once Close was called, else nil. Every retry
// loop asks it first: the SDK's own CANCELLED is not the retryable one of a cut connection.
func (c *Client) closedError() *Error {
	select {
	case <-c.closed:
		return newError(codes.Canceled, "", "the client is closed")
	default:
		return nil
	}
}

// peer is the AllocSvr at addr (the same one for every table and call that names it).
func (c *Client) peer(addr string) (*peer, *Error) {
	if err := c.closedError(); err != nil {
		return nil, err
	}
	c.peersMu.Lock()
	defer c.peersMu.Unlock()
	if p, ok := c.peers[addr]; ok {
		return p, nil
	}
	conn, err := grpc.Dial(addr, c.dial...)
	if err != nil {
		return nil, newError(codes.InvalidArgument, "", "cannot dial %q: %v", addr, err)
	}
	// The coalescing queue (MaxQueued slots, 800 KB at the default) is made on the peer's
	// first coalesced call: an address only id calls or a route table named costs none.
	p := &peer{addr: addr, conn: conn, seq: pb.NewSeqServiceClient(conn), ids: pb.NewIdServiceClient(conn)}
	c.peers[addr] = p
	return p, nil
}

// RouteTables are the route tables known now, one per set, by uid range.
func (c *Client) RouteTables() []*pb.RouteTable {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]*pb.RouteTable(nil), c.tables...)
}

// LearnRoutes keeps each table that is newer than the one held for its set (a table learnt
// elsewhere); a table never goes back.
func (c *Client) LearnRoutes(tables ...*pb.RouteTable) {
	for _, t := range tables {
		c.install(t)
	}
}

// install keeps t if its version is above the one held for its set: a table never goes back.
func (c *Client) install(t *pb.RouteTable) {
	if t == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, held := range c.tables {
		if held.GetSetId() == t.GetSetId() {
			if held.GetVersion() >= t.GetVersion() {
				return
			}
			c.tables[i] = t
			bump(&c.stats.installed)
			return
		}
	}
	c.tables = append(c.tables, t)
	sort.Slice(c.tables, func(i, j int) bool { return c.tables[i].GetUidBegin() < c.tables[j].GetUidBegin() })
	bump(&c.stats.installed)
}

// tableFor is the table of the set holding uid, if known.
func (c *Client) tableFor(uid uint64) *pb.RouteTable {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return tableIn(c.tables, uid)
}

func tableIn(tables []*pb.RouteTable, uid uint64) *pb.RouteTable {
	for _, t := range tables {
		if t.GetUidBegin() <= uid && uid < t.GetUidEnd() {
			return t
		}
	}
	return nil
}

// ownerOf is the entry naming the owner of uid's section in t (nil for a section in a gap);
// a section size of 0 counts as 1 (seqsvr-proto's route.rs).
func ownerOf(t *pb.RouteTable, uid uint64) *pb.RouteEntry {
	size := t.GetSectionSize()
	if size == 0 {
		size = 1
	}
	section := uid / size
	entries := t.GetEntries()
	i := sort.Search(len(entries), func(i int) bool { return entries[i].GetSectionEnd() > section })
	hit := func(e *pb.RouteEntry) bool { return e.GetSectionBegin() <= section && section < e.GetSectionEnd() }
	if i < len(entries) && hit(entries[i]) {
		return entries[i]
	}
	for _, e := range entries { // a table not sorted by section
		if hit(e) {
			return e
		}
	}
	return nil
}

// ownerAddr is the address t names for uid, if uid is in t's set and the entry has one.
func ownerAddr(t *pb.RouteTable, uid uint64) string {
	if t == nil || uid < t.GetUidBegin() || uid >= t.GetUidEnd() {
		return ""
	}
	if e := ownerOf(t, uid); e != nil {
		return e.GetAddr()
	}
	return ""
}

// routeOf is where uid is served and the version of its set's table: found false if no table
// has uid's set; an UNAVAILABLE error if the set's section has no owner yet.
func (c *Client) routeOf(uid uint64) (addr string, version uint64, found bool, err *Error) {
	t := c.tableFor(uid)
	if t == nil {
		return "", 0, false, nil
	}
	if a := ownerAddr(t, uid); a != "" {
		return a, t.GetVersion(), true, nil
	}
	return "", 0, true, newError(codes.Unavailable, "", "no AllocSvr serves uid %d's section yet (route table v%d of set %d)",
		uid, t.GetVersion(), t.GetSetId())
}

// locate is routeOf, learning the tables from the seeds first if no table has uid's set.
func (c *Client) locate(ctx context.Context, uid uint64, until time.Time) (*peer, uint64, *Error) {
	addr, version, found, err := c.routeOf(uid)
	if !found {
		c.refreshFrom(ctx, c.seeds, until)
		addr, version, found, err = c.routeOf(uid)
	}
	if !found {
		var sets []string
		for _, t := range c.RouteTables() {
			sets = append(sets, fmt.Sprintf("set %d [%d, %d)", t.GetSetId(), t.GetUidBegin(), t.GetUidEnd()))
		}
		return nil, 0, newError(codes.InvalidArgument, "give a uid of one of the cluster's sets",
			"uid %d is outside every set of the cluster (%s)", uid, strings.Join(sets, ", "))
	}
	if err != nil {
		return nil, 0, err
	}
	p, perr := c.peer(addr)
	return p, version, perr
}

// refreshFrom asks every address at once for its route table and installs what comes back;
// once one table arrived the others get seedGrace more. Returns the failures.
func (c *Client) refreshFrom(ctx context.Context, addrs []string, until time.Time) []string {
	left := attemptTimeout(until)
	if left <= 0 || len(addrs) == 0 {
		return nil
	}
	type answer struct {
		addr  string
		table *pb.RouteTable
		err   *Error
	}
	answers := make(chan answer, len(addrs))
	for _, addr := range addrs {
		go func(addr string) {
			bump(&c.stats.refreshes)
			p, err := c.peer(addr)
			if err != nil {
				answers <- answer{addr: addr, err: err}
				return
			}
			actx, cancel := context.WithTimeout(ctx, left)
			defer cancel()
			r, rerr := p.seq.GetRouteTable(actx, &pb.GetRouteTableRequest{})
			if rerr != nil {
				answers <- answer{addr: addr, err: fromRPC(rerr)}
				return
			}
			answers <- answer{addr: addr, table: r.GetRouteTable()}
		}(addr)
	}
	var errs []string
	var grace <-chan time.Time
	for pending := len(addrs); pending > 0; pending-- {
		select {
		case a := <-answers:
			switch {
			case a.err != nil:
				errs = append(errs, a.addr+": "+a.err.Message)
			case a.table == nil:
				errs = append(errs, a.addr+": empty route table")
			default:
				c.install(a.table)
				if grace == nil {
					grace = time.After(seedGrace)
				}
			}
		case <-grace:
			return append(errs, fmt.Sprintf("%d more did not answer in time", pending))
		case <-ctx.Done():
			return append(errs, fmt.Sprintf("%d more did not answer before the deadline", pending))
		}
	}
	return errs
}

// refreshFor refreshes the table of uid's set from every AllocSvr in it and the seeds.
func (c *Client) refreshFor(ctx context.Context, uids []uint64, until time.Time) {
	seen := map[string]bool{}
	var addrs []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for _, uid := range uids {
		if t := c.tableFor(uid); t != nil {
			for _, e := range t.GetEntries() {
				add(e.GetAddr())
			}
		}
	}
	for _, s := range c.seeds {
		add(s)
	}
	c.refreshFrom(ctx, addrs, until)
}

// attemptFunc is one try at uid's owner p: the value and the table the answer carried.
type attemptFunc func(ctx context.Context, p *peer, version uint64, until time.Time) (uint64, *pb.RouteTable, *Error)

// call is the retry loop shared by Next and Current: the Rust SDK's call_attempts.
func (c *Client) call(ctx context.Context, uid uint64, attempt attemptFunc) (uint64, error) {
	bump(&c.stats.calls)
	v, err := c.callAttempts(ctx, uid, attempt)
	if err != nil {
		bump(&c.stats.failed)
		return 0, err
	}
	return v, nil
}

func (c *Client) callAttempts(ctx context.Context, uid uint64, attempt attemptFunc) (uint64, *Error) {
	ctx, cancel, until := c.bound(ctx)
	defer cancel()
	b := StandardRetry.NewBackoff()
	var last *Error
	for {
		if err := c.closedError(); err != nil {
			return 0, err
		}
		p, version, err := c.locate(ctx, uid, until)
		switch {
		case err != nil && err.Code == codes.InvalidArgument:
			return 0, err
		case err != nil:
			last = err
		default:
			timeout := attemptTimeout(until)
			if timeout <= 0 || ctx.Err() != nil {
				return 0, ctxError(ctx, last)
			}
			actx, acancel := context.WithTimeout(ctx, timeout)
			value, table, aerr := attempt(actx, p, version, time.Now().Add(timeout))
			acancel()
			if aerr == nil {
				c.install(table)
				return value, nil
			}
			if ctx.Err() != nil {
				return 0, ctxError(ctx, aerr)
			}
			switch {
			case aerr.Code == codes.FailedPrecondition && aerr.routeTable != nil:
				c.install(aerr.routeTable)
				// At once, a few times in a row; then back off like any retry.
				if b.Redirect() {
					bump(&c.stats.redirects)
					continue
				}
				last = aerr
			case Retryable(aerr.Code):
				last = aerr
			default:
				return 0, aerr
			}
		}
		if !b.Wait(ctx, until) {
			return 0, ctxError(ctx, last)
		}
		bump(&c.stats.retries)
		c.refreshFor(ctx, []uint64{uid}, until)
	}
}

// Next is the next sequence of uid: above every value returned for uid by a call that
// completed before this one started. Retried within ctx's deadline as RetryPolicy says.
// Concurrent Next calls bound for one AllocSvr ride one NextBatch RPC.
func (c *Client) Next(ctx context.Context, uid uint64) (uint64, error) {
	return c.call(ctx, uid, func(ctx context.Context, p *peer, version uint64, until time.Time) (uint64, *pb.RouteTable, *Error) {
		if !c.opts.DisableCoalescing {
			seq, err := c.nextCoalesced(ctx, p, uid, version, until)
			switch {
			case err == nil && seq > 0:
				return seq, nil, nil
			case err == nil:
				// Not servable at once (hand-over, waiting for an advance): ask alone, and
				// let the AllocSvr wait for it.
			case err.Code == codes.InvalidArgument:
				// E.g. more calls than the AllocSvr takes in one batch: ask alone.
			default:
				return 0, nil, err
			}
		}
		var trailer metadata.MD
		r, err := p.seq.Next(ctx, &pb.NextRequest{Uid: uid, RouteVersion: version}, grpc.Trailer(&trailer))
		if err != nil {
			return 0, nil, fromAnswer(err, trailer)
		}
		return r.GetSeq(), r.GetRouteTable(), nil
	})
}

// Current is uid's current sequence without allocating: at least every value handed out for
// it and below the next one; 0 if its section never allocated anything.
func (c *Client) Current(ctx context.Context, uid uint64) (uint64, error) {
	return c.call(ctx, uid, func(ctx context.Context, p *peer, version uint64, _ time.Time) (uint64, *pb.RouteTable, *Error) {
		var trailer metadata.MD
		r, err := p.seq.Current(ctx, &pb.CurrentRequest{Uid: uid, RouteVersion: version}, grpc.Trailer(&trailer))
		if err != nil {
			return 0, nil, fromAnswer(err, trailer)
		}
		return r.GetSeq(), r.GetRouteTable(), nil
	})
}
