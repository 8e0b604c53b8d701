#!/usr/bin/env bash
# CPU a vhost-user-blk backend burns for a frontend that is connected but idle, and for a
# trickle of requests: `vmirq serve` with its defaults against qemu-storage-daemon with its
# defaults (issue 14's budget: idle at most 1 % of a core, 100 IOPS at most 2 %).
#
# The client is crates/vmirq-blk/examples/blk_load in open-loop mode (RATE requests per second,
# one at a time, interrupt mode; RATE 0: connected, no I/O) on CPU 0; the server runs on CPU 1
# under the normal scheduler (no real-time priority: the way a user starts it). The server's
# CPU is utime + stime of all its threads from /proc/PID/stat over the window, which starts 2 s
# after the client (connection set up) and lasts SECONDS. Targets alternate, REPS rounds.
# `vmirq-contention-off` is the defaults without the contention gate: what the kick-wait
# policy alone costs, whatever else runs on the machine.
#
#   scripts/blk-idle-cpu.sh [SECONDS] [RATE] [REPS]      (defaults 60, 100, 1)
#
# Needs: qemu-storage-daemon (scripts/setup.sh), python3, a release build (built here).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
rate=${2:-100}
reps=${3:-1}
cargo build --release -q -p vmirq --bin vmirq
cargo build --release -q -p vmirq-blk --example blk_load
vmirq=$PWD/target/release/vmirq
load=$PWD/target/release/examples/blk_load
command -v qemu-storage-daemon >/dev/null || { echo "qemu-storage-daemon not installed (scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT
tck=$(getconf CLK_TCK)

ticks() { # utime + stime of process $1, clock ticks
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# one LABEL MODE RATE -- server command (the socket path is appended)
one() {
  local label=$1 mode=$2 r=$3; shift 4
  local sock=$work/$label.sock
  rm -f "$sock"
  taskset -c 1 "$@" "$sock" >"$work/srv.log" 2>&1 &
  local spid=$!
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  taskset -c 0 "$load" "$sock" 1 "$((secs + 4))" read "$r" >"$work/client.out" 2>&1 &
  local cpid=$!
  sleep 2
  local t0 c0 t1 c1
  t0=$(date +%s.%N); c0=$(ticks "$spid")
  sleep "$secs"
  t1=$(date +%s.%N); c1=$(ticks "$spid")
  wait "$cpid" || true
  kill -INT "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  local counters
  counters=$(grep -o 'poll_hits=[0-9]* poll_misses=[0-9]* poll_contended=[0-9]*' "$work/srv.log" | head -n 1 || true)
  local pct
  pct=$(python3 -c "print(f'{100 * ($c1 - $c0) / $tck / ($t1 - $t0):.3f}')")
  echo "$label $mode $pct $(tail -n 1 "$work/client.out") ${counters:-}" | tee -a "$work/results" >&2
}

qsd() {
  exec qemu-storage-daemon --blockdev driver=null-co,node-name=disk,size=1073741824,read-zeroes=on \
    --export "type=vhost-user-blk,id=exp,node-name=disk,addr.type=unix,addr.path=$1,writable=on"
}
export -f qsd

for round in $(seq "$reps"); do
  echo "round $round/$reps" >&2
  for mode in idle trickle; do
    r=0
    [ "$mode" = trickle ] && r=$rate
    one qsd "$mode" "$r" -- bash -c 'qsd "$0"'
    one vmirq "$mode" "$r" -- "$vmirq" serve --null 1G --socket
    one vmirq-contention-off "$mode" "$r" -- "$vmirq" serve --null 1G --poll-contention off --socket
  done
done

echo
echo "server CPU, % of one core over ${secs} s (idle: connected, no I/O; trickle: ${rate} IOPS):"
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, mode, pct, rest = line.split(" ", 3)
    rows.setdefault((label, mode), []).append(float(pct))
for (label, mode), v in sorted(rows.items()):
    print(f"  {label:<20} {mode:<8} median {statistics.median(v):.3f}%  (min {min(v):.3f}, max {max(v):.3f}, {len(v)} rounds)")
PY
