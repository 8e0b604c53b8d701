//! Shared by the Linux-guest tests: the harness (built once per test binary), the two kinds of
//! backend (`vmirq serve` and qemu-storage-daemon with a file node), and the compact check
//! list one boot runs (identity, fio write+verify and re-read, ext4 + fsck, discard and
//! write-zeroes, interrupts) with the assertions on its output.
#![allow(dead_code, missing_docs)]

pub mod lifecycle;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use std::time::Duration;
use vmirq_guest::{fio, interrupts, Backend, Run, Script};

/// Disk size every test serves.
pub const DISK_MIB: u64 = 64;
/// Serial number vmirq serve is given.
pub const SERIAL: &str = "vmirq-guest-e2e";
/// Bound of one QEMU run (TCG on a busy 2-core machine).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(300);

pub use vmirq_guest::{shared_harness as harness, skip};

/// A socket path in a fresh directory.
pub struct Place {
    pub dir: tempfile::TempDir,
}

impl Place {
    pub fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("vmirq-e2e-")
                .tempdir()
                .expect("tempdir"),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("blk.sock")
    }
}

/// The device side of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `vmirq serve --ram` with these extra arguments.
    Vmirq,
    /// qemu-storage-daemon exporting a file in /dev/shm.
    Qsd,
}

/// A started backend with what it serves.
pub struct Served {
    pub kind: Kind,
    pub backend: Backend,
    pub place: Place,
    /// qemu-storage-daemon's image file.
    _image: Option<tempfile::NamedTempFile>,
}

/// `vmirq serve --ram 64M --serial SERIAL` plus `args`.
pub fn vmirq(args: &[&str]) -> Served {
    let place = Place::new();
    let size = format!("{DISK_MIB}M");
    let mut all = vec!["--ram", size.as_str(), "--serial", SERIAL];
    all.extend_from_slice(args);
    let backend = Backend::vmirq_serve(
        Path::new(env!("CARGO_BIN_EXE_vmirq")),
        &place.socket(),
        &all,
    )
    .expect("start vmirq serve");
    Served {
        kind: Kind::Vmirq,
        backend,
        place,
        _image: None,
    }
}

/// qemu-storage-daemon on a zero-filled file, or `None` after a SKIPPED line when it is not
/// installed.
pub fn qsd(test: &str, queues: u16, read_only: bool) -> Option<Served> {
    let Some(exe) = vmirq_guest::process::find_program("qemu-storage-daemon") else {
        skip(
            test,
            "qemu-storage-daemon is not installed (Debian: qemu-system-common)",
        );
        return None;
    };
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let image = tempfile::Builder::new()
        .prefix("vmirq-e2e-")
        .suffix(".img")
        .tempfile_in(dir)
        .expect("image file");
    image.as_file().set_len(DISK_MIB << 20).expect("size image");
    let place = Place::new();
    let backend =
        Backend::qemu_storage_daemon(&exe, &place.socket(), image.path(), queues, read_only)
            .expect("start qemu-storage-daemon");
    Some(Served {
        kind: Kind::Qsd,
        backend,
        place,
        _image: Some(image),
    })
}

/// fio jobs of the write/verify checks: (name, block size, queue depth, offset MiB, size MiB).
pub const FIO_JOBS: [(&str, u32, u32, u32, u32); 4] = [
    ("bs4k-qd1", 4096, 1, 0, 1),
    ("bs4k-qd32", 4096, 32, 4, 2),
    ("bs128k-qd1", 131_072, 1, 8, 4),
    ("bs128k-qd32", 131_072, 32, 16, 8),
];

/// fio over FIO_JOBS: random writes, each block verified (crc32c header) after its job's
/// writes; with `reread`, nothing is written and every block is read back and verified in
/// the same random order (a separate fio process: the data came from the device, not fio's
/// memory).
pub fn fio_command(reread: bool) -> String {
    let mut cmd = String::from(
        "fio --output-format=json --direct=1 --ioengine=libaio --filename=/dev/vda \
         --rw=randwrite --verify=crc32c --verify_fatal=1 --stonewall",
    );
    if reread {
        cmd.push_str(" --verify_only");
    }
    for (name, bs, qd, off, size) in FIO_JOBS {
        cmd.push_str(&format!(
            " --name={name} --bs={bs} --iodepth={qd} --offset={off}M --size={size}M"
        ));
    }
    cmd
}

/// Identity of the disk as the guest sees it, one value a line: size in sectors, serial,
/// discard and write-zeroes limits, read-only flag, number of blk-mq hardware queues.
pub const IDENTITY: &str = "cat /sys/block/vda/size; cat /sys/block/vda/serial; echo; \
     cat /sys/block/vda/queue/discard_max_bytes /sys/block/vda/queue/write_zeroes_max_bytes \
     /sys/block/vda/ro; ls /sys/block/vda/mq | wc -l";

/// The disk's identity as parsed from the `identity` step.
#[derive(Debug, PartialEq, Eq)]
pub struct Identity {
    pub sectors: u64,
    pub serial: String,
    pub discard_max: u64,
    pub write_zeroes_max: u64,
    pub read_only: bool,
    pub hw_queues: u64,
}

pub fn identity(run: &Run) -> Identity {
    let out = run.output("identity");
    let l: Vec<&str> = out.lines().map(str::trim).collect();
    let num = |i: usize| -> u64 {
        l.get(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("identity line {i} in {out:?}"))
    };
    Identity {
        sectors: num(0),
        serial: l.get(1).copied().unwrap_or("").to_owned(),
        discard_max: num(2),
        write_zeroes_max: num(3),
        read_only: num(4) == 1,
        hw_queues: num(5),
    }
}

/// ext4 on the whole disk: make it (mke2fs also discards the device), write a 4 MiB random
/// file and 50 small ones, sync, unmount, `e2fsck -fn` (must be clean), mount again and check
/// the big file's checksum.
pub const EXT4: &str = "mkfs.ext4 -q -F /dev/vda && mount /dev/vda /mnt && \
     dd if=/dev/urandom of=/mnt/big bs=1M count=4 2>/dev/null && mkdir /mnt/d && \
     for i in $(seq 1 50); do echo file $i > /mnt/d/f$i; done && \
     sha256sum /mnt/big > /tmp/big.sum && sync && umount /mnt && \
     e2fsck -fn /dev/vda && echo fsck=clean && mount -o ro /dev/vda /mnt && \
     sha256sum -c /tmp/big.sum && [ $(ls /mnt/d | wc -l) = 50 ] && umount /mnt";

/// DISCARD of 1 MiB at 40 MiB; 2 MiB of random data at 41 MiB, then WRITE_ZEROES (`blkdiscard
/// -z`) of its first MiB: that MiB must read back as zeroes, the next one must not.
pub const DISCARD: &str = "/usr/sbin/blkdiscard -o 40M -l 1M /dev/vda && \
     dd if=/dev/urandom of=/dev/vda bs=1M seek=41 count=2 oflag=direct 2>/dev/null && \
     /usr/sbin/blkdiscard -z -o 41M -l 1M /dev/vda && \
     echo zeroed_nonzero=$(dd if=/dev/vda bs=1M skip=41 count=1 iflag=direct 2>/dev/null | tr -d '\\000' | wc -c) && \
     echo kept_nonzero=$(dd if=/dev/vda bs=1M skip=42 count=1 iflag=direct 2>/dev/null | tr -d '\\000' | wc -c)";

/// The compact check list one boot runs.
pub fn check_list() -> Script {
    Script::new()
        .wait_block("vda", 20)
        .step("identity", 10, IDENTITY)
        .step("fio-write", 240, &fio_command(false))
        .step("fio-reread", 240, &fio_command(true))
        .step("ext4", 240, EXT4)
        .step("discard", 60, DISCARD)
        .step("interrupts", 10, "cat /proc/interrupts")
}

/// Check the fio step `step`: every job ran without error and moved exactly its region
/// (writes and their verify reads, or only reads for the re-read).
pub fn assert_fio(run: &Run, step: &str, reread: bool) {
    let jobs = fio::parse(run.output(step))
        .unwrap_or_else(|e| panic!("{step}: no fio JSON ({e})\n{}", run.diagnostics()));
    assert_eq!(jobs.len(), FIO_JOBS.len(), "{step}: jobs");
    for ((name, bs, _, _, size), job) in FIO_JOBS.iter().zip(&jobs) {
        let blocks = (u64::from(*size) << 20) / u64::from(*bs);
        assert_eq!(job.jobname, *name);
        assert_eq!(job.error, 0, "{step} {name}: fio error");
        // (With --verify_only fio still counts the writes it replays without issuing them.)
        if !reread {
            assert_eq!(job.write.total_ios, blocks, "{step} {name}: writes");
        }
        assert_eq!(job.read.total_ios, blocks, "{step} {name}: verify reads");
    }
}

/// Everything the check list must show, on top of [`Run::ok`].
pub fn assert_check_list(run: &Run, kind: Kind) {
    assert!(run.ok(), "{}", run.diagnostics());
    let id = identity(run);
    assert_eq!(id.sectors, DISK_MIB << 11, "capacity in 512-byte sectors");
    if kind == Kind::Vmirq {
        assert_eq!(id.serial, SERIAL);
    }
    assert!(id.discard_max > 0 && id.write_zeroes_max > 0, "{id:?}");
    assert!(!id.read_only && id.hw_queues == 1, "{id:?}");
    assert_fio(run, "fio-write", false);
    assert_fio(run, "fio-reread", true);
    assert!(
        run.output("ext4").contains("fsck=clean"),
        "{}",
        run.output("ext4")
    );
    assert!(run.output("ext4").contains("/mnt/big: OK"));
    let discard = run.output("discard");
    assert!(
        discard.contains("zeroed_nonzero=0\n"),
        "write-zeroes left data: {discard}"
    );
    assert!(
        discard.contains("kept_nonzero=") && !discard.contains("kept_nonzero=0\n"),
        "write-zeroes went past its range: {discard}"
    );
    let irqs = interrupts::total(run.output("interrupts"), "virtio0-req");
    assert!(
        irqs > 0,
        "no completion interrupts:\n{}",
        run.output("interrupts")
    );
}

/// One line for the test log: what ran, how long, interrupts per request.
pub fn report(test: &str, run: &Run, requests: Option<u64>) {
    let irqs = interrupts::total(run.output("interrupts"), "virtio0-req");
    let per_req = requests.filter(|&r| r > 0).map_or_else(String::new, |r| {
        format!(", {:.3} interrupts/request", irqs as f64 / r as f64)
    });
    let steps: Vec<String> = run
        .transcript
        .steps
        .iter()
        .map(|s| {
            format!(
                "{} {:.1}",
                s.name,
                s.elapsed().unwrap_or_default().as_secs_f64()
            )
        })
        .collect();
    let _ = writeln!(
        std::io::stderr(),
        "{test}: {} boot {:.1} s, run {:.1} s, {irqs} interrupts{per_req}; steps (s): {}",
        run.accel,
        run.boot_time().unwrap_or_default().as_secs_f64(),
        run.wall.as_secs_f64(),
        steps.join(", ")
    );
}

/// Sum of `key=N` over the `queue Q:` lines vmirq serve prints on exit.
pub fn counter(log: &str, key: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.starts_with("queue "))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}
