#!/usr/bin/env bash
# Side-by-side measurement of `vmirq serve` against qemu-storage-daemon, leading with each
# one's defaults (no policy flags, no options: issue 14): 4 KiB random reads from the libblkio
# load generator (crates/vmirq-blk/examples/blk_load.rs, interrupt-mode client), server pinned
# to CPU 1 and client to CPU 0, both SCHED_FIFO when permitted. Configurations are interleaved,
# REPS rounds; the report gives median (min..max) per configuration, and per round the ratio of
# `vmirq` (defaults) to `qsd` (defaults) run just before it, so a median ratio can be told from
# a few lucky rounds. `sleeps/IO` is the client's voluntary context switches per I/O (real
# blocking waits, each a cross-CPU wakeup), as opposed to notifications, which may reach a
# client that is still running. `srv CPU` is the server's utime + stime over the client's run
# (/proc/PID/stat); CPU/IO adds the client's.
#
#   scripts/blk-targets.sh [REPS] [SECONDS]        (defaults 5 and 2)
#   IMAGE_DIR=/var/tmp scripts/blk-targets.sh      (where the O_DIRECT image is created)
#   ONLY=qd32 scripts/blk-targets.sh               (only the QD 32 null-disk rows)
#   ONLY=choice scripts/blk-targets.sh             (how the defaults were chosen: the defaults
#                                                   against `--poll histogram` and
#                                                   `--moderation none`, QD 32 and QD 1)
#   LOAD=1 scripts/blk-targets.sh                  (a nice-19 busy loop on each CPU throughout:
#                                                   the neighbour-load condition)
#   RT=0 scripts/blk-targets.sh                    (no real-time priority: the normal scheduler)
#
# Rows: `vmirq` is `vmirq serve` with no policy flags; `+never` rows turn kick polling off
# (`none+never` are the defaults before issue 14); `qsd-iothread-poll` is the peer's export in
# an IOThread with `poll-max-ns=200000`.
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
case $only in all | qd32 | choice) ;; *) echo "ONLY must be all, qd32 or choice, not '$only'" >&2; exit 2 ;; esac
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
[ "${RT:-1}" = 0 ] && rt=()

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
  local spid
  spid=$(pgrep -n -f -- "$sock" || true)
  local t0=0 t1=0
  [ -n "$spid" ] && t0=$(awk '{ print $14 + $15 }' "/proc/$spid/stat" 2>/dev/null || echo 0)
  local out
  out=$("${rt[@]}" taskset -c 0 "$load" "$sock" "$qd" "$secs" 2>&1 | tail -n 1) || true
  local rss=0
  if [ -n "$spid" ]; then
    rss=$(awk '/VmHWM/ {print $2}' "/proc/$spid/status" 2>/dev/null || echo 0)
    t1=$(awk '{ print $14 + $15 }' "/proc/$spid/stat" 2>/dev/null || echo "$t0")
  fi
  kill "$pid" ${spid:+"$spid"} 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "$label $qd ${rss:-0} $r $((t1 - t0)) $out" >>"$work/results"
  echo "$label qd$qd: $out" >&2
}

for r in $(seq "$reps"); do
  echo "round $r/$reps" >&2
  if [ "$only" = choice ]; then
    for qd in 32 1; do
      one qsd "$qd" -- qsd "$null_dev"
      one vmirq "$qd" -- "$vmirq" serve --null 1G
      one vmirq-histogram "$qd" -- "$vmirq" serve --null 1G --poll histogram
      one vmirq-none "$qd" -- "$vmirq" serve --null 1G --moderation none
    done
    continue
  fi
  one qsd 32 -- qsd "$null_dev"
  one vmirq 32 -- "$vmirq" serve --null 1G
  one qsd-iothread-poll 32 -- qsd "$null_dev" poll
  one vmirq-vic+never 32 -- "$vmirq" serve --null 1G --moderation vic --poll never
  [ "$only" = qd32 ] && continue
  one qsd 1 -- qsd "$null_dev"
  one vmirq 1 -- "$vmirq" serve --null 1G
  one vmirq-none+never 1 -- "$vmirq" serve --null 1G --moderation none --poll never
  one vmirq-vic+never 1 -- "$vmirq" serve --null 1G --moderation vic --poll never
  one qsd-file 32 -- qsd "$file_dev"
  one vmirq-file 32 -- "$vmirq" serve --image "$image" --direct
  one vmirq-file-none+never 32 -- "$vmirq" serve --image "$image" --direct --moderation none --poll never
  one vmirq-ram 32 -- "$vmirq" serve --ram 1G
done

python3 - "$work/results" "$secs" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
secs, tck = float(sys.argv[2]), float(sys.argv[3])
rows = {}
by_round = {}
for line in open(sys.argv[1]):
    label, qd, rss, rnd, ticks, rest = line.split(" ", 5)
    try:
        r = json.loads(rest)
    except ValueError:
        print(f"{label} qd{qd}: run failed: {rest.strip()}")
        continue
    r["rss_mib"] = int(rss) / 1024
    r["srv_cpu_pct"] = 100 * int(ticks) / tck / secs
    r["cpu_ns_per_io"] = (r["srv_cpu_pct"] + r["client_cpu_pct"]) / 100 / max(r["iops"], 1) * 1e9
    rows.setdefault((label, int(qd)), []).append(r)
    by_round.setdefault(int(rnd), {})[(label, int(qd))] = r
def med(k, key): return statistics.median(x[key] for x in rows[k])
print(f"{'config':<22}{'QD':>4}{'IOPS median (min..max)':>32}{'notif/IO':>10}{'sleeps/IO':>10}{'p50 us':>9}{'p99 us':>9}{'client CPU':>11}{'srv CPU':>8}{'CPU/IO ns':>10}{'RSS MiB':>9}")
for k in rows:
    v = rows[k]
    iops = [x["iops"] for x in v]
    print(f"{k[0]:<22}{k[1]:>4}{statistics.median(iops):>14.0f} ({min(iops):.0f}..{max(iops):.0f})"
          f"{med(k,'notif_per_io'):>10.3f}{med(k,'sleeps_per_io'):>10.3f}{med(k,'p50_us'):>9.1f}{med(k,'p99_us'):>9.1f}"
          f"{med(k,'client_cpu_pct'):>10.0f}%{med(k,'srv_cpu_pct'):>7.0f}%{med(k,'cpu_ns_per_io'):>10.0f}{max(x['rss_mib'] for x in v):>9.1f}")
def per_round(a, b, key):
    out = []
    for rnd in sorted(by_round):
        x, y = by_round[rnd].get(a), by_round[rnd].get(b)
        if x and y and y[key] > 0:
            out.append(x[key] / y[key])
    return out
def show(name, a, b, key, target):
    rr = per_round(a, b, key)
    if not rr:
        return
    print(f"  {name}: median {statistics.median(rr):.2f}x ({target}); per round "
          + " ".join(f"{x:.2f}" for x in rr))
print()
print("defaults against defaults (vmirq / qsd, each round against the peer run just before it):")
show("QD32 IOPS", ("vmirq", 32), ("qsd", 32), "iops", ">= 1.2")
if ("vmirq", 32) in rows:
    print(f"  QD32 notifications per I/O: {med(('vmirq', 32), 'notif_per_io'):.3f} (<= 0.1); "
          f"qsd {med(('qsd', 32), 'notif_per_io'):.3f}")
show("QD32 CPU per I/O (client + server)", ("vmirq", 32), ("qsd", 32), "cpu_ns_per_io", "<= 1")
show("QD32 IOPS vs qsd with IOThread polling", ("vmirq", 32), ("qsd-iothread-poll", 32), "iops", "")
show("QD32 IOPS without kick polling (vic+never)", ("vmirq-vic+never", 32), ("qsd", 32), "iops", "")
show("QD1 p50", ("vmirq", 1), ("qsd", 1), "p50_us", "<= 0.7")
show("QD1 IOPS", ("vmirq", 1), ("qsd", 1), "iops", "")
show("QD1 CPU per I/O (client + server)", ("vmirq", 1), ("qsd", 1), "cpu_ns_per_io", "")
show("QD1 p50, the defaults before issue 14 (none+never)", ("vmirq-none+never", 1), ("qsd", 1), "p50_us", "")
show("O_DIRECT image QD32 IOPS", ("vmirq-file", 32), ("qsd-file", 32), "iops", "")
for alt in ("vmirq-histogram", "vmirq-none"):
    for qd in (32, 1):
        show(f"QD{qd} IOPS, {alt} against the defaults", (alt, qd), ("vmirq", qd), "iops", "")
        show(f"QD{qd} p50, {alt} against the defaults", (alt, qd), ("vmirq", qd), "p50_us", "")
PY
