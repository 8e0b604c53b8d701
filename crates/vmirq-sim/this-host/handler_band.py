"""The device cells' handler sensitivity of a this-host prediction (issue 16, fourteenth
session): predict-then-measure.sh writes the device prediction again with the guest's
interrupt handler 2 and 1 emulated instructions shorter and 1 and 2 longer, next to the
point prediction; prediction-table.py and compare.py show the band of predicted p50s."""
import json
import os


def handler_band(d_or_prefix, name):
    """(min, max) p50 of device run `name` over the handler-sensitivity predictions written
    next to the point prediction (PREFIX-handler-2.json .. -handler+2.json, fourteenth
    session), the point prediction included; None when there are none."""
    xs = []
    for k in ("-2", "-1", "", "+1", "+2"):
        p = f"{d_or_prefix}-device{'-handler' + k if k else ''}.json"
        if not os.path.exists(p):
            if k:
                continue
            return None
        runs = json.load(open(p))["runs"]
        if name in runs:
            xs.append(runs[name]["values"]["io_latency_ns.p50"])
    return (min(xs), max(xs)) if len(xs) > 1 else None
