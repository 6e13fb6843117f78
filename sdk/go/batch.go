package seqsvr

import (
	"context"
	"sync"
	"time"

	pb "github.com/seqsvr/seqsvr/sdk/go/seqsvrpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// group is the uids of a batch still to be answered that go to one AllocSvr.
type group struct {
	addr string
	// version is the lowest version of the tables that routed them (sent along: a newer
	// table comes back).
	version uint64
	// idx are indices into the batch, in batch order.
	idx []int
}

// groups are the pending uids of a batch by where they go now.
type groups struct {
	// routed: one group per AllocSvr, in order of first appearance.
	routed []*group
	// unrouted are indices of uids whose section no AllocSvr serves yet (they wait).
	unrouted []int
}

// groupByOwner groups pending (indices into uids, ascending) by the owner of each uid's
// section in tables. missing is a uid no table covers (ok false).
func groupByOwner(tables []*pb.RouteTable, uids []uint64, pending []int) (g groups, missing uint64, ok bool) {
	byAddr := map[string]*group{}
	for _, i := range pending {
		uid := uids[i]
		t := tableIn(tables, uid)
		if t == nil {
			return groups{}, uid, false
		}
		e := ownerOf(t, uid)
		if e == nil || e.GetAddr() == "" {
			g.unrouted = append(g.unrouted, i)
			continue
		}
		gr, seen := byAddr[e.GetAddr()]
		if !seen {
			gr = &group{addr: e.GetAddr(), version: t.GetVersion()}
			byAddr[e.GetAddr()] = gr
			g.routed = append(g.routed, gr)
		}
		if t.GetVersion() < gr.version {
			gr.version = t.GetVersion()
		}
		gr.idx = append(gr.idx, i)
	}
	return g, 0, true
}

// NextBatch is the next sequence of each uid, in order; a repeated uid gets increasing values
// in batch order. One NextBatch RPC per AllocSvr involved, each all-or-nothing; the whole
// batch is not (a part that failed leaves only gaps, never repeats). Each retry regroups the
// uids not answered yet by their owners in the current tables, so a hand-over that splits a
// group sends each part to its new owner.
func (c *Client) NextBatch(ctx context.Context, uids []uint64) ([]uint64, error) {
	bump(&c.stats.calls)
	out, err := c.nextBatch(ctx, uids)
	if err != nil {
		bump(&c.stats.failed)
		return nil, err
	}
	return out, nil
}

func (c *Client) nextBatch(ctx context.Context, uids []uint64) ([]uint64, *Error) {
	if len(uids) == 0 {
		return nil, newError(codes.InvalidArgument, "give at least one uid", "empty batch")
	}
	ctx, cancel, until := c.bound(ctx)
	defer cancel()
	out := make([]uint64, len(uids))
	pending := make([]int, len(uids))
	for i := range pending {
		pending[i] = i
	}
	b := StandardRetry.NewBackoff()
	for {
		if err := c.closedError(); err != nil {
			return nil, err
		}
		gs, missing, ok := groupByOwner(c.RouteTables(), uids, pending)
		if !ok {
			// Learns the tables, or says the uid is outside every set.
			if _, _, err := c.locate(ctx, missing, until); err != nil && err.Code == codes.InvalidArgument {
				return nil, err
			}
			if gs, missing, ok = groupByOwner(c.RouteTables(), uids, pending); !ok {
				return nil, newError(codes.Unavailable, "", "uid %d: no route table has its set yet; retry", missing)
			}
		}
		timeout := attemptTimeout(until)
		if timeout <= 0 || ctx.Err() != nil {
			return nil, ctxError(ctx, nil)
		}
		type result struct {
			seqs  []uint64
			table *pb.RouteTable
			err   *Error
		}
		results := make([]result, len(gs.routed))
		var wg sync.WaitGroup
		for gi, g := range gs.routed {
			part := make([]uint64, len(g.idx))
			for k, i := range g.idx {
				part[k] = uids[i]
			}
			wg.Add(1)
			go func(gi int, g *group, part []uint64) {
				defer wg.Done()
				seqs, table, err := c.sendBatch(ctx, g.addr, part, g.version, timeout)
				results[gi] = result{seqs, table, err}
			}(gi, g, part)
		}
		wg.Wait()
		if ctx.Err() != nil {
			return nil, ctxError(ctx, nil)
		}
		// Why the uids still pending must wait (retryable), if anything must.
		var wait, redirected *Error
		if len(gs.unrouted) > 0 {
			wait = newError(codes.Unavailable, "", "no AllocSvr serves uid %d's section yet", uids[gs.unrouted[0]])
		}
		answered := make([]bool, len(uids))
		for gi, g := range gs.routed {
			r := results[gi]
			switch {
			case r.err == nil:
				if len(r.seqs) != len(g.idx) {
					return nil, newError(codes.Internal, "", "%s answered %d values for %d uids", g.addr, len(r.seqs), len(g.idx))
				}
				c.install(r.table)
				for k, i := range g.idx {
					out[i] = r.seqs[k]
					answered[i] = true
				}
			case r.err.Code == codes.FailedPrecondition && r.err.routeTable != nil:
				c.install(r.err.routeTable)
				redirected = r.err
			case Retryable(r.err.Code):
				wait = r.err
			default:
				return nil, r.err
			}
		}
		left := pending[:0]
		for _, i := range pending {
			if !answered[i] {
				left = append(left, i)
			}
		}
		pending = left
		if len(pending) == 0 {
			return out, nil
		}
		if wait == nil && redirected != nil && b.Redirect() {
			bump(&c.stats.redirects)
			continue // regroup at once by the tables the redirects brought
		}
		last := wait
		if last == nil {
			last = redirected
		}
		if !b.Wait(ctx, until) {
			return nil, ctxError(ctx, last)
		}
		bump(&c.stats.retries)
		rest := make([]uint64, len(pending))
		for k, i := range pending {
			rest[k] = uids[i]
		}
		c.refreshFor(ctx, rest, until)
	}
}

// sendBatch is one all-or-nothing NextBatch attempt at addr.
func (c *Client) sendBatch(ctx context.Context, addr string, uids []uint64, version uint64, timeout time.Duration) ([]uint64, *pb.RouteTable, *Error) {
	p, err := c.peer(addr)
	if err != nil {
		return nil, nil, err
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var trailer metadata.MD
	r, rerr := p.seq.NextBatch(actx, &pb.NextBatchRequest{Uids: uids, RouteVersion: version}, grpc.Trailer(&trailer))
	if rerr != nil {
		return nil, nil, fromAnswer(rerr, trailer)
	}
	return r.GetSeqs(), r.GetRouteTable(), nil
}
