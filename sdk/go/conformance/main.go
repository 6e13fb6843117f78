// The Go SDK's conformance runner (issue 32): the protocol of tests/conformance/README.md over
// tests/conformance/cases.json, through the SDK's public API only.
//
//	seqsvr-go-conformance static --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY \
//	                             --foreign-cert PEM --foreign-key KEY --out DIR
//	seqsvr-go-conformance load   --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY --out DIR
//
// static runs every case without "phase": "load", one after the other (exit 0: all passed, 1:
// one failed, 2: it could not run). load runs the case with "phase": "load" until DIR/stop
// exists (or SIGINT/SIGTERM), waits for the calls in flight, closes the client and exits 0 (1:
// it could not start). Both write DIR/results.jsonl (static starts it afresh, load adds its
// line, so one DIR can take a static run and then a load run) and, for the concurrent_next and
// fault_load cases, DIR/NAME.history.jsonl in seqcheck's format
// (crates/seqsvr-check/src/history.rs), one line written as each call completes.
//
// The runner never retries a call itself: the SDK's own retries are what is being tested.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	seqsvr "github.com/seqsvr/seqsvr/sdk/go"
	"google.golang.org/grpc/codes"
)

const (
	// callTimeout bounds each call of the static cases (the SDK retries within it).
	callTimeout = 10 * time.Second
	// loadCallTimeout bounds each call under faults: longer than a lease (5 s in the dev
	// cluster) plus the hand-over, so most calls ride out a kill.
	loadCallTimeout = 15 * time.Second
	// refuseWithin is how long a refused_connection client has to fail.
	refuseWithin = 3 * time.Second
	// stopPoll is how often load mode looks for DIR/stop (the protocol: at least every 100 ms).
	stopPoll = 50 * time.Millisecond
)

// Case is one entry of cases.json; each kind reads its own fields.
type Case struct {
	Name             string    `json:"name"`
	Kind             string    `json:"kind"`
	Phase            string    `json:"phase"`
	Callers          int       `json:"callers"`
	CallsPerCaller   int       `json:"calls_per_caller"`
	UIDs             []uint64  `json:"uids"`
	BatchEvery       int       `json:"batch_every"`
	Call             *CallSpec `json:"call"`
	Code             string    `json:"code"`
	Certificate      string    `json:"certificate"`
	ServerNamePrefix string    `json:"server_name_prefix"`
	File             string    `json:"file"`
	Count            uint32    `json:"count"`
	Session          *struct {
		Type uint32 `json:"type"`
		ID   string `json:"id"`
	} `json:"session"`
}

// CallSpec is an error case's call.
type CallSpec struct {
	Op     string   `json:"op"`
	UID    *uint64  `json:"uid"`
	UIDs   []uint64 `json:"uids"`
	Scheme string   `json:"scheme"`
	Count  uint32   `json:"count"`
}

type casesFile struct {
	Version int    `json:"version"`
	Cases   []Case `json:"cases"`
}

// Result is one line of results.jsonl.
type Result struct {
	Case   string `json:"case"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Outcome is a history operation's outcome in seqcheck's format.
type Outcome struct {
	Type   string   `json:"type"`
	Values []uint64 `json:"values,omitempty"`
	Code   string   `json:"code,omitempty"`
	Reason string   `json:"reason,omitempty"`
}

// Operation is one line of a history file (seqcheck's Operation).
type Operation struct {
	Client     int      `json:"client"`
	Set        uint64   `json:"set"`
	UIDs       []uint64 `json:"uids"`
	InvokeNs   uint64   `json:"invoke_ns"`
	CompleteNs uint64   `json:"complete_ns"`
	Outcome    Outcome  `json:"outcome"`
}

// codeNames are the gRPC codes as the cases and histories spell them.
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

// CodeName is code as the protocol spells it (INVALID_ARGUMENT).
func CodeName(code codes.Code) string {
	if name, ok := codeNames[code]; ok {
		return name
	}
	return fmt.Sprintf("CODE_%d", uint32(code))
}

// OutcomeOf is what a call's answer is in a history: ok with one value per uid, fail only for
// INVALID_ARGUMENT and NOT_FOUND (never applied), unknown for every other error (it may have
// been applied), malformed for an answer with another number of values than uids.
func OutcomeOf(uids, values []uint64, err error) Outcome {
	if err == nil {
		if len(values) != len(uids) {
			return Outcome{Type: "malformed", Reason: fmt.Sprintf("%d values for %d uids", len(values), len(uids))}
		}
		return Outcome{Type: "ok", Values: values}
	}
	switch code := seqsvr.Code(err); code {
	case codes.InvalidArgument, codes.NotFound:
		return Outcome{Type: "fail", Code: CodeName(code)}
	}
	return Outcome{Type: "unknown", Reason: err.Error()}
}

// History is one case's history file, a line written (unbuffered) as each call completes.
type History struct {
	mu  sync.Mutex
	f   *os.File
	err error
	n   int
}

func createHistory(dir, name string) (*History, error) {
	f, err := os.Create(filepath.Join(dir, name+".history.jsonl"))
	if err != nil {
		return nil, err
	}
	return &History{f: f}, nil
}

func (h *History) Record(op Operation) {
	line, err := json.Marshal(op)
	if err != nil {
		panic(err) // plain numbers and strings: cannot happen
	}
	line = append(line, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Write(line); err != nil && h.err == nil {
		h.err = err
	}
	h.n++
}

// Close closes the file and says whether every line was written.
func (h *History) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.f.Close(); err != nil && h.err == nil {
		h.err = err
	}
	return h.err
}

// point is one ok value of one uid, for CheckRealTime.
type point struct {
	value, invoke, complete uint64
	client                  int
}

// CheckRealTime checks invariant I1 over ok operations as seqcheck does: per uid, every value
// distinct, and an operation invoked after another completed got a higher value. It returns
// the first violation, or "".
func CheckRealTime(ops []Operation) string {
	byUID := map[uint64][]point{}
	for _, op := range ops {
		if op.Outcome.Type != "ok" {
			continue
		}
		for i, uid := range op.UIDs {
			byUID[uid] = append(byUID[uid], point{op.Outcome.Values[i], op.InvokeNs, op.CompleteNs, op.Client})
		}
	}
	uids := make([]uint64, 0, len(byUID))
	for uid := range byUID {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	for _, uid := range uids {
		list := byUID[uid]
		seen := map[uint64]int{}
		for _, p := range list {
			if c, dup := seen[p.value]; dup {
				return fmt.Sprintf("uid %d: value %d handed out twice (callers %d and %d)", uid, p.value, c, p.client)
			}
			seen[p.value] = p.client
		}
		byInvoke := append([]point(nil), list...)
		sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].invoke < byInvoke[j].invoke })
		byComplete := append([]point(nil), list...)
		sort.Slice(byComplete, func(i, j int) bool { return byComplete[i].complete < byComplete[j].complete })
		var best point
		k := 0
		for _, p := range byInvoke {
			for k < len(byComplete) && byComplete[k].complete < p.invoke {
				if byComplete[k].value > best.value {
					best = byComplete[k]
				}
				k++
			}
			if k > 0 && p.value <= best.value {
				return fmt.Sprintf("uid %d: caller %d's call invoked at %d ns got %d, but %d had been returned to caller %d at %d ns",
					uid, p.client, p.invoke, p.value, best.value, best.client, best.complete)
			}
		}
	}
	return ""
}

// perCaller checks that one caller's own values per uid strictly increase.
type perCaller map[uint64]uint64

func (m perCaller) add(uid, value uint64) error {
	if last, ok := m[uid]; ok && value <= last {
		return fmt.Errorf("uid %d: got %d after %d", uid, value, last)
	}
	m[uid] = value
	return nil
}

// Runner holds what every case needs.
type Runner struct {
	casesDir      string
	cluster       *seqsvr.ClusterFile
	cert, key     string
	foreign       [2]string
	out           string
	start         time.Time
	client        *seqsvr.Client
	connectErr    error
	results       *os.File
	stopRequested func() bool
}

// now is nanoseconds since the run started, on Go's monotonic clock.
func (r *Runner) now() uint64 { return uint64(time.Since(r.start).Nanoseconds()) }

// setOf is the set whose range holds uid (the cluster file's ranges).
func (r *Runner) setOf(uid uint64) uint64 {
	for _, s := range r.cluster.Sets {
		if uid >= s.UIDBegin && uid < s.UIDEnd {
			return s.ID
		}
	}
	return 0
}

func (r *Runner) options(cert, key string) (seqsvr.Options, error) {
	return r.cluster.Options(cert, key)
}

func (r *Runner) connect() {
	opts, err := r.options(r.cert, r.key)
	if err != nil {
		r.connectErr = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r.client, r.connectErr = seqsvr.Connect(ctx, opts)
}

func (r *Runner) record(res Result) error {
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = r.results.Write(append(line, '\n'))
	return err
}

// Kinds are the case kinds the runner knows (tests/conformance/README.md's table).
var Kinds = map[string]bool{"concurrent_next": true, "batch_order": true, "current_after_next": true, "error": true,
	"refused_connection": true, "decode_vectors": true, "ids_decode": true, "fault_load": true}

// run runs one case, a panic included, into its result.
func (r *Runner) run(c Case) (res Result) {
	res.Case = c.Name
	defer func() {
		if p := recover(); p != nil {
			res.OK, res.Detail = false, fmt.Sprintf("the runner panicked: %v", p)
		}
	}()
	if !Kinds[c.Kind] {
		res.Detail = fmt.Sprintf("unknown case kind %q: this runner does not know it", c.Kind)
		return
	}
	needsClient := c.Kind != "decode_vectors" && c.Kind != "refused_connection"
	if needsClient && r.client == nil {
		res.Detail = fmt.Sprintf("the client could not connect: %v", r.connectErr)
		return
	}
	var err error
	switch c.Kind {
	case "concurrent_next":
		res.Detail, err = r.concurrentNext(c)
	case "batch_order":
		res.Detail, err = r.batchOrder(c)
	case "current_after_next":
		res.Detail, err = r.currentAfterNext(c)
	case "error":
		res.Detail, err = r.errorCase(c)
	case "refused_connection":
		res.Detail, err = r.refusedConnection(c)
	case "decode_vectors":
		res.Detail, err = r.decodeVectors(c)
	case "ids_decode":
		res.Detail, err = r.idsDecode(c)
	case "fault_load":
		res.Detail, err = r.faultLoad(c)
	}
	if err != nil {
		res.Detail = err.Error()
		return
	}
	res.OK = true
	return
}

func callCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// concurrent_next: callers × calls_per_caller next(uid) over uids; every call succeeds, each
// caller's values per uid strictly increase, and the history passes I1 (checked here as
// seqcheck does; the script runs seqcheck on the file too).
func (r *Runner) concurrentNext(c Case) (string, error) {
	if c.Callers <= 0 || c.CallsPerCaller <= 0 || len(c.UIDs) == 0 {
		return "", fmt.Errorf("the case needs callers, calls_per_caller and uids")
	}
	h, err := createHistory(r.out, c.Name)
	if err != nil {
		return "", err
	}
	ops := make([][]Operation, c.Callers)
	problems := make([]error, c.Callers)
	var wg sync.WaitGroup
	for cl := 0; cl < c.Callers; cl++ {
		wg.Add(1)
		go func(cl int) {
			defer wg.Done()
			own := perCaller{}
			for i := 0; i < c.CallsPerCaller; i++ {
				uid := c.UIDs[(cl+i)%len(c.UIDs)]
				ctx, cancel := callCtx(callTimeout)
				invoke := r.now()
				v, err := r.client.Next(ctx, uid)
				complete := r.now()
				cancel()
				op := Operation{Client: cl, Set: r.setOf(uid), UIDs: []uint64{uid}, InvokeNs: invoke, CompleteNs: complete,
					Outcome: OutcomeOf([]uint64{uid}, []uint64{v}, err)}
				h.Record(op)
				ops[cl] = append(ops[cl], op)
				if problems[cl] != nil {
					continue
				}
				if err != nil {
					problems[cl] = fmt.Errorf("caller %d call %d next(%d): %v", cl, i, uid, err)
				} else if perr := own.add(uid, v); perr != nil {
					problems[cl] = fmt.Errorf("caller %d: its own values not increasing: %v", cl, perr)
				}
			}
		}(cl)
	}
	wg.Wait()
	if err := h.Close(); err != nil {
		return "", fmt.Errorf("writing the history: %v", err)
	}
	var all []Operation
	for _, o := range ops {
		all = append(all, o...)
	}
	var failed []string
	for _, p := range problems {
		if p != nil {
			failed = append(failed, p.Error())
		}
	}
	if len(failed) > 0 {
		return "", fmt.Errorf("%d of %d callers saw a problem; %s", len(failed), c.Callers, strings.Join(failed, "; "))
	}
	if v := CheckRealTime(all); v != "" {
		return "", fmt.Errorf("the history breaks I1: %s", v)
	}
	return fmt.Sprintf("%d callers x %d calls over %v: every call succeeded, each caller's values per uid increase, I1 holds in-process; history %s.history.jsonl (%d operations)",
		c.Callers, c.CallsPerCaller, c.UIDs, c.Name, len(all)), nil
}

// batch_order: one next_batch gives one value per place, increasing over a uid's places; a
// second gives every uid a value above its first call's largest.
func (r *Runner) batchOrder(c Case) (string, error) {
	ctx, cancel := callCtx(callTimeout)
	defer cancel()
	first, err := r.client.NextBatch(ctx, c.UIDs)
	if err != nil {
		return "", fmt.Errorf("next_batch(%v): %v", c.UIDs, err)
	}
	if len(first) != len(c.UIDs) {
		return "", fmt.Errorf("next_batch(%v) answered %d values: %v", c.UIDs, len(first), first)
	}
	largest := map[uint64]uint64{}
	for i, uid := range c.UIDs {
		if last, ok := largest[uid]; ok && first[i] <= last {
			return "", fmt.Errorf("next_batch(%v) = %v: uid %d's place %d got %d, not above its earlier place's %d", c.UIDs, first, uid, i, first[i], last)
		}
		largest[uid] = first[i]
	}
	second, err := r.client.NextBatch(ctx, c.UIDs)
	if err != nil {
		return "", fmt.Errorf("the second next_batch(%v): %v", c.UIDs, err)
	}
	if len(second) != len(c.UIDs) {
		return "", fmt.Errorf("the second next_batch(%v) answered %d values: %v", c.UIDs, len(second), second)
	}
	for i, uid := range c.UIDs {
		if second[i] <= largest[uid] {
			return "", fmt.Errorf("the second next_batch = %v: uid %d got %d, not above the first call's %d (first %v)", second, uid, second[i], largest[uid], first)
		}
	}
	return fmt.Sprintf("next_batch(%v) = %v, then %v", c.UIDs, first, second), nil
}

// current_after_next: current(uid) == next(uid) just returned.
func (r *Runner) currentAfterNext(c Case) (string, error) {
	if len(c.UIDs) == 0 {
		return "", fmt.Errorf("the case has no uids")
	}
	var seen []string
	for _, uid := range c.UIDs {
		ctx, cancel := callCtx(callTimeout)
		v, err := r.client.Next(ctx, uid)
		if err != nil {
			cancel()
			return "", fmt.Errorf("next(%d): %v", uid, err)
		}
		cur, err := r.client.Current(ctx, uid)
		cancel()
		if err != nil {
			return "", fmt.Errorf("current(%d) after next = %d: %v", uid, v, err)
		}
		if cur != v {
			return "", fmt.Errorf("uid %d: next = %d, then current = %d", uid, v, cur)
		}
		seen = append(seen, fmt.Sprintf("%d: next %d current %d", uid, v, cur))
	}
	return strings.Join(seen, "; "), nil
}

// error: the call fails with the SDK's typed error of the case's code and a message; next(42)
// works afterwards.
func (r *Runner) errorCase(c Case) (string, error) {
	if c.Call == nil {
		return "", fmt.Errorf("the case has no call")
	}
	ctx, cancel := callCtx(callTimeout)
	defer cancel()
	var what string
	var got interface{}
	var err error
	switch c.Call.Op {
	case "next":
		if c.Call.UID == nil {
			return "", fmt.Errorf("a next call without uid")
		}
		what = fmt.Sprintf("next(%d)", *c.Call.UID)
		got, err = r.client.Next(ctx, *c.Call.UID)
	case "next_batch":
		what = fmt.Sprintf("next_batch(%v)", c.Call.UIDs)
		got, err = r.client.NextBatch(ctx, c.Call.UIDs)
	case "next_ids":
		what = fmt.Sprintf("next_ids(%q, %d)", c.Call.Scheme, c.Call.Count)
		var ids *seqsvr.IDs
		ids, err = r.client.NextIDs(ctx, c.Call.Scheme, c.Call.Count)
		if ids != nil {
			got = *ids
		}
	default:
		return "", fmt.Errorf("unknown op %q", c.Call.Op)
	}
	if err == nil {
		return "", fmt.Errorf("%s succeeded with %+v; want %s", what, got, c.Code)
	}
	var e *seqsvr.Error
	if !errors.As(err, &e) {
		return "", fmt.Errorf("%s failed with %T %v, not the SDK's *seqsvr.Error", what, err, err)
	}
	if CodeName(e.Code) != c.Code {
		return "", fmt.Errorf("%s failed with %s, want %s: %v", what, CodeName(e.Code), c.Code, err)
	}
	if e.Message == "" {
		return "", fmt.Errorf("%s failed with %s but an empty message", what, CodeName(e.Code))
	}
	v, err2 := r.client.Next(ctx, 42)
	if err2 != nil {
		return "", fmt.Errorf("%s failed as it should (%v), but next(42) afterwards failed: %v", what, err, err2)
	}
	return fmt.Sprintf("%s: %v; next(42) afterwards = %d", what, err, v), nil
}

// refused_connection: a client with the case's certificate (and server name) cannot connect,
// or its first next(42) fails, within 3 s; no value comes back. The runner's own client then
// still gets next(42), so the refusal is not the cluster being down.
func (r *Runner) refusedConnection(c Case) (string, error) {
	cert, key := r.cert, r.key
	switch c.Certificate {
	case "own":
	case "foreign":
		cert, key = r.foreign[0], r.foreign[1]
		if cert == "" || key == "" {
			return "", fmt.Errorf("no --foreign-cert/--foreign-key given")
		}
	default:
		return "", fmt.Errorf("unknown certificate %q (own or foreign)", c.Certificate)
	}
	opts, err := r.options(cert, key)
	if err != nil {
		return "", fmt.Errorf("options: %v", err)
	}
	if c.ServerNamePrefix != "" {
		opts.TLS.ServerName = c.ServerNamePrefix + opts.TLS.ServerName
	}
	ctx, cancel := callCtx(refuseWithin)
	defer cancel()
	began := time.Now()
	var how string
	client, err := seqsvr.Connect(ctx, opts)
	if err == nil {
		v, nerr := client.Next(ctx, 42)
		client.Close()
		if nerr == nil {
			return "", fmt.Errorf("the client (certificate %s, server name %s) was served: next(42) = %d", c.Certificate, opts.TLS.ServerName, v)
		}
		how = fmt.Sprintf("connected, but next(42) failed after %v: %v", time.Since(began).Round(time.Millisecond), nerr)
	} else {
		how = fmt.Sprintf("Connect failed after %v: %v", time.Since(began).Round(time.Millisecond), err)
	}
	if r.client == nil {
		return "", fmt.Errorf("refused (%s), but the runner's own client could not connect either (%v): the refusal proves nothing", how, r.connectErr)
	}
	ctx2, cancel2 := callCtx(callTimeout)
	defer cancel2()
	if _, err := r.client.Next(ctx2, 42); err != nil {
		return "", fmt.Errorf("refused (%s), but the runner's own client's next(42) failed too: %v", how, err)
	}
	return fmt.Sprintf("certificate %s, server name %s: %s", c.Certificate, opts.TLS.ServerName, how), nil
}

// The decode vectors file (its about says how it is read).
type vectorLayout struct {
	Spec struct {
		Scheme     string  `json:"scheme"`
		EpochMs    *uint64 `json:"epoch_ms"`
		Unit       string  `json:"unit"`
		TimeBits   *uint32 `json:"time_bits"`
		WorkerBits *uint32 `json:"worker_bits"`
		SeqBits    *uint32 `json:"seq_bits"`
	} `json:"spec"`
	LoadAtMs *uint64 `json:"load_at_ms"`
}

func (v vectorLayout) spec() seqsvr.LayoutSpec {
	s := v.Spec
	return seqsvr.LayoutSpec{Scheme: seqsvr.Scheme(s.Scheme), EpochMs: s.EpochMs, Unit: seqsvr.TimeUnit(s.Unit),
		TimeBits: s.TimeBits, WorkerBits: s.WorkerBits, SeqBits: s.SeqBits}
}

type vectorsFile struct {
	NowMs   uint64                  `json:"now_ms"`
	Layouts map[string]vectorLayout `json:"layouts"`
	Decode  []struct {
		Layout string                     `json:"layout"`
		Input  string                     `json:"input"`
		Expect map[string]json.RawMessage `json:"expect"`
		Error  *string                    `json:"error"`
	} `json:"decode"`
	LayoutErrors []struct {
		Spec          json.RawMessage `json:"spec"`
		LoadAtMs      uint64          `json:"load_at_ms"`
		ErrorContains string          `json:"error_contains"`
	} `json:"layout_errors"`
	SessionHashes []struct {
		SessionID string `json:"session_id"`
		Hash      uint64 `json:"hash"`
	} `json:"session_hashes"`
}

// decodedView is a decoded id as `seqctl id decode --json` shows it (the vectors' expect keys):
// ids and rand_b as decimal strings, nil for a part the scheme lacks.
func decodedView(d *seqsvr.Decoded) map[string]interface{} {
	opt := func(p seqsvr.Part, v uint64) interface{} {
		if d.Has(p) {
			return v
		}
		return nil
	}
	var worker, rand interface{}
	if d.Worker != nil {
		worker = *d.Worker
	}
	if d.Has(seqsvr.PartRand) {
		rand = fmt.Sprint(d.Fields.Rand)
	}
	return map[string]interface{}{
		"id": d.ID.String(), "text": d.Text, "time": d.TimeRFC3339, "time_units": d.Fields.Time, "unit": string(d.Unit),
		"epoch": d.EpochRFC3339, "unix_ms": d.UnixMs, "worker": worker, "business": opt(seqsvr.PartBusiness, d.Fields.Business),
		"session_type": opt(seqsvr.PartSessionType, d.Fields.SessionType), "session_hash": opt(seqsvr.PartSessionHash, d.Fields.SessionHash),
		"sequence": d.Fields.Sequence, "rand": rand, "layout": d.Bits, "range": d.Range,
	}
}

// exactJSON is raw JSON decoded with numbers kept as their text.
func exactJSON(raw []byte) (interface{}, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v interface{}
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// sameJSON compares a vector's JSON value with a Go value through their JSON forms, numbers
// exactly.
func sameJSON(want json.RawMessage, got interface{}) bool {
	raw, err := json.Marshal(got)
	if err != nil {
		return false
	}
	a, err1 := exactJSON(want)
	b, err2 := exactJSON(raw)
	return err1 == nil && err2 == nil && reflect.DeepEqual(a, b)
}

// decode_vectors: the pure decoder gives every vector of the file exactly: the decodes, the
// layout errors and the session hashes.
func (r *Runner) decodeVectors(c Case) (string, error) {
	raw, err := os.ReadFile(filepath.Join(r.casesDir, c.File))
	if err != nil {
		return "", err
	}
	var v vectorsFile
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("%s: %v", c.File, err)
	}
	if len(v.Decode) == 0 {
		return "", fmt.Errorf("%s holds no decode vectors", c.File)
	}
	var bad []string
	fields := 0
	for _, d := range v.Decode {
		l, ok := v.Layouts[d.Layout]
		if !ok {
			bad = append(bad, fmt.Sprintf("%q: no layout %q", d.Input, d.Layout))
			continue
		}
		at := v.NowMs
		if l.LoadAtMs != nil {
			at = *l.LoadAtMs
		}
		layout, err := l.spec().Load(at)
		if err != nil {
			bad = append(bad, fmt.Sprintf("layout %s: %v", d.Layout, err))
			continue
		}
		got, err := seqsvr.Decode(layout, d.Input)
		if d.Error != nil {
			if err == nil || err.Error() != *d.Error {
				bad = append(bad, fmt.Sprintf("%s %q: want the error %q, got %v", d.Layout, d.Input, *d.Error, err))
			}
			continue
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s %q: %v", d.Layout, d.Input, err))
			continue
		}
		if len(d.Expect) == 0 {
			bad = append(bad, fmt.Sprintf("%s %q: a vector with neither expect nor error", d.Layout, d.Input))
			continue
		}
		view := decodedView(got)
		keys := make([]string, 0, len(d.Expect))
		for k := range d.Expect {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			g, known := view[k]
			if !known {
				bad = append(bad, fmt.Sprintf("%s %q: the vector's field %s is not one this runner knows", d.Layout, d.Input, k))
			} else if !sameJSON(d.Expect[k], g) {
				bad = append(bad, fmt.Sprintf("%s %q: %s is %v, want %s", d.Layout, d.Input, k, g, d.Expect[k]))
			}
			fields++
		}
	}
	for _, e := range v.LayoutErrors {
		var l vectorLayout
		if err := json.Unmarshal([]byte(`{"spec":`+string(e.Spec)+`}`), &l); err != nil {
			bad = append(bad, fmt.Sprintf("layout error %s: %v", e.Spec, err))
			continue
		}
		if _, err := l.spec().Load(e.LoadAtMs); err == nil || !strings.Contains(err.Error(), e.ErrorContains) {
			bad = append(bad, fmt.Sprintf("layout %s at %d: want an error with %q, got %v", e.Spec, e.LoadAtMs, e.ErrorContains, err))
		}
	}
	for _, s := range v.SessionHashes {
		if got := seqsvr.SessionHashOf(s.SessionID); got != s.Hash {
			bad = append(bad, fmt.Sprintf("session hash of %q: %d, want %d", s.SessionID, got, s.Hash))
		}
	}
	if len(bad) > 0 {
		return "", fmt.Errorf("%d vectors differ: %s", len(bad), strings.Join(bad, "; "))
	}
	return fmt.Sprintf("%d decode vectors (%d fields), %d layout errors, %d session hashes: all as expected",
		len(v.Decode), fields, len(v.LayoutErrors), len(v.SessionHashes)), nil
}

// ids_decode: for every scheme of the cluster file, count ids (rongcloud: of the case's
// session) that decode with the file's layout at now, strictly increase and carry the worker
// id the answer names (rongcloud: no worker; the session's type and hash).
func (r *Runner) idsDecode(c Case) (string, error) {
	if c.Count == 0 {
		return "", fmt.Errorf("the case has no count")
	}
	names := make([]string, 0, len(r.cluster.IDs.Schemes))
	for name := range r.cluster.IDs.Schemes {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "", fmt.Errorf("the cluster file has no [ids.schemes]")
	}
	var seen []string
	for _, name := range names {
		scheme := seqsvr.Scheme(r.cluster.IDs.Schemes[name].Scheme)
		layout, err := r.cluster.Layout(name, uint64(time.Now().UnixNano()/1e6))
		if err != nil {
			return "", fmt.Errorf("%s: the cluster file's layout: %v", name, err)
		}
		ctx, cancel := callCtx(callTimeout)
		var ids *seqsvr.IDs
		if scheme == seqsvr.RongCloud {
			if c.Session == nil {
				cancel()
				return "", fmt.Errorf("%s: the case has no session for rongcloud", name)
			}
			ids, err = r.client.NextSessionIDs(ctx, name, c.Count, seqsvr.Session{Type: c.Session.Type, ID: c.Session.ID})
		} else {
			ids, err = r.client.NextIDs(ctx, name, c.Count)
		}
		cancel()
		if err != nil {
			return "", fmt.Errorf("%s: %v", name, err)
		}
		if ids.Len() != int(c.Count) {
			return "", fmt.Errorf("%s: asked for %d ids, got %d", name, c.Count, ids.Len())
		}
		var first *seqsvr.Decoded
		for i := 0; i < ids.Len(); i++ {
			d, err := seqsvr.DecodeID(layout, ids.At(i))
			if err != nil {
				return "", fmt.Errorf("%s: id %s does not decode: %v", name, ids.At(i), err)
			}
			if scheme == seqsvr.RongCloud {
				want := seqsvr.SessionHashOf(c.Session.ID)
				if d.Worker != nil || d.Fields.SessionType != uint64(c.Session.Type) || d.Fields.SessionHash != want {
					return "", fmt.Errorf("%s: id %s decodes to worker %v, session type %d, hash %d; want no worker, type %d, hash %d",
						name, d.Text, d.Worker, d.Fields.SessionType, d.Fields.SessionHash, c.Session.Type, want)
				}
			} else if d.Worker == nil || *d.Worker != ids.WorkerID {
				return "", fmt.Errorf("%s: id %s carries worker %v, the answer names %d", name, d.Text, d.Worker, ids.WorkerID)
			}
			if i > 0 && ids.At(i).Cmp(ids.At(i-1)) <= 0 {
				return "", fmt.Errorf("%s: id %s is not above %s", name, ids.At(i), ids.At(i-1))
			}
			if first == nil {
				first = d
			}
		}
		worker := fmt.Sprintf("worker %d", ids.WorkerID)
		if scheme == seqsvr.RongCloud {
			worker = fmt.Sprintf("session type %d hash %d", first.Fields.SessionType, first.Fields.SessionHash)
		}
		seen = append(seen, fmt.Sprintf("%s: %d ids, %s, first %s (%s)", name, ids.Len(), worker, first.Text, first.TimeRFC3339))
	}
	return strings.Join(seen, "; "), nil
}

// fault_load: callers loop over uids as concurrent_next does, every batch_every-th call a
// next_batch(uids), until stop; each caller's own values per uid must increase and no call
// may fail as never applied (the script checks the history with seqcheck and that calls
// succeed after each fault).
func (r *Runner) faultLoad(c Case) (string, error) {
	if c.Callers <= 0 || len(c.UIDs) == 0 {
		return "", fmt.Errorf("the case needs callers and uids")
	}
	h, err := createHistory(r.out, c.Name)
	if err != nil {
		return "", err
	}
	type tally struct {
		ok, fail, unknown, malformed int
		problem                      error
		lastUnknown                  string
	}
	tallies := make([]tally, c.Callers)
	var wg sync.WaitGroup
	for cl := 0; cl < c.Callers; cl++ {
		wg.Add(1)
		go func(cl int) {
			defer wg.Done()
			t := &tallies[cl]
			own := perCaller{}
			for i := 0; !r.stopRequested(); i++ {
				var uids, values []uint64
				var err error
				ctx, cancel := callCtx(loadCallTimeout)
				invoke := r.now()
				if c.BatchEvery > 0 && (i+1)%c.BatchEvery == 0 {
					uids = c.UIDs
					values, err = r.client.NextBatch(ctx, uids)
				} else {
					uids = []uint64{c.UIDs[(cl+i)%len(c.UIDs)]}
					var v uint64
					v, err = r.client.Next(ctx, uids[0])
					values = []uint64{v}
				}
				complete := r.now()
				cancel()
				out := OutcomeOf(uids, values, err)
				h.Record(Operation{Client: cl, Set: r.setOf(uids[0]), UIDs: uids, InvokeNs: invoke, CompleteNs: complete, Outcome: out})
				switch out.Type {
				case "ok":
					t.ok++
					for k, uid := range uids {
						if perr := own.add(uid, values[k]); perr != nil && t.problem == nil {
							t.problem = fmt.Errorf("caller %d: its own values not increasing: %v", cl, perr)
						}
					}
				case "fail":
					t.fail++
					if t.problem == nil {
						t.problem = fmt.Errorf("caller %d: %v failed as never applied: %v", cl, uids, err)
					}
				case "unknown":
					t.unknown++
					t.lastUnknown = out.Reason
				default:
					t.malformed++
					if t.problem == nil {
						t.problem = fmt.Errorf("caller %d: %v: %s", cl, uids, out.Reason)
					}
				}
			}
		}(cl)
	}
	wg.Wait()
	if err := h.Close(); err != nil {
		return "", fmt.Errorf("writing the history: %v", err)
	}
	var sum tally
	var problems []string
	for _, t := range tallies {
		sum.ok += t.ok
		sum.fail += t.fail
		sum.unknown += t.unknown
		sum.malformed += t.malformed
		if t.lastUnknown != "" {
			sum.lastUnknown = t.lastUnknown
		}
		if t.problem != nil {
			problems = append(problems, t.problem.Error())
		}
	}
	counts := fmt.Sprintf("%d calls: %d ok, %d unknown, %d fail, %d malformed", sum.ok+sum.fail+sum.unknown+sum.malformed,
		sum.ok, sum.unknown, sum.fail, sum.malformed)
	if sum.lastUnknown != "" {
		counts += fmt.Sprintf(" (an unknown: %s)", sum.lastUnknown)
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("%s; %s", counts, strings.Join(problems, "; "))
	}
	if sum.ok == 0 {
		return "", fmt.Errorf("%s: no call succeeded", counts)
	}
	return fmt.Sprintf("%d callers over %v (every %d-th a batch): %s; history %s.history.jsonl", c.Callers, c.UIDs, c.BatchEvery,
		counts, c.Name), nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `usage:
  seqsvr-go-conformance static --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY --foreign-cert PEM --foreign-key KEY --out DIR
  seqsvr-go-conformance load   --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY --out DIR`)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is the runner; its value is the exit code.
func run(args []string, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "static" && args[0] != "load") {
		usage(stderr)
		return 2
	}
	mode := args[0]
	cannot := 2 // static: 2 when it cannot run at all; load: 1 when it cannot start
	if mode == "load" {
		cannot = 1
	}
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	casesPath := fs.String("cases", "", "cases.json")
	clusterPath := fs.String("cluster", "", "the cluster file")
	cert := fs.String("cert", "", "the application's certificate (PEM)")
	key := fs.String("key", "", "its key")
	foreignCert := fs.String("foreign-cert", "", "a certificate of a CA the cluster does not know")
	foreignKey := fs.String("foreign-key", "", "its key")
	out := fs.String("out", "", "the directory results.jsonl and the histories go to")
	if err := fs.Parse(args[1:]); err != nil {
		return cannot
	}
	missing := []string{}
	for name, v := range map[string]string{"cases": *casesPath, "cluster": *clusterPath, "cert": *cert, "key": *key, "out": *out} {
		if v == "" {
			missing = append(missing, "--"+name)
		}
	}
	if mode == "static" && (*foreignCert == "" || *foreignKey == "") {
		missing = append(missing, "--foreign-cert/--foreign-key")
	}
	if len(missing) > 0 || fs.NArg() > 0 {
		sort.Strings(missing)
		fmt.Fprintf(stderr, "missing %v, or extra arguments %v\n", missing, fs.Args())
		usage(stderr)
		return cannot
	}
	raw, err := os.ReadFile(*casesPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return cannot
	}
	var cases casesFile
	if err := json.Unmarshal(raw, &cases); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", *casesPath, err)
		return cannot
	}
	cluster, err := seqsvr.LoadClusterFile(*clusterPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return cannot
	}
	for _, f := range []string{*cert, *key, *foreignCert, *foreignKey} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			fmt.Fprintln(stderr, err)
			return cannot
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(stderr, err)
		return cannot
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if mode == "load" {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	results, err := os.OpenFile(filepath.Join(*out, "results.jsonl"), flags, 0o644)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return cannot
	}
	defer results.Close()

	r := &Runner{
		casesDir: filepath.Dir(*casesPath), cluster: cluster, cert: *cert, key: *key,
		foreign: [2]string{*foreignCert, *foreignKey}, out: *out, start: time.Now(), results: results,
		stopRequested: func() bool { return false },
	}
	var chosen []Case
	for _, c := range cases.Cases {
		if (c.Phase == "load") == (mode == "load") {
			chosen = append(chosen, c)
		}
	}
	if mode == "load" {
		if len(chosen) != 1 {
			fmt.Fprintf(stderr, "%s has %d cases of phase load, want one\n", *casesPath, len(chosen))
			return 1
		}
		return r.load(chosen[0], stderr)
	}
	if len(chosen) == 0 {
		fmt.Fprintf(stderr, "%s has no static cases\n", *casesPath)
		return 2
	}
	r.connect()
	if r.client != nil {
		defer r.client.Close()
	} else {
		fmt.Fprintf(stderr, "the client could not connect: %v\n", r.connectErr)
	}
	failed := 0
	for _, c := range chosen {
		began := time.Now()
		res := r.run(c)
		if err := r.record(res); err != nil {
			fmt.Fprintf(stderr, "writing results.jsonl: %v\n", err)
			return 2
		}
		verdict := "ok  "
		if !res.OK {
			verdict = "FAIL"
			failed++
		}
		fmt.Fprintf(stderr, "%s %s (%v): %s\n", verdict, c.Name, time.Since(began).Round(time.Millisecond), res.Detail)
	}
	fmt.Fprintf(stderr, "%d of %d cases passed\n", len(chosen)-failed, len(chosen))
	if failed > 0 {
		return 1
	}
	return 0
}

// load runs the load case until DIR/stop exists (or a SIGINT/SIGTERM).
func (r *Runner) load(c Case, stderr io.Writer) int {
	r.connect()
	if r.client == nil {
		fmt.Fprintf(stderr, "the client could not connect: %v\n", r.connectErr)
		return 1
	}
	stop := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }) }
	r.stopRequested = func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	stopFile := filepath.Join(r.out, "stop")
	go func() {
		tick := time.NewTicker(stopPoll)
		defer tick.Stop()
		for {
			select {
			case <-signals:
				halt()
				return
			case <-tick.C:
				if _, err := os.Stat(stopFile); err == nil {
					halt()
					return
				}
			}
		}
	}()
	fmt.Fprintf(stderr, "load: %s until %s exists\n", c.Name, stopFile)
	res := r.run(c)
	r.client.Close()
	if err := r.record(res); err != nil {
		fmt.Fprintf(stderr, "writing results.jsonl: %v\n", err)
	}
	verdict := "ok  "
	if !res.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(stderr, "%s %s: %s\n", verdict, c.Name, res.Detail)
	return 0
}
