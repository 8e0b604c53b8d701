#!/usr/bin/env bash
# Instructions per decision cycle for every policy, counted by valgrind (callgrind): stable on
# a noisy machine, unlike wall-clock time. Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p vmirq-policy --example decision_loop
bin=${CARGO_TARGET_DIR:-target}/release/examples/decision_loop
N=100000
count() { # family spec n -> total instructions
  local out
  out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$3" 2>&1 >/dev/null)
  echo "$out" | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "| family | policy | instructions per cycle |"
echo "| --- | --- | ---: |"
for fam_spec in moderation:none moderation:count moderation:vic moderation:ipi-gap moderation:dim \
    "moderation:dim:latency=on" moderation:spdk moderation:budget \
    wait:never wait:fixed wait:kvm wait:guest-haltpoll wait:histogram; do
  fam=${fam_spec%%:*}; spec=${fam_spec#*:}
  base=$(count "$fam" "$spec" 0); full=$(count "$fam" "$spec" $N)
  echo "| $fam | \`$spec\` | $(( (full - base) / N )) |"
done
