#!/usr/bin/env bash
# The exact command of this run (after the disconnect fix, commit cb4508b; from the repository root): the 7 policies of scripts/soak.sh
# run concurrently, each its own soak.sh (own socket, image, server and client), under nice 19.
set -u
R=crates/vmirq-blk/results/soak-2026-11-25-10min-after-fix
for p in none vic count:usecs=50,frames=32 ipi-gap:gap_us=100 dim spdk budget:us=20; do
  n=${p%%:*}
  MINUTES=10 RECONNECTS=100 KILLS=10 POLICIES="$p" OUT=$R/$n \
    nice -n 19 bash scripts/soak.sh >"$R/$n.out" 2>&1 &
done
wait
