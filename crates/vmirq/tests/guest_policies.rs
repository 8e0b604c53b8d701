//! The Linux virtio_blk driver against `vmirq serve` under each moderation policy and with
//! kick polling, and the same check list against qemu-storage-daemon (the harness is fair if
//! the peer passes it too). One guest boot per case runs the compact check list of
//! `guest/mod.rs`: capacity and serial, fio random writes with verify at 4 KiB / 128 KiB and
//! QD 1 / 32 and a re-read verify, ext4 with a clean fsck, discard and write-zeroes. QEMU
//! missing: a SKIPPED line.

mod guest;

use guest::{assert_check_list, check_list, counter, harness, report, Kind, RUN_TIMEOUT};
use vmirq_guest::VhostUserBlk;

/// Boot the check list against `vmirq serve` with `args` and check it and the backend's
/// counters.
fn vmirq_case(test: &str, args: &[&str]) {
    let Some(h) = harness(test) else { return };
    let mut served = guest::vmirq(args);
    let machine = h
        .machine()
        .timeout(RUN_TIMEOUT)
        .disk(VhostUserBlk::new(served.backend.socket(), 1));
    let run = h.run(&machine, &check_list()).expect("start QEMU");
    let (log, clean) = served.backend.stop();
    assert_check_list(&run, Kind::Vmirq);
    assert!(clean, "vmirq serve did not exit cleanly:\n{log}");
    let requests: u64 = counter(&log, "requests").iter().sum();
    let errors: u64 = counter(&log, "errors").iter().sum();
    assert_eq!(errors, 0, "backend counted errors:\n{log}");
    // At least fio's: each block written, verified, and verified again by the re-read.
    let fio_blocks: u64 = guest::FIO_JOBS
        .iter()
        .map(|(_, bs, _, _, size)| (u64::from(*size) << 20) / u64::from(*bs))
        .sum();
    assert!(
        requests >= 3 * fio_blocks,
        "too few requests for the list: {log}"
    );
    report(test, &run, Some(requests));
}

macro_rules! policy_tests {
    ($($name:ident: [$($arg:expr),*];)*) => {$(
        #[test]
        fn $name() {
            vmirq_case(stringify!($name), &[$($arg),*]);
        }
    )*};
}

policy_tests! {
    moderation_none: ["--moderation", "none"];
    moderation_count: ["--moderation", "count"];
    moderation_vic: ["--moderation", "vic"];
    moderation_ipi_gap: ["--moderation", "ipi-gap"];
    moderation_dim: ["--moderation", "dim"];
    moderation_spdk: ["--moderation", "spdk"];
    moderation_budget: ["--moderation", "budget"];
    vic_with_kick_polling: ["--moderation", "vic", "--poll", "kvm"];
}

#[test]
fn qemu_storage_daemon_passes_the_same_list() {
    let test = "qemu_storage_daemon_passes_the_same_list";
    let Some(h) = harness(test) else { return };
    let Some(served) = guest::qsd(test, 1, false) else {
        return;
    };
    let machine = h
        .machine()
        .timeout(RUN_TIMEOUT)
        .disk(VhostUserBlk::new(served.backend.socket(), 1));
    let run = h.run(&machine, &check_list()).expect("start QEMU");
    assert_check_list(&run, Kind::Qsd);
    report(test, &run, None);
}
