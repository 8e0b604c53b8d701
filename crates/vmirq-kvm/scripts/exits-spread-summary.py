#!/usr/bin/env python3
"""One row per primitive over several batches of exits-spread.py output: the range (max - min,
µs) of its net cost over each batch's runs, old method / paired, and in how many batches the
paired range was the narrower (issue 16, helper `simprobe`). Then the levels: per primitive,
the median over every run of all batches of each method's net p50, and in how many runs the
paired value was the higher.
Usage: exits-spread-summary.py BATCH_DIR... (each with a spread.md and exits-*.json) > summary.md"""
import glob
import json
import os
import statistics
import sys


def levels(batches):
    old, new = {}, {}
    for b in batches:
        for f in sorted(glob.glob(os.path.join(b, "exits-*.json"))):
            d = json.load(open(f))
            net = {o["op"]: o["net_p50_ns"] for o in d["ops"]}
            for p in d["paired"]:
                k = (p["op"], p["reference"])
                if p["op"] not in net or (p["reference"] != "baseline" and p["reference"] not in net):
                    continue
                o = net[p["op"]] - (0 if p["reference"] == "baseline" else net[p["reference"]])
                old.setdefault(k, []).append(o)
                new.setdefault(k, []).append(p["net_ns"]["p50"])
    print("\n| primitive | old: median net p50 µs | paired | paired higher in |")
    print("|---|---|---|---|")
    for k, a in old.items():
        b = new[k]
        name = k[0] if k[1] == "baseline" else f"{k[0]} - {k[1]}"
        higher = sum(y > x for x, y in zip(a, b))
        print(f"| {name} | {statistics.median(a) / 1000:.2f} | {statistics.median(b) / 1000:.2f} | "
              f"{higher} of {len(a)} runs |")


def main():
    batches = sys.argv[1:]
    rows = {}
    for b in batches:
        for line in open(os.path.join(b, "spread.md")):
            c = [x.strip() for x in line.split("|")]
            if len(c) > 7 and c[2] in ("old (separate loops)", "paired"):
                rows.setdefault(c[1], {})[(b, c[2][:3])] = float(c[6])
    names = " | ".join(os.path.basename(b.rstrip("/")) for b in batches)
    print(f"| primitive | max - min over the runs, µs, old / paired: {names} | paired narrower |")
    print("|---|" + "---|" * len(batches) + "---|")
    for k, v in rows.items():
        cells, narrower, seen = [], 0, 0
        for b in batches:
            if (b, "old") not in v:
                cells.append("-")
                continue
            o, p = v[(b, "old")], v[(b, "pai")]
            seen += 1
            narrower += p < o
            cells.append(f"{o:.2f} / {p:.2f}")
        print(f"| {k} | " + " | ".join(cells) + f" | {narrower} of {seen} |")
    levels(batches)


main()
