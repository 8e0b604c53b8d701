//! Command lists of the lifecycle tests: read-only export, two queues, reboot and reconnect.

use super::{FIO_JOBS, IDENTITY};
use vmirq_guest::Script;

/// A read-only export: the guest must see it read-only, fail to write or make a filesystem,
/// and read the (zero-filled) disk back unchanged.
pub fn read_only() -> Script {
    Script::new()
        .wait_block("vda", 20)
        .step("identity", 10, IDENTITY)
        .step(
            "write",
            30,
            "if dd if=/dev/urandom of=/dev/vda bs=4k count=16 oflag=direct; then echo WRITTEN; \
             exit 1; fi; echo refused",
        )
        .step(
            "mkfs",
            60,
            "if mkfs.ext4 -q -F /dev/vda; then echo MADE; exit 1; fi; echo refused",
        )
        .step(
            "read",
            60,
            // md5sum rather than `tr | wc` over 8 MiB: a byte-at-a-time pipe took over 30 s under
            // TCG on a loaded machine.
            "z=$(dd if=/dev/zero bs=1M count=8 2>/dev/null | md5sum); \
             d=$(dd if=/dev/vda bs=1M count=8 iflag=direct 2>/dev/null | md5sum); \
             if [ \"$d\" = \"$z\" ]; then echo nonzero=0; else echo nonzero=some; fi",
        )
}

/// fio on both queues at once: two jobs, one pinned to each vCPU (blk-mq maps vCPU n to
/// queue n), random writes with verify on separate 2 MiB regions.
pub const FIO_TWO_QUEUES: &str = "fio --output-format=json --direct=1 --ioengine=libaio \
     --filename=/dev/vda --rw=randwrite --verify=crc32c --verify_fatal=1 --bs=4k --iodepth=8 \
     --size=2M --offset_increment=4M --numjobs=2 --cpus_allowed=0-1 \
     --cpus_allowed_policy=split --name=q";

/// Two queues, two vCPUs: interrupts of both queues before and after fio on both.
pub fn two_queues() -> Script {
    Script::new()
        .wait_block("vda", 20)
        .step("identity", 10, IDENTITY)
        .step("irq-before", 10, "cat /proc/interrupts")
        .step("fio", 240, FIO_TWO_QUEUES)
        .step("irq-after", 10, "cat /proc/interrupts")
}

/// The data of the reboot test: 4 MiB of random 4 KiB writes at QD 16, verified.
fn fio_data(reread: bool) -> String {
    let only = if reread { " --verify_only" } else { "" };
    format!(
        "fio --output-format=json --direct=1 --ioengine=libaio --filename=/dev/vda \
         --rw=randwrite --verify=crc32c --verify_fatal=1 --bs=4k --iodepth=16 --size=4M \
         --offset={}M --name=data{only}",
        FIO_JOBS.len() * 8
    )
}

/// First QEMU process: boot 1 writes the data and resets the machine (the device is reset
/// and started again on the same vhost-user connection); boot 2 reads it back.
pub fn reboot() -> Script {
    Script::new()
        .wait_block("vda", 20)
        .on_boot(
            1,
            Script::new().step("write", 240, &fio_data(false)).reboot(),
        )
        .on_boot(
            2,
            Script::new()
                .step("identity", 10, IDENTITY)
                .step("reread", 240, &fio_data(true)),
        )
}

/// Second QEMU process against the same backend (a new vhost-user connection): the data is
/// still there.
pub fn reconnect() -> Script {
    Script::new()
        .wait_block("vda", 20)
        .step("reread", 240, &fio_data(true))
}

/// fio of the restart test: 4 KiB random writes at QD 32 over 8 MiB, each block verified
/// (crc32c) after the writes; long enough under TCG for the backend to be killed several times while
/// it runs.
pub const FIO_RESTART: &str = "fio --output-format=json --direct=1 --ioengine=libaio \
     --filename=/dev/vda --rw=randwrite --verify=crc32c --verify_fatal=1 --bs=4k \
     --iodepth=32 --size=32M --name=restart";

/// The backend is killed and restarted while `fio` runs; then a separate fio re-reads and
/// verifies the region, and the kernel's messages are printed.
pub fn backend_restart() -> Script {
    Script::new()
        .wait_block("vda", 20)
        .step("fio", 240, FIO_RESTART)
        .step("reread", 120, &format!("{FIO_RESTART} --verify_only"))
        .step("dmesg", 10, "dmesg")
}
