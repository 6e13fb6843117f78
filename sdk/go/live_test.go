package seqsvr

// The live tests: against a running `scripts/dev-cluster.sh up` whose directory SEQSVR_DEV_DIR
// names (sdk/go/build.sh --live starts one and sets it). Skipped without it.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func devDir(t *testing.T) string {
	dir := os.Getenv("SEQSVR_DEV_DIR")
	if dir == "" {
		t.Skip("SEQSVR_DEV_DIR is not set: no live cluster (sdk/go/build.sh --live)")
	}
	return dir
}

// liveClient connects to the dev cluster as the application (client.pem of its PKI).
func liveClient(t *testing.T, mutate func(*Options)) (*Client, *ClusterFile) {
	dir := devDir(t)
	f, err := LoadClusterFile(filepath.Join(dir, "cluster.toml"))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := f.Options(filepath.Join(dir, "certs/client.pem"), filepath.Join(dir, "certs/client.key"))
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, f
}

// The README's example is examples/readme/main.go, and it runs as printed from a directory
// whose data/local is the dev cluster's.
func TestLiveReadmeExample(t *testing.T) {
	dir := devDir(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("examples/readme/main.go")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```go\n(// The README's example.*?)```").FindSubmatch(readme)
	if block == nil || !bytes.Equal(block[1], example) {
		t.Fatal("README.md's example is not examples/readme/main.go")
	}
	work := t.TempDir()
	bin := filepath.Join(work, "readme")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/seqsvr/seqsvr/sdk/go/examples/readme").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(work, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(work, "data", "local")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the example failed: %v\n%s", err, out)
	}
	t.Logf("example: %s", bytes.TrimSpace(out))
	m := regexp.MustCompile(`next\(42\): (\d+) batch: \[(\d+) (\d+) (\d+)\] snowflake ids: \[(\d+) (\d+) (\d+)\]`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("unexpected output %s", out)
	}
	n := func(i int) uint64 { v, _ := strconv.ParseUint(string(m[i]), 10, 64); return v }
	if !(n(2) > n(1) && n(3) > n(2) && n(4) > 0 && n(6) > n(5) && n(7) > n(6)) {
		t.Fatalf("not increasing: %s", out)
	}
}

// op is one completed call for the real-time check.
type op struct {
	uid, value uint64
	start, end time.Time
}

// checkRealTime checks I1 on ops: for every uid, a call that started after another completed
// got a higher value, and no value was handed out twice.
func checkRealTime(t *testing.T, ops []op) {
	byUID := map[uint64][]op{}
	for _, o := range ops {
		byUID[o.uid] = append(byUID[o.uid], o)
	}
	for uid, list := range byUID {
		seen := map[uint64]bool{}
		for _, o := range list {
			if seen[o.value] {
				t.Fatalf("uid %d: value %d handed out twice", uid, o.value)
			}
			seen[o.value] = true
		}
		ends := append([]op(nil), list...)
		sort.Slice(ends, func(i, j int) bool { return ends[i].end.Before(ends[j].end) })
		starts := append([]op(nil), list...)
		sort.Slice(starts, func(i, j int) bool { return starts[i].start.Before(starts[j].start) })
		// Sweep: the highest value among calls completed before each start.
		var maxDone uint64
		k := 0
		for _, o := range starts {
			for k < len(ends) && ends[k].end.Before(o.start) {
				if ends[k].value > maxDone {
					maxDone = ends[k].value
				}
				k++
			}
			if o.value <= maxDone {
				t.Fatalf("uid %d: a call started after %d was returned got %d", uid, maxDone, o.value)
			}
		}
	}
}

// callers runs `workers` goroutines until stop is closed, each calling Next (and now and then
// NextBatch with repeats, and Current) on uids; every completed call is recorded.
func callers(c *Client, uids []uint64, workers int, stop <-chan struct{}, timeout time.Duration) (wait func() ([]op, []error)) {
	var mu sync.Mutex
	var ops []op
	var errs []error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				uid := uids[(w+i)%len(uids)]
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				start := time.Now()
				var got []op
				var err error
				switch i % 10 {
				case 9: // a batch with a repeat: increasing in batch order
					var seqs []uint64
					batch := []uint64{uid, uids[(w+i+1)%len(uids)], uid}
					seqs, err = c.NextBatch(ctx, batch)
					if err == nil && seqs[2] <= seqs[0] {
						err = fmt.Errorf("batch %v got %v: a repeat not increasing", batch, seqs)
					}
					for k := range seqs {
						got = append(got, op{uid: batch[k], value: seqs[k]})
					}
				default:
					var seq uint64
					seq, err = c.Next(ctx, uid)
					got = append(got, op{uid: uid, value: seq})
					if err == nil && i%7 == 0 {
						var cur uint64
						if cur, err = c.Current(ctx, uid); err == nil && cur < seq {
							err = fmt.Errorf("uid %d: current %d below a value %d already returned", uid, cur, seq)
						}
					}
				}
				end := time.Now()
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					for _, o := range got {
						o.start, o.end = start, end
						ops = append(ops, o)
					}
				}
				mu.Unlock()
			}
		}(w)
	}
	return func() ([]op, []error) {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return ops, errs
	}
}

// Many concurrent callers over shared uids of both sets: strictly increasing in real time per
// uid, batches increasing over their repeats, Current at or above what was returned.
func TestLiveConcurrentCallersAreStrictlyIncreasing(t *testing.T) {
	c, _ := liveClient(t, nil)
	uids := []uint64{42, 43, 100_042, 7_000_042, 2_147_500_042, 2_147_600_042}
	stop := make(chan struct{})
	wait := callers(c, uids, 32, stop, 5*time.Second)
	var n int
	waitFor(t, "enough calls", time.Minute, func() bool { n = int(c.Stats().Calls); return n > 20_000 })
	close(stop)
	ops, errs := wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, the first: %v", len(errs), errs[0])
	}
	checkRealTime(t, ops)
	s := c.Stats()
	t.Logf("%d values checked; stats %+v (%.1f calls per coalesced RPC)", len(ops), s, float64(s.Calls)/float64(s.CoalescedRPCs+1))
}

// A kill -9 of the AllocSvr that owns the uids during the run: calls resume at the new owner
// (after the old lease ran out), and no value repeats or goes back.
func TestLiveKillOfTheOwningAllocSvr(t *testing.T) {
	dir := devDir(t)
	root := os.Getenv("SEQSVR_ROOT")
	if root == "" {
		t.Skip("SEQSVR_ROOT is not set: cannot restart the killed AllocSvr afterwards")
	}
	c, _ := liveClient(t, nil)
	uids := []uint64{42, 43, 44, 99_999}
	owner := ownerAddr(c.tableFor(42), 42)
	// The dev cluster's AllocSvrs listen on 72SI + SEQSVR_DEV_PORT_OFFSET (scripts/dev-cluster.sh).
	portNumber, err := strconv.Atoi(owner[strings.LastIndex(owner, ":")+1:])
	if err != nil {
		t.Fatalf("owner %s: %v", owner, err)
	}
	if offset := os.Getenv("SEQSVR_DEV_PORT_OFFSET"); offset != "" {
		n, err := strconv.Atoi(offset)
		if err != nil {
			t.Fatalf("SEQSVR_DEV_PORT_OFFSET=%q: %v", offset, err)
		}
		portNumber -= n
	}
	port := strconv.Itoa(portNumber)
	if len(port) != 4 || !strings.HasPrefix(port, "72") {
		t.Fatalf("owner %s is not a dev cluster AllocSvr", owner)
	}
	name := fmt.Sprintf("alloc-%c-%c", port[2], port[3])
	raw, err := os.ReadFile(filepath.Join(dir, "pids", name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd := exec.Command(filepath.Join(root, "scripts/dev-cluster.sh"), "restart", name)
		cmd.Env = append(os.Environ(), "SEQSVR_DEV_DIR="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("restarting %s: %v\n%s", name, err, out)
		}
	}()
	stop := make(chan struct{})
	wait := callers(c, uids, 8, stop, 15*time.Second)
	waitFor(t, "calls before the kill", time.Minute, func() bool { return c.Stats().Calls > 2_000 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	t.Logf("killed %s (pid %d, owner of uid 42 at %s)", name, pid, owner)
	// Resumed: the route table names another owner and calls complete there.
	waitFor(t, "a new owner", time.Minute, func() bool { a := ownerAddr(c.tableFor(42), 42); return a != "" && a != owner })
	after := c.Stats().Calls
	waitFor(t, "calls after the hand-over", time.Minute, func() bool { return c.Stats().Calls > after+2_000 })
	close(stop)
	ops, errs := wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed (each had 15 s), the first: %v", len(errs), errs[0])
	}
	checkRealTime(t, ops)
	resumed := time.Time{}
	for _, o := range ops {
		if o.start.After(killedAt) && (resumed.IsZero() || o.end.Before(resumed)) {
			resumed = o.end
		}
	}
	t.Logf("%d values checked; the first call started after the kill returned %v after it; new owner %s",
		len(ops), resumed.Sub(killedAt).Round(time.Millisecond), ownerAddr(c.tableFor(42), 42))
}

// Each bad input gives its typed error; ids decode to the worker id their answer names; a
// certificate the cluster does not know, and a server name the AllocSvrs do not carry, are
// refused.
func TestLiveErrorsIdsAndCertificates(t *testing.T) {
	dir := devDir(t)
	c, f := liveClient(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		what string
		err  error
		code codes.Code
	}{
		{"uid outside every set", second(c.Next(ctx, 4_294_900_000)), codes.InvalidArgument},
		{"empty batch", second(c.NextBatch(ctx, nil)), codes.InvalidArgument},
		{"count over the cap", second(c.NextIDs(ctx, "snowflake", f.IDs.MaxCount+1)), codes.InvalidArgument},
		{"count 0", second(c.NextIDs(ctx, "snowflake", 0)), codes.InvalidArgument},
		{"unknown scheme", second(c.NextIDs(ctx, "no-such-scheme", 1)), codes.NotFound},
		{"weibo business too large", second(c.NextIDs(ctx, "weibo", 1, WithBusiness(32))), codes.InvalidArgument},
	} {
		var e *Error
		if !asError(tc.err, &e) || e.Code != tc.code || e.Message == "" {
			t.Fatalf("%s: want %v, got %v", tc.what, tc.code, tc.err)
		}
		t.Logf("%s: %v", tc.what, tc.err)
	}

	now := uint64(time.Now().UnixNano() / 1e6)
	for name, s := range f.IDs.Schemes {
		layout, err := f.Layout(name, now)
		if err != nil {
			t.Fatal(err)
		}
		var ids *IDs
		if Scheme(s.Scheme) == RongCloud {
			ids, err = c.NextSessionIDs(ctx, name, 5, Session{Type: 1, ID: "group-42"})
		} else {
			ids, err = c.NextIDs(ctx, name, 5)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := 0; i < ids.Len(); i++ {
			d, err := DecodeID(layout, ids.At(i))
			if err != nil {
				t.Fatalf("%s: %s does not decode: %v", name, ids.At(i), err)
			}
			if Scheme(s.Scheme) == RongCloud {
				if d.Worker != nil || d.Fields.SessionType != 1 || d.Fields.SessionHash != SessionHashOf("group-42") {
					t.Fatalf("%s: %+v", name, d)
				}
			} else if d.Worker == nil || *d.Worker != ids.WorkerID {
				t.Fatalf("%s: id %s carries worker %v, the answer says %d", name, d.Text, d.Worker, ids.WorkerID)
			}
			if i > 0 && ids.At(i).Cmp(ids.At(i-1)) <= 0 {
				t.Fatalf("%s: not increasing", name)
			}
		}
		server, err := c.DecodeOnServer(ctx, name, mustText(t, layout, ids.At(0)))
		if err != nil {
			t.Fatal(err)
		}
		local, _ := DecodeID(layout, ids.At(0))
		if server.GetText() != local.Text || server.GetUnixMs() != local.UnixMs || server.GetSequence() != local.Fields.Sequence ||
			server.GetLayout() != local.LayoutText() {
			t.Fatalf("%s: the server decodes %+v, the SDK %+v", name, server, local)
		}
		t.Logf("%s: %d ids of worker %d, first %s (%s)", name, ids.Len(), ids.WorkerID, local.Text, local.TimeRFC3339)
	}

	// A certificate of a CA the cluster does not know.
	ca := newCA(t)
	cert, key := ca.issue(t, "client", false)
	files := writeFiles(t, map[string][]byte{"c.pem": cert, "c.key": key})
	opts, _ := f.Options(files["c.pem"], files["c.key"])
	short, cancelShort := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShort()
	if c, err := Connect(short, opts); err == nil {
		c.Close()
		t.Fatal("a certificate of an unknown CA was served")
	} else {
		t.Logf("unknown certificate: %v", err)
	}
	// The right certificate, but a server name the AllocSvrs do not carry.
	opts, _ = f.Options(filepath.Join(dir, "certs/client.pem"), filepath.Join(dir, "certs/client.key"))
	opts.TLS.ServerName = "not-" + opts.TLS.ServerName
	short2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if c, err := Connect(short2, opts); err == nil {
		c.Close()
		t.Fatal("an AllocSvr was accepted under another server name")
	}
}

func second(_ interface{}, err error) error { return err }

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}

func mustText(t *testing.T, l *Layout, id U128) string {
	text, err := l.Format(id)
	if err != nil {
		t.Fatal(err)
	}
	return text
}
