"""Latency percentile curves of seqbench results (median run per target) as a PNG."""
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

results, out = Path(sys.argv[1]), sys.argv[2]
by_label = defaultdict(list)
for f in sorted(results.glob("*.json")):
    r = json.loads(f.read_text())
    by_label[r["label"]].append(r)
fig, ax = plt.subplots(figsize=(9, 5))
for label, runs in sorted(by_label.items()):
    med = sorted(runs, key=lambda r: r["values_per_s"])[len(runs) // 2]
    xs = [100 - p for p, _ in med["curve"]]
    ys = [us / 1000 for _, us in med["curve"]]
    vps = statistics.median(r["values_per_s"] for r in runs)
    cpu = statistics.median(
        r.get("client_cpu_us_per_call", 0) + r.get("server_cpu_us_per_call", 0) for r in runs
    )
    ax.plot(xs, ys, marker="o", label=f"{label} ({vps:,.0f} values/s, {cpu:.1f} µs CPU/call)")
ax.set_xscale("log")
ax.invert_xaxis()
ax.set_yscale("log")
ax.set_xlabel("100 - percentile (p50 = 50, p99.9 = 0.1)")
ax.set_ylabel("latency (ms)")
ax.set_title("Latency per call, median run per target")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out, dpi=110)
