//! The Linux guest through a device's lifecycle against `vmirq serve` and, for comparison,
//! qemu-storage-daemon: a read-only export; two queues with I/O on both; a warm reset of the
//! guest and then a second QEMU process against the same running backend (reset and
//! reconnect), with the data written before read back after each. QEMU missing: a SKIPPED
//! line.

mod guest;

use guest::lifecycle;
use guest::{counter, harness, identity, report, Kind, Served, RUN_TIMEOUT};
use vmirq_guest::{fio, interrupts, Harness, VhostUserBlk};

fn read_only(h: &Harness, mut served: Served, test: &str) {
    let machine = h
        .machine()
        .timeout(RUN_TIMEOUT)
        .disk(VhostUserBlk::new(served.backend.socket(), 1));
    let run = h
        .run(&machine, &lifecycle::read_only())
        .expect("start QEMU");
    assert!(run.ok(), "{}", run.diagnostics());
    let id = identity(&run);
    assert!(
        id.read_only,
        "the guest does not see a read-only disk: {id:?}"
    );
    assert!(run.output("write").contains("refused"));
    assert!(run.output("mkfs").contains("refused"));
    assert!(
        run.output("read").contains("nonzero=0\n"),
        "{}",
        run.output("read")
    );
    if served.kind == Kind::Vmirq {
        let (log, clean) = served.backend.stop();
        assert!(clean, "{log}");
        assert_eq!(
            counter(&log, "write_bytes"),
            vec![0],
            "a write reached the device: {log}"
        );
        assert!(counter(&log, "read_bytes")[0] >= 8 << 20, "{log}");
    }
    report(test, &run, None);
}

#[test]
fn read_only_export_refuses_writes() {
    let test = "read_only_export_refuses_writes";
    let Some(h) = harness(test) else { return };
    read_only(h, guest::vmirq(&["--read-only"]), test);
}

#[test]
fn qemu_storage_daemon_read_only() {
    let test = "qemu_storage_daemon_read_only";
    let Some(h) = harness(test) else { return };
    let Some(served) = guest::qsd(test, 1, true) else {
        return;
    };
    read_only(h, served, test);
}

fn two_queues(h: &Harness, mut served: Served, test: &str) {
    let machine = h
        .machine()
        .cpus(2)
        .timeout(RUN_TIMEOUT)
        .disk(VhostUserBlk::new(served.backend.socket(), 2));
    let run = h
        .run(&machine, &lifecycle::two_queues())
        .expect("start QEMU");
    assert!(run.ok(), "{}", run.diagnostics());
    assert_eq!(identity(&run).hw_queues, 2, "blk-mq hardware queues");
    let jobs = fio::parse(run.output("fio")).expect("fio JSON");
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        assert_eq!(job.error, 0);
        assert_eq!(job.write.total_ios, 512, "{job:?}");
        assert_eq!(job.read.total_ios, 512, "verify reads {job:?}");
    }
    for q in ["virtio0-req.0", "virtio0-req.1"] {
        let before = interrupts::total(run.output("irq-before"), q);
        let after = interrupts::total(run.output("irq-after"), q);
        assert!(
            after > before,
            "no interrupts on {q} during fio:\n{}",
            run.output("irq-after")
        );
    }
    if served.kind == Kind::Vmirq {
        let (log, clean) = served.backend.stop();
        assert!(clean, "{log}");
        let per_queue = counter(&log, "requests");
        assert_eq!(per_queue.len(), 2, "{log}");
        assert!(per_queue.iter().all(|&r| r >= 512), "a queue idle: {log}");
    }
    report(test, &run, None);
}

#[test]
fn two_queues_both_carry_io() {
    let test = "two_queues_both_carry_io";
    let Some(h) = harness(test) else { return };
    two_queues(h, guest::vmirq(&["--queues", "2"]), test);
}

#[test]
fn qemu_storage_daemon_two_queues() {
    let test = "qemu_storage_daemon_two_queues";
    let Some(h) = harness(test) else { return };
    let Some(served) = guest::qsd(test, 2, false) else {
        return;
    };
    two_queues(h, served, test);
}

fn reboot_and_reconnect(h: &Harness, mut served: Served, test: &str) {
    let disk = VhostUserBlk::new(served.backend.socket(), 1);
    let machine = h.machine().boots(2).timeout(RUN_TIMEOUT).disk(disk.clone());
    let first = h.run(&machine, &lifecycle::reboot()).expect("start QEMU");
    assert!(first.ok(), "{}", first.diagnostics());
    let t = &first.transcript;
    assert_eq!(
        (t.boots.len(), t.reboots),
        (2, 1),
        "{}",
        first.diagnostics()
    );
    assert!(t.step_in(1, "write").is_some_and(|s| s.ok()));
    assert!(t.step_in(2, "reread").is_some_and(|s| s.ok()));
    assert_eq!(identity(&first).sectors, guest::DISK_MIB << 11);
    assert!(
        served.backend.running(),
        "the backend died with the first QEMU"
    );

    let machine = h.machine().timeout(RUN_TIMEOUT).disk(disk);
    let second = h
        .run(&machine, &lifecycle::reconnect())
        .expect("start QEMU again");
    assert!(second.ok(), "{}", second.diagnostics());
    for run in [&first, &second] {
        let reread = run.transcript.steps.iter().rfind(|s| s.name == "reread");
        let jobs = fio::parse(&reread.expect("reread").output).expect("fio JSON");
        assert_eq!((jobs[0].error, jobs[0].read.total_ios), (0, 1024));
    }
    if served.kind == Kind::Vmirq {
        let (log, clean) = served.backend.stop();
        assert!(clean, "{log}");
        assert_eq!(counter(&log, "errors"), vec![0], "{log}");
    }
    report(test, &first, None);
    report(&format!("{test} (reconnect)"), &second, None);
}

#[test]
fn reboot_and_reconnect_keep_the_data() {
    let test = "reboot_and_reconnect_keep_the_data";
    let Some(h) = harness(test) else { return };
    reboot_and_reconnect(h, guest::vmirq(&[]), test);
}

#[test]
fn qemu_storage_daemon_reboot_and_reconnect() {
    let test = "qemu_storage_daemon_reboot_and_reconnect";
    let Some(h) = harness(test) else { return };
    let Some(served) = guest::qsd(test, 1, false) else {
        return;
    };
    reboot_and_reconnect(h, served, test);
}
