#!/bin/busybox sh
# /init of vmirq's test guest (see README.md next to this file). Loads the virtio and fw_cfg
# modules, reads the command list QEMU passes as fw_cfg file opt/vmirq/script, runs it
# and powers off. Kernel messages go to ttyS0; the protocol goes to ttyS1, one line each:
#   @@VMIRQ HELLO                       the host answers `boot=<n>` on the same port
#   @@VMIRQ READY boot=<n> uptime=<s>   the guest is up; the command list starts
#   @@VMIRQ BEGIN <i> <name>            around each step's output (stdout and stderr)
#   @@VMIRQ END <i> rc=<status>         (124 when the step's timeout killed it)
#   @@VMIRQ REBOOT                      the command list asked for a warm reset
#   @@VMIRQ DONE                        the list ran to its end; the guest powers off
# The command list is shell sourced by this script: `step NAME TIMEOUT_S 'command'` runs one
# step; `$VMIRQ_BOOT` is 1 on the first boot of the QEMU process and counts warm resets;
# `guest_reboot` resets the machine.
/bin/busybox --install -s /bin
# The real programs (fio, mkfs.ext4, e2fsck, blkdiscard) live in /usr/bin and /usr/sbin. Debian's
# busybox sh runs its own applet for a bare command name that is one (blkdiscard, mke2fs), so
# command lists call those by path (/usr/sbin/blkdiscard).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp /mnt
mount -t tmpfs tmpfs /tmp

while read -r m; do
  insmod "/lib/modules/$m" || echo "vmirq-init: insmod $m failed" >/dev/ttyS0
done </lib/modules/load-order

stty -F /dev/ttyS1 raw -echo 2>/dev/null
exec 3>/dev/ttyS1

# Which boot of this QEMU process this is: the host answers HELLO with the count of HELLOs it
# has seen (a warm reset keeps the connection); without an answer in 10 s, 1.
echo "@@VMIRQ HELLO" >&3
VMIRQ_BOOT=1
if read -t 10 -r reply </dev/ttyS1; then
  case "$reply" in boot=[0-9]*) VMIRQ_BOOT=${reply#boot=} ;; esac
fi
export VMIRQ_BOOT

STEP=0
step() {
  STEP=$((STEP + 1))
  echo "@@VMIRQ BEGIN $STEP $1" >&3
  timeout "$2" sh -c "$3" >&3 2>&3 </dev/null
  echo "@@VMIRQ END $STEP rc=$?" >&3
}
guest_reboot() {
  echo "@@VMIRQ REBOOT" >&3
  sync
  reboot -f
}

SCRIPT=/sys/firmware/qemu_fw_cfg/by_name/opt/vmirq/script/raw
echo "@@VMIRQ READY boot=$VMIRQ_BOOT uptime=$(cut -d' ' -f1 /proc/uptime)" >&3
if [ -r "$SCRIPT" ]; then
  cp "$SCRIPT" /tmp/script
  . /tmp/script
else
  echo "@@VMIRQ BEGIN 1 script" >&3
  echo "no command list at $SCRIPT" >&3
  echo "@@VMIRQ END 1 rc=127" >&3
fi
echo "@@VMIRQ DONE" >&3
sync
poweroff -f
