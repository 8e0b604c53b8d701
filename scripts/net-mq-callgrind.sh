#!/usr/bin/env bash
# Instructions per frame of serve-net's per-port forwarding with --queues 1 and --queues 2
# (callgrind, independent of machine load): what multiqueue costs a one-pair client. The
# netload polling client (64-byte stream, unpaced) sets up one pair, so with --queues 2 each
# frame also pays the flow hash and the check of pair 1's receive vring.
#
#   scripts/net-mq-callgrind.sh
#
# Needs: valgrind, a release build (built here).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p vmirq --bin vmirq
vmirq=$PWD/target/release/vmirq
command -v valgrind >/dev/null || { echo "valgrind not installed" >&2; exit 1; }
work=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
for q in 1 2; do
  rm -f "$work"/*.sock
  RUST_LOG=error valgrind --tool=callgrind --callgrind-out-file="$work/cg.$q" "$vmirq" serve-net \
    --socket "$work/a.sock" --socket "$work/b.sock" --datapath per-port --queues "$q" \
    2>"$work/srv.txt" &
  srv=$!
  for _ in $(seq 100); do [ -S "$work/b.sock" ] && break; sleep 0.2; done
  RUST_LOG=error timeout 120 "$vmirq" netload --socket "$work/a.sock" --socket "$work/b.sock" \
    --mode poll --workload stream:64 --seconds 1 --warmup 0.2 --repeat 1 --cpu 0 >/dev/null 2>&1 || true
  kill -INT "$srv"
  wait "$srv" || true
  srv=
  frames=$(grep -oE '^port 0: tx_frames=[0-9]+' "$work/srv.txt" | grep -oE '[0-9]+$')
  for f in 'Fabric::service_txq' 'PROGRAM TOTALS'; do
    ir=$(callgrind_annotate --inclusive=yes "$work/cg.$q" 2>/dev/null | grep -E "$f" | head -1 |
      awk '{ gsub(",", "", $1); print $1 }' || true)
    if [ -n "$ir" ]; then echo "queues=$q frames=$frames $f Ir/frame=$((ir / frames))"; fi
  done
done
