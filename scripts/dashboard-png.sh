#!/usr/bin/env bash
# Renders docs/dashboard.png: the panels of config/grafana/seqsvr.json, their PromQL evaluated by
# a real Prometheus (Debian's `prometheus` package) scraping the local cluster while seqbench
# loads it, with a rolling restart of one AllocSvr and one store member in the middle.
# (Grafana itself is not packaged for Debian and no image can be pulled here.)
#   scripts/dashboard-png.sh [SECONDS]     default 150
# Needs the local cluster's ports free or running (`scripts/dev-cluster.sh up` is called).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"
seconds=${1:-150}

command -v prometheus >/dev/null || {
  echo ">> installing prometheus (Debian package)"
  as_root apt-get install -y -qq prometheus >/dev/null
}
python3 -c 'import matplotlib' 2>/dev/null || pip install -q matplotlib

scripts/dev-cluster.sh up >/dev/null
work=$(mktemp -d -t seqsvr-dashboard-XXXXXX)
prometheus --config.file=config/prometheus-local.yml --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:19090 >"$work/prometheus.log" 2>&1 &
prom=$!
trap 'kill $prom 2>/dev/null || true; wait $prom 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:19090/-/ready >/dev/null && break
  sleep 0.2
done
start=$(date +%s)
echo ">> load for ${seconds}s (seqbench, paced 20000 calls/s), rolling restarts at 1/3 and 2/3"
SEQSVR_TLS_CERT=data/local/certs/client.pem SEQSVR_TLS_KEY=data/local/certs/client.key \
"$SEQSVR_BIN/seqbench" run --target seqsvr --config data/local/cluster.toml --seconds "$seconds" \
  --rate 20000 --out "$work/bench.json" >"$work/bench.log" 2>&1 &
bench=$!
sleep $((seconds / 3))
scripts/dev-cluster.sh restart alloc-0-1
sleep $((seconds / 3))
leader=store-0-1
for id in 1 2 3; do # the set-0 member whose /metrics says it leads
  if curl -sf "http://127.0.0.1:1710$id/metrics" | grep -q '^seqsvr_store_is_leader{.*} 1$'; then
    leader=store-0-$id
  fi
done
scripts/dev-cluster.sh restart "$leader"
wait $bench
end=$(date +%s)
sleep 10 # one more scrape of the last rates
python3 scripts/dashboard_png.py --prometheus http://127.0.0.1:19090 --dashboard config/grafana/seqsvr.json \
  --start "$start" --end "$end" --out docs/dashboard.png \
  --note "AllocSvr alloc-0-1 restarted at +$((seconds / 3))s, $leader at +$((2 * seconds / 3))s"
echo ">> wrote docs/dashboard.png (Prometheus data and logs in $work)"
