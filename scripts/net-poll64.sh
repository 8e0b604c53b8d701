#!/usr/bin/env bash
# Polling clients, 64-byte frames: serve-net against testpmd's vhost PMD in the same run
# (issue 15's 0.7x goal). Every configuration below is one `vmirq netload` session with both
# peers interleaved (testpmd's vhost PMD, then serve-net), with netload's polling client and,
# with --loopback-reference, testpmd's own virtio-user loopback as the client; the
# configurations themselves are interleaved REPS times. Output: everything into
# crates/vmirq-net/results/<date>-poll64-datapaths.txt, and the ratio lines (serve-net /
# testpmd, per configuration and client) at its end and on stdout.
#
#   scripts/net-poll64.sh [REPS] [SECONDS]          (defaults 3, 1)
#   CONFIGS="pmd:cpu=1/never" scripts/net-poll64.sh (a subset: DATAPATH/POLL, space-separated)
#
# Configurations (serve-net --datapath / --poll): per-port/never, per-port/kvm (the collapse
# of issue 15), pmd:cpu=1/never, pmd:cpu=1/fixed:us=100 (the forwarding thread keeps polling
# 100 µs after the last frame), pmd:cpu=1/kvm. netload's client runs on CPU 0 and testpmd's
# vhost PMD forwards on CPU 1, so the PMD thread is pinned to CPU 1 as well.
#
# Needs: dpdk-testpmd (scripts/setup.sh), hugepages (scripts/hugepages.sh, run here), root.
# Run on a quiet machine: the peers busy-poll, so any other load changes the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
secs=${2:-1}
configs=${CONFIGS:-"per-port/never per-port/kvm pmd:cpu=1/never pmd:cpu=1/fixed:us=100 pmd:cpu=1/kvm"}
cargo build --release -q -p vmirq --bin vmirq
vmirq=$PWD/target/release/vmirq
bash scripts/hugepages.sh >/dev/null || echo "hugepages: see scripts/hugepages.sh" >&2
out=crates/vmirq-net/results/$(date -u +%Y-%m-%d)-poll64-datapaths.txt
{
  echo "# scripts/net-poll64.sh $reps $secs at $(date -u +%FT%TZ), $(git rev-parse --short HEAD)"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out"
for r in $(seq 1 "$reps"); do
  for c in $configs; do
    dp=${c%%/*}
    poll=${c#*/}
    echo "== repeat $r: --datapath $dp --poll $poll" | tee -a "$out"
    RUST_LOG=error timeout 300 "$vmirq" netload --peer testpmd,vmirq --mode poll \
      --workload stream:64 --seconds "$secs" --repeat 1 --loopback-reference \
      --vmirq-poll "$poll" --vmirq-datapath "$dp" >>"$out" 2>&1 ||
      echo "   failed (exit $?)" | tee -a "$out"
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
summary=$(grep -E '^== repeat|/testpmd (packets/s \[poll\]|loopback packets/s)|^pmd: ' "$out" || true)
printf '== summary: serve-net/testpmd packets/s per run (netload client, then testpmd loopback)\n%s\n' \
  "$summary" | tee -a "$out"
echo "full output: $out"
