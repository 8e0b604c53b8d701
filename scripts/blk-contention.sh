#!/usr/bin/env bash
# Does kick polling get out of a neighbour's way? A busy loop (the neighbour) shares CPU 1
# with the server, both under the normal scheduler; the client runs on CPU 0. For each server
# configuration the report gives the client's IOPS, the neighbour's share of CPU 1 (its
# utime + stime from /proc/PID/stat over the run) and the server's poll counters
# (poll_contended: polls the contention gate refused or cut short).
#
#   scripts/blk-contention.sh [REPS] [SECONDS] [QD]     (defaults 3, 2, 32)
#   NICE=19 scripts/blk-contention.sh                    (the neighbour's nice value; default 0)
#
# Configurations: `vmirq` (defaults: vic, kvm polling, contention gate on), the same with
# `--poll-contention off`, and `--poll never`; qemu-storage-daemon with its defaults.
#
# Needs: qemu-storage-daemon (scripts/setup.sh), python3, a release build (built here).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
secs=${2:-2}
qd=${3:-32}
nice_=${NICE:-0}
cargo build --release -q -p vmirq --bin vmirq
cargo build --release -q -p vmirq-blk --example blk_load
vmirq=$PWD/target/release/vmirq
load=$PWD/target/release/examples/blk_load
command -v qemu-storage-daemon >/dev/null || { echo "qemu-storage-daemon not installed (scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT
tck=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

qsd() {
  exec qemu-storage-daemon --blockdev driver=null-co,node-name=disk,size=1073741824,read-zeroes=on \
    --export "type=vhost-user-blk,id=exp,node-name=disk,addr.type=unix,addr.path=$1,writable=on"
}
export -f qsd

# one LABEL -- server command (the socket path is appended)
one() {
  local label=$1; shift 2
  local sock=$work/$label.sock
  rm -f "$sock"
  taskset -c 1 "$@" "$sock" >"$work/srv.log" 2>&1 &
  local spid=$!
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  taskset -c 1 nice -n "$nice_" bash -c 'while :; do :; done' &
  local bpid=$!
  sleep 0.2
  local b0 t0 b1 t1 out
  b0=$(ticks "$bpid"); t0=$(date +%s.%N)
  out=$(taskset -c 0 "$load" "$sock" "$qd" "$secs" 2>&1 | tail -n 1) || true
  b1=$(ticks "$bpid"); t1=$(date +%s.%N)
  kill "$bpid"
  wait "$bpid" 2>/dev/null || true
  kill -INT "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  local counters
  counters=$(grep -o 'poll_hits=[0-9]* poll_misses=[0-9]* poll_contended=[0-9]*' "$work/srv.log" | head -n 1 || true)
  local share
  share=$(python3 -c "print(f'{100 * ($b1 - $b0) / $tck / ($t1 - $t0):.1f}')")
  echo "$label $share $out ${counters:-}" | tee -a "$work/results" >&2
}

echo "neighbour: busy loop at nice $nice_ on CPU 1 (the server's), QD $qd" >&2
for r in $(seq "$reps"); do
  echo "round $r/$reps" >&2
  one qsd -- bash -c 'qsd "$0"'
  one vmirq -- "$vmirq" serve --null 1G --socket
  one vmirq-contention-off -- "$vmirq" serve --null 1G --poll-contention off --socket
  one vmirq-poll-never -- "$vmirq" serve --null 1G --poll never --socket
done

python3 - "$work/results" <<'PY'
import json, re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, share, rest = line.split(" ", 2)
    j = json.loads(rest[: rest.index("}") + 1])
    c = dict((k, int(v)) for k, v in re.findall(r"(poll_\w+)=(\d+)", rest))
    rows.setdefault(label, []).append((float(share), j, c))
print(f"{'server':<22}{'IOPS median':>12}{'neighbour CPU':>15}{'polls/IO':>10}{'contended/IO':>14}")
for label, v in rows.items():
    iops = statistics.median(j["iops"] for _, j, _ in v)
    share = statistics.median(s for s, _, _ in v)
    ios = sum(j["ios"] for _, j, _ in v) or 1
    polls = sum(c.get("poll_hits", 0) + c.get("poll_misses", 0) for _, _, c in v) / ios
    cont = sum(c.get("poll_contended", 0) for _, _, c in v) / ios
    pc = f"{polls:.3f}" if label.startswith("vmirq") else "-"
    cc = f"{cont:.3f}" if label.startswith("vmirq") else "-"
    print(f"{label:<22}{iops:>12.0f}{share:>14.1f}%{pc:>10}{cc:>14}")
PY
