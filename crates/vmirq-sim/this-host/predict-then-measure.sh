#!/usr/bin/env bash
# The this-host prediction (issue 16) in one window, so that primitives and composites are
# measured minutes apart and the host's drift between quiet periods (sleeping irqfd wake
# 15.8 us at 03:20, 11.1 us at 06:30) cannot separate them:
#   (a) wait for a quiet second (>= 90 % idle, at most WAIT_S s), measure the primitives
#       (measure-primitives.sh, PRIM_ROUNDS rounds);
#   (b) build the profile from them alone (make-profile.py $PROFILE_FLAGS, default --v8;
#       PROFILE_FLAGS=--v7 reproduces the eighth session's profile; PROFILE_FLAGS=--v9 adds
#       the ICR write to another vCPU, tenth session; PROFILE_FLAGS=--v11 adds the device
#       thread's own irqfd write into a running vCPU, fifteenth session);
#   (c) predict `vmirq kvm wake` (irqfd/IPI x polling off/200 us x 20/30/50/100 us) and
#       `vmirq kvm device` (none, count, count:usecs=1000,frames=16; and each with the
#       handler +-1 and +-2 instructions, its sensitivity) with `vmirq sim`, write
#       prediction.md, and
#       `git commit` OUT_DIR: the prediction is committed before any composite exists;
#   (d) measure the composites (measure-composites.sh, ROUNDS rounds, each gated on a quiet
#       second as well) and write compare.md (compare.py) and commit.txt (the prediction's
#       commit).
# Usage (from anywhere in the repository, release build of `vmirq` first):
#   crates/vmirq-sim/this-host/predict-then-measure.sh OUT_DIR [ROUNDS] [VMIRQ]
# OUT_DIR is committed, so put it inside the repository, e.g.
# crates/vmirq-sim/this-host/window-$(date -u +%F-%H%M). ROUNDS defaults to 5, VMIRQ to
# target/release/vmirq. LABEL (default "quiet") is written into prediction.md and the
# commit messages: use LABEL=loaded when the host is known to be busy. NO_COMMIT=1 skips
# both commits (a dry run; the prediction is then not a committed prediction).
set -euo pipefail
out=$1 rounds=${2:-5} vmirq=${3:-target/release/vmirq}
here=$(cd "$(dirname "$0")" && pwd)
top=$(git -C "$here" rev-parse --show-toplevel)
label=${LABEL:-quiet}
prim_rounds=${PRIM_ROUNDS:-5}
flags=${PROFILE_FLAGS:---v8}
wait_s=${WAIT_S:-300}
case $vmirq in /*) ;; *) vmirq=$(cd "$(dirname "$vmirq")" && pwd)/$(basename "$vmirq") ;; esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$top"
[ -x "$vmirq" ] || { echo "no vmirq binary at $vmirq (cargo build --release -p vmirq)" >&2; exit 2; }
case $out/ in
  "$top"/*) ;;
  *) [ "${NO_COMMIT:-0}" = 1 ] || { echo "$out is outside the repository $top: it could not be committed" >&2; exit 2; } ;;
esac
if [ -n "$(ls -A "$out")" ]; then
  echo "$out is not empty: use a new directory per window" >&2
  exit 2
fi

idle_pct() {  # idle share of all CPUs over one second, from /proc/stat
  read -r _ a1 b1 c1 d1 e1 f1 g1 h1 _ < /proc/stat; sleep 1
  read -r _ a2 b2 c2 d2 e2 f2 g2 h2 _ < /proc/stat
  local tot=$(( (a2+b2+c2+d2+e2+f2+g2+h2) - (a1+b1+c1+d1+e1+f1+g1+h1) ))
  echo $(( 100 * (d2 - d1) / (tot > 0 ? tot : 1) ))
}
deadline=$(( $(date +%s) + wait_s ))
while idle=$(idle_pct); [ "$idle" -lt 90 ] && [ "$(date +%s)" -lt "$deadline" ]; do :; done
echo "window start $(date -u +%FT%TZ): host ${idle} % idle, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/window.txt" >&2

# (a) primitives
"$here/measure-primitives.sh" "$out" "$prim_rounds" "$vmirq"
# (b) profile
# shellcheck disable=SC2086 # flags are words
python3 "$here/make-profile.py" $flags "$out" > "$out/profile.json"
# (c) prediction, committed
insn=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["costs_ns"]["exit_roundtrip_ns"])' "$out/profile.json")
"$vmirq" sim scenarios/this_host_wake_v3.toml --costs "$out/profile.json" \
  --json "$out/prediction-wake.json" > /dev/null
# v6 on (and v7, which is v6 plus the costs' measured spread, v8, v7 with paired net costs, and v9, v8 with the ICR write to another vCPU), two facts of `vmirq kvm device` the model had wrong (README, seventh session):
# the driver's handler masks interrupts (an interrupt gate, no `sti`), so a device interrupt
# that arrives during its delivery or handler waits and merges; the device thread polls the
# submitted count, so it has a request before the doorbell's exit ends.
mask=()
case " $flags " in
  *" --v6 "* | *" --v7 "* | *" --v8 "* | *" --v9 "* | *" --v10 "* | *" --v11 "* | *" --v12 "*) mask=(--set workload.isr_masks_irqs=true --set workload.device_polls_ring=true) ;;
esac
# k = 0 is the prediction compared (the handler's 26 emulated instructions). The other runs
# are the device cells' sensitivity (fourteenth session): the handler one and two
# instructions shorter and longer, written next to it. A cell whose p50 moves far within
# this band sits on a knife edge (the timer-bound `count` cell: 8 or 9 completions per
# interrupt).
for k in 0 -2 -1 1 2; do
  case $k in 0) name=prediction-device ;; -*) name=prediction-device-handler$k ;; *) name=prediction-device-handler+$k ;; esac
  "$vmirq" sim scenarios/this_host_device.toml --costs "$out/profile.json" \
    --set "workload.isr_ns=$(( (26 + k) * insn ))" "${mask[@]}" --json "$out/$name.json" > /dev/null
done
python3 "$here/prediction-table.py" "$out" "$label" "$flags" > "$out/prediction.md"
echo "prediction made $(date -u +%FT%TZ)" >> "$out/window.txt"
if [ "${NO_COMMIT:-0}" != 1 ]; then
  git add -- "$out"
  git commit -q -m "this-host prediction ($label window, profile $flags): primitives, profile and predicted cells, committed before the composites are measured" -- "$out"
  git rev-parse HEAD > "$out/commit.txt"
else
  echo "not committed (NO_COMMIT=1)" > "$out/commit.txt"
fi
echo "prediction commit: $(cat "$out/commit.txt")" >&2
# (d) composites and the comparison
INTERVALS=20,30,50,100 WAIT_S=${ROUND_WAIT_S:-60} "$here/measure-composites.sh" "$out" 1 "$rounds" "$vmirq"
echo "composites done $(date -u +%FT%TZ)" >> "$out/window.txt"
python3 "$here/compare.py" "$out" "$out/prediction" > "$out/compare.md"
cat "$out/compare.md"
if [ "${NO_COMMIT:-0}" != 1 ]; then
  git add -- "$out"
  git commit -q -m "this-host measurement ($label window) of the prediction committed in $(cat "$out/commit.txt")" -- "$out"
fi
