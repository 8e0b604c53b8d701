#!/usr/bin/env bash
# Counts per packet of serve-net's data paths under netload's polling client (64-byte
# stream, as fast as the rings allow): serve-net runs as its own process so that its CPU
# time (every thread: port workers and the forwarding thread) is read from /proc; netload's
# client is pinned to CPU 0. Per configuration and repeat: packets received, serve-net CPU
# ns per packet, TX kicks per packet, forwarding-thread wakeups per packet (pmd). Counts,
# not rates: they hold up on a loaded machine far better than packets/s (say if it was).
#
#   scripts/net-poll64-counts.sh [REPS] [SECONDS]    (defaults 3, 2)
#   CONFIGS="per-port/never pmd:cpu=1/never" scripts/net-poll64-counts.sh
#   MODE=interrupt WORKLOAD=stream:1514@20000 scripts/net-poll64-counts.sh   (other clients)
#   VMIRQ=path scripts/net-poll64-counts.sh   (that binary instead of a fresh build, e.g. to
#                                            interleave two revisions)
#
# Needs: a release build (built here); no testpmd.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
secs=${2:-2}
mode=${MODE:-poll}
workload=${WORKLOAD:-stream:64}
configs=${CONFIGS:-"per-port/never per-port/kvm pmd:cpu=1/never pmd:cpu=1/fixed:us=100 pmd:cpu=1/kvm"}
vmirq=${VMIRQ:-}
if [ -z "$vmirq" ]; then
  cargo build --release -q -p vmirq --bin vmirq
  vmirq=$PWD/target/release/vmirq
fi
work=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
tck=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg) mode $mode workload $workload"
printf '%-26s %3s %10s %12s %12s %14s\n' config rep packets cpu_ns/pkt kicks/pkt pmd_wake/pkt
for r in $(seq 1 "$reps"); do
  for c in $configs; do
    dp=${c%%/*}
    poll=${c#*/}
    rm -f "$work"/*.sock
    RUST_LOG=error "$vmirq" serve-net --socket "$work/a.sock" --socket "$work/b.sock" \
      --poll "$poll" --datapath "$dp" 2>"$work/srv.txt" &
    srv=$!
    for _ in $(seq 100); do [ -S "$work/b.sock" ] && break; sleep 0.05; done
    t0=$(ticks "$srv")
    RUST_LOG=error timeout 120 "$vmirq" netload --socket "$work/a.sock" --socket "$work/b.sock" \
      --mode "$mode" --workload "$workload" --seconds "$secs" --warmup 0.2 --repeat 1 --cpu 0 \
      >"$work/load.txt" 2>&1 || { echo "netload failed:"; cat "$work/load.txt"; }
    t1=$(ticks "$srv")
    kill -INT "$srv"
    wait "$srv" || true
    srv=
    # Everything port 0 transmitted went through the switch (warm-up included).
    frames=$(grep -oE '^port 0: .*tx_frames=[0-9]+' "$work/srv.txt" | grep -oE '[0-9]+$' | head -1)
    kicks=$(awk '/kicks/ { for (i = 1; i <= NF; i++) if ($i ~ /^kicks=/) { split($i, a, "="); s += a[2] } } END { print s + 0 }' "$work/srv.txt")
    wake=$(grep -oE '^pmd: .*wakeups=[0-9]+' "$work/srv.txt" | grep -oE '[0-9]+$' || echo 0)
    awk -v c="$c" -v r="$r" -v f="${frames:-0}" -v t=$((t1 - t0)) -v hz="$tck" -v k="$kicks" -v w="$wake" \
      'BEGIN { if (f == 0) f = 1; printf "%-26s %3d %10d %12.0f %12.4f %14.4f\n", c, r, f, t * 1e9 / hz / f, k / f, w / f }'
    grep -E '^(port|pmd|queue)' "$work/srv.txt" | sed 's/^/    /'
  done
done
