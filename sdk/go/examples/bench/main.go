// A load generator for the Go SDK, the Go side of docs/benchmarks' SDK comparison: the workload
// of `seqbench run` (--concurrency callers, each a closed loop of one call after another on a
// uid drawn from [--uid-base, --uid-base + --uids), uniform or Zipf s = 1, for --seconds), and
// prints ONE JSON line: values/s, the latency quantiles and the client's CPU µs per call
// (getrusage of this process, user + system, over the timed window only).
//
//	--target seqsvr  the SDK as shipped (Next, concurrent calls coalesced into NextBatch RPCs;
//	                 --no-coalesce: one Next RPC per call)
//	--target redis   `INCR seq:{uid}` on ONE connection shared by every caller and pipelined
//	                 (redigo, Debian's golang-github-gomodule-redigo-dev: a writer goroutine
//	                 sends every queued command and flushes once per burst, a reader goroutine
//	                 takes the replies in order), as redis-rs' MultiplexedConnection does for
//	                 seqbench's "redis everysec, shared conn"
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	seqsvr "github.com/seqsvr/seqsvr/sdk/go"
)

// cpu is this process's CPU time so far, user + system.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// zipf draws ranks 1..n with P(k) ∝ 1/k (rand_distr's Zipf(n, 1.0), which seqbench uses; Go's
// rand.Zipf needs s > 1), by binary search in the cumulative distribution.
type zipf struct{ cdf []float64 }

func newZipf(n uint64) *zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for k := uint64(1); k <= n; k++ {
		sum += 1 / float64(k)
		cdf[k-1] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	return &zipf{cdf: cdf}
}

// rank0 is a rank minus 1, in [0, n).
func (z *zipf) rank0(rng *rand.Rand) uint64 {
	u := rng.Float64()
	return uint64(sort.SearchFloat64s(z.cdf, u))
}

// caller is one target's call: the value of uid.
type caller func(ctx context.Context, uid uint64) (uint64, error)

// pipeline is one Redis connection shared by every caller: commands are written in the order
// they are queued and flushed once per burst, replies read back in the same order.
type pipeline struct {
	conn     redis.Conn
	queue    chan *redisCall
	inflight chan *redisCall
}

type redisCall struct {
	key  string
	v    uint64
	err  error
	done chan struct{}
}

func newPipeline(conn redis.Conn, depth int) *pipeline {
	p := &pipeline{conn: conn, queue: make(chan *redisCall, depth), inflight: make(chan *redisCall, depth)}
	go p.write()
	go p.read()
	return p
}

func (p *pipeline) write() {
	for c := range p.queue {
		for more := true; more; {
			p.inflight <- c
			if err := p.conn.Send("INCR", c.key); err != nil {
				log.Fatalf("redis: send: %v", err)
			}
			select {
			case c = <-p.queue:
			default:
				more = false
			}
		}
		if err := p.conn.Flush(); err != nil {
			log.Fatalf("redis: flush: %v", err)
		}
	}
}

func (p *pipeline) read() {
	for c := range p.inflight {
		v, err := redis.Uint64(p.conn.Receive())
		c.v, c.err = v, err
		c.done <- struct{}{}
	}
}

// incr is one caller's INCR (each caller owns its redisCall, reused call after call).
func (p *pipeline) incr(c *redisCall, uid uint64) (uint64, error) {
	c.key = "seq:" + strconv.FormatUint(uid, 10)
	p.queue <- c
	<-c.done
	return c.v, c.err
}

// Result is the one JSON line (field names as seqbench's RunResult where they mean the same).
type Result struct {
	SDK                string  `json:"sdk"`
	Target             string  `json:"target"`
	Coalesce           bool    `json:"coalesce"`
	Concurrency        int     `json:"concurrency"`
	Dist               string  `json:"dist"`
	UIDs               uint64  `json:"uids"`
	UIDBase            uint64  `json:"uid_base"`
	Seconds            float64 `json:"seconds"`
	Calls              uint64  `json:"calls"`
	Values             uint64  `json:"values"`
	Errors             uint64  `json:"errors"`
	FirstError         string  `json:"first_error,omitempty"`
	CallsPerS          float64 `json:"calls_per_s"`
	ValuesPerS         float64 `json:"values_per_s"`
	P50Us              int64   `json:"p50_us"`
	P99Us              int64   `json:"p99_us"`
	P999Us             int64   `json:"p999_us"`
	MaxUs              int64   `json:"max_us"`
	ClientCPUUsPerCall float64 `json:"client_cpu_us_per_call"`
	ClientCPUCores     float64 `json:"client_cpu_cores"`
	CoalescedRPCs      uint64  `json:"coalesced_rpcs"`
	CallsPerCoalesced  float64 `json:"calls_per_coalesced_rpc,omitempty"`
	GOMAXPROCS         int     `json:"gomaxprocs"`
}

func main() {
	target := flag.String("target", "seqsvr", "seqsvr (the SDK) or redis (INCR over one shared pipelined connection)")
	config := flag.String("config", "data/local/cluster.toml", "seqsvr: the cluster file")
	cert := flag.String("cert", "data/local/certs/client.pem", "seqsvr: the application's certificate")
	key := flag.String("key", "data/local/certs/client.key", "seqsvr: its key")
	redisURL := flag.String("redis-url", "redis://127.0.0.1:6379", "redis: the server")
	concurrency := flag.Int("concurrency", 64, "callers")
	seconds := flag.Float64("seconds", 10, "how long the timed window lasts")
	uids := flag.Uint64("uids", 100_000, "uids drawn from [uid-base, uid-base + uids)")
	uidBase := flag.Uint64("uid-base", 0, "the first uid")
	dist := flag.String("dist", "uniform", "uniform or zipf (s = 1, rank 1 = uid-base)")
	noCoalesce := flag.Bool("no-coalesce", false, "seqsvr: one Next RPC per call")
	timeout := flag.Duration("timeout", 3*time.Second, "each call's deadline")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the timed window here (go tool pprof)")
	flag.Parse()
	if *concurrency < 1 || *uids < 1 || *seconds <= 0 {
		log.Fatal("--concurrency and --uids must be at least 1, --seconds above 0")
	}
	var z *zipf
	switch *dist {
	case "uniform":
	case "zipf":
		z = newZipf(*uids)
	default:
		log.Fatalf("--dist %q: uniform or zipf", *dist)
	}

	res := Result{SDK: "go", Target: *target, Concurrency: *concurrency, Dist: *dist, UIDs: *uids, UIDBase: *uidBase,
		GOMAXPROCS: runtime.GOMAXPROCS(0)}
	var call func(w int) caller
	var client *seqsvr.Client
	switch *target {
	case "seqsvr":
		opts, err := seqsvr.FromClusterFile(*config, *cert, *key)
		if err != nil {
			log.Fatal(err)
		}
		opts.DisableCoalescing = *noCoalesce
		res.Coalesce = !*noCoalesce
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		client, err = seqsvr.Connect(ctx, opts)
		cancel()
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		call = func(int) caller { return client.Next }
	case "redis":
		conn, err := redis.DialURL(*redisURL)
		if err != nil {
			log.Fatalf("redis: %v", err)
		}
		defer conn.Close()
		p := newPipeline(conn, 4**concurrency)
		res.Coalesce = true
		call = func(int) caller {
			c := &redisCall{done: make(chan struct{}, 1)}
			return func(_ context.Context, uid uint64) (uint64, error) { return p.incr(c, uid) }
		}
	default:
		log.Fatalf("--target %q: seqsvr or redis", *target)
	}

	var calls, failed uint64
	var firstErr atomic.Value
	lat := make([][]time.Duration, *concurrency)
	window := time.Duration(*seconds * float64(time.Second))
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			next := call(w)
			rng := rand.New(rand.NewSource(int64(w) + 1))
			lat[w] = make([]time.Duration, 0, 1<<14)
			<-begin
			stop := time.Now().Add(window)
			for {
				start := time.Now()
				if !start.Before(stop) {
					return
				}
				var uid uint64
				if z != nil {
					uid = *uidBase + z.rank0(rng)
				} else {
					uid = *uidBase + uint64(rng.Int63n(int64(*uids)))
				}
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				_, err := next(ctx, uid)
				cancel()
				if err != nil {
					if atomic.AddUint64(&failed, 1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				atomic.AddUint64(&calls, 1)
				lat[w] = append(lat[w], time.Since(start))
			}
		}(w)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatalf("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatalf("--cpuprofile: %v", err)
		}
		defer f.Close()
	}
	// The window's edges for `seqbench sdks`, which reads the servers' CPU time at each.
	fmt.Println("SEQBENCH_WINDOW start")
	cpu0, t0 := cpu(), time.Now()
	close(begin)
	wg.Wait()
	elapsed, used := time.Since(t0), cpu()-cpu0
	fmt.Println("SEQBENCH_WINDOW end")
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	q := func(p float64) int64 {
		if len(all) == 0 {
			return 0
		}
		return all[int(p*float64(len(all)-1))].Microseconds()
	}
	res.Seconds = elapsed.Seconds()
	res.Calls, res.Values, res.Errors = calls, calls, failed
	if e, ok := firstErr.Load().(string); ok {
		res.FirstError = e
	}
	res.CallsPerS = float64(calls) / elapsed.Seconds()
	res.ValuesPerS = res.CallsPerS
	res.P50Us, res.P99Us, res.P999Us, res.MaxUs = q(0.5), q(0.99), q(0.999), q(1)
	if calls > 0 {
		res.ClientCPUUsPerCall = float64(used.Nanoseconds()) / 1e3 / float64(calls)
	}
	res.ClientCPUCores = used.Seconds() / elapsed.Seconds()
	if client != nil {
		s := client.Stats()
		res.CoalescedRPCs = s.CoalescedRPCs
		if s.CoalescedRPCs > 0 {
			res.CallsPerCoalesced = float64(s.Calls) / float64(s.CoalescedRPCs)
		}
	}
	line, err := json.Marshal(res)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(line))
	if calls == 0 {
		os.Exit(1)
	}
}
