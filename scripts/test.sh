#!/usr/bin/env bash
# The project's test command: every crate's unit, property and end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --no-fail-fast "$@"
