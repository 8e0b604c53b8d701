#!/usr/bin/env bash
# The interrupt-moderation comparisons of issue 15 on serve-net, for a quiet machine:
# interleaved repeats of `vmirq netload` against `vmirq serve-net` (in process) with each
# moderation policy, every number as median [min..max] and as a ratio of interleaved runs.
#
#   1. bulk stream 1514 B, unpaced, sent by the client thread itself (the runs of the
#      state note; the client rarely sleeps, so it takes few interrupts unmoderated):
#                                                   none vs dim vs dim-loop
#   2. bulk stream 1514 B from the wire (`--sender wire`: a thread of its own on CPU 1
#      sends, the client thread on CPU 0 only receives and sleeps on its interrupts, as a
#      guest NIC's receive queue in the moderation talk), paced at RATE_PPS:
#                                                   none vs dim vs dim-loop
#   2q. the same at a quarter of RATE_PPS (the rate of the loaded-machine runs in results/)
#   3. the same, unpaced (as fast as the wire thread and the switch go)
#   3L. the same with 1024-entry rings (QEMU's largest rx_queue_size): unmoderated a saturated
#      receiver already takes few interrupts, and net_dim's 256-frame count ends every hold, so
#      interrupts per packet cannot fall below 1/256 with 256-entry rings
#   4. mix on the same queue (bulk 0->1 plus a 64 B request/response 0<->1 every 200 us),
#      the client sends both: none vs dim vs dim-lat vs dim-lat:wait=on (every mix run
#      compares dim-lat without and with the response wait, and reports the frames the client
#      read ahead of each response: its backlog since the port's ring was last empty)
#   4w. the same queue with the wire as the far end: it sends the bulk to the client's port
#      (paced at RATE_PPS) and answers the client's requests, so the guest's one receive
#      queue carries both (the talk's case): none vs dim vs dim-lat
#   4t. the shared queue as the talk has it: three ports, the wire streams 0 -> 1 at
#      RATE_PPS, a responder thread on port 2 answers the client's requests (96 B UDP
#      frames, per-queue NAPI client, serve-net learning addresses, receive low-water mark
#      1/2): none vs dim-lat vs dim-lat:overtake=on; the reports split each round trip
#      into its halves (request to the responder, response back to the client)
#   5. mix on separate queues (4 ports: bulk 0->1 from the wire, paced at RATE_PPS, messages
#      2<->3 on the client thread; the bulk's and the messages' interrupts counted apart):
#                                                   none vs dim vs dim-lat
#   6. the same with the bulk unpaced and sent by the client thread
#
# Paced rate: by default 812744 frames/s, the line rate of 10 Gbit/s Ethernet for 1514-byte
# frames (1538 bytes on the wire with preamble, FCS and inter-frame gap), about half of what
# this client receives unpaced on the 2-core development VM. A guest NIC in the moderation
# talk is not saturated by its host switch; at a paced rate equal throughput holds by
# construction (check `slips` in the .log: frames the wire could not send on time), so the
# comparison is interrupts and CPU per packet at the same load.
#
# Usage: scripts/net-moderation.sh [REPEAT] (default 5). Environment: RATE_PPS, SECONDS_PER_RUN
# (default 2), OUT (results file; default crates/vmirq-net/results/DATE-net-moderation.txt),
# NO_BUILD=1 to use an existing target/release/vmirq, VMIRQ=path to use that binary instead
# (no build; e.g. another revision's, for an A/B of two binaries), ONLY="4 4w" to run only
# those comparisons (their numbers as above).
set -euo pipefail
cd "$(dirname "$0")/.."

REPEAT="${1:-5}"
RATE_PPS="${RATE_PPS:-812744}"
SECS="${SECONDS_PER_RUN:-2}"
OUT="${OUT:-crates/vmirq-net/results/$(date -u +%Y-%m-%d-%H%M)-net-moderation.txt}"
BIN="${VMIRQ:-target/release/vmirq}"

if [ -z "${VMIRQ:-}" ] && [ "${NO_BUILD:-0}" != 1 ]; then
    cargo build --release -p vmirq >&2
fi
[ -x "$BIN" ] || { echo "no $BIN (build it or unset NO_BUILD)" >&2; exit 1; }

mkdir -p "$(dirname "$OUT")"
: >"$OUT.log"
{
    echo "# serve-net moderation comparisons (scripts/net-moderation.sh), repeat $REPEAT, ${SECS} s per run"
    echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty'), binary $BIN"
    echo "# machine: $(nproc) CPUs; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT"

# run TITLE ARGS...: one interleaved comparison; the table and ratios go to $OUT, the
# per-run summaries and serve-net's counters to $OUT.log.
run() {
    local title="$1"
    shift
    if [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" ${title%%.*} "* ]]; then
        return 0
    fi
    local cmd=("$BIN" netload --peer vmirq --mode interrupt --repeat "$REPEAT" --seconds "$SECS" "$@")
    echo "== $title" >&2
    {
        echo
        echo "## $title"
        echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "\$ ${cmd[*]}"
    } >>"$OUT"
    "${cmd[@]}" >>"$OUT" 2>>"$OUT.log"
}

M2=(--vmirq-moderation none --vmirq-moderation dim --vmirq-moderation dim-loop)
M3=(--vmirq-moderation none --vmirq-moderation dim --vmirq-moderation dim-lat
    --vmirq-moderation dim-lat:wait=on)
BIG=(--rx-queue-size 1024 --tx-queue-size 1024)

run "1. bulk stream 1514 B, unpaced, client sends" --workload stream:1514 "${M2[@]}"
run "2. bulk stream 1514 B from the wire, paced at $RATE_PPS pps" --sender wire \
    --workload "stream:1514@$RATE_PPS" "${M2[@]}"
run "2q. bulk stream 1514 B from the wire, paced at $((RATE_PPS / 4)) pps (a quarter)" --sender wire \
    --workload "stream:1514@$((RATE_PPS / 4))" "${M2[@]}"
run "3. bulk stream 1514 B from the wire, unpaced" --sender wire --workload stream:1514 "${M2[@]}"
run "3L. bulk stream 1514 B from the wire, unpaced, 1024-entry rings" --sender wire \
    --workload stream:1514 "${BIG[@]}" "${M2[@]}"
run "4. mix, same queue, bulk unpaced, client sends" --workload mix:1514+64/200 "${M3[@]}"
run "4w. mix, same queue, the wire sends the bulk at $RATE_PPS pps and answers the messages" \
    --sender wire --workload "mix:1514@$RATE_PPS+64/200" "${M3[@]}"
run "4t. mix, one receive queue fed by two ports (3 ports), the wire at $RATE_PPS pps, a responder on port 2" \
    --ports 3 --sender wire --frames udp --napi queue --vmirq-rx-low-water 1/2 \
    --workload "mix:1514@$RATE_PPS+96/200" --vmirq-moderation none --vmirq-moderation dim-lat \
    --vmirq-moderation dim-lat:overtake=on
run "5. mix, separate queues, bulk from the wire paced at $RATE_PPS pps" --ports 4 --sender wire \
    --workload "mix:1514@$RATE_PPS+64/200" "${M3[@]}"
run "6. mix, separate queues, bulk unpaced, client sends" --ports 4 --workload mix:1514+64/200 "${M3[@]}"

echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT"
echo "results: $OUT (per-run summaries: $OUT.log)" >&2
