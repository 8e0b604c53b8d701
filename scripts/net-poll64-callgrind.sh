#!/usr/bin/env bash
# Instructions per frame of serve-net's forwarding loop (callgrind; independent of machine
# load): serve-net under valgrind, netload's polling client unpaced (64-byte stream) in its
# own process, so serve-net is the bottleneck and the forwarding thread takes full bursts.
# Prints, per data path, the inclusive Ir of the forwarding function (per-port:
# Fabric::service_txq, every drain of a port's worker whatever event started it; pmd:
# Fabric::pmd_pass) and of the whole program, per frame moved.
#
#   scripts/net-poll64-callgrind.sh [DATAPATH...]     (default: per-port pmd)
#
# MODE=interrupt and WORKLOAD=rr:64 (netload's --mode, --workload; default poll,
# stream:64) measure other clients; WORKLOAD=loopback runs testpmd's virtio-user loopback
# client instead of netload (DPDK's virtio PMD, `--tx-first`: 64 frames circulate through
# the two ports, both ports transmit; needs dpdk-testpmd and hugepages, see
# scripts/hugepages.sh; SECONDS_LOOP=N, default 6, how long the client runs). SERVE_ARGS
# adds serve-net options (e.g. SERVE_ARGS="--moderation count:usecs=50,frames=32").
# VMIRQ=path: measure that binary instead of building one (e.g. a copy of an older build,
# to compare two revisions). KEEP=dir: keep the callgrind outputs there (cg.DATAPATH), for
# `callgrind_annotate --inclusive=yes` or a self-cost profile. CACHE=1: callgrind's cache
# simulation too (`--cache-sim=yes`), and the data-cache read and write misses per frame
# (D1mr D1mw first level, DLmr DLmw last level) of the same functions. The simulation is of
# one CPU's caches: it counts what this process misses by itself (capacity, conflicts), not
# the lines another CPU (the client's) took away, which are the loopback's misses.
#
# Needs: valgrind, a release build (built here).
set -euo pipefail
cd "$(dirname "$0")/.."
vmirq=${VMIRQ:-}
if [ -z "$vmirq" ]; then
  cargo build --release -q -p vmirq --bin vmirq
  vmirq=$PWD/target/release/vmirq
fi
command -v valgrind >/dev/null || { echo "valgrind not installed" >&2; exit 1; }
work=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
dps=("$@")
[ ${#dps[@]} -eq 0 ] && dps=(per-port pmd)
for dp in "${dps[@]}"; do
  rm -f "$work"/*.sock
  cache=()
  [ -n "${CACHE:-}" ] && cache=(--cache-sim=yes)
  RUST_LOG=error valgrind --tool=callgrind "${cache[@]}" --callgrind-out-file="$work/cg.$dp" "$vmirq" serve-net \
    --socket "$work/a.sock" --socket "$work/b.sock" --datapath "$dp" ${SERVE_ARGS:-} 2>"$work/srv.txt" &
  srv=$!
  for _ in $(seq 100); do [ -S "$work/b.sock" ] && break; sleep 0.2; done
  if [ "${WORKLOAD:-}" = loopback ]; then
    # The client's forwarding lcore on CPU 0, its main lcore on CPU 1 (as netload's
    # --loopback-reference runs it); stopped with SIGINT so that it prints its totals.
    timeout -s INT "${SECONDS_LOOP:-6}" dpdk-testpmd -l 0,1 --main-lcore 1 --no-pci \
      --file-prefix="vmirq-cg-$$" -m 256 --in-memory --single-file-segments \
      --vdev "net_virtio_user0,path=$work/a.sock" --vdev "net_virtio_user1,path=$work/b.sock" \
      -- --forward-mode=io --auto-start --stats-period 1 --nb-cores=1 --total-num-mbufs=16384 \
      --max-pkt-len=1518 --tx-first >"$work/client.txt" 2>&1 || true
  else
    RUST_LOG=error timeout 120 "$vmirq" netload --socket "$work/a.sock" --socket "$work/b.sock" \
      --mode "${MODE:-poll}" --workload "${WORKLOAD:-stream:64}" --seconds 1 --warmup 0.2 --repeat 1 --cpu 0 >/dev/null 2>&1 || true
  fi
  kill -INT "$srv"
  wait "$srv" || true
  srv=
  # Frames moved: taken off every port's transmit queues (a request/response workload
  # sends both ways).
  frames=$(grep -oE '^port [0-9]+: tx_frames=[0-9]+' "$work/srv.txt" | grep -oE '[0-9]+$' |
    awk '{ n += $1 } END { print n + 0 }')
  for f in 'Fabric>?::service_txq \[' 'Fabric::pmd_pass \[' 'PROGRAM TOTALS'; do
    ir=$(callgrind_annotate --inclusive=yes "$work/cg.$dp" 2>/dev/null | grep -E "$f" | head -1 |
      awk '{ gsub(",", "", $1); print $1 }' || true)
    if [ -n "$ir" ]; then echo "$dp frames=$frames ${f% \\[} Ir/frame=$((ir / frames))"; fi
    if [ -n "${CACHE:-}" ]; then
      callgrind_annotate --inclusive=yes --show=D1mr,D1mw,DLmr,DLmw "$work/cg.$dp" 2>/dev/null |
        grep -E "$f" | head -1 | tr -d ',' | awk -v n="$frames" -v name="${f% \\[}" -v dp="$dp" '{
          printf "%s %s D1mr/frame=%.2f D1mw/frame=%.2f DLmr/frame=%.2f DLmw/frame=%.2f\n",
            dp, name, $1 / n, $3 / n, $5 / n, $7 / n }' || true
    fi
  done
  # The forwarding thread's passes, empty passes and sleeps (pmd only).
  grep -E '^pmd: ' "$work/srv.txt" | sed "s/^/$dp /" || true
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work/cg.$dp" "$work/srv.txt" "$KEEP/" && mv "$KEEP/srv.txt" "$KEEP/srv.$dp.txt"; fi
done
