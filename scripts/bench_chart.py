#!/usr/bin/env python3
"""Draws throughput per workload for hopper, the peers and the PostgreSQL limits as an SVG.

Usage:
  scripts/bench_chart.py [--out docs/benchmarks.svg] [--title TEXT] [--hopper-json FILE]... CSV...

CSV: results files of bench-peers/harness.py (columns date, system, variant, version, workload,
rep, value, unit, note); several may be given (e.g. a baseline and a side-by-side run).
--hopper-json: output of `hopper --json bench --workload all`, one JSON object per line (several
files = several repetitions); added as system "hopper (hopper bench)".

One panel per workload (W1 bulk enqueue, W2 single enqueue, W3 drain: jobs/s, longer is
better; W4 p50 and p99: ms, shorter is better). Each bar is the median of the repetitions with
a line from min to max (in the W4 panels a bar over 10x the panel's median is cut at the edge); hopper's bars are drawn in a stronger colour, the limits in grey. Only
the Python standard library is used.
"""
import argparse
import collections
import csv
import json
import statistics
from xml.sax.saxutils import escape

PANELS = [
    ("W1_bulk_enqueue", "W1 bulk enqueue 100k, 1,000 per call", "jobs/s", ["L1_batch_insert_1000"]),
    ("W2_single_enqueue", "W2 single enqueue, one client", "jobs/s", ["L0_single_insert_1"]),
    ("W3_drain", "W3 drain 100k no-op jobs, concurrency 50", "jobs/s",
     ["L2_claim_delete_100", "L3_claim_update_complete_100"]),
    ("W4_latency_p50", "W4 enqueue→start p50 at 200/s (shorter is better)", "ms", []),
    ("W4_latency_p99", "W4 enqueue→start p99 at 200/s (shorter is better)", "ms", []),
]
LIMIT_NAMES = {"L0_single_insert_1": "L0 one-row insert", "L1_batch_insert_1000": "L1 batch insert",
               "L2_claim_delete_100": "L2 claim by delete", "L3_claim_update_complete_100": "L3 claim + complete"}
JSON_WORKLOADS = {"W1": ["W1_bulk_enqueue"], "W2": ["W2_single_enqueue"], "W3": ["W3_drain"],
                  "W4": ["W4_latency_p50", "W4_latency_p99"]}

WIDTH, LABEL_W, BAR_H, GAP = 900, 300, 16, 4
COLOURS = {"hopper": "#d9480f", "limit": "#868e96", "peer": "#4c6ef5"}


def read_csv(paths):
    """(system label, workload) -> values, and the dates seen."""
    values, dates = collections.defaultdict(list), set()
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                try:
                    v = float(r["value"])
                except (KeyError, ValueError):
                    continue
                w = r["workload"]
                if r["system"] == "postgres-limit":
                    label = f"PostgreSQL {LIMIT_NAMES.get(w, w)} ({r['variant']})"
                else:
                    label = f"{r['system']} {r['variant']}"
                values[(label, w)].append(v)
                dates.add(r["date"])
    return values, dates


def read_hopper_json(paths, values):
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                for w in JSON_WORKLOADS.get(r.get("id"), []):
                    key = "p50_ms" if w.endswith("p50") else "p99_ms" if w.endswith("p99") else "jobs_per_sec"
                    if key in r:
                        values[("hopper (hopper bench)", w)].append(float(r[key]))


def kind(label):
    if label.startswith("PostgreSQL"):
        return "limit"
    return "hopper" if label.startswith("hopper") else "peer"


def rows_for(values, workload, limits):
    """[(label, median, min, max)] for one panel: the limits first, then every system."""
    rows = []
    for lim in limits:
        for (label, w), xs in sorted(values.items()):
            if w == lim:
                rows.append((label, statistics.median(xs), min(xs), max(xs)))
    systems = [(label, xs) for (label, w), xs in values.items() if w == workload]
    lower_better = workload.startswith("W4_")
    systems.sort(key=lambda s: statistics.median(s[1]), reverse=not lower_better)
    rows += [(label, statistics.median(xs), min(xs), max(xs)) for label, xs in systems]
    return rows


def fmt(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def svg(values, title, subtitle):
    out, y = [], 56
    plot_w = WIDTH - LABEL_W - 90
    for workload, name, unit, limits in PANELS:
        rows = rows_for(values, workload, limits)
        if not rows:
            continue
        out.append(f'<text x="10" y="{y}" class="h">{escape(name)} — {unit}</text>')
        y += 8
        # A bar more than 10x the panel's median (pg-boss default's 36 s latency) is cut at the
        # edge so the others stay readable; its label keeps the real figure.
        cap = 10 * statistics.median(r[1] for r in rows) if unit == "ms" else float("inf")
        top = max(min(r[3], cap) for r in rows) or 1.0
        for label, med, lo, hi in rows:
            k = kind(label)
            w = max(1.0, plot_w * min(med, top) / top)
            out.append(f'<text x="{LABEL_W - 6}" y="{y + BAR_H - 4}" class="l" text-anchor="end">{escape(label)}</text>')
            out.append(f'<rect x="{LABEL_W}" y="{y}" width="{w:.1f}" height="{BAR_H}" fill="{COLOURS[k]}"/>')
            if hi > lo:
                x0, x1 = (LABEL_W + plot_w * min(v, top) / top for v in (lo, hi))
                mid = y + BAR_H / 2
                out.append(f'<line x1="{x0:.1f}" y1="{mid}" x2="{x1:.1f}" y2="{mid}" class="r"/>')
            out.append(f'<text x="{LABEL_W + w + 4:.1f}" y="{y + BAR_H - 4}" class="v">{fmt(med)}{" (cut)" if med > top else ""}</text>')
            y += BAR_H + GAP
        y += 22
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y}" viewBox="0 0 {WIDTH} {y}">',
        "<style>text{font-family:sans-serif;fill:#212529}.t{font-size:16px;font-weight:bold}"
        ".s{font-size:11px;fill:#495057}.h{font-size:13px;font-weight:bold}.l{font-size:11px}"
        ".v{font-size:10px;fill:#495057}.r{stroke:#212529;stroke-width:1.2}</style>",
        f'<rect width="{WIDTH}" height="{y}" fill="white"/>',
        f'<text x="10" y="22" class="t">{escape(title)}</text>',
        f'<text x="10" y="40" class="s">{escape(subtitle)}</text>',
    ]
    return "\n".join(head + out + ["</svg>", ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="*", help="harness results.csv files")
    ap.add_argument("--hopper-json", action="append", default=[], help="`hopper --json bench` output")
    ap.add_argument("--out", default="docs/benchmarks.svg")
    ap.add_argument("--title", default="hopper beside the PostgreSQL job queues and PostgreSQL's own limits")
    a = ap.parse_args()
    values, dates = read_csv(a.csv)
    read_hopper_json(a.hopper_json, values)
    if not values:
        ap.error("no figures: give a results.csv or --hopper-json")
    subtitle = (f"bench-peers workloads, 2-core machine, PostgreSQL 15; median of the repetitions, "
                f"line = min–max; runs of {', '.join(sorted(dates)) or 'hopper bench'}")
    with open(a.out, "w") as f:
        f.write(svg(values, a.title, subtitle))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
