//! The Linux guest through a device's lifecycle against `vmirq serve` and, for comparison,
//! qemu-storage-daemon: a read-only export; two queues with I/O on both; a warm reset of the
//! guest and then a second QEMU process against the same running backend (reset and
//! reconnect), with the data written before read back after each; `vmirq serve` killed and
//! restarted under fio (INFLIGHT_SHMFD). QEMU missing: a SKIPPED line.

mod guest;

use guest::lifecycle;
use guest::{counter, harness, identity, report, Kind, Served, RUN_TIMEOUT};
use std::io::Write as _;
use std::time::{Duration, Instant};
use vmirq_guest::{fio, interrupts, Backend, Harness, VhostUserBlk};

fn read_only(h: &Harness, mut served: Served, test: &str) {
    let machine = h
        .machine()
        .timeout(RUN_TIMEOUT)
        .disk(VhostUserBlk::new(served.backend.socket(), 1));
    let run = h
        .run(&machine, &lifecycle::read_only())
        .expect("start QEMU");
    assert!(
        run.ok(),
        "{}\n--- backend log:\n{}",
        run.diagnostics(),
        served.backend.log_text()
    );
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

/// The restart test kills the backend at least this many times while fio runs, and goes on
/// (up to MAX_KILLS) until a kill has found requests in flight.
const MIN_KILLS: usize = 2;
const MAX_KILLS: usize = 12;

/// `text` without ANSI colour sequences (`ESC [ ... m`, tracing's when stderr is a file too).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `resubmit=N` of the backend's "ring resumes from the inflight area" lines.
fn resumes(log: &str) -> Vec<u64> {
    plain(log)
        .lines()
        .filter(|l| l.contains("ring resumes from the inflight area"))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("resubmit="))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no resubmit= in {l:?}"))
        })
        .collect()
}

/// `vmirq serve` on an image file (O_DIRECT) is SIGKILLed under a guest running fio (4 KiB
/// random writes at QD 32 with crc32c verify), 2 to 12 times (until a kill has found requests
/// in flight), and started again on the same socket each time; QEMU
/// (`reconnect=1`) reconnects and hands the restarted backend its inflight area
/// (INFLIGHT_SHMFD). fio must end without an I/O or verify error, a re-read must verify, the
/// guest kernel must log no I/O error, and each restarted backend must log that its ring
/// resumed from the inflight area, at least one of them with requests to resubmit.
#[test]
fn backend_killed_under_fio_resumes_from_inflight() {
    let test = "backend_killed_under_fio_resumes_from_inflight";
    let Some(h) = harness(test) else { return };
    let place = guest::Place::new();
    // O_DIRECT needs a disk-backed directory (tmpfs refuses it on Debian 12's kernel).
    let image_dir = tempfile::Builder::new()
        .prefix("vmirq-e2e-")
        .tempdir_in("/var/tmp")
        .expect("image directory in /var/tmp");
    let image = image_dir.path().join("disk.img");
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(guest::DISK_MIB << 20))
        .expect("image file");
    let image_arg = image.display().to_string();
    let mut backend = Backend::vmirq_serve_logged(
        std::path::Path::new(env!("CARGO_BIN_EXE_vmirq")),
        &place.socket(),
        &["--image", &image_arg, "--direct", "--serial", guest::SERIAL],
        "info",
    )
    .expect("start vmirq serve");
    let disk = VhostUserBlk {
        reconnect_s: Some(1),
        ..VhostUserBlk::new(backend.socket(), 1)
    };
    let machine = h.machine().timeout(RUN_TIMEOUT).disk(disk);
    let mut vm = h
        .start(&machine, &lifecycle::backend_restart())
        .expect("start QEMU");
    assert!(
        vm.wait_until(Duration::from_secs(120), |t| t.started("fio")),
        "fio never started"
    );
    let mut logs = Vec::new();
    let mut per_kill: Vec<u64> = Vec::new();
    for kill in 1..=MAX_KILLS {
        if kill > MIN_KILLS && per_kill.iter().any(|&n| n > 0) {
            break;
        }
        // Kill while I/O flows through this process: its counters (SIGUSR1) show writes.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            backend.usr1();
            std::thread::sleep(Duration::from_millis(100));
            let written = counter(&plain(&backend.log_text()), "write_bytes");
            if written.last().is_some_and(|&b| b >= 256 << 10) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "kill {kill}: no writes reach the backend:\n{}",
                backend.log_text()
            );
        }
        if vm
            .transcript()
            .step("fio")
            .is_none_or(|s| s.status.is_some())
        {
            break;
        }
        backend.kill();
        logs.push(backend.log_text());
        backend.restart().expect("restart vmirq serve");
        // QEMU reconnects within its 1 s interval and starts the device again.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(&n) = resumes(&backend.log_text()).first() {
                per_kill.push(n);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "kill {kill}: the restarted backend never resumed a ring from the inflight \
                 area:\n{}",
                backend.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let run = vm.finish();
    let (last, clean) = backend.stop();
    assert!(clean, "{last}");
    logs.push(last);
    assert!(run.ok(), "{}", run.diagnostics());

    let jobs = fio::parse(run.output("fio")).expect("fio JSON");
    let blocks = (32u64 << 20) / 4096;
    assert_eq!(jobs[0].error, 0, "fio error");
    assert_eq!(jobs[0].write.total_ios, blocks, "writes");
    assert_eq!(jobs[0].read.total_ios, blocks, "verify reads");
    let reread = fio::parse(run.output("reread")).expect("fio JSON");
    assert_eq!((reread[0].error, reread[0].read.total_ios), (0, blocks));
    let dmesg = run.output("dmesg");
    for bad in ["I/O error", "blk_update_request", "critical"] {
        assert!(!dmesg.contains(bad), "guest kernel: {bad}\n{dmesg}");
    }

    assert!(
        per_kill.len() >= MIN_KILLS,
        "fio ended after {} kills: lengthen it",
        per_kill.len()
    );
    assert!(
        per_kill.iter().any(|&n| n > 0),
        "no kill found requests in flight: {per_kill:?}\n{}",
        plain(&logs.join("\n--- restarted\n"))
    );
    assert_eq!(
        counter(&plain(logs.last().expect("last log")), "errors"),
        vec![0],
        "{}",
        logs.last().expect("last log")
    );
    report(test, &run, None);
    let _ = writeln!(
        std::io::stderr(),
        "{test}: {} kills, requests resubmitted per restart: {per_kill:?}",
        per_kill.len()
    );
}
