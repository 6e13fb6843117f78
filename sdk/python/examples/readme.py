# The README's example: run from the repository's root against `scripts/dev-cluster.sh up`.
import seqsvr

opts = seqsvr.from_cluster_file("data/local/cluster.toml", "data/local/certs/client.pem", "data/local/certs/client.key")
with seqsvr.Client(opts, timeout=10) as client:
    seq = client.next(4000042)
    batch = client.next_batch([4000042, 4000042, 2300000042])
    ids = client.next_ids("snowflake", 3)
    print("next(4000042):", seq, "batch:", batch, "snowflake ids:", ids.ids, "worker", ids.worker_id)
