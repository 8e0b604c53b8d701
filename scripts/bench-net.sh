#!/usr/bin/env bash
# The network bench for a quiet machine: `vmirq bench --net` (serve-net's defaults and `dim`
# against DPDK testpmd's vhost PMD, and Open vSwitch with DPDK where it is installed) with
# the release build, saved as text, JSON and HTML under crates/vmirq-bench/results/ with the
# machine's load before and after (polling peers starve under load: a loaded run flatters
# serve-net, so its ratios are not results).
#
#   scripts/bench-net.sh [NAME] [extra vmirq bench options...]
#
# NAME defaults to net-<UTC date and time>. Needs dpdk-testpmd (scripts/setup.sh) and
# hugepages for OVS (scripts/hugepages.sh); OVS is optional (apt-get install
# openvswitch-switch-dpdk; without it the run says why it left it out). About 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-net-$(date -u +%Y-%m-%d-%H%M)}
shift || true
out=crates/vmirq-bench/results/$name
cargo build --release -p vmirq
bash scripts/hugepages.sh >/dev/null || echo "hugepages not ready: OVS will be left out" >&2
{
  echo "load before: $(cat /proc/loadavg)"
  target/release/vmirq bench --net --json "$out.json" --html "$out.html" "$@" 2>&1
  echo "load after: $(cat /proc/loadavg)"
} | tee "$out.txt"
