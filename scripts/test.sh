#!/usr/bin/env bash
# The project's test command: every crate's unit, property and end-to-end tests. The `vmirq`
# binary is built first because the benchmark's end-to-end test starts `vmirq serve` from it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p vmirq
cargo test --workspace --no-fail-fast "$@"
