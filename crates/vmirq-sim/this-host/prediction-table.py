#!/usr/bin/env python3
"""The prediction of one predict-then-measure.sh window as Markdown (issue 16).
Usage: prediction-table.py OUT_DIR LABEL PROFILE_FLAGS
Reads OUT_DIR/profile.json, prediction-wake.json and prediction-device.json (written by
`vmirq sim` with that profile); prints the profile's costs with their derivation, then the
predicted p50 and polled share of every `vmirq kvm wake` cell and the `vmirq kvm device`
numbers that compare.py later sets against the measurement."""
import json
import os
import sys

from handler_band import handler_band



def main():
    d, label, flags = sys.argv[1], sys.argv[2], sys.argv[3]
    prof = json.load(open(os.path.join(d, "profile.json")))
    wake = json.load(open(os.path.join(d, "prediction-wake.json")))["runs"]
    dev = json.load(open(os.path.join(d, "prediction-device.json")))["runs"]
    print(f"# this-host prediction ({label} window), profile `make-profile.py {flags}`\n")
    print(f"Profile source: {prof['source']}\n")
    print("| cost | ns | derivation | input median [min, max] |")
    print("|---|---|---|---|")
    inputs = prof["inputs_median_min_max"]
    for k, v in prof["costs_ns"].items():
        src = prof["derivation"].get(k, "")
        # The input a cost is derived from, where its name differs from the cost's (v5).
        alias = {"guest_irq_entry_ns": "irq_entry_ns", "irqfd_inject_ns": "irqfd_write_ns",
                 "doorbell_exit_ns": "doorbell_user3_ns",
                 "running_irq_exit_ns": ("forced_to_handler_ns"
                                         if any(v in flags for v in ("--v6", "--v7", "--v8", "--v9", "--v10", "--v11", "--v12"))
                                         else "doorbell_user3_ns"),
                 "irq_return_ns": "forced_return_ns",
                 "ipi_send_other_ns": "ipi_other_polled_ns",
                 "device_notify_ns": "forced_write_ns",
                 "irq_chain_ns": "chained_iret_ns"}
        # v8 (and v9) take these two from the paired loops; the same-named inputs are v7's
        # (recorded).
        paired = ({"wrmsr_exit_ns": "ipi_self_paired_ns", "guest_irq_entry_ns": "irq_entry_paired_ns"}
                  if any(v in flags for v in ("--v8", "--v9", "--v10", "--v11", "--v12")) else {})
        inp = (inputs.get(paired.get(k, "")) or inputs.get(k) or inputs.get(alias.get(k, ""))
               or (inputs.get("insn") if "insn" in src else None))
        print(f"| {k} | {v} | {src} | {inp if inp else ''} |")
    rec = {k: v for k, v in inputs.items() if k not in prof["costs_ns"] and k != "insn"}
    if rec:
        print("\nAlso measured in this window (median [min, max] over rounds): "
              + "; ".join(f"{k} {v}" for k, v in sorted(rec.items())))
    print("\n| `vmirq kvm wake` cell (other core) | predicted p50 µs | predicted polled % |")
    print("|---|---|---|")
    for name, run in sorted(wake.items()):
        v = run["values"]
        pol = 100.0 * v.get("host_poll_hits", 0.0) / max(v["halts"], 1)
        print(f"| {name} | {v['wakeup_ns.p50'] / 1e3:.2f} | {pol:.0f} |")
    print("\n| `vmirq kvm device` | completions/s | notifications / completion | "
          "interrupts / completion | latency p50 µs | p50 with the handler -2..+2 insn |")
    print("|---|---|---|---|---|---|")
    for name, run in dev.items():
        v = run["values"]
        done = v["ios_completed"]
        band = handler_band(os.path.join(d, "prediction"), name)
        band = f"{band[0] / 1e3:.1f}..{band[1] / 1e3:.1f}" if band else ""
        print(f"| {name} | {v['ios_completed.per_s']:.0f} | {v['notifications'] / done:.3f} | "
              f"{v['guest_interrupts'] / done:.3f} | {v['io_latency_ns.p50'] / 1e3:.1f} | {band} |")


main()
