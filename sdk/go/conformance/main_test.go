package main

// The runner's own parts that need no cluster: the outcome mapping, the history's format, the
// in-process I1 check, the decode vectors case and the command line's exit codes.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const casesPath = "../../../tests/conformance/cases.json"

func TestOutcomes(t *testing.T) {
	uids := []uint64{42, 43}
	if o := OutcomeOf(uids, []uint64{7, 8}, nil); o.Type != "ok" || len(o.Values) != 2 {
		t.Fatalf("ok: %+v", o)
	}
	if o := OutcomeOf(uids, []uint64{7}, nil); o.Type != "malformed" {
		t.Fatalf("one value for two uids: %+v", o)
	}
	for code, want := range map[codes.Code]string{
		codes.InvalidArgument: "fail", codes.NotFound: "fail", codes.Unavailable: "unknown",
		codes.DeadlineExceeded: "unknown", codes.ResourceExhausted: "unknown", codes.FailedPrecondition: "unknown",
		codes.Canceled: "unknown", codes.Unknown: "unknown",
	} {
		err := status.Error(code, "m")
		o := OutcomeOf(uids, nil, err)
		if o.Type != want {
			t.Errorf("%v: %+v, want %s", code, o, want)
		}
		if want == "fail" && o.Code != CodeName(code) {
			t.Errorf("%v: code %q", code, o.Code)
		}
		if want == "unknown" && o.Reason == "" {
			t.Errorf("%v: no reason", code)
		}
	}
	if o := OutcomeOf(uids, nil, errors.New("plain")); o.Type != "unknown" {
		t.Fatalf("a plain error: %+v", o)
	}
	if CodeName(codes.InvalidArgument) != "INVALID_ARGUMENT" || CodeName(codes.Canceled) != "CANCELLED" {
		t.Fatal("code names")
	}
	// Every code's name is the one gRPC's own JSON form reads back.
	for code, name := range codeNames {
		var back codes.Code
		if err := back.UnmarshalJSON([]byte(`"` + name + `"`)); err != nil || back != code {
			t.Errorf("%s reads back as %v (%v)", name, back, err)
		}
	}
}

// A history line has exactly seqcheck's fields (history.rs: Operation, Outcome tagged "type").
func TestHistoryFormat(t *testing.T) {
	dir := t.TempDir()
	h, err := createHistory(dir, "x")
	if err != nil {
		t.Fatal(err)
	}
	h.Record(Operation{Client: 3, Set: 1, UIDs: []uint64{2147500042}, InvokeNs: 1200, CompleteNs: 98000,
		Outcome: Outcome{Type: "ok", Values: []uint64{18446744073709551615}}})
	h.Record(Operation{Client: 0, UIDs: []uint64{1}, Outcome: Outcome{Type: "fail", Code: "INVALID_ARGUMENT"}})
	h.Record(Operation{Client: 0, UIDs: []uint64{1}, Outcome: Outcome{Type: "unknown", Reason: "lost"}})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "x.history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"client":3,"set":1,"uids":[2147500042],"invoke_ns":1200,"complete_ns":98000,"outcome":{"type":"ok","values":[18446744073709551615]}}
{"client":0,"set":0,"uids":[1],"invoke_ns":0,"complete_ns":0,"outcome":{"type":"fail","code":"INVALID_ARGUMENT"}}
{"client":0,"set":0,"uids":[1],"invoke_ns":0,"complete_ns":0,"outcome":{"type":"unknown","reason":"lost"}}
`
	if string(raw) != want {
		t.Fatalf("got\n%s\nwant\n%s", raw, want)
	}
}

func ok(client int, uid, invoke, complete, value uint64) Operation {
	return Operation{Client: client, UIDs: []uint64{uid}, InvokeNs: invoke, CompleteNs: complete,
		Outcome: Outcome{Type: "ok", Values: []uint64{value}}}
}

func TestCheckRealTime(t *testing.T) {
	valid := []Operation{ok(0, 1, 0, 10, 5), ok(1, 1, 5, 20, 4), ok(0, 1, 11, 30, 6), ok(0, 2, 0, 1, 6),
		{Client: 2, UIDs: []uint64{1}, InvokeNs: 12, CompleteNs: 13, Outcome: Outcome{Type: "unknown", Reason: "x"}}}
	if v := CheckRealTime(valid); v != "" {
		t.Fatalf("a valid history: %s", v)
	}
	if v := CheckRealTime([]Operation{ok(0, 1, 0, 10, 5), ok(1, 1, 11, 20, 5)}); !strings.Contains(v, "twice") {
		t.Fatalf("a repeat: %q", v)
	}
	if v := CheckRealTime([]Operation{ok(0, 1, 0, 10, 5), ok(1, 1, 11, 20, 4)}); !strings.Contains(v, "had been returned") {
		t.Fatalf("going back in real time: %q", v)
	}
	// A batch's values count per uid.
	batch := Operation{UIDs: []uint64{1, 2}, InvokeNs: 0, CompleteNs: 10, Outcome: Outcome{Type: "ok", Values: []uint64{9, 3}}}
	if v := CheckRealTime([]Operation{batch, ok(1, 2, 11, 20, 3)}); !strings.Contains(v, "uid 2") {
		t.Fatalf("a batch's repeat: %q", v)
	}
	own := perCaller{}
	if own.add(1, 5) != nil || own.add(2, 1) != nil || own.add(1, 6) != nil || own.add(1, 6) == nil {
		t.Fatal("perCaller")
	}
}

func loadCases(t *testing.T) []Case {
	raw, err := os.ReadFile(casesPath)
	if err != nil {
		t.Fatal(err)
	}
	var f casesFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return f.Cases
}

// Every kind in cases.json is one the runner knows (a case of an unknown kind fails).
func TestEveryCaseKindIsKnown(t *testing.T) {
	cases := loadCases(t)
	if len(cases) < 10 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		if !Kinds[c.Kind] {
			t.Errorf("case %s: kind %s", c.Name, c.Kind)
		}
	}
	r := &Runner{}
	if res := r.run(Case{Name: "x", Kind: "no-such-kind"}); res.OK || !strings.Contains(res.Detail, "unknown case kind") {
		t.Fatalf("%+v", res)
	}
	if res := r.run(Case{Name: "x", Kind: "batch_order"}); res.OK || !strings.Contains(res.Detail, "could not connect") {
		t.Fatalf("without a client: %+v", res)
	}
}

// The decode_vectors case passes on the suite's file, and fails on a vector changed by one
// field.
func TestDecodeVectorsCase(t *testing.T) {
	var c Case
	for _, k := range loadCases(t) {
		if k.Kind == "decode_vectors" {
			c = k
		}
	}
	r := &Runner{casesDir: filepath.Dir(casesPath)}
	res := r.run(c)
	if !res.OK {
		t.Fatalf("%+v", res)
	}
	t.Log(res.Detail)
	raw, err := os.ReadFile(filepath.Join(r.casesDir, c.File))
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Replace(raw, []byte(`"unix_ms": 1288834974658`), []byte(`"unix_ms": 1288834974659`), 1)
	if bytes.Equal(changed, raw) {
		t.Fatal("the vector to change is not in the file")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, c.File), changed, 0o644); err != nil {
		t.Fatal(err)
	}
	r.casesDir = dir
	if res := r.run(c); res.OK || !strings.Contains(res.Detail, "unix_ms is 1288834974658") {
		t.Fatalf("a changed vector: %+v", res)
	}
}

func TestCommandLine(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(nil, &stderr); code != 2 {
		t.Fatalf("no mode: %d", code)
	}
	if code := run([]string{"static", "--cases", casesPath}, &stderr); code != 2 {
		t.Fatalf("static without its files: %d", code)
	}
	if code := run([]string{"load", "--cases", casesPath}, &stderr); code != 1 {
		t.Fatalf("load without its files: %d", code)
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.pem")
	args := []string{"static", "--cases", casesPath, "--cluster", "../../../config/cluster.toml", "--cert", missing,
		"--key", missing, "--foreign-cert", missing, "--foreign-key", missing, "--out", dir}
	stderr.Reset()
	if code := run(args, &stderr); code != 2 || !strings.Contains(stderr.String(), "none.pem") {
		t.Fatalf("unreadable certificate: %d %s", code, stderr.String())
	}
}

// readResults reads a results.jsonl.
func readResults(t *testing.T, path string) []Result {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Result
	s := bufio.NewScanner(f)
	for s.Scan() {
		var r Result
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// Without a cluster every static case is still reported (failed, saying why), the decoder's
// passes, and the exit code is 1.
func TestStaticWithoutCluster(t *testing.T) {
	dir := t.TempDir()
	// A cluster file whose [tls] names a CA bundle that does not exist: every client fails
	// to build, as with a cluster that cannot be reached.
	cluster := filepath.Join(dir, "cluster.toml")
	if err := os.WriteFile(cluster, []byte("section_size = 100000\n[[sets]]\nid = 0\nuid_begin = 0\nuid_end = 100\nallocs = [\"127.0.0.1:1\"]\n[tls]\nserver_name = \"x\"\nstore_ca = \"none.pem\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pem := filepath.Join(dir, "c.pem")
	if err := os.WriteFile(pem, []byte("not a pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var stderr bytes.Buffer
	code := run([]string{"static", "--cases", casesPath, "--cluster", cluster, "--cert", pem, "--key", pem,
		"--foreign-cert", pem, "--foreign-key", pem, "--out", out}, &stderr)
	if code != 1 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	results := readResults(t, filepath.Join(out, "results.jsonl"))
	want := 0
	for _, c := range loadCases(t) {
		if c.Phase != "load" {
			want++
		}
	}
	if len(results) != want {
		t.Fatalf("%d results for %d static cases", len(results), want)
	}
	for _, r := range results {
		if r.Detail == "" {
			t.Errorf("%s: no detail", r.Case)
		}
		if r.OK != (r.Case == "decode-vectors") {
			t.Errorf("%+v", r)
		}
	}
}
