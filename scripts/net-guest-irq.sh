#!/usr/bin/env bash
# Two real Linux guests (QEMU, kernel 6.1 virtio_net) through `vmirq serve-net`: guest B's
# card interrupts per received packet over an 8 MiB TCP stream under --moderation none and a
# count policy, in the same run, repeated. Prints each run's line and the count/none ratios.
# Usage: scripts/net-guest-irq.sh [RUNS=3] [COUNT_SPEC=count:usecs=2000,frames=64]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
export VMIRQ_NET_GUEST_COUNT="${2:-count:usecs=2000,frames=64}"
cargo test -q -p vmirq-net --test linux_guest --no-run
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (nproc $(nproc))"
for i in $(seq "$runs"); do
  line="$(cargo test -q -p vmirq-net --test linux_guest -- --nocapture 2>&1 | grep "guest B's card" || true)"
  [ -n "$line" ] || { echo "run $i: no result (test failed or SKIPPED)"; continue; }
  echo "run $i: $line"
  echo "$line" | awk '{ for (i = 1; i <= NF; i++) { if ($i == "none" && !n) n = $(i + 1); if ($i ~ /^count:/ && !c) c = $(i + 1) } } END { if (n > 0) printf "  count/none interrupts per packet: %.3f\n", c / n }'
done
