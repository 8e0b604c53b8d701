#!/usr/bin/env bash
# Interleaved A/B of serve-net binaries under testpmd's virtio-user loopback client (DPDK's
# virtio PMD, `--tx-first`: 64 frames circulate, both ports transmit), serve-net as its own
# process with `--datapath pmd:cpu=1`. Per binary and repeat: the client's packets/s (median
# of its reports after two of warm-up), the client's CPU cycles per packet (testpmd's
# `--record-core-cycles`: cycles of its forwarding iterations that received frames, per
# frame; the client's own cost, which the device's feature set can change), and the
# forwarding thread's counts per loop of 64 frames: busy ns per chain (wall time of the
# passes that moved frames over the chains; the per-frame cost apart from empty passes and
# sleeps), CPU ns per chain, passes, empty passes and sleeps per loop, chains per pass that
# moved frames, receive kicks per port.
#
# The name `testpmd` instead of a binary runs testpmd's vhost PMD as the device (the peer of
# scripts/net-poll64.sh, forwarding on CPU 1 like the pmd thread), with the same client, so
# a run interleaves both devices; its line gives the device's busy ns per frame from its own
# `--record-core-cycles` (cycles of forwarding iterations that received frames, per frame:
# the same measure as busy ns per chain).
#
#   scripts/net-poll64-loopback-ab.sh BINARY... (e.g. two release builds of two commits)
#   REPS=5 SECS=5 POLL=never DP=pmd:cpu=1 scripts/net-poll64-loopback-ab.sh A B
#   scripts/net-poll64-loopback-ab.sh A@in_order=0 A testpmd (the client's virtio-user
#     devargs after `@` appended to both ports: here serve-net A without and with
#     VIRTIO_F_IN_ORDER, then testpmd's vhost PMD)
#
# busy_ns needs a binary that prints it (the pmd line's busy_ns, from b49c7d9 on).
# Needs: dpdk-testpmd and hugepages (scripts/hugepages.sh), root. On a loaded machine the
# packets/s mean little; compare busy ns per chain and the client's cycles per packet over
# several interleaved pairs.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
secs=${SECS:-5}
work=$(mktemp -d)
srv=
cli=
trap '[ -n "$cli" ] && kill "$cli" 2>/dev/null; [ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
one() { # BINARY[@DEVARGS] -> counts line
  local bin=${1%%@*} dev=
  [ "$bin" != "$1" ] && dev=",${1#*@}"
  rm -f "$work"/*.sock
  if [ "$bin" = testpmd ]; then
    dpdk-testpmd -l 0,1 --no-pci --file-prefix="vmirq-ab-peer-$$" -m 256 --in-memory \
      --single-file-segments --vdev "net_vhost0,iface=$work/a.sock" \
      --vdev "net_vhost1,iface=$work/b.sock" -- --forward-mode=io --auto-start \
      --stats-period 1 --nb-cores=1 --total-num-mbufs=16384 --max-pkt-len=9216 \
      --record-core-cycles >"$work/srv.txt" 2>&1 &
  else
    RUST_LOG=error "$bin" serve-net --socket "$work/a.sock" --socket "$work/b.sock" \
      --datapath "${DP:-pmd:cpu=1}" --poll "${POLL:-never}" 2>"$work/srv.txt" &
  fi
  srv=$!
  for _ in $(seq 100); do [ -S "$work/b.sock" ] && break; sleep 0.05; done
  timeout -s INT $((secs + 3)) dpdk-testpmd -l 0,1 --main-lcore 1 --no-pci \
    --file-prefix="vmirq-ab-$$" -m 256 --in-memory --single-file-segments \
    --vdev "net_virtio_user0,path=$work/a.sock$dev" --vdev "net_virtio_user1,path=$work/b.sock$dev" \
    -- --forward-mode=io --auto-start --stats-period 1 --nb-cores=1 --total-num-mbufs=16384 \
    --max-pkt-len=1518 --tx-first --record-core-cycles >"$work/cli.txt" 2>&1 &
  cli=$!
  wait "$cli" || true
  cli=
  kill -INT "$srv"
  wait "$srv" || true
  srv=
  pps=$(grep -E 'Rx-pps' "$work/cli.txt" | awk '{ print $2 }' | paste - - |
    awk 'NR > 2 { print $1 + $2 }' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] + 0 }')
  # testpmd's last "CPU cycles/packet=C (... at F MHz Clock", in ns per frame.
  cyc_ns() { grep -E 'CPU cycles/packet=' "$1" | tail -1 |
    sed -E 's/.*cycles\/packet=([0-9.]+).* at ([0-9]+) MHz.*/\1 \2/' |
    awk '{ printf "%.1f", $1 * 1000 / $2 }'; }
  cli_ns=$(cyc_ns "$work/cli.txt")
  if [ "$bin" = testpmd ]; then
    echo "pps=$pps client_ns/frame=${cli_ns:-?} busy_ns/chain=$(cyc_ns "$work/srv.txt")"
    return
  fi
  kicks=$(awk '/^queue 0:/ { for (i = 1; i <= NF; i++) if ($i ~ /^kicks=/) { split($i, a, "="); printf "%s ", a[2] } }' "$work/srv.txt")
  grep -E '^pmd: ' "$work/srv.txt" | sed 's/=/ /g' | awk -v p="$pps" -v k="$kicks" -v cl="${cli_ns:-?}" '{
    for (i = 1; i <= NF; i++) m[$i] = $(i + 1)
    c = m["chains"]; if (c == 0) c = 1; loops = c / 64; busy = m["passes"] - m["idle_passes"]; if (busy == 0) busy = 1
    printf "pps=%s client_ns/frame=%s busy_ns/chain=%.1f cpu_ns/chain=%.0f passes/loop=%.2f idle/loop=%.3f sleeps/loop=%.3f chains/busy_pass=%.1f slow_passes=%s rx_kicks=%s\n",
      p, cl, m["busy_ns"] / c, m["cpu_ns"] / c, m["passes"] / loops, m["idle_passes"] / loops, m["sleeps"] / loops, c / busy, m["slow_passes"], k }'
  grep -qE '^pmd: ' "$work/srv.txt" || echo "pps=$pps rx_kicks=$kicks (no pmd line)"
}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) secs $secs poll ${POLL:-never} datapath ${DP:-pmd:cpu=1}"
for r in $(seq 1 "${REPS:-3}"); do
  for b in "$@"; do
    echo "$r $b $(one "$b")"
  done
done
