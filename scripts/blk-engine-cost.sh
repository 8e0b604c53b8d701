#!/usr/bin/env bash
# Instructions per request of the vmirq-blk queue engine (parse, start, complete, moderate:
# everything inside QueueEngine::on_kick, the mock guest excluded)
# driven by the mock guest, counted by valgrind (callgrind): stable on a noisy machine.
# Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p vmirq-blk --example engine_cost
bin=${CARGO_TARGET_DIR:-target}/release/examples/engine_cost
N=2000
count() { # batches batch disk moderation -> total instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="*QueueEngine*on_kick*" \
    "$bin" "$@" 2>&1 >/dev/null \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "| disk | batch | moderation | instructions per request |"
echo "| --- | ---: | --- | ---: |"
for disk in null ram; do
  for batch in 1 32; do
    for m in none vic; do
      base=$(count 0 "$batch" "$disk" "$m"); full=$(count "$N" "$batch" "$disk" "$m")
      echo "| $disk | $batch | \`$m\` | $(( (full - base) / (N * batch) )) |"
    done
  done
done
