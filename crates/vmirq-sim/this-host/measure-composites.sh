#!/usr/bin/env bash
# The composite results the this-host profile predicts (issue 16), measured on the real KVM
# after the prediction was committed. Usage: measure-composites.sh OUT_DIR FIRST_ROUND LAST_ROUND VMIRQ
# Per round, under the shared measurement lock: `vmirq kvm wake` (irqfd and ipi, halt
# polling 0 and 200 us, 30 and 100 us intervals, other-core sender) and `vmirq kvm device`
# (none, count and count:usecs=1000,frames=16, depth 32, service 20 us, ring-3 driver). `vmirq kvm` pins its threads
# (vCPU on CPU 0, sender/device on CPU 1) and runs them at nice -10 when permitted.
# Before each round it waits (at most WAIT_S seconds, default 300) for a second in which the
# host was >= 90 % idle, as the vmirq-kvm README's rounds do, and records the idle share.
# INTERVALS (default 30,100) sets the wake intervals (µs); profile v3's prediction needs
# INTERVALS=20,30,50,100.
set -euo pipefail
out=$1 first=$2 last=$3 vmirq=$4
wait_s=${WAIT_S:-300}
export INTERVALS=${INTERVALS:-30,100}
mkdir -p "$out"
idle_pct() {  # idle share of all CPUs over one second, from /proc/stat
  read -r _ a1 b1 c1 d1 e1 f1 g1 h1 _ < /proc/stat; sleep 1
  read -r _ a2 b2 c2 d2 e2 f2 g2 h2 _ < /proc/stat
  local tot=$(( (a2+b2+c2+d2+e2+f2+g2+h2) - (a1+b1+c1+d1+e1+f1+g1+h1) ))
  echo $(( 100 * (d2 - d1) / (tot > 0 ? tot : 1) ))
}
for r in $(seq "$first" "$last"); do
  deadline=$(( $(date +%s) + wait_s ))
  while idle=$(idle_pct); [ "$idle" -lt 90 ] && [ "$(date +%s)" -lt "$deadline" ]; do :; done
  echo "round $r: host ${idle} % idle before it" >&2
  IDLE=$idle flock /tmp/vmirq-measure.lock bash -c '
    set -euo pipefail
    r=$1 out=$2 vmirq=$3
    echo "{\"round\":$r,\"start\":\"$(date -u +%FT%TZ)\",\"loadavg\":\"$(cut -d" " -f1-3 /proc/loadavg)\",\"idle_pct_before\":$IDLE}" >> "$out/composites-rounds.jsonl"
    "$vmirq" kvm wake --json --path irqfd,ipi --halt-poll-ns 0,200000 --interval-us "$INTERVALS" \
      --placement other --samples 2000 > "$out/wake-$r.json"
    "$vmirq" kvm device --json --moderation none --moderation count:usecs=50,frames=32 --moderation count:usecs=1000,frames=16 \
      --depth 32 --service-us 20 --driver spin-user > "$out/device-$r.json"
    echo "{\"round\":$r,\"end\":\"$(date -u +%FT%TZ)\",\"loadavg\":\"$(cut -d" " -f1-3 /proc/loadavg)\"}" >> "$out/composites-rounds.jsonl"
  ' _ "$r" "$out" "$vmirq"
  echo "round $r done: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
