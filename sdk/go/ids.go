package seqsvr

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/seqsvr/seqsvr/sdk/go/seqsvrpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// refreshTimeoutMax bounds a route refresh between two rounds of an id call.
const refreshTimeoutMax = 500 * time.Millisecond

// sessionRedirectsMax is the most NOT_OWNER redirects one session call follows before it
// backs off.
const sessionRedirectsMax = 8

// sessionUIDsMax is the most session uids a client remembers.
const sessionUIDsMax = 1 << 16

// IDs is one NextIDs answer: strictly increasing ids, all carrying WorkerID.
type IDs struct {
	// U64 holds the ids of the schemes held in 64 bits (snowflake, uid-generator, weibo, js53).
	U64 []uint64
	// U128 holds the ids of uuidv7 and rongcloud.
	U128 []U128
	// WorkerID is the worker id every id carries (0 for rongcloud).
	WorkerID uint64
	// SessionUID is, for rongcloud, the uid the session is routed by.
	SessionUID uint64
}

// Len is how many ids the answer holds.
func (i *IDs) Len() int { return len(i.U64) + len(i.U128) }

// At is id n as a U128 (either width).
func (i *IDs) At(n int) U128 {
	if len(i.U64) > 0 {
		return U128From(i.U64[n])
	}
	return i.U128[n]
}

// IDOption is an optional field of a NextIDs call.
type IDOption func(*pb.NextIdsRequest)

// WithBusiness sets weibo's business number (0..=31); the other schemes take none.
func WithBusiness(business uint64) IDOption {
	return func(r *pb.NextIdsRequest) { r.Business = business }
}

// Session is a rongcloud session: its type (0..=15) and its id, as text (hashed as the
// AllocSvrs hash it: SessionHashOf) or, with ID empty, as the 22-bit hash itself.
type Session struct {
	Type uint32
	ID   string
	Hash uint64
}

func (s Session) hash() uint64 {
	if s.ID != "" {
		return SessionHashOf(s.ID)
	}
	return s.Hash
}

// key is type << 22 | hash.
func (s Session) key() (uint64, *Error) {
	if uint64(s.Type) >= SessionTypes || s.hash() >= SessionHashes {
		return 0, newError(codes.InvalidArgument, "", "session type %d and hash %d must be below %d and %d",
			s.Type, s.hash(), SessionTypes, SessionHashes)
	}
	return uint64(s.Type)<<22 | s.hash(), nil
}

type sessionKey struct {
	scheme string
	key    uint64
}

// sessionCache is what AllocSvrs answered: the uid each session is routed by.
type sessionCache struct {
	mu   sync.Mutex
	uids map[sessionKey]uint64
}

func (s *sessionCache) get(k sessionKey) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid, ok := s.uids[k]
	return uid, ok
}

func (s *sessionCache) put(k sessionKey, uid uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uids == nil || len(s.uids) >= sessionUIDsMax {
		s.uids = map[sessionKey]uint64{}
	}
	s.uids[k] = uid
}

// addresses are every AllocSvr known now, in round-robin order: the seeds, then those the
// route tables name.
func (c *Client) addresses() []string {
	addrs := append([]string(nil), c.seeds...)
	seen := map[string]bool{}
	for _, a := range addrs {
		seen[a] = true
	}
	for _, t := range c.RouteTables() {
		for _, e := range t.GetEntries() {
			if a := e.GetAddr(); a != "" && !seen[a] {
				seen[a] = true
				addrs = append(addrs, a)
			}
		}
	}
	return addrs
}

// roundRobin is every AllocSvr known now, starting one further than the last call did.
func (c *Client) roundRobin() []string {
	all := c.addresses()
	start := int(atomic.AddUint64(&c.cursor, 1) % uint64(len(all)))
	return append(all[start:], all[:start]...)
}

// refreshRoutes asks every known AllocSvr for its route table (within timeout) and installs
// the newer ones.
func (c *Client) refreshRoutes(ctx context.Context, timeout time.Duration) {
	until := time.Now().Add(timeout)
	c.refreshFrom(ctx, c.addresses(), until)
}

// idsOf checks a NextIds answer against what was asked and what the service promises: count
// ids, all of one width, strictly increasing. Anything else is a server bug (INTERNAL), never
// handed on: a repeated or reordered id could be handed out twice.
func idsOf(addr string, r *pb.NextIdsResponse, count uint32) (*IDs, *Error) {
	bad := func(format string, args ...interface{}) *Error {
		return newError(codes.Internal, "", "%s answered NextIds wrongly: %s", addr, fmt.Sprintf(format, args...))
	}
	n64 := len(r.GetIds()) + (len(r.GetIds64Packed())+7)/8
	n128 := len(r.GetIds128()) + (len(r.GetIds128Packed())+15)/16
	out := &IDs{WorkerID: r.GetWorkerId(), SessionUID: r.GetSessionUid()}
	switch {
	case n64 > 0 && n128 > 0:
		return nil, bad("both 64-bit and 128-bit ids")
	case n64 == 0 && n128 == 0:
		return nil, bad("no ids for a count of %d", count)
	case n64 > 0:
		packed := r.GetIds64Packed()
		switch {
		case len(packed) == 0:
			out.U64 = append([]uint64(nil), r.GetIds()...)
		case len(r.GetIds()) > 0:
			return nil, bad("both ids and ids64_packed hold ids")
		case len(packed)%8 != 0:
			return nil, bad("ids64_packed has %d bytes, not a multiple of 8", len(packed))
		default:
			out.U64 = make([]uint64, len(packed)/8)
			for i := range out.U64 {
				var v uint64
				for _, b := range packed[8*i : 8*i+8] {
					v = v<<8 | uint64(b)
				}
				out.U64[i] = v
			}
		}
	default:
		packed := r.GetIds128Packed()
		switch {
		case len(packed) == 0:
			for pos, raw := range r.GetIds128() {
				id, err := U128FromBytes(raw)
				if err != nil {
					return nil, bad("ids128[%d] has %d bytes, not 16", pos, len(raw))
				}
				out.U128 = append(out.U128, id)
			}
		case len(r.GetIds128()) > 0:
			return nil, bad("both ids128 and ids128_packed hold ids")
		case len(packed)%16 != 0:
			return nil, bad("ids128_packed has %d bytes, not a multiple of 16", len(packed))
		default:
			for i := 0; i < len(packed); i += 16 {
				id, _ := U128FromBytes(packed[i : i+16])
				out.U128 = append(out.U128, id)
			}
		}
	}
	if out.Len() != int(count) {
		return nil, bad("%d ids for a count of %d", out.Len(), count)
	}
	for i := 1; i < out.Len(); i++ {
		if out.At(i).Cmp(out.At(i-1)) <= 0 {
			return nil, bad("id #%d (%s) is not above the one before it (%s)", i, out.At(i), out.At(i-1))
		}
	}
	return out, nil
}

// NextIDs is count new ids of scheme (a name of the cluster config's [ids.schemes]) from one
// AllocSvr, strictly increasing, with the worker id they carry. Any AllocSvr serves any scheme:
// calls go round-robin over every AllocSvr known; a retryable failure goes to the next one at
// once, and after a round in which every one failed the client backs off (RetryPolicy), asks
// for fresh route tables and tries another round, within ctx's deadline. Other codes are final
// (NOT_FOUND: no such scheme; INVALID_ARGUMENT: a count or field that does not fit;
// RESOURCE_EXHAUSTED: every worker id held, or the time field ran out).
func (c *Client) NextIDs(ctx context.Context, scheme string, count uint32, opts ...IDOption) (*IDs, error) {
	if count == 0 {
		return nil, newError(codes.InvalidArgument, "", "count 0: ask for at least one id")
	}
	req := &pb.NextIdsRequest{Scheme: scheme, Count: count, PackedIds64: true, PackedIds128: true}
	for _, o := range opts {
		o(req)
	}
	ids, err := c.idCall(ctx, func(ctx context.Context, p *peer) (*IDs, *Error) {
		r, err := p.ids.NextIds(ctx, req)
		if err != nil {
			return nil, fromRPC(err)
		}
		return idsOf(p.addr, r, count)
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// DecodeOnServer asks an AllocSvr to decode text (Decode does the same without a server, given
// the layout).
func (c *Client) DecodeOnServer(ctx context.Context, scheme, text string) (*pb.DecodeIdResponse, error) {
	var out *pb.DecodeIdResponse
	_, err := c.idCall(ctx, func(ctx context.Context, p *peer) (*IDs, *Error) {
		r, err := p.ids.Decode(ctx, &pb.DecodeIdRequest{Scheme: scheme, Text: text})
		if err != nil {
			return nil, fromRPC(err)
		}
		out = r
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// idCall is the retry loop of the id calls: rounds over the known AllocSvrs, starting one
// further each call.
func (c *Client) idCall(ctx context.Context, attempt func(context.Context, *peer) (*IDs, *Error)) (*IDs, *Error) {
	ctx, cancel, until := c.bound(ctx)
	defer cancel()
	b := StandardRetry.NewBackoff()
	for {
		if err := c.closedError(); err != nil {
			return nil, err
		}
		var failures []string
		var last *Error
		for _, addr := range c.roundRobin() {
			timeout := attemptTimeout(until)
			if timeout <= 0 || ctx.Err() != nil {
				break
			}
			p, err := c.peer(addr)
			if err != nil {
				failures = append(failures, addr+": "+err.Message)
				continue
			}
			actx, acancel := context.WithTimeout(ctx, timeout)
			ids, aerr := attempt(actx, p)
			acancel()
			if aerr == nil {
				return ids, nil
			}
			if ctx.Err() != nil {
				return nil, ctxError(ctx, aerr)
			}
			if !Retryable(aerr.Code) {
				return nil, aerr
			}
			failures = append(failures, addr+": "+aerr.Code.String()+": "+aerr.Message)
			last = aerr
		}
		if last == nil {
			return nil, ctxError(ctx, newError(codes.DeadlineExceeded, "", "the deadline passed before an AllocSvr could be asked (%s)", strings.Join(failures, "; ")))
		}
		if !b.Wait(ctx, until) {
			return nil, ctxError(ctx, newError(last.Code, last.Hint, "no AllocSvr answered in time; last round: %s", strings.Join(failures, "; ")))
		}
		left := time.Until(until)
		if left > refreshTimeoutMax {
			left = refreshTimeoutMax
		}
		c.refreshRoutes(ctx, left)
	}
}

// sessionUID is the uid rongcloud session key of scheme is routed by, if known: what the
// AllocSvrs answered first, else the cluster config's rule.
func (c *Client) sessionUID(scheme string, key uint64) (uint64, bool) {
	if uid, ok := c.sessions.get(sessionKey{scheme, key}); ok {
		return uid, true
	}
	if c.opts.IDs == nil {
		return 0, false
	}
	s, ok := c.opts.IDs.Schemes[scheme]
	if !ok || Scheme(s.Scheme) != RongCloud {
		return 0, false
	}
	begin, end := s.sessionUIDs()
	if begin >= end {
		return 0, false
	}
	return sessionUID(begin, end, key), true
}

// sessionOwner is the address of the AllocSvr that serves session key, if known.
func (c *Client) sessionOwner(scheme string, key uint64) string {
	uid, ok := c.sessionUID(scheme, key)
	if !ok {
		return ""
	}
	return ownerAddr(c.tableFor(uid), uid)
}

// NextSessionIDs is count new rongcloud ids of session, strictly increasing (and above every id
// the session had before), from the owner of the session's section. The client asks the owner
// directly once it knows the session's uid (from the cluster config, or an earlier answer) and
// that uid's route; otherwise any AllocSvr, which answers NOT_OWNER with the uid and its route
// table. Retries as NextIDs, within ctx's deadline.
func (c *Client) NextSessionIDs(ctx context.Context, scheme string, count uint32, session Session) (*IDs, error) {
	if count == 0 {
		return nil, newError(codes.InvalidArgument, "", "count 0: ask for at least one id")
	}
	key, kerr := session.key()
	if kerr != nil {
		return nil, kerr
	}
	req := &pb.NextIdsRequest{Scheme: scheme, Count: count, SessionType: session.Type, PackedIds128: true}
	if session.ID != "" {
		req.SessionId = session.ID
	} else {
		h := session.Hash
		req.SessionHash = &h
	}
	ctx, cancel, until := c.bound(ctx)
	defer cancel()
	b := StandardRetry.NewBackoff()
	redirects := 0
	for {
		if err := c.closedError(); err != nil {
			return nil, err
		}
		var addrs []string
		if owner := c.sessionOwner(scheme, key); owner != "" && redirects < sessionRedirectsMax {
			addrs = []string{owner}
		} else {
			addrs = c.roundRobin()
		}
		var failures []string
		lastCode := codes.Unavailable
		redirected := false
		for _, addr := range addrs {
			timeout := attemptTimeout(until)
			if timeout <= 0 || ctx.Err() != nil {
				break
			}
			p, err := c.peer(addr)
			if err != nil {
				failures = append(failures, addr+": "+err.Message)
				continue
			}
			actx, acancel := context.WithTimeout(ctx, timeout)
			var trailer metadata.MD
			r, rerr := p.ids.NextIds(actx, req, grpc.Trailer(&trailer))
			acancel()
			if rerr == nil {
				c.sessions.put(sessionKey{scheme, key}, r.GetSessionUid())
				ids, ierr := idsOf(addr, r, count)
				if ierr != nil {
					return nil, ierr
				}
				return ids, nil
			}
			e := fromAnswer(rerr, trailer)
			if ctx.Err() != nil {
				return nil, ctxError(ctx, e)
			}
			if e.isNotOwner() {
				if e.sessionUID != nil {
					c.sessions.put(sessionKey{scheme, key}, *e.sessionUID)
				}
				c.install(e.routeTable)
				redirects++
				redirected = redirects <= sessionRedirectsMax
				failures = append(failures, addr+": "+e.Message)
				if owner := c.sessionOwner(scheme, key); redirected && owner != "" && owner != addr {
					break // ask the owner now
				}
				continue
			}
			if !Retryable(e.Code) {
				return nil, e
			}
			lastCode = e.Code
			failures = append(failures, addr+": "+e.Code.String()+": "+e.Message)
		}
		if redirected {
			continue
		}
		if !b.Wait(ctx, until) {
			return nil, ctxError(ctx, newError(lastCode, "", "no owner of the session answered in time; last round: %s", strings.Join(failures, "; ")))
		}
		redirects = 0
		left := time.Until(until)
		if left > refreshTimeoutMax {
			left = refreshTimeoutMax
		}
		c.refreshRoutes(ctx, left)
	}
}
