#!/usr/bin/env bash
# Installs what vmirq's commands and tests need on a Debian machine (run as root or with sudo):
# qemu-storage-daemon (the benchmark peer, package qemu-system-common) and valgrind
# (instruction counts). Rust itself comes from rustup (https://rustup.rs).
set -euo pipefail
need=()
command -v qemu-storage-daemon >/dev/null || need+=(qemu-system-common)
command -v valgrind >/dev/null || need+=(valgrind)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup first" >&2; exit 1; }
