#!/usr/bin/env bash
# Post hoc (NOT a prediction: the windows' measurements were known): what profile v7's cost
# spread does on windows that predict-then-measure.sh already measured (issue 16, helper
# `simvar`). For each WINDOW it rebuilds the v6 and the v7 profile from the window's own
# primitives (make-profile.py; v6 must equal the committed profile.json), re-runs the
# window's two predictions (wake and device, as predict-then-measure.sh runs them) for each,
# and prints compare.py's tables for both. The seeds of the device scenario are SEEDS
# (default 1, the scenario's own); the v7 spread's draws come from the seed.
# Usage: posthoc-spread.sh VMIRQ WINDOW... (writes only under a mktemp directory)
set -euo pipefail
vmirq=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
top=$(git -C "$here" rev-parse --show-toplevel)
tmp=$(mktemp -d /tmp/vmirq-posthoc.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$top"
for w in "$@"; do
  name=$(basename "$w")
  for v in ${PROFILES:-v6 v7}; do
    p=$tmp/$name-$v
    python3 "$here/make-profile.py" --$v "$w" > "$p-profile.json"
    insn=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["costs_ns"]["exit_roundtrip_ns"])' "$p-profile.json")
    "$vmirq" sim scenarios/this_host_wake_v3.toml --costs "$p-profile.json" --json "$p-wake.json" > /dev/null
    for seed in ${SEEDS:-1}; do
      "$vmirq" sim scenarios/this_host_device.toml --costs "$p-profile.json" \
        --set "workload.isr_ns=$(( 26 * insn ))" --set workload.isr_masks_irqs=true \
        --set workload.device_polls_ring=true --set "seed=$seed" --json "$p-device.json" > /dev/null
      echo "### $name, profile $v, device seed $seed (post hoc)"
      python3 "$here/compare.py" "$w" "$p" | grep -v '^- round'
    done
  done
done
