package seqsvr

import (
	"context"
	"time"

	pb "github.com/seqsvr/seqsvr/sdk/go/seqsvrpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// pending is a Next call waiting for a coalesced RPC.
type pending struct {
	uid     uint64
	version uint64
	until   time.Time
	// ctx is the caller's attempt: a caller that gave up is left out of the batch.
	ctx   context.Context
	reply chan coalesced // buffered (1): the coalescer never blocks on a caller
}

type coalesced struct {
	seq uint64
	err *Error
}

// nextCoalesced queues uid for p's next coalesced RPC and waits for its value; 0 = not served
// at once (the caller asks alone). A full queue fails at once with RESOURCE_EXHAUSTED.
func (c *Client) nextCoalesced(ctx context.Context, p *peer, uid, version uint64, until time.Time) (uint64, *Error) {
	p.start.Do(func() {
		p.queue = make(chan *pending, c.opts.MaxQueued)
		go c.coalesce(p)
	})
	call := &pending{uid: uid, version: version, until: until, ctx: ctx, reply: make(chan coalesced, 1)}
	select {
	case p.queue <- call:
	default:
		return 0, newError(codes.ResourceExhausted,
			"the AllocSvr answers slower than calls arrive: back off before retrying, or raise Options.MaxQueued or MaxInFlight",
			"%d calls already wait for a coalesced RPC to %s (Options.MaxQueued)", c.opts.MaxQueued, p.addr)
	}
	select {
	case r := <-call.reply:
		return r.seq, r.err
	case <-ctx.Done():
		return 0, fromRPC(ctx.Err())
	case <-c.closed:
		return 0, newError(codes.Canceled, "", "the client is closed")
	}
}

// coalesce is p's coalescing goroutine: once one of MaxInFlight slots is free, it takes every
// call waiting (up to MaxCoalesced) and sends them as one NextBatch with independent entries,
// in queue order; calls pile up in the queue meanwhile. Each RPC runs in a goroutine of its
// own that frees its slot when answered. It ends when the client closes.
func (c *Client) coalesce(p *peer) {
	slots := make(chan struct{}, c.opts.MaxInFlight)
	for {
		select {
		case slots <- struct{}{}:
		case <-c.closed:
			return
		}
		var first *pending
		select {
		case first = <-p.queue:
		case <-c.closed:
			return
		}
		batch := []*pending{first}
	drain:
		for len(batch) < c.opts.MaxCoalesced {
			select {
			case next := <-p.queue:
				batch = append(batch, next)
			default:
				break drain
			}
		}
		live := batch[:0]
		for _, call := range batch {
			if call.ctx.Err() == nil { // callers that gave up are left out
				live = append(live, call)
			}
		}
		if len(live) == 0 {
			<-slots
			continue
		}
		go func(batch []*pending) {
			defer func() { <-slots }()
			c.sendCoalesced(p, batch)
		}(live)
	}
}

// sendCoalesced sends one coalesced NextBatch and hands each caller its answer: its value (0:
// not served at once), or the RPC's error for all of them.
func (c *Client) sendCoalesced(p *peer, batch []*pending) {
	bump(&c.stats.coalesced)
	until := batch[0].until
	version := batch[0].version
	uids := make([]uint64, len(batch))
	for i, call := range batch {
		uids[i] = call.uid
		if call.until.After(until) {
			until = call.until
		}
		if call.version < version {
			version = call.version
		}
	}
	answerAll := func(err *Error) {
		for _, call := range batch {
			call.reply <- coalesced{err: err}
		}
	}
	timeout := attemptTimeout(until)
	if timeout <= 0 {
		answerAll(newError(codes.DeadlineExceeded, "", "the deadline passed before the batch was sent"))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() { // the client's Close ends the RPC too
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	var trailer metadata.MD
	r, err := p.seq.NextBatch(ctx, &pb.NextBatchRequest{Uids: uids, RouteVersion: version, Independent: true}, grpc.Trailer(&trailer))
	if err != nil {
		answerAll(fromAnswer(err, trailer))
		return
	}
	seqs := r.GetSeqs()
	if len(seqs) != len(batch) {
		answerAll(newError(codes.Internal, "", "%s answered %d values for %d uids", p.addr, len(seqs), len(batch)))
		return
	}
	c.install(r.GetRouteTable())
	for i, call := range batch {
		call.reply <- coalesced{seq: seqs[i]}
	}
}
