#!/usr/bin/env python3
"""Plots the panels of a Grafana dashboard JSON from a Prometheus server: each panel's PromQL
queries evaluated with /api/v1/query_range over [start, end], one subplot per panel, the legend
from the panel's legendFormat. Used by scripts/dashboard-png.sh."""
import argparse
import json
import math
import re
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def query_range(base, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise SystemExit(f"query failed: {expr}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or "value"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    dash = json.load(open(a.dashboard))
    panels = dash["panels"]
    cols = 2
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(14, 3.1 * rows), squeeze=False)
    step = max(5, int((a.end - a.start) / 120))
    for ax, panel in zip([x for row in axes for x in row], panels):
        for t in panel["targets"]:
            for series in query_range(a.prometheus, t["expr"], a.start, a.end, step):
                xs = [float(v[0]) - a.start for v in series["values"]]
                ys = [float(v[1]) for v in series["values"]]
                ys = [y if math.isfinite(y) else float("nan") for y in ys]
                ax.plot(xs, ys, label=legend(t.get("legendFormat", ""), series["metric"]))
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        ax.set_title(panel["title"] + (f"  [{unit}]" if unit else ""), fontsize=10)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="upper left", ncol=2)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    for ax in [x for row in axes for x in row][len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{dash['title']} — {a.note}  (x: seconds since the load started)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(a.out, dpi=80)


if __name__ == "__main__":
    main()
