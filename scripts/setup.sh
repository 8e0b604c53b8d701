#!/usr/bin/env bash
# Installs what vmirq's commands and tests need on a Debian machine (run as root or with sudo):
# qemu-storage-daemon (the benchmark peer, package qemu-system-common), valgrind (instruction
# counts), and the Linux test guest's parts (scripts/guest/README.md): QEMU, Debian's cloud
# kernel, busybox-static, fio, e2fsprogs, util-linux, cpio, xz-utils and zstd; DPDK 22.11 (dpdk,
# and dpdk-dev for dpdk-testpmd: the network peer; hugepages: scripts/hugepages.sh). Rust itself
# comes from rustup (https://rustup.rs).
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
have qemu-storage-daemon || need+=(qemu-system-common)
have valgrind || need+=(valgrind)
have qemu-system-x86_64 || need+=(qemu-system-x86)
ls /boot/vmlinuz-*-cloud-amd64 >/dev/null 2>&1 || need+=(linux-image-cloud-amd64)
# busybox must be the static build: the guest's /init runs it with no libraries.
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
have fio || need+=(fio)
have mkfs.ext4 || need+=(e2fsprogs)
have blkdiscard || need+=(util-linux)
# ip (the tap test configures its interface in a namespace of its own).
have ip || need+=(iproute2)
have cpio || need+=(cpio)
have xz || need+=(xz-utils)
have zstd || need+=(zstd)
dpkg-query -W -f='${Status}' dpdk 2>/dev/null | grep -q 'install ok installed' || need+=(dpdk)
have dpdk-testpmd || need+=(dpdk-dev)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup first" >&2; exit 1; }

# Dask distributed for `vmirq sim sweep --engine dask` and its test, in a venv under the
# repository's target dir (no system pip): target/py/bin/python. Debian's python3 needs the
# python3-venv package for `python3 -m venv` (ensurepip), so a failed venv installs it.
cd "$(dirname "$0")/.."
py_env=target/py
dask_version=2026.8.0
if ! "$py_env/bin/python" -c "import distributed, sys; sys.exit(distributed.__version__ != '$dask_version')" 2>/dev/null; then
  rm -rf "$py_env"
  if ! command -v python3 >/dev/null || ! python3 -m venv "$py_env" 2>/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3 python3-venv
    rm -rf "$py_env"
    python3 -m venv "$py_env"
  fi
  "$py_env/bin/python" -m pip install -q --disable-pip-version-check "distributed==$dask_version"
fi
"$py_env/bin/python" -c 'import distributed; print("dask distributed", distributed.__version__)'
