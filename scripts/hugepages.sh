#!/usr/bin/env bash
# Prepares 2 MiB hugepages for DPDK's testpmd (the network peer and reference client):
# reserves PAGES of them (default 1024 = 2 GiB; never lowers an existing reservation) and
# mounts hugetlbfs at /dev/hugepages unless one is mounted. Needs root. Says what it could not
# do and exits 1 then; testpmd's vhost peer still runs without hugepages (--no-huge), the
# virtio-user reference client does not.
# Usage: scripts/hugepages.sh [PAGES]
set -euo pipefail
pages=${1:-1024}
ok=1
have=$(cat /proc/sys/vm/nr_hugepages)
if [ "$have" -lt "$pages" ]; then
  if ! (echo "$pages" > /proc/sys/vm/nr_hugepages) 2>/dev/null; then
    echo "hugepages: cannot write /proc/sys/vm/nr_hugepages (needs root)" >&2
    ok=0
  fi
  have=$(cat /proc/sys/vm/nr_hugepages)
  if [ "$have" -lt "$pages" ]; then
    echo "hugepages: only $have of $pages pages reserved (not enough contiguous memory?)" >&2
  fi
fi
if [ "$have" -eq 0 ]; then
  ok=0
fi
if ! awk '$3 == "hugetlbfs" { found = 1 } END { exit !found }' /proc/mounts; then
  if ! { mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages; } 2>/dev/null; then
    echo "hugepages: cannot mount hugetlbfs at /dev/hugepages (needs root)" >&2
    ok=0
  fi
fi
mount_point=$(awk '$3 == "hugetlbfs" { print $2; exit }' /proc/mounts)
free=$(awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo)
echo "hugepages: $have reserved, $free free, hugetlbfs at ${mount_point:-nowhere}"
[ "$ok" = 1 ]
