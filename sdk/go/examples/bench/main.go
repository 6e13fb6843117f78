// A load generator for the Go SDK, the workload of `seqbench run --target seqsvr`: --concurrency
// callers, each calling Next on uids drawn uniformly from [0, --uids) for --seconds; prints
// values/s, the latency quantiles and the client's CPU µs per call.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	seqsvr "github.com/seqsvr/seqsvr/sdk/go"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	config := flag.String("config", "data/local/cluster.toml", "the cluster file")
	cert := flag.String("cert", "data/local/certs/client.pem", "the application's certificate")
	key := flag.String("key", "data/local/certs/client.key", "its key")
	concurrency := flag.Int("concurrency", 64, "callers")
	seconds := flag.Float64("seconds", 10, "how long")
	uids := flag.Uint64("uids", 100_000, "uids drawn from [0, uids)")
	noCoalesce := flag.Bool("no-coalesce", false, "one RPC per call")
	flag.Parse()

	opts, err := seqsvr.FromClusterFile(*config, *cert, *key)
	if err != nil {
		log.Fatal(err)
	}
	opts.DisableCoalescing = *noCoalesce
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	client, err := seqsvr.Connect(ctx, opts)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	var calls, failed uint64
	lat := make([][]time.Duration, *concurrency)
	stop := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	cpu0, t0 := cpu(), time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w) + 1))
			for time.Now().Before(stop) {
				uid := rng.Uint64() % *uids
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err := client.Next(ctx, uid)
				cancel()
				if err != nil {
					atomic.AddUint64(&failed, 1)
					continue
				}
				atomic.AddUint64(&calls, 1)
				lat[w] = append(lat[w], time.Since(start))
			}
		}(w)
	}
	wg.Wait()
	elapsed, used := time.Since(t0), cpu()-cpu0
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	q := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[int(p*float64(len(all)-1))]
	}
	s := client.Stats()
	fmt.Printf("go sdk: %d callers, %.0f values/s, p50 %v p99 %v p99.9 %v, client CPU %.2f µs/call, %d failed, %.1f calls per coalesced RPC\n",
		*concurrency, float64(calls)/elapsed.Seconds(), q(0.5), q(0.99), q(0.999),
		float64(used.Microseconds())/float64(calls+1), failed, float64(s.Calls)/float64(s.CoalescedRPCs+1))
}
