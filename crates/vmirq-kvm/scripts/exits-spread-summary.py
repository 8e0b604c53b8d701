#!/usr/bin/env python3
"""One row per primitive over several batches of exits-spread.py output: the range (max - min,
µs) of its net cost over each batch's runs, old method / paired, and in how many batches the
paired range was the narrower (issue 16, helper `simprobe`).
Usage: exits-spread-summary.py BATCH_DIR... (each with a spread.md) > summary.md"""
import os
import sys


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


main()
