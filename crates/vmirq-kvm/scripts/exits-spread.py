#!/usr/bin/env python3
"""Spread of each exit primitive's net cost across repeated `vmirq kvm exits --json` runs,
for both methods of the same runs (issue 16, helper `simprobe`).

Usage: exits-spread.py EXITS.json... > spread.md

- old: the single-operation loops' `net_p50_ns` (the op loop's p50 minus the `nop` baseline
  loop's p50, two VMs, two phases); for irq_entry against pio_user, the difference of the two
  loops' net p50s (what host profiles v5-v7 charge as `guest_irq_entry_ns`); ring-3 loops'
  `net_p50_ns` is their raw p50 (nothing subtracted).
- paired: `paired[].net_ns.p50`, the p50 of the per-pair differences of the op against its
  reference alternating in one loop of one VM (p10 and p90 shown per run as well).

Per primitive and method: the value of every run (µs), min, max, max - min and max / min (when
min > 0). Also the baseline raw p50s: the single baseline loop's, and the range of the paired
loops' nop references within each run (one VM per pair).
"""
import json
import sys


def us(ns):
    return f"{ns / 1000:.2f}"


def ratio(lo, hi):
    return f"{hi / lo:.2f}" if lo > 0 else "-"


def main():
    runs = [json.load(open(p)) for p in sys.argv[1:]]
    if not runs:
        sys.exit("usage: exits-spread.py EXITS.json...")
    print(f"{len(runs)} runs; loadavg at each run's end: "
          + ", ".join(r["loadavg"].split()[0] for r in runs) + "\n")
    pairs = [(p["op"], p["reference"]) for p in runs[0]["paired"]]
    print("| primitive | method | per run, µs | min | max | max - min | max / min |")
    print("|---|---|---|---|---|---|---|")
    for op, ref in pairs:
        old, new, bands = [], [], []
        for r in runs:
            net = {o["op"]: o["net_p50_ns"] for o in r["ops"]}
            p = next((p for p in r["paired"] if (p["op"], p["reference"]) == (op, ref)), None)
            if op not in net or (ref != "baseline" and ref not in net) or p is None:
                break
            old.append(net[op] if ref == "baseline" else net[op] - net[ref])
            new.append(p["net_ns"]["p50"])
            bands.append(f"{us(p['net_ns']['p10'])}..{us(p['net_ns']['p90'])}")
        else:
            name = op if ref == "baseline" else f"{op} - {ref}"
            for method, xs in (("old (separate loops)", old), ("paired", new)):
                lo, hi = min(xs), max(xs)
                print(f"| {name} | {method} | {', '.join(us(x) for x in xs)} | {us(lo)} | "
                      f"{us(hi)} | {us(hi - lo)} | {ratio(lo, hi)} |")
            print(f"| {name} | paired p10..p90 | {', '.join(bands)} | | | | |")
    print("\n| run | baseline loop raw p50 µs | paired nop references' raw p50 µs, min..max "
          "over the pairs' VMs | loadavg |")
    print("|---|---|---|---|")
    for i, r in enumerate(runs, 1):
        base = next(o["raw_ns"]["p50"] for o in r["ops"] if o["op"] == "baseline")
        refs = [p["reference_raw_ns"]["p50"] for p in r["paired"]
                if p["reference"] == "baseline" and p["op"] not in ("doorbell_user3", "cpuid_user3")]
        print(f"| {i} | {us(base)} | {us(min(refs))}..{us(max(refs))} | {r['loadavg']} |")


main()
