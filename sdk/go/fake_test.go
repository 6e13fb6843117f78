package seqsvr

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	pb "github.com/seqsvr/seqsvr/sdk/go/seqsvrpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fakeAlloc is the one test double of these tests: an in-process AllocSvr (a real gRPC server
// on a loopback port) whose answers a test scripts through its hooks. Hooks left nil answer
// UNIMPLEMENTED, except GetRouteTable, which answers table.
type fakeAlloc struct {
	pb.UnimplementedSeqServiceServer
	pb.UnimplementedIdServiceServer
	addr string

	mu    sync.Mutex
	table *pb.RouteTable
	// calls counts calls by method name; noForward those that carried seqsvr-no-forward: 1.
	calls     map[string]int
	noForward map[string]int

	next      func(ctx context.Context, r *pb.NextRequest) (*pb.NextResponse, error)
	nextBatch func(ctx context.Context, r *pb.NextBatchRequest) (*pb.NextBatchResponse, error)
	current   func(ctx context.Context, r *pb.CurrentRequest) (*pb.CurrentResponse, error)
	nextIds   func(ctx context.Context, r *pb.NextIdsRequest) (*pb.NextIdsResponse, error)
}

// serveFake starts f on 127.0.0.1 (optionally with server options, e.g. TLS) and stops it when
// the test ends.
func serveFake(t *testing.T, f *fakeAlloc, opts ...grpc.ServerOption) *fakeAlloc {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	f.calls, f.noForward = map[string]int{}, map[string]int{}
	s := grpc.NewServer(opts...)
	pb.RegisterSeqServiceServer(s, f)
	pb.RegisterIdServiceServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return f
}

func (f *fakeAlloc) count(ctx context.Context, method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(NoForwardMetadata); len(v) == 1 && v[0] == "1" {
			f.noForward[method]++
		}
	}
}

func (f *fakeAlloc) callsOf(method string) (calls, noForward int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method], f.noForward[method]
}

func (f *fakeAlloc) setTable(t *pb.RouteTable) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = t
}

func (f *fakeAlloc) GetRouteTable(ctx context.Context, _ *pb.GetRouteTableRequest) (*pb.GetRouteTableResponse, error) {
	f.count(ctx, "GetRouteTable")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.table == nil {
		return nil, status.Error(codes.Unavailable, "no route table yet")
	}
	return &pb.GetRouteTableResponse{RouteTable: f.table}, nil
}

func (f *fakeAlloc) Next(ctx context.Context, r *pb.NextRequest) (*pb.NextResponse, error) {
	f.count(ctx, "Next")
	if f.next == nil {
		return nil, status.Error(codes.Unimplemented, "Next")
	}
	return f.next(ctx, r)
}

func (f *fakeAlloc) NextBatch(ctx context.Context, r *pb.NextBatchRequest) (*pb.NextBatchResponse, error) {
	f.count(ctx, "NextBatch")
	if f.nextBatch == nil {
		return nil, status.Error(codes.Unimplemented, "NextBatch")
	}
	return f.nextBatch(ctx, r)
}

func (f *fakeAlloc) Current(ctx context.Context, r *pb.CurrentRequest) (*pb.CurrentResponse, error) {
	f.count(ctx, "Current")
	if f.current == nil {
		return nil, status.Error(codes.Unimplemented, "Current")
	}
	return f.current(ctx, r)
}

func (f *fakeAlloc) NextIds(ctx context.Context, r *pb.NextIdsRequest) (*pb.NextIdsResponse, error) {
	f.count(ctx, "NextIds")
	if f.nextIds == nil {
		return nil, status.Error(codes.Unimplemented, "NextIds")
	}
	return f.nextIds(ctx, r)
}

// notOwner is the AllocSvr's NOT_OWNER answer: FAILED_PRECONDITION with t in the trailers.
func notOwner(ctx context.Context, t *pb.RouteTable) error {
	raw, err := proto.Marshal(t)
	if err != nil {
		return err
	}
	grpc.SetTrailer(ctx, metadata.Pairs(RouteTableMetadata, string(raw)))
	return status.Errorf(codes.FailedPrecondition, "NOT_OWNER: section is not served here (route table v%d)", t.GetVersion())
}

// table is a route table of set `set` over uids [0, 1000) of 10-uid sections, entries
// (begin, end, addr).
func table(set, version uint64, entries ...interface{}) *pb.RouteTable {
	t := &pb.RouteTable{SetId: set, Version: version, UidBegin: set * 1000, UidEnd: (set + 1) * 1000, SectionSize: 10}
	for i := 0; i+2 < len(entries); i += 3 {
		t.Entries = append(t.Entries, &pb.RouteEntry{SectionBegin: uint64(entries[i].(int)),
			SectionEnd: uint64(entries[i+1].(int)), Addr: entries[i+2].(string)})
	}
	return t
}

// plaintext connects a plaintext client to seeds with opts' other fields.
func plaintext(t *testing.T, opts Options, seeds ...string) *Client {
	t.Helper()
	opts.Seeds, opts.Plaintext = seeds, true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually polls cond until it holds (a condition wait, not a sleep as synchronisation).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what, 10*time.Second, cond)
}

// waitFor is eventually with a limit of its own (the live tests wait for a hand-over).
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	until := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(until) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
