#!/usr/bin/env bash
# Side-by-side measurement of `vmirq serve` against qemu-storage-daemon for vmirq-blk's
# targets (issue 3): 4 KiB random reads from the libblkio load generator
# (crates/vmirq-blk/examples/blk_load.rs, interrupt-mode client), server pinned to CPU 1 and
# client to CPU 0, both SCHED_FIFO when permitted. Configurations are interleaved, REPS rounds;
# the report gives median (min..max) per configuration and ratios against the peer's median.
# `sleeps/IO` is the client's voluntary context switches per I/O (real blocking waits, each a
# cross-CPU wakeup), as opposed to notifications, which may reach a client that is still running.
#
#   scripts/blk-targets.sh [REPS] [SECONDS]        (defaults 5 and 2)
#   IMAGE_DIR=/var/tmp scripts/blk-targets.sh      (where the O_DIRECT image is created)
#   ONLY=qd32 scripts/blk-targets.sh               (only the QD 32 null-disk rows)
#   LOAD=1 scripts/blk-targets.sh                  (a nice-19 busy loop on each CPU throughout:
#                                                   the neighbour-load condition)
#
# Besides medians, the report gives the QD 32 ratio of each round (vmirq against the peer run
# just before it), so a median ratio can be told from a few lucky rounds.
#
# Needs: qemu-storage-daemon (scripts/setup.sh), python3, a release build (built here).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
secs=${2:-2}
image_dir=${IMAGE_DIR:-/var/tmp}
# Two builds: with --example, cargo builds only that example, not the vmirq binary.
cargo build --release -q -p vmirq --bin vmirq
cargo build --release -q -p vmirq-blk --example blk_load
vmirq=$PWD/target/release/vmirq
load=$PWD/target/release/examples/blk_load
command -v qemu-storage-daemon >/dev/null || { echo "qemu-storage-daemon not installed (scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d)
image=$image_dir/vmirq-blk-targets.img
only=${ONLY:-all}
case $only in all | qd32) ;; *) echo "ONLY must be all or qd32, not '$only'" >&2; exit 2 ;; esac
burners=()
cleanup() {
  [ ${#burners[@]} -gt 0 ] && kill "${burners[@]}" 2>/dev/null
  pkill -P $$ 2>/dev/null || true
  rm -rf "$work" "$image"
}
trap cleanup EXIT
if [ "$only" = all ]; then
  # Populate the image so O_DIRECT reads hit allocated blocks.
  dd if=/dev/zero of="$image" bs=1M count=1024 conv=notrunc status=none
fi
if [ "${LOAD:-0}" = 1 ]; then
  for cpu in 0 1; do
    taskset -c "$cpu" nice -n 19 bash -c 'while :; do :; done' &
    burners+=($!)
  done
  echo "neighbour load: busy loops at nice 19 on CPUs 0 and 1 (pids ${burners[*]})" >&2
fi

rt=(chrt -f 10)
"${rt[@]}" true 2>/dev/null || rt=()

qsd() { # qsd SOCKET BLOCKDEV [poll]
  local extra=() exp=""
  if [ "${3:-}" = poll ]; then
    extra=(--object iothread,id=io0,poll-max-ns=200000)
    exp=",iothread=io0"
  fi
  exec qemu-storage-daemon "${extra[@]}" --blockdev "$2" \
    --export "type=vhost-user-blk,id=exp,node-name=disk,addr.type=unix,addr.path=$1,writable=on$exp"
}
null_dev="driver=null-co,node-name=disk,size=1073741824,read-zeroes=on"
file_dev="driver=file,node-name=disk,filename=$image,aio=io_uring,cache.direct=on"

# one LABEL QD -- server command (the socket path is appended as --socket PATH, or given
# to the qsd function as its first argument)
one() {
  local label=$1 qd=$2; shift 3
  local sock=$work/${label//+/_}.sock # no regex characters: pgrep -f matches it
  rm -f "$sock"
  if [ "$1" = qsd ]; then
    shift
    ("${rt[@]}" taskset -c 1 bash -c "$(declare -f qsd); qsd \"\$@\"" _ "$sock" "$@" >"$work/srv.log" 2>&1) &
  else
    "${rt[@]}" taskset -c 1 "$@" --socket "$sock" >"$work/srv.log" 2>&1 &
  fi
  local pid=$!
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
  sleep 0.2
  local out
  out=$("${rt[@]}" taskset -c 0 "$load" "$sock" "$qd" "$secs" 2>&1 | tail -n 1) || true
  local spid
  spid=$(pgrep -n -f -- "$sock" || true)
  local rss=0
  [ -n "$spid" ] && rss=$(awk '/VmHWM/ {print $2}' "/proc/$spid/status" 2>/dev/null || echo 0)
  kill "$pid" ${spid:+"$spid"} 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "$label $qd ${rss:-0} $r $out" >>"$work/results"
  echo "$label qd$qd: $out" >&2
}

for r in $(seq "$reps"); do
  echo "round $r/$reps" >&2
  one qsd 32 -- qsd "$null_dev"
  one qsd-iothread-poll 32 -- qsd "$null_dev" poll
  one vmirq-vic 32 -- "$vmirq" serve --null 1G --moderation vic
  one vmirq-vic+kvm 32 -- "$vmirq" serve --null 1G --moderation vic --poll kvm:max_ns=200000
  [ "$only" = qd32 ] && continue
  one qsd 1 -- qsd "$null_dev"
  one vmirq-none 1 -- "$vmirq" serve --null 1G --moderation none
  one vmirq-vic 1 -- "$vmirq" serve --null 1G --moderation vic
  one vmirq-none+kvm 1 -- "$vmirq" serve --null 1G --moderation none --poll kvm:max_ns=200000
  one vmirq-vic+kvm 1 -- "$vmirq" serve --null 1G --moderation vic --poll kvm:max_ns=200000
  one qsd-file 32 -- qsd "$file_dev"
  one vmirq-file-none 32 -- "$vmirq" serve --image "$image" --direct --moderation none
  one vmirq-file-vic 32 -- "$vmirq" serve --image "$image" --direct --moderation vic
  one vmirq-file-vic+kvm 32 -- "$vmirq" serve --image "$image" --direct --moderation vic --poll kvm:max_ns=200000
  one vmirq-ram-vic+kvm 32 -- "$vmirq" serve --ram 1G --moderation vic --poll kvm:max_ns=200000
done

python3 - "$work/results" <<'PY'
import json, statistics, sys
rows = {}
by_round = {}
for line in open(sys.argv[1]):
    label, qd, rss, rnd, rest = line.split(" ", 4)
    try:
        r = json.loads(rest)
    except ValueError:
        print(f"{label} qd{qd}: run failed: {rest.strip()}")
        continue
    r["rss_mib"] = int(rss) / 1024
    rows.setdefault((label, int(qd)), []).append(r)
    by_round.setdefault(int(rnd), {})[(label, int(qd))] = r
def med(k, key): return statistics.median(x[key] for x in rows[k])
print(f"{'config':<22}{'QD':>4}{'IOPS median (min..max)':>32}{'notif/IO':>10}{'sleeps/IO':>10}{'p50 us':>9}{'p99 us':>9}{'client CPU':>11}{'RSS MiB':>9}")
for k in rows:
    v = rows[k]
    iops = [x["iops"] for x in v]
    print(f"{k[0]:<22}{k[1]:>4}{statistics.median(iops):>14.0f} ({min(iops):.0f}..{max(iops):.0f})"
          f"{med(k,'notif_per_io'):>10.3f}{med(k,'sleeps_per_io'):>10.3f}{med(k,'p50_us'):>9.1f}{med(k,'p99_us'):>9.1f}"
          f"{med(k,'client_cpu_pct'):>10.0f}%{max(x['rss_mib'] for x in v):>9.1f}")
def ratio(a, b, key):
    if a in rows and b in rows:
        return med(a, key) / med(b, key)
    return float("nan")
print()
print("QD 32 IOPS ratio per round, vic+kvm against the peers of the same round:")
for rnd in sorted(by_round):
    r = by_round[rnd]
    def rr(a, b):
        a, b = r.get((a, 32)), r.get((b, 32))
        return f"{a['iops'] / b['iops']:.2f}x" if a and b else "n/a"
    print(f"  round {rnd}: vs qsd {rr('vmirq-vic+kvm', 'qsd')}, "
          f"vs qsd-iothread-poll {rr('vmirq-vic+kvm', 'qsd-iothread-poll')}")
print()
print("targets (medians of this run):")
r = ratio(("vmirq-vic+kvm", 32), ("qsd", 32), "iops")
print(f"  QD32 vic+kvm IOPS / qsd: {r:.2f}x (>= 1.2); vs qsd with iothread polling: "
      f"{ratio(('vmirq-vic+kvm', 32), ('qsd-iothread-poll', 32), 'iops'):.2f}x; "
      f"notif/IO {med(('vmirq-vic+kvm', 32), 'notif_per_io'):.3f} (<= 0.1)")
print(f"  QD32 vic (no kick polling) IOPS / qsd: {ratio(('vmirq-vic', 32), ('qsd', 32), 'iops'):.2f}x")
if ("qsd", 1) not in rows:
    sys.exit(0)
print(f"  QD1 none+kvm p50 / qsd p50: {ratio(('vmirq-none+kvm', 1), ('qsd', 1), 'p50_us'):.2f}x; "
      f"vic+kvm: {ratio(('vmirq-vic+kvm', 1), ('qsd', 1), 'p50_us'):.2f}x (<= 0.7)")
print(f"  QD1 vic / none IOPS: {ratio(('vmirq-vic', 1), ('vmirq-none', 1), 'iops'):.2f}x, "
      f"p50 {ratio(('vmirq-vic', 1), ('vmirq-none', 1), 'p50_us'):.2f}x (no regression: about 1)")
print(f"  O_DIRECT image QD32: vic / qsd {ratio(('vmirq-file-vic', 32), ('qsd-file', 32), 'iops'):.2f}x, "
      f"vic+kvm / qsd {ratio(('vmirq-file-vic+kvm', 32), ('qsd-file', 32), 'iops'):.2f}x, "
      f"none / qsd {ratio(('vmirq-file-none', 32), ('qsd-file', 32), 'iops'):.2f}x")
PY
