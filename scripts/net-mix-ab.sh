#!/usr/bin/env bash
# A/B of two `vmirq` binaries on issue 15's mix (setup 5 of scripts/net-moderation.sh by
# default: separate queues, the bulk from the wire paced at 10 GbE line rate), alternated
# A B A B ... so that the machine's noise hits both alike. Each netload call compares the
# policies in MODS interleaved (the RTT ratio to `none` is a same-run ratio); the per-run
# summaries and serve-net's per-port counters (tx_yields, rx_suppressed, ...) go to
# $OUT.log, the ratio lines of every call to $OUT, and a last table to stdout.
#
#   A=bins/682660b/vmirq B=target/release/vmirq scripts/net-mix-ab.sh [ROUNDS] [REPEAT]
#
# Environment: A, B (binaries; B defaults to target/release/vmirq, no build), ROUNDS (3),
# REPEAT (3 runs of each policy per call), SECONDS_PER_RUN (2), RATE_PPS (812744),
# WORKLOAD (default the setup-5 mix), EXTRA (more netload arguments, default
# "--ports 4 --sender wire"), EXTRA_A / EXTRA_B (arguments of one side only, e.g.
# EXTRA_B="--napi queue" with A=B for an A/B of the client's NAPI model), MODS (default
# "none dim-lat"), OUT. For IPv4/UDP frames (one UDP flow per netload flow, what a switch
# that treats flows differently needs) put `--frames udp` in EXTRA, so both sides send
# them: EXTRA="--ports 4 --sender wire --frames udp". Messages must then be at least 82
# bytes: WORKLOAD="mix:1514@812744+96/200" (the default's 64-byte messages are refused).
# EXTRA goes to both binaries, and a binary older than --frames refuses the option.
# Issue 15's shared receive queue as the talk has it (the bulk and the responses from two
# source ports, meeting only in the client's one receive queue: the wire streams 0 -> 1, a
# responder thread on port 2 answers the requests 1 -> 2; serve-net then switches with
# `--switch learn`): EXTRA="--ports 3 --sender wire --frames udp --napi queue"
# WORKLOAD="mix:1514@812744+96/200" (binaries older than --ports 3 refuse it). On a shared
# queue no interrupt count is the bulk's own: the table's `interrupts/packet` (the one
# queue's) and `frames ahead of msg` lines go to $OUT too.
# HALT_POLL_A / HALT_POLL_B (ns, root only): the guest halt polling of the machine the
# script runs on, when that machine is itself a VM with Linux's cpuidle-haltpoll driver
# (/sys/module/haltpoll/parameters/guest_halt_poll_ns), written before each side's call and
# put back at exit: an A/B of the same binary on an idle machine that polls or halts.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${1:-${ROUNDS:-3}}"
REPEAT="${2:-${REPEAT:-3}}"
A="${A:?A=path of the first vmirq binary}"
B="${B:-target/release/vmirq}"
SECS="${SECONDS_PER_RUN:-2}"
RATE_PPS="${RATE_PPS:-812744}"
WORKLOAD="${WORKLOAD:-mix:1514@$RATE_PPS+64/200}"
read -r -a EXTRA_ARGS <<<"${EXTRA:---ports 4 --sender wire}"
read -r -a MOD_NAMES <<<"${MODS:-none dim-lat}"
read -r -a EXTRA_A_ARGS <<<"${EXTRA_A:-}"
read -r -a EXTRA_B_ARGS <<<"${EXTRA_B:-}"
OUT="${OUT:-crates/vmirq-net/results/$(date -u +%Y-%m-%d-%H%M)-mix-ab.txt}"
for bin in "$A" "$B"; do
    [ -x "$bin" ] || { echo "no binary $bin" >&2; exit 1; }
done
HALT_POLL_FILE=/sys/module/haltpoll/parameters/guest_halt_poll_ns
if [ -n "${HALT_POLL_A:-}${HALT_POLL_B:-}" ]; then
    [ -w "$HALT_POLL_FILE" ] || { echo "HALT_POLL_A/B: $HALT_POLL_FILE is not writable (not a haltpoll guest, or not root)" >&2; exit 1; }
    HALT_POLL_SAVED="$(cat "$HALT_POLL_FILE")"
    trap 'echo "$HALT_POLL_SAVED" >"$HALT_POLL_FILE"' EXIT
fi
MODS_ARGS=()
for m in "${MOD_NAMES[@]}"; do
    MODS_ARGS+=(--vmirq-moderation "$m")
done

mkdir -p "$(dirname "$OUT")"
: >"$OUT.log"
{
    echo "# mix A/B (scripts/net-mix-ab.sh): A=$A B=$B, $ROUNDS rounds of A then B, repeat $REPEAT, ${SECS} s per run"
    echo "# workload $WORKLOAD ${EXTRA_ARGS[*]}; A adds: ${EXTRA_A:-nothing}; B adds: ${EXTRA_B:-nothing}; policies ${MOD_NAMES[*]}"
    echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(nproc) CPUs; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT"

for r in $(seq 1 "$ROUNDS"); do
    for side in A B; do
        bin="$A"
        side_args=("${EXTRA_A_ARGS[@]}")
        if [ "$side" = B ]; then
            bin="$B"
            side_args=("${EXTRA_B_ARGS[@]}")
        fi
        halt_poll="HALT_POLL_$side"
        if [ -n "${!halt_poll:-}" ]; then
            echo "${!halt_poll}" >"$HALT_POLL_FILE"
        fi
        echo "== round $r $side" >&2
        {
            echo
            echo "## round $r $side ($bin); load before: $(cut -d' ' -f1-3 /proc/loadavg)${HALT_POLL_SAVED:+; guest_halt_poll_ns $(cat "$HALT_POLL_FILE")}"
        } >>"$OUT"
        echo "## round $r $side ($bin)" >>"$OUT.log"
        "$bin" netload --peer vmirq --mode interrupt --repeat "$REPEAT" --seconds "$SECS" \
            --workload "$WORKLOAD" "${EXTRA_ARGS[@]}" ${side_args[@]+"${side_args[@]}"} "${MODS_ARGS[@]}" \
            2>>"$OUT.log" | tee -a "$OUT.log" | grep -E '^(mix|peer:|RTT p50|frames ahead of msg|frames during msg|wakeup to msg|interrupts/packet|bulk interrupts|msg interrupts)| RTT p50 | (bulk )?interrupts/packet ' >>"$OUT" || true
    done
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT"
# The same-run RTT p50 ratios to `none`, per side.
for side in A B; do
    printf '%s: ' "$side"
    awk -v s="$side" '/^## round/{cur=$4} cur==s && /RTT p50 \[interrupt\]/{printf "%s=%s ", $1, $5}' "$OUT"
    echo
done
echo "results: $OUT (per-run summaries and counters: $OUT.log)" >&2
