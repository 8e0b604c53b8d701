#!/usr/bin/env bash
# Run `vmirq kvm exits --json` ROUNDS times back to back, as measure-primitives.sh runs it
# (under the shared measurement lock, nice -10; the command pins its own vCPU thread to CPU 0
# and its writers to CPU 1), with no idle gate: the spread of the net costs across the runs
# is the point, for the single-operation loops (`ops[].net_p50_ns`) and the paired loops
# (`paired[].net_ns`) of the same runs. Writes OUT_DIR/exits-R.json and appends one line per
# run to OUT_DIR/runs.txt (start and end UTC, /proc/loadavg before and after, the host's idle
# share over the second before the run), and the costs file of each run to OUT_DIR/costs-R.json.
# Then: exits-spread.py OUT_DIR/exits-*.json.
# Usage: exits-repeat.sh OUT_DIR ROUNDS VMIRQ_BINARY
set -euo pipefail
out=$1 rounds=$2 vmirq=$3
mkdir -p "$out"
idle_pct() {  # idle share of all CPUs over one second, from /proc/stat
  read -r _ a1 b1 c1 d1 e1 f1 g1 h1 _ < /proc/stat; sleep 1
  read -r _ a2 b2 c2 d2 e2 f2 g2 h2 _ < /proc/stat
  local tot=$(( (a2+b2+c2+d2+e2+f2+g2+h2) - (a1+b1+c1+d1+e1+f1+g1+h1) ))
  echo $(( 100 * (d2 - d1) / (tot > 0 ? tot : 1) ))
}
for r in $(seq 1 "$rounds"); do
  idle=$(idle_pct)
  before=$(cut -d' ' -f1-3 /proc/loadavg) start=$(date -u +%FT%TZ)
  flock /tmp/vmirq-measure.lock nice -n -10 "$vmirq" kvm exits --costs "$out/costs-$r.json" --json > "$out/exits-$r.json"
  echo "run $r: $start .. $(date -u +%FT%TZ), idle ${idle} % before, loadavg $before -> $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/runs.txt" >&2
done
