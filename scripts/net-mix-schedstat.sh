#!/usr/bin/env bash
# Where the threads of issue 15's 3-port mix wait for a CPU: one `vmirq netload` call per
# target (in-process serve-net, the shared-queue mix of net-mix-ab.sh), alternated
# ROUNDS times, with every thread's /proc schedstat (ns on a CPU, ns waiting on a run
# queue, times scheduled) read T1 and T2 seconds into each call. Prints per call and thread
# the difference: run ms, run-queue wait ms, slices and the wait per slice, with the call's
# RTT p50 and round-trip halves. Threads: the client (the process's main thread), three
# `vring_worker`s (serve-net's port workers 0, 1 and 2, in thread-id order),
# `netload-respond` (the far end on port 2) and `netload-wire` (the bulk sender on port 0).
#
#   scripts/net-mix-schedstat.sh [ROUNDS]     (env VMIRQ, MODS, EXTRA, WORKLOAD, OUT, T1, T2, SECS)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-${ROUNDS:-3}}"
VMIRQ="${VMIRQ:-target/release/vmirq}"
read -r -a MOD_NAMES <<<"${MODS:-none dim-lat:overtake=on}"
read -r -a EXTRA_ARGS <<<"${EXTRA:---ports 3 --sender wire --frames udp --napi queue --vmirq-rx-low-water 1/2}"
WORKLOAD="${WORKLOAD:-mix:1514@812744+96/200}"
T1="${T1:-2}" T2="${T2:-4}" SECS="${SECS:-5}"
OUT="${OUT:-crates/vmirq-net/results/$(date -u +%Y-%m-%d-%H%M)-mix-schedstat.txt}"
[ -x "$VMIRQ" ] || { echo "no binary $VMIRQ" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
snap() {
    for t in /proc/"$1"/task/*; do
        echo "$(basename "$t") $(tr ' ' _ <"$t/comm") $(cat "$t/schedstat" 2>/dev/null || true)"
    done
}
{
    echo "# mix schedstat (scripts/net-mix-schedstat.sh): $VMIRQ, $ROUNDS rounds of ${MOD_NAMES[*]}, ${SECS} s per call, threads read at ${T1} s and ${T2} s"
    echo "# workload $WORKLOAD ${EXTRA_ARGS[*]}"
    echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(nproc) CPUs; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT"
for r in $(seq 1 "$ROUNDS"); do
    for m in "${MOD_NAMES[@]}"; do
        "$VMIRQ" netload --peer vmirq --mode interrupt --repeat 1 --seconds "$SECS" \
            --workload "$WORKLOAD" "${EXTRA_ARGS[@]}" --vmirq-moderation "$m" >"$tmp/out" 2>&1 &
        pid=$!
        sleep "$T1"; snap "$pid" >"$tmp/s1"
        sleep $((T2 - T1)); snap "$pid" >"$tmp/s2"
        wait "$pid" || { echo "netload failed:" >&2; tail -5 "$tmp/out" >&2; exit 1; }
        {
            echo
            echo "## round $r $m; load $(cut -d' ' -f1-3 /proc/loadavg)"
            grep -E "rtt p50|rr halves|last wakeup" "$tmp/out" | head -3
            python3 - "$tmp/s1" "$tmp/s2" <<'PY'
import sys
def rows(p):
    out = {}
    for line in open(p):
        f = line.split()
        if len(f) == 5:
            out[f[0]] = f
    return out
a, b = rows(sys.argv[1]), rows(sys.argv[2])
print(f"{'thread':16} {'run ms':>8} {'wait ms':>8} {'slices':>8} {'wait/slice us':>13}")
for t in sorted(b, key=int):
    if t not in a:
        continue
    run = (int(b[t][2]) - int(a[t][2])) / 1e6
    wait = (int(b[t][3]) - int(a[t][3])) / 1e6
    sl = int(b[t][4]) - int(a[t][4])
    if sl:
        print(f"{b[t][1]:16} {run:8.1f} {wait:8.1f} {sl:8d} {1e3 * wait / sl:13.1f}")
PY
        } >>"$OUT"
    done
done
echo "results: $OUT" >&2
