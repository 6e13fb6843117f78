package seqsvr

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// vectorsPath is the language-neutral decode vectors every SDK's decoder passes.
const vectorsPath = "../../tests/conformance/decode-vectors.json"

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

func (v vectorLayout) spec() LayoutSpec {
	s := v.Spec
	return LayoutSpec{Scheme: Scheme(s.Scheme), EpochMs: s.EpochMs, Unit: TimeUnit(s.Unit), TimeBits: s.TimeBits,
		WorkerBits: s.WorkerBits, SeqBits: s.SeqBits}
}

type vectors struct {
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

func loadVectors(t *testing.T) *vectors {
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Decode) < 30 {
		t.Fatalf("only %d decode vectors", len(v.Decode))
	}
	return &v
}

// view is a decoded id as `seqctl id decode --json` shows it (DecodedView): the vectors'
// "expect" keys. Ids and rand_b as decimal strings; nil for a part the scheme lacks.
func view(d *Decoded) map[string]interface{} {
	opt := func(p Part, v uint64) interface{} {
		if d.Has(p) {
			return v
		}
		return nil
	}
	var worker interface{}
	if d.Worker != nil {
		worker = *d.Worker
	}
	var rand interface{}
	if d.Has(PartRand) {
		rand = fmt.Sprint(d.Fields.Rand)
	}
	return map[string]interface{}{
		"id": d.ID.String(), "text": d.Text, "time": d.TimeRFC3339, "time_units": d.Fields.Time, "unit": string(d.Unit),
		"epoch": d.EpochRFC3339, "unix_ms": d.UnixMs, "worker": worker, "business": opt(PartBusiness, d.Fields.Business),
		"session_type": opt(PartSessionType, d.Fields.SessionType), "session_hash": opt(PartSessionHash, d.Fields.SessionHash),
		"sequence": d.Fields.Sequence, "rand": rand, "layout": d.Bits, "range": d.Range,
	}
}

// same compares a vector's JSON value with a Go one through their JSON forms.
func same(want json.RawMessage, got interface{}) bool {
	raw, err := json.Marshal(got)
	if err != nil {
		return false
	}
	var a, b interface{}
	return json.Unmarshal(want, &a) == nil && json.Unmarshal(raw, &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

// Every vector decodes to its expected fields, or fails with exactly its error.
func TestDecodeVectors(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Decode {
		l := v.Layouts[c.Layout]
		at := v.NowMs
		if l.LoadAtMs != nil {
			at = *l.LoadAtMs
		}
		layout, err := l.spec().Load(at)
		if err != nil {
			t.Fatalf("layout %s: %v", c.Layout, err)
		}
		d, err := Decode(layout, c.Input)
		if c.Error != nil {
			if err == nil || err.Error() != *c.Error {
				t.Errorf("%s %q: want error %q, got %v", c.Layout, c.Input, *c.Error, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %q: %v", c.Layout, c.Input, err)
			continue
		}
		got := view(d)
		if len(c.Expect) == 0 {
			t.Fatalf("%s %q: a vector without expectations", c.Layout, c.Input)
		}
		for key, want := range c.Expect {
			if _, known := got[key]; !known {
				t.Fatalf("%s %q: unknown field %s", c.Layout, c.Input, key)
			}
			if !same(want, got[key]) {
				t.Errorf("%s %q: %s is %v, want %s", c.Layout, c.Input, key, got[key], want)
			}
		}
	}
	for _, c := range v.LayoutErrors {
		var l vectorLayout
		if err := json.Unmarshal([]byte(`{"spec":`+string(c.Spec)+`}`), &l); err != nil {
			t.Fatal(err)
		}
		if _, err := l.spec().Load(c.LoadAtMs); err == nil || !strings.Contains(err.Error(), c.ErrorContains) {
			t.Errorf("%s: want an error with %q, got %v", c.Spec, c.ErrorContains, err)
		}
	}
	for _, h := range v.SessionHashes {
		if got := SessionHashOf(h.SessionID); got != h.Hash {
			t.Errorf("session hash of %q: %d, want %d", h.SessionID, got, h.Hash)
		}
	}
}

// The vectors are the Rust decoder's: with SEQSVR_SEQCTL naming a seqctl binary, each vector
// whose layout loads today is decoded by `seqctl id decode --json` and must match the file.
func TestDecodeVectorsAreTheRustDecoders(t *testing.T) {
	seqctl := os.Getenv("SEQSVR_SEQCTL")
	if seqctl == "" {
		t.Skip("SEQSVR_SEQCTL is not set")
	}
	v := loadVectors(t)
	config := []string{"section_size = 100000", "[[sets]]", "id = 0", "uid_begin = 0", "uid_end = 100000000",
		`stores = [{ id = 1, addr = "127.0.0.1:1" }]`, `allocs = ["127.0.0.1:2"]`, "[ids]"}
	var names []string
	for name := range v.Layouts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		l := v.Layouts[name]
		if l.LoadAtMs != nil {
			continue
		}
		raw, _ := json.Marshal(l.Spec)
		var fields map[string]interface{}
		json.Unmarshal(raw, &fields)
		config = append(config, "[ids.schemes."+name+"]")
		for k, val := range fields {
			if val != nil && val != "" {
				enc, _ := json.Marshal(val)
				config = append(config, k+" = "+string(enc))
			}
		}
	}
	path := filepath.Join(t.TempDir(), "cluster.toml")
	if err := os.WriteFile(path, []byte(strings.Join(config, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range v.Decode {
		if v.Layouts[c.Layout].LoadAtMs != nil {
			continue
		}
		out, err := exec.Command(seqctl, "--config", path, "--json", "id", "decode", "--", c.Layout, c.Input).Output()
		if c.Error != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			if err == nil || !strings.Contains(msg, ": "+*c.Error+"\n") {
				t.Errorf("%s %q: seqctl did not fail with %q: %s%s", c.Layout, c.Input, *c.Error, out, msg)
			}
			checked++
			continue
		}
		if err != nil {
			t.Fatalf("%s %q: seqctl: %v", c.Layout, c.Input, err)
		}
		var rust map[string]json.RawMessage
		if err := json.Unmarshal(out, &rust); err != nil {
			t.Fatal(err)
		}
		for key, want := range c.Expect {
			got := rust[key]
			if key == "rand" && string(got) != "null" {
				got = json.RawMessage(`"` + string(got) + `"`)
			}
			var a, b interface{}
			json.Unmarshal(want, &a)
			json.Unmarshal(got, &b)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("%s %q: seqctl's %s is %s, the vector's %s", c.Layout, c.Input, key, got, want)
			}
		}
		checked++
	}
	t.Logf("%d vectors checked against %s", checked, seqctl)
}

// Fields → id → text → Decode gives the fields back, for every scheme (the Rust decoder's
// round-trip cases), and the encoder refuses fields that do not fit.
func TestDecodeRoundTripsEveryScheme(t *testing.T) {
	const now = 1_750_000_000_000
	epoch := uint64(1_704_067_200_000) // 2024-01-01
	cases := []struct {
		spec   LayoutSpec
		fields Fields
		worker *uint64
	}{
		{SpecOf(Snowflake), Fields{Time: 5000, Worker: 1023, Sequence: 4095}, u64p(1023)},
		{LayoutSpec{Scheme: UIDGenerator, EpochMs: &epoch}, Fields{Time: 77, Worker: 4_000_000, Sequence: 8191}, u64p(4_000_000)},
		{SpecOf(Weibo), Fields{Time: 123, Worker: 31, Business: 17, Sequence: 9}, u64p(31)},
		{SpecOf(RongCloud), Fields{Time: now, Sequence: 12, SessionType: 3, SessionHash: 0x3f_ffff}, nil},
		{SpecOf(UUIDv7), Fields{Time: now, Sequence: 1, Rand: 5<<46 | 99}, u64p(5)},
		{SpecOf(JS53), Fields{Time: 1<<41 - 1, Worker: 31, Sequence: 127}, u64p(31)},
	}
	for _, c := range cases {
		layout, err := c.spec.Load(now)
		if err != nil {
			t.Fatal(err)
		}
		id, err := layout.Encode(c.fields)
		if err != nil {
			t.Fatal(err)
		}
		text, err := layout.Format(id)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Decode(layout, text)
		if err != nil {
			t.Fatalf("%s %s: %v", c.spec.Scheme, text, err)
		}
		if d.ID != id || d.Fields != c.fields || d.Text != text || fmt.Sprint(d.Worker != nil) != fmt.Sprint(c.worker != nil) ||
			(c.worker != nil && *d.Worker != *c.worker) {
			t.Fatalf("%s: %+v", c.spec.Scheme, d)
		}
		if c.spec.Scheme == JS53 && id != U128From(JSMaxSafeInteger) {
			t.Fatalf("js53's largest id is %s", id)
		}
	}
	snowflake, _ := SpecOf(Snowflake).Load(now)
	if _, err := snowflake.Encode(Fields{Worker: 1024}); err == nil {
		t.Fatal("a worker of 11 bits")
	}
	if _, err := snowflake.Encode(Fields{Business: 1}); err == nil {
		t.Fatal("snowflake has no business field")
	}
}

func u64p(v uint64) *uint64 { return &v }
