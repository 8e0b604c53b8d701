#!/usr/bin/env bash
# Primitive measurements for the vmirq-sim `this-host` profile (issue 16).
# Usage: measure-primitives.sh OUT_DIR ROUNDS VMIRQ_BINARY
# Each round, under the shared measurement lock and pinned (the probes pin their own
# threads; `vmirq kvm` pins its vCPU and sender threads), runs:
#   primitives wake 1->0 at 100 and 30 us, notice and pollnotice 1->0, timerfd on CPU 0
#   (100 us, and 20 us with timerspin, the non-sleeping reference: the count of `vmirq kvm
#   exits`' LAPIC-timer loops), signal on CPU 1; since v6 also wake and pollnotice 1->0 after
#   20, 30 and 50 us and timerfd at 30 and 50 us (the idle-length dependence) (this directory's primitives.c), and `vmirq kvm exits --json` (exit
#   costs; its hlt_wakeup_* and irq_inject* wake cells are recorded in the file but are
#   never profile inputs, see make-profile.py).
# Appends to OUT_DIR/primitives.jsonl and writes OUT_DIR/exits-ROUND.json; then
# `make-profile.py OUT_DIR` turns them into the profile.
set -euo pipefail
out=$1 rounds=$2 vmirq=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
bin=$(mktemp /tmp/vmirq-primitives.XXXXXX)
trap 'rm -f "$bin"' EXIT
cc -O2 -Wall -Wextra -pthread "$here/primitives.c" -o "$bin"
nice_run() { nice -n -10 "$@" 2>/dev/null || "$@"; }
for r in $(seq 1 "$rounds"); do
  flock /tmp/vmirq-measure.lock bash -c '
    set -euo pipefail
    r=$1 out=$2 bin=$3 vmirq=$4
    tag() { sed "s/^{/{\"round\":$r,\"date\":\"$(date -u +%FT%TZ)\",\"loadavg\":\"$(cut -d" " -f1-3 /proc/loadavg)\",/"; }
    for spec in "wake 1 0 100" "wake 1 0 30" "notice 1 0 100" "pollnotice 1 0 100" "timerfd 0 0 100" "timerfd 0 0 20" "timerspin 0 0 20" "signal 1 1 100" \
        "wake 1 0 20" "wake 1 0 50" "pollnotice 1 0 20" "pollnotice 1 0 30" "pollnotice 1 0 50" "timerfd 0 0 30" "timerfd 0 0 50"; do
      nice -n -10 "$bin" $spec 2000 | tag >> "$out/primitives.jsonl"
    done
    nice -n -10 "$vmirq" kvm exits --json > "$out/exits-$r.json"
  ' _ "$r" "$out" "$bin" "$vmirq"
  echo "round $r done: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
