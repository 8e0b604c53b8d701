//! Experiment: kill `vmirq serve` under a guest running fio and restart it on the same socket,
//! with QEMU's chardev `reconnect=1`. Prints what the guest saw (fio's result, the kernel's
//! messages) and what QEMU said. Without the backend's INFLIGHT_SHMFD support, requests that
//! were in flight when it died may be lost or redone; this shows which.
//!
//! `cargo run -p vmirq-guest --example backend_restart -- target/release/vmirq [KILL_AFTER_MS]`

use std::path::PathBuf;
use std::time::Duration;
use vmirq_guest::{Backend, Harness, Script, VhostUserBlk};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let vmirq = PathBuf::from(
        args.next()
            .ok_or("usage: backend_restart VMIRQ [KILL_AFTER_MS]")?,
    );
    let kill_after = Duration::from_millis(args.next().map_or(Ok(2000), |a| a.parse())?);
    let harness = Harness::prepare()?;
    println!("guest under {}", harness.accel);
    let dir = tempfile::tempdir()?;
    let image = dir.path().join("disk.img");
    std::fs::File::create(&image)?.set_len(64 << 20)?;
    let sock = dir.path().join("blk.sock");
    let image_arg = image.display().to_string();
    let mut backend = Backend::vmirq_serve(&vmirq, &sock, &["--image", &image_arg])?;
    let disk = VhostUserBlk {
        reconnect_s: Some(1),
        ..VhostUserBlk::new(&sock, 1)
    };
    let machine = harness
        .machine()
        .disk(disk)
        .timeout(Duration::from_secs(300));
    let script = Script::new()
        .wait_block("vda", 20)
        .step(
            "fio",
            200,
            "fio --name=w --filename=/dev/vda --direct=1 --ioengine=libaio --rw=randwrite \
             --bs=4k --iodepth=32 --size=16M --loops=4 --verify=crc32c --verify_fatal=1 \
             --output-format=json",
        )
        .step(
            "reread",
            200,
            "fio --name=w --filename=/dev/vda --direct=1 --ioengine=libaio --rw=randwrite \
             --bs=4k --iodepth=32 --size=16M --verify=crc32c --verify_only --output-format=json",
        )
        .step("dmesg", 10, "dmesg | tail -n 30");
    let mut vm = harness.start(&machine, &script)?;
    if !vm.wait_until(Duration::from_secs(120), |t| t.started("fio")) {
        println!("fio never started");
    }
    std::thread::sleep(kill_after);
    println!("{:.1} s: killing the backend", vm.elapsed().as_secs_f64());
    backend.kill();
    std::thread::sleep(Duration::from_millis(500));
    backend.restart()?;
    println!("{:.1} s: backend restarted", vm.elapsed().as_secs_f64());
    let run = vm.finish();
    println!(
        "QEMU {} after {:.1} s, list done: {}",
        run.exit,
        run.wall.as_secs_f64(),
        run.transcript.done
    );
    for s in &run.transcript.steps {
        let summary = match vmirq_guest::fio::parse(&s.output) {
            Ok(jobs) => jobs
                .iter()
                .map(|j| {
                    format!(
                        "{}: error {} writes {} reads {}",
                        j.jobname, j.error, j.write.total_ios, j.read.total_ios
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(_) => vmirq_guest::qemu::tail(&s.output, 30),
        };
        println!(
            "--- step {} status {:?} ({:.1} s)\n{summary}",
            s.name,
            s.status,
            s.elapsed().unwrap_or_default().as_secs_f64()
        );
    }
    println!(
        "--- console tail\n{}",
        vmirq_guest::qemu::tail(&run.console, 20)
    );
    println!(
        "--- QEMU stderr\n{}",
        vmirq_guest::qemu::tail(&run.qemu_stderr, 20)
    );
    let (log, _) = backend.stop();
    println!(
        "--- backend log (after restart)\n{}",
        vmirq_guest::qemu::tail(&log, 20)
    );
    Ok(())
}
