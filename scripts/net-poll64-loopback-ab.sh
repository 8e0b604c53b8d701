#!/usr/bin/env bash
# Interleaved A/B of serve-net binaries under testpmd's virtio-user loopback client (DPDK's
# virtio PMD, `--tx-first`: 64 frames circulate, both ports transmit), serve-net as its own
# process with `--datapath pmd:cpu=1`. Per binary and repeat: the client's packets/s (median
# of its reports after two of warm-up), and the forwarding thread's counts per loop of 64
# frames: busy ns per chain (wall time of the passes that moved frames over the chains; the
# per-frame cost apart from empty passes and sleeps), CPU ns per chain, passes, empty passes
# and sleeps per loop, chains per pass that moved frames, receive kicks per port.
#
#   scripts/net-poll64-loopback-ab.sh BINARY... (e.g. two release builds of two commits)
#   REPS=5 SECS=5 POLL=never DP=pmd:cpu=1 scripts/net-poll64-loopback-ab.sh A B
#
# busy_ns needs a binary that prints it (the pmd line's busy_ns, from b49c7d9 on).
# Needs: dpdk-testpmd and hugepages (scripts/hugepages.sh), root. On a loaded machine the
# packets/s mean little; compare busy ns per chain over several interleaved pairs.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
secs=${SECS:-5}
work=$(mktemp -d)
srv=
cli=
trap '[ -n "$cli" ] && kill "$cli" 2>/dev/null; [ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
one() { # BINARY -> counts line
  rm -f "$work"/*.sock
  RUST_LOG=error "$1" serve-net --socket "$work/a.sock" --socket "$work/b.sock" \
    --datapath "${DP:-pmd:cpu=1}" --poll "${POLL:-never}" 2>"$work/srv.txt" &
  srv=$!
  for _ in $(seq 100); do [ -S "$work/b.sock" ] && break; sleep 0.05; done
  timeout -s INT $((secs + 3)) dpdk-testpmd -l 0,1 --main-lcore 1 --no-pci \
    --file-prefix="vmirq-ab-$$" -m 256 --in-memory --single-file-segments \
    --vdev "net_virtio_user0,path=$work/a.sock" --vdev "net_virtio_user1,path=$work/b.sock" \
    -- --forward-mode=io --auto-start --stats-period 1 --nb-cores=1 --total-num-mbufs=16384 \
    --max-pkt-len=1518 --tx-first >"$work/cli.txt" 2>&1 &
  cli=$!
  wait "$cli" || true
  cli=
  kill -INT "$srv"
  wait "$srv" || true
  srv=
  pps=$(grep -E 'Rx-pps' "$work/cli.txt" | awk '{ print $2 }' | paste - - |
    awk 'NR > 2 { print $1 + $2 }' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] + 0 }')
  kicks=$(awk '/^queue 0:/ { for (i = 1; i <= NF; i++) if ($i ~ /^kicks=/) { split($i, a, "="); printf "%s ", a[2] } }' "$work/srv.txt")
  grep -E '^pmd: ' "$work/srv.txt" | sed 's/=/ /g' | awk -v p="$pps" -v k="$kicks" '{
    for (i = 1; i <= NF; i++) m[$i] = $(i + 1)
    c = m["chains"]; if (c == 0) c = 1; loops = c / 64; busy = m["passes"] - m["idle_passes"]; if (busy == 0) busy = 1
    printf "pps=%s busy_ns/chain=%.1f cpu_ns/chain=%.0f passes/loop=%.2f idle/loop=%.3f sleeps/loop=%.3f chains/busy_pass=%.1f slow_passes=%s rx_kicks=%s\n",
      p, m["busy_ns"] / c, m["cpu_ns"] / c, m["passes"] / loops, m["idle_passes"] / loops, m["sleeps"] / loops, c / busy, m["slow_passes"], k }'
  grep -qE '^pmd: ' "$work/srv.txt" || echo "pps=$pps rx_kicks=$kicks (no pmd line)"
}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) secs $secs poll ${POLL:-never} datapath ${DP:-pmd:cpu=1}"
for r in $(seq 1 "${REPS:-3}"); do
  for b in "$@"; do
    echo "$r $b $(one "$b")"
  done
done
