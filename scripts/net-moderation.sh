#!/usr/bin/env bash
# The interrupt-moderation comparisons of issue 15 on serve-net, for a quiet machine:
# interleaved repeats of `vmirq netload` against `vmirq serve-net` (in process) with each
# moderation policy, every number as median [min..max] and as a ratio of interleaved runs.
#
#   1. bulk stream 1514 B, unpaced:                 none vs dim vs dim-loop
#   2. bulk stream 1514 B, paced at RATE_PPS:       none vs dim vs dim-loop
#   3. mix on the same queue (bulk + 64 B message every 200 us), unpaced and paced:
#                                                   none vs dim vs dim-lat
#   4. mix on separate queues (4 ports; the bulk's and the messages' interrupts counted
#      apart), unpaced and paced:                   none vs dim vs dim-lat
#
# Paced rate: by default 812744 frames/s, the line rate of 10 Gbit/s Ethernet for 1514-byte
# frames (1538 bytes on the wire with preamble, FCS and inter-frame gap), about half of what
# this client receives unpaced on the 2-core development VM. A guest NIC in the moderation
# talk is not saturated by its host switch; at a paced rate equal throughput holds by
# construction, so the comparison is interrupts and CPU per packet at the same load.
#
# Usage: scripts/net-moderation.sh [REPEAT] (default 5). Environment: RATE_PPS, SECONDS_PER_RUN
# (default 2), OUT (results file; default crates/vmirq-net/results/DATE-net-moderation.txt),
# NO_BUILD=1 to use an existing target/release/vmirq.
set -euo pipefail
cd "$(dirname "$0")/.."

REPEAT="${1:-5}"
RATE_PPS="${RATE_PPS:-812744}"
SECS="${SECONDS_PER_RUN:-2}"
OUT="${OUT:-crates/vmirq-net/results/$(date -u +%Y-%m-%d-%H%M)-net-moderation.txt}"
BIN=target/release/vmirq

if [ "${NO_BUILD:-0}" != 1 ]; then
    cargo build --release -p vmirq >&2
fi
[ -x "$BIN" ] || { echo "no $BIN (build it or unset NO_BUILD)" >&2; exit 1; }

mkdir -p "$(dirname "$OUT")"
{
    echo "# serve-net moderation comparisons (scripts/net-moderation.sh), repeat $REPEAT, ${SECS} s per run"
    echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty')"
    echo "# machine: $(nproc) CPUs; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT"

# run TITLE ARGS...: one interleaved comparison; the table and ratios go to $OUT, the
# per-run summaries and serve-net's counters to $OUT.log.
run() {
    local title="$1"
    shift
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
M3=(--vmirq-moderation none --vmirq-moderation dim --vmirq-moderation dim-lat)

run "bulk stream 1514 B, unpaced" --workload stream:1514 "${M2[@]}"
run "bulk stream 1514 B, paced at $RATE_PPS pps" --workload "stream:1514@$RATE_PPS" "${M2[@]}"
run "mix, same queue, bulk unpaced" --workload mix:1514+64/200 "${M3[@]}"
run "mix, same queue, bulk paced at $RATE_PPS pps" --workload "mix:1514@$RATE_PPS+64/200" "${M3[@]}"
run "mix, separate queues, bulk unpaced" --ports 4 --workload mix:1514+64/200 "${M3[@]}"
run "mix, separate queues, bulk paced at $RATE_PPS pps" --ports 4 --workload "mix:1514@$RATE_PPS+64/200" "${M3[@]}"

echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT"
echo "results: $OUT (per-run summaries: $OUT.log)" >&2
