#!/usr/bin/env bash
# Soak test of `vmirq serve` (not a unit test): for each moderation policy, MINUTES of mixed
# verified I/O (examples/soak_client.rs: reads, writes, flushes of 4-64 KiB on two queues,
# every read checked against the last completed write of each block) through the
# spec-following vhost-user frontend with the inflight area; the client reconnects RECONNECTS
# times (alternately clean, GET_VRING_BASE first, and unclean, the socket just closes) and
# this script SIGKILLs and restarts the server KILLS times (the client reconnects and the new
# server resubmits what was in flight). The server's RSS, open fds and threads are sampled
# every SAMPLE seconds.
#
# Usage: scripts/soak.sh            (10 minutes per policy, 100 reconnects, 10 kills each)
#        MINUTES=1 POLICIES="none vic" scripts/soak.sh
#        PARALLEL=1 scripts/soak.sh (every policy at once, each in OUT/<policy name> with its
#        own socket, image, server and client, under nice 19: 10 minutes for all 7)
# Env: MINUTES RECONNECTS KILLS POLICIES BLOCKS (4 KiB blocks of the image, 16384 = 64 MiB)
#      SAMPLE (seconds, 2) OUT (results directory, crates/vmirq-blk/results/soak-<UTC date>)
#      PARALLEL (1: run the policies concurrently).
# Exit status 1 when any policy saw a data mismatch or a client error.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."

MINUTES=${MINUTES:-10}
RECONNECTS=${RECONNECTS:-100}
KILLS=${KILLS:-10}
POLICIES=${POLICIES:-"none vic count:usecs=50,frames=32 ipi-gap:gap_us=100 dim spdk budget:us=20"}
BLOCKS=${BLOCKS:-16384}
SAMPLE=${SAMPLE:-2}
OUT=${OUT:-crates/vmirq-blk/results/soak-$(date -u +%Y-%m-%dT%H%M)}

cargo build --release -q -p vmirq
cargo build --release -q -p vmirq-blk --example soak_client

if [ "${PARALLEL:-0}" = 1 ]; then
  # One soak per policy, all at once; each writes OUT/<name>/ and OUT/<name>.out.
  mkdir -p "$OUT"
  children=()
  trap 'kill "${children[@]}" 2>/dev/null || true; wait' EXIT
  for policy in $POLICIES; do
    name=${policy%%:*}
    PARALLEL=0 POLICIES="$policy" OUT="$OUT/$name" nice -n 19 bash "$self" >"$OUT/$name.out" 2>&1 &
    children+=("$!")
  done
  status=0
  for pid in "${children[@]}"; do
    wait "$pid" || status=1
  done
  children=()
  set -- $POLICIES
  {
    head -n 1 "$OUT/${1%%:*}/summary.txt"
    for policy in $POLICIES; do
      sed -n 2p "$OUT/${policy%%:*}/summary.txt"
    done
  } | tee "$OUT/summary.txt"
  exit "$status"
fi
serve=target/release/vmirq
client=target/release/examples/soak_client
mkdir -p "$OUT"
work=$(mktemp -d /var/tmp/vmirq-soak.XXXXXX)
server_pid=
client_pid=
cleanup() {
  [ -n "$client_pid" ] && kill "$client_pid" 2>/dev/null || true
  [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

seconds=$((MINUTES * 60))
kill_every=$(( seconds / (KILLS + 1) ))
[ "$kill_every" -ge 1 ] || kill_every=1
sock=$work/v.sock
image=$work/disk.img
status=0

start_server() {
  "$serve" serve --socket "$sock" --image "$image" $direct --queues 2 --queue-size 128 \
    --moderation "$1" 2>>"$work/server.log" &
  server_pid=$!
}

sample() { # policy process_index elapsed
  local st rss anon shmem fds threads
  st=/proc/$server_pid/status
  rss=$(awk '/^VmRSS/ {print $2}' "$st" 2>/dev/null || echo 0)
  anon=$(awk '/^RssAnon/ {print $2}' "$st" 2>/dev/null || echo 0)
  shmem=$(awk '/^RssShmem/ {print $2}' "$st" 2>/dev/null || echo 0)
  threads=$(awk '/^Threads/ {print $2}' "$st" 2>/dev/null || echo 0)
  fds=$(ls "/proc/$server_pid/fd" 2>/dev/null | wc -l)
  echo "${1//,/;},$2,$3,$server_pid,$rss,$anon,$shmem,$fds,$threads" >>"$OUT/samples.csv"
}

# rss_kb = anon_kb (the server's own heap and stacks) + shmem_kb (the guest memory and the
# inflight area it touched, shared with the frontend) + file-backed pages.
# (Commas in a policy spec become semicolons in the CSV.)
echo "policy,process,elapsed_s,pid,rss_kb,anon_kb,shmem_kb,fds,threads" >"$OUT/samples.csv"
printf '%-26s %9s %7s %6s %5s %6s %6s %5s %6s  %s\n' policy ops MiB/s mism err recon kills lost marked \
  "anon_kb first/last/max  fds first/last/max" | tee "$OUT/summary.txt"
for policy in $POLICIES; do
  rm -f "$image"
  truncate -s $((BLOCKS * 4096)) "$image"
  direct=
  if dd if=/dev/zero of="$image" bs=4096 count=1 oflag=direct conv=notrunc status=none 2>/dev/null; then
    direct=--direct
  fi
  : >"$work/server.log"
  start_server "$policy"
  process=1
  "$client" "$sock" "$seconds" "$RECONNECTS" "$BLOCKS" >"$work/client.json" 2>"$work/client.log" &
  client_pid=$!
  start=$(date +%s)
  next_kill=$((start + kill_every))
  kills=0
  while kill -0 "$client_pid" 2>/dev/null; do
    now=$(date +%s)
    sample "$policy" "$process" $((now - start))
    if [ "$kills" -lt "$KILLS" ] && [ "$now" -ge "$next_kill" ]; then
      kill -9 "$server_pid"
      wait "$server_pid" 2>/dev/null || true
      kills=$((kills + 1))
      next_kill=$((next_kill + kill_every))
      start_server "$policy"
      process=$((process + 1))
    fi
    sleep "$SAMPLE"
  done
  wait "$client_pid" || true
  client_pid=
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
  cp "$work/client.log" "$OUT/client-${policy%%:*}.log"
  cp "$work/server.log" "$OUT/server-${policy%%:*}.log"
  json=$(tail -n 1 "$work/client.json")
  echo "$policy $json" >>"$OUT/client.jsonl"
  field() { echo "$json" | sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
  ops=$(field ops); bytes=$(field bytes); secs=$(field seconds)
  mism=$(field mismatches); err=$(field errors)
  recon=$(( $(field clean_reconnects) + $(field unclean_reconnects) ))
  lost=$(field backend_losses); marked=$(field marked_at_loss)
  mibs=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { if (s > 0) printf "%.1f", b / s / 1048576; else print 0 }')
  # Anonymous RSS and fds of the server: first sample of the run, last sample, largest.
  mem=$(awk -F, -v p="${policy//,/;}" '$1 == p && $6 > 0 {
      if (first == "") { first = $6; ffd = $8 }
      last = $6; lfd = $8
      if ($6 > max) max = $6; if ($8 > maxfd) maxfd = $8 }
    END { printf "%s/%s/%s  %s/%s/%s", first, last, max, ffd, lfd, maxfd }' "$OUT/samples.csv")
  printf '%-26s %9s %7s %6s %5s %6s %6s %5s %6s  %s\n' "$policy" "${ops:-?}" "$mibs" "${mism:-?}" \
    "${err:-?}" "$recon" "$kills" "${lost:-?}" "${marked:-?}" "$mem" | tee -a "$OUT/summary.txt"
  if [ -z "$json" ] || [ "${mism:-1}" != 0 ] || [ "${err:-1}" != 0 ]; then
    status=1
  fi
done
echo "samples: $OUT/samples.csv; client results: $OUT/client.jsonl" | tee -a "$OUT/summary.txt"
exit "$status"
