#!/usr/bin/env bash
set -u
out=crates/vmirq-netload/results/netload-2026-11-25
mkdir -p "$out"
v=target/release/vmirq
run() { name=$1; shift; echo "=== $name: vmirq netload $*"; uptime; $v netload "$@" --json "$out/$name.json" 2>"$out/$name.log"; }
run stream64 --workload stream:64
run stream64-paced --workload stream:64@100k
run stream1514 --workload stream:1514
run stream9014 --workload stream:9014 --rx-buf-len 4096 --rx-queue-size 1024
run rr64 --workload rr:64
run mix --workload mix:9014+64/100 --window 64 --rx-buf-len 4096 --rx-queue-size 1024
run mix4 --workload mix:9014+64/100 --window 64 --rx-buf-len 4096 --rx-queue-size 1024 --ports 4
echo "=== loopback reference"; uptime
target/release/examples/loopback 5
