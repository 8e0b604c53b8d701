#!/usr/bin/env python3
"""Measured (vmirq kvm wake/device rounds) against predicted (vmirq sim with the this-host
profile). Usage: compare.py MEASURE_DIR PREDICTION_PREFIX [ROUND ...]
PREDICTION_PREFIX is e.g. crates/vmirq-sim/predictions/this-host-2026-11-25 (reads
PREFIX-wake.json and PREFIX-device.json). Prints Markdown tables: per cell the median
[min, max] over rounds of each round's value, the prediction, and measured / predicted.
Without ROUNDs every round with both files is used."""
import glob
import json
import os
import statistics
import sys

from handler_band import handler_band



def mmm(xs):
    return statistics.median(xs), min(xs), max(xs)


def fmt(t, scale=1.0, nd=1):
    m, lo, hi = (x * scale for x in t)
    return f"{m:.{nd}f} [{lo:.{nd}f}, {hi:.{nd}f}]"


def main():
    d, prefix = sys.argv[1], sys.argv[2]
    want = [int(x) for x in sys.argv[3:]]
    rounds = sorted(int(os.path.basename(p)[5:-5]) for p in glob.glob(os.path.join(d, "wake-*.json")))
    rounds = [r for r in rounds if os.path.exists(os.path.join(d, f"device-{r}.json"))]
    if want:
        rounds = [r for r in rounds if r in want]
    meta = {}
    for l in open(os.path.join(d, "composites-rounds.jsonl")):
        x = json.loads(l)
        if "end" in x:
            x["loadavg_end"] = x.pop("loadavg")
        meta.setdefault(x["round"], {}).update(x)
    print(f"rounds {rounds}")
    for r in rounds:
        m = meta.get(r, {})
        print(f"- round {r}: {m.get('start')} load {m.get('loadavg')} idle before "
              f"{m.get('idle_pct_before', 'not gated')} %, end load {m.get('loadavg_end', m.get('loadavg'))}")
    pw = json.load(open(prefix + "-wake.json"))["runs"]
    pd = json.load(open(prefix + "-device.json"))["runs"]

    print("\n| path | interval µs | halt poll ns | measured p50 µs | predicted p50 µs | measured / predicted | measured polled % | predicted polled % |")
    print("|---|---|---|---|---|---|---|---|")
    cells = {}
    for r in rounds:
        for c in json.load(open(os.path.join(d, f"wake-{r}.json")))["cells"]:
            k = (c["path"], c["interval_ns"] // 1000, c["halt_poll_ns"])
            cells.setdefault(k, []).append(c)
    for k in sorted(cells):
        path, iv, hp = k
        cs = cells[k]
        p50 = mmm([c["lat_ns"]["p50"] for c in cs])
        pol = mmm([100.0 * c["polls_successful"] / max(c["halts"], 1) for c in cs])
        label = f"{path}-{iv}-{'off' if hp == 0 else 'poll200'}"
        if label not in pw:  # a cell measured in these rounds but not in this prediction
            print(f"| {path} | {iv} | {hp} | {fmt(p50, 1e-3)} | not predicted | | {fmt(pol)} | |")
            continue
        run = pw[label]["values"]
        pp50 = run["wakeup_ns.p50"]
        ppol = 100.0 * run.get("host_poll_hits", 0.0) / run["halts"]
        print(f"| {path} | {iv} | {hp} | {fmt(p50, 1e-3)} | {pp50 / 1e3:.1f} | "
              f"{fmt(tuple(x / pp50 for x in p50), 1, 2)} | {fmt(pol)} | {ppol:.0f} |")

    print("\n| policy | measured completions/s | predicted | measured interrupts per completion | predicted | measured notifications per completion | predicted | measured latency p50 µs | predicted | measured / predicted p50 | predicted p50, handler -2..+2 insn |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    runs = {}
    for r in rounds:
        for x in json.load(open(os.path.join(d, f"device-{r}.json")))["runs"]:
            runs.setdefault(x["moderation"], []).append(x)
    for pol, xs in runs.items():
        if pol not in pd:  # measured in these rounds but not in this prediction
            print(f"| {pol} | not predicted | | | | | | | | | |")
            continue
        v = pd[pol]["values"]
        done = v["ios_completed"]
        cps = mmm([x["completions_per_sec"] for x in xs])
        ipc = mmm([x["irqs_per_completion"] for x in xs])
        npc = mmm([x["notifies"] / max(x["completions"], 1) for x in xs])
        lat = mmm([x["lat_ns"]["p50"] for x in xs])
        plat = v["io_latency_ns.p50"]
        band = handler_band(prefix, pol)
        band = f"{band[0] / 1e3:.1f}..{band[1] / 1e3:.1f}" if band else ""
        print(f"| {pol} | {fmt(cps, 1, 0)} | {v['ios_completed.per_s']:.0f} | {fmt(ipc, 1, 3)} | "
              f"{v['guest_interrupts'] / done:.3f} | {fmt(npc, 1, 3)} | {v['notifications'] / done:.3f} | "
              f"{fmt(lat, 1e-3)} | {plat / 1e3:.1f} | {fmt(tuple(x / plat for x in lat), 1, 2)} | {band} |")


main()
