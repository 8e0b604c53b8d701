#!/usr/bin/env bash
# Builds vmirq's test guest from the host's Debian packages and caches it:
#   kernel       /boot/vmlinuz-<release> (package linux-image-cloud-amd64: virtio as modules)
#   initramfs    busybox-static, the virtio_pci / virtio_blk / virtio_net / qemu_fw_cfg modules in load
#                order, fio, mkfs.ext4 and e2fsck (e2fsprogs), blkdiscard (util-linux), each
#                with the shared libraries ldd names, and init.sh as /init.
# Usage: build-initramfs.sh CACHE_DIR
# Prints the directory holding `vmlinuz`, `initramfs.cpio` and `manifest` (the package
# versions) on its last line of stdout. The directory's name carries a key over the package
# versions, the input files and these scripts, so an upgraded package or an edited /init builds
# a new guest and a cached one is reused otherwise (about 1 s to check, ~3 s to build).
# Environment: VMIRQ_GUEST_KERNEL=<release> picks a kernel other than the newest
# /boot/vmlinuz-*-cloud-amd64 (any kernel with virtio_pci/virtio_blk as modules or built in).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${1:?usage: build-initramfs.sh CACHE_DIR}"
init_script="${VMIRQ_GUEST_INIT:-$here/init.sh}"

die() { echo "build-initramfs: $*" >&2; exit 1; }

release="${VMIRQ_GUEST_KERNEL:-}"
if [ -z "$release" ]; then
  newest="$(ls /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$newest" ] || die "no /boot/vmlinuz-*-cloud-amd64 (Debian: apt-get install linux-image-cloud-amd64)"
  release="${newest#/boot/vmlinuz-}"
fi
kernel="/boot/vmlinuz-$release"
moddir="/lib/modules/$release"
[ -r "$kernel" ] || die "cannot read $kernel"
[ -r "$moddir/modules.dep" ] || die "no $moddir/modules.dep"

busybox="$(command -v busybox || true)"
[ -n "$busybox" ] || die "busybox not found (Debian: apt-get install busybox-static)"
if ldd "$busybox" >/dev/null 2>&1; then
  die "$busybox is dynamically linked (Debian: apt-get install busybox-static)"
fi
programs=()
for p in fio mkfs.ext4 mke2fs e2fsck blkdiscard; do
  path="$(PATH="$PATH:/sbin:/usr/sbin" command -v "$p" || true)"
  [ -n "$path" ] || die "$p not found (Debian: apt-get install fio e2fsprogs util-linux)"
  programs+=("$path")
done
modules=(virtio_pci virtio_blk virtio_net qemu_fw_cfg)

# The cache key: package versions (when dpkg knows them), every input file's size and mtime,
# and the contents of this script and of /init.
versions() {
  command -v dpkg-query >/dev/null || { echo "dpkg-query: none"; return; }
  for pkg in "linux-image-$release" busybox-static fio e2fsprogs util-linux; do
    echo "$pkg $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo '?')"
  done
}
libraries() {
  for p in "${programs[@]}"; do
    ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
  done | sort -u
}
key="$( {
  versions
  echo "$release"
  stat -L -c '%n %s %Y' "$kernel" "$busybox" "${programs[@]}" $(libraries)
  cat "${BASH_SOURCE[0]}" "$init_script"
} | sha256sum | cut -c1-16)"
out="$cache/guest-$release-$key"
if [ -f "$out/initramfs.cpio" ] && [ -f "$out/vmlinuz" ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,mnt,etc,lib/modules}
cp "$busybox" "$root/bin/busybox"
cp "$init_script" "$root/init"
chmod 755 "$root/init" "$root/bin/busybox"
[ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$root/etc/"

# Programs and their libraries, each at the path ldd resolved (RUNPATHs keep working).
copy_file() {
  mkdir -p "$root$(dirname "$1")"
  cp -L "$1" "$root$1"
}
for p in "${programs[@]}"; do
  copy_file "$p"
done
for lib in $(libraries); do copy_file "$lib"; done

# Modules: each wanted module after its dependencies (modules.dep order), decompressed.
declare -A seen=()
order=()
add_module() { # $1: path relative to $moddir
  [ -n "${seen[$1]:-}" ] && return
  seen[$1]=1
  local deps
  deps="$(awk -v m="$1:" '$1 == m { $1 = ""; print }' "$moddir/modules.dep")"
  for d in $deps; do add_module "$d"; done
  order+=("$1")
}
for m in "${modules[@]}"; do
  rel="$(awk -v m="$m" '{ f = $1; sub(/:$/, "", f); n = f; sub(/.*\//, "", n); sub(/\.ko(\.(xz|zst|gz))?$/, "", n); gsub(/-/, "_", n); if (n == m) { print f; exit } }' "$moddir/modules.dep")"
  if [ -z "$rel" ]; then
    grep -q "/$m.ko" "$moddir/modules.builtin" 2>/dev/null && continue
    die "module $m is neither in $moddir/modules.dep nor built in"
  fi
  add_module "$rel"
done
: >"$root/lib/modules/load-order"
for rel in "${order[@]}"; do
  name="$(basename "$rel")"
  case "$name" in
    *.ko.xz) xz -dc "$moddir/$rel" >"$root/lib/modules/${name%.xz}" ;;
    *.ko.zst) zstd -qdc "$moddir/$rel" >"$root/lib/modules/${name%.zst}" ;;
    *.ko.gz) gzip -dc "$moddir/$rel" >"$root/lib/modules/${name%.gz}" ;;
    *) cp "$moddir/$rel" "$root/lib/modules/$name" ;;
  esac
  echo "${name%.ko*}.ko" >>"$root/lib/modules/load-order"
done

# An uncompressed archive: QEMU hands it over by fw_cfg DMA and the kernel copies it, which
# under TCG is faster than decompressing ~80 MiB (fio's libraries).
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$tmp/initramfs.cpio"
cp "$kernel" "$tmp/vmlinuz"
{
  echo "kernel $release"
  versions
  echo "modules ${order[*]}"
  echo "files $(find "$root" -type f | wc -l), $(du -sh "$root" | cut -f1)"
} >"$tmp/manifest"
mkdir "$tmp/guest"
mv "$tmp/vmlinuz" "$tmp/initramfs.cpio" "$tmp/manifest" "$tmp/guest/"
# Publish atomically; a concurrent build of the same key may have won the race (then the
# rename fails and the trap removes this copy).
mv -T "$tmp/guest" "$out" 2>/dev/null || true
# Guests of other keys are stale (an upgraded package or edited script).
for old in "$cache"/guest-*; do
  [ "$old" = "$out" ] || rm -rf "$old"
done
echo "$out"
