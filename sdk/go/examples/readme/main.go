// The README's example: run from the repository's root against `scripts/dev-cluster.sh up`.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	seqsvr "github.com/seqsvr/seqsvr/sdk/go"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts, err := seqsvr.FromClusterFile("data/local/cluster.toml", "data/local/certs/client.pem", "data/local/certs/client.key")
	check(err)
	client, err := seqsvr.Connect(ctx, opts)
	check(err)
	defer client.Close()
	seq, err := client.Next(ctx, 42)
	check(err)
	batch, err := client.NextBatch(ctx, []uint64{42, 42, 2147500042})
	check(err)
	ids, err := client.NextIDs(ctx, "snowflake", 3)
	check(err)
	fmt.Println("next(42):", seq, "batch:", batch, "snowflake ids:", ids.U64, "worker", ids.WorkerID)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
