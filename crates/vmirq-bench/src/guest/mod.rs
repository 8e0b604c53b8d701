//! `vmirq bench --guest`: fio inside a real Linux guest (vmirq-guest: Debian's kernel, the
//! Linux virtio_blk driver, QEMU's vhost-user-blk frontend) against each target: `vmirq serve`
//! with its defaults, `vmirq serve` with vIC moderation and kick polling, and
//! qemu-storage-daemon, all serving the same in-memory file. Per workload the guest reads
//! `/proc/interrupts` before and after fio, so each run gives IOPS and completion interrupts
//! per I/O as the guest counted them. Targets are interleaved (order rotated each repetition);
//! IOPS are compared as ratios to the peer within the same repetition. Under TCG (when KVM
//! cannot run a Linux guest) the absolute numbers are an emulator's, not hardware's: the
//! report says which accelerator ran and the ratios and interrupt counts are what to read.

mod table;

pub use table::render;

use crate::error::Result;
use crate::machine::{git_revision, Machine};
use crate::stats::{as_f64, ratio, Spread};
use crate::target::{find_on_path, DiskFile, TargetSpec};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vmirq_guest::{fio, interrupts, Backend, Harness, Run, Script, VhostUserBlk};

/// Size of the disk file the guest sees.
pub const DISK_BYTES: u64 = 128 << 20;

/// One fio job the guest runs against every target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Short name (`randread-4k-qd1`).
    pub name: &'static str,
    /// fio `--rw`.
    pub rw: &'static str,
    /// Block size in bytes.
    pub bs: u32,
    /// fio `--iodepth`.
    pub qd: u32,
}

/// The workload set: latency-bound (QD 1), throughput (QD 32) reads, and writes.
pub const WORKLOADS: [Workload; 3] = [
    Workload {
        name: "randread-4k-qd1",
        rw: "randread",
        bs: 4096,
        qd: 1,
    },
    Workload {
        name: "randread-4k-qd32",
        rw: "randread",
        bs: 4096,
        qd: 32,
    },
    Workload {
        name: "randwrite-4k-qd32",
        rw: "randwrite",
        bs: 4096,
        qd: 32,
    },
];

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Targets, in the order of the first repetition.
    pub targets: Vec<TargetSpec>,
    /// Repetitions (one guest boot per target each).
    pub repetitions: u32,
    /// Seconds of each fio job.
    pub runtime_s: u32,
    /// The `vmirq` executable providing `serve`.
    pub vmirq_exe: PathBuf,
    /// The command line, for the report.
    pub command: String,
}

impl Options {
    /// The default targets: vmirq's defaults, vIC with KVM-style kick polling, and the peer.
    #[must_use]
    pub fn default_targets() -> Vec<TargetSpec> {
        ["vmirq", "vmirq:vic+kvm", "qemu-storage-daemon"]
            .iter()
            .filter_map(|t| t.parse().ok())
            .collect()
    }
}

/// One fio job in one guest boot.
#[derive(Debug, Clone, Serialize)]
pub struct GuestRun {
    /// Repetition (0-based).
    pub rep: u32,
    /// I/Os per second fio measured.
    pub iops: f64,
    /// I/Os fio completed.
    pub ios: u64,
    /// Completion interrupts of the disk's queues during the job (`virtio0-req.*`).
    pub interrupts: u64,
    /// `interrupts / ios`.
    pub interrupts_per_io: f64,
}

/// One target × workload over the repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct GuestCell {
    /// Target name.
    pub target: String,
    /// The workload.
    pub workload: Workload,
    /// IOPS over repetitions.
    pub iops: Spread,
    /// Interrupts per I/O over repetitions.
    pub interrupts_per_io: Spread,
    /// IOPS divided by the peer's in the same repetition (absent for the peer or without it).
    pub iops_vs_peer: Option<Spread>,
    /// The runs.
    pub runs: Vec<GuestRun>,
}

/// The whole `--guest` report (`--json` writes it).
#[derive(Debug, Clone, Serialize)]
pub struct GuestReport {
    /// Source revision.
    pub revision: String,
    /// The host.
    pub machine: Machine,
    /// The command line.
    pub command: String,
    /// `kvm` or `tcg`.
    pub accel: vmirq_guest::Accel,
    /// Why that accelerator.
    pub accel_reason: String,
    /// What the numbers are: hardware-like (KVM) or an emulator's (TCG).
    pub timing_note: String,
    /// The guest's kernel release.
    pub guest_kernel: String,
    /// Host seconds from QEMU's start to the guest's `/init` running the list, per boot.
    pub boot_s: Spread,
    /// Repetitions.
    pub repetitions: u32,
    /// Seconds of each fio job.
    pub runtime_s: u32,
    /// One per target × workload.
    pub cells: Vec<GuestCell>,
    /// What went wrong or was left out.
    pub notices: Vec<String>,
    /// Wall time of the whole bench.
    pub wall_s: f64,
}

impl GuestReport {
    /// The report as pretty JSON.
    ///
    /// # Errors
    /// Serialisation fails (not expected for these types).
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }
}

/// The command list of one boot: wait for the disk, a second of warm-up, then per workload
/// `/proc/interrupts`, fio, and `/proc/interrupts` once more at the end.
#[must_use]
pub fn script(runtime_s: u32) -> Script {
    let fio = |rw: &str, bs: u32, qd: u32, secs: u32| {
        format!(
            "fio --output-format=json --name=w --filename=/dev/vda --direct=1 --ioengine=libaio \
             --rw={rw} --bs={bs} --iodepth={qd} --time_based --runtime={secs} --norandommap \
             --randrepeat=0"
        )
    };
    let limit = runtime_s.saturating_mul(4).saturating_add(60);
    let mut s =
        Script::new()
            .wait_block("vda", 20)
            .step("warmup", limit, &fio("randread", 4096, 8, 1));
    for w in &WORKLOADS {
        s = s
            .step(&format!("irq-{}", w.name), 10, "cat /proc/interrupts")
            .step(
                &format!("fio-{}", w.name),
                limit,
                &fio(w.rw, w.bs, w.qd, runtime_s),
            );
    }
    s.step("irq-end", 10, "cat /proc/interrupts")
}

/// The measurements of each workload in `run`, in [`WORKLOADS`] order.
///
/// # Errors
/// A step is missing or fio's output cannot be read (the message says which).
pub fn measurements(run: &Run, rep: u32) -> std::result::Result<Vec<GuestRun>, String> {
    let irq = |name: &str| interrupts::total(run.output(name), "virtio0-req");
    let mut out = Vec::new();
    for (i, w) in WORKLOADS.iter().enumerate() {
        let step = format!("fio-{}", w.name);
        let jobs = fio::parse(run.output(&step)).map_err(|e| format!("{step}: {e}"))?;
        let job = jobs.first().ok_or_else(|| format!("{step}: no job"))?;
        if job.error != 0 {
            return Err(format!("{step}: fio error {}", job.error));
        }
        let next = WORKLOADS
            .get(i + 1)
            .map_or_else(|| "irq-end".to_owned(), |n| format!("irq-{}", n.name));
        let interrupts = irq(&next).saturating_sub(irq(&format!("irq-{}", w.name)));
        let ios = job.total_ios();
        out.push(GuestRun {
            rep,
            iops: job.iops(),
            ios,
            interrupts,
            interrupts_per_io: ratio(as_f64(interrupts), as_f64(ios)),
        });
    }
    Ok(out)
}

/// What one repetition of one target produced.
struct Sample {
    target: TargetSpec,
    runs: Vec<GuestRun>,
    boot_s: f64,
}

/// Run the guest bench; progress lines go to `log`.
///
/// # Errors
/// The guest cannot be prepared (QEMU or a package missing) or the disk file not created.
pub fn run(opts: &Options, log: &dyn Fn(&str)) -> Result<GuestReport> {
    let started = Instant::now();
    let harness = Harness::prepare()?;
    log(&format!(
        "guest: Linux {} under {}",
        harness.image.kernel_release(),
        harness.accel
    ));
    let qsd = find_on_path("qemu-storage-daemon");
    let mut notices = Vec::new();
    let mut targets = opts.targets.clone();
    if qsd.is_none() {
        targets.retain(|t| !matches!(t, TargetSpec::Qsd | TargetSpec::QsdPoll));
        notices.push("qemu-storage-daemon is not installed: the peer is left out".to_owned());
    }
    targets.retain(|t| {
        let keep = *t != TargetSpec::Bare;
        if !keep {
            notices.push("bare has no guest path and is left out of --guest".to_owned());
        }
        keep
    });
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let disk = DiskFile::create(&dir, DISK_BYTES)?;
    let mut samples = Vec::new();
    for rep in 0..opts.repetitions {
        for k in 0..targets.len() {
            let target = targets[(k + rep as usize) % targets.len()];
            log(&format!("rep {}: {target}", rep + 1));
            match one_boot(&harness, opts, &target, qsd.as_deref(), disk.path(), rep) {
                Ok(s) => samples.push(s),
                Err(e) => {
                    let n = format!("rep {} {target}: {e}", rep + 1);
                    log(&n);
                    notices.push(n);
                }
            }
        }
    }
    let boots: Vec<f64> = samples.iter().map(|s| s.boot_s).collect();
    Ok(GuestReport {
        revision: git_revision(),
        machine: Machine::describe(qsd.as_deref()),
        command: opts.command.clone(),
        accel: harness.accel.accel,
        accel_reason: harness.accel.reason.clone(),
        timing_note: timing_note(harness.accel.accel),
        guest_kernel: harness.image.kernel_release().to_owned(),
        boot_s: Spread::of(&boots),
        repetitions: opts.repetitions,
        runtime_s: opts.runtime_s,
        cells: cells(&targets, &samples),
        notices,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

fn timing_note(accel: vmirq_guest::Accel) -> String {
    match accel {
        vmirq_guest::Accel::Kvm => "KVM: the guest runs on the host's CPUs".to_owned(),
        vmirq_guest::Accel::Tcg => "TCG: the guest runs in QEMU's binary translator, so IOPS \
                                    are an emulator's, not hardware's; compare targets by \
                                    the ratios of this run and by interrupts per I/O"
            .to_owned(),
    }
}

/// Start `target`, boot the guest against it, and measure.
fn one_boot(
    harness: &Harness,
    opts: &Options,
    target: &TargetSpec,
    qsd: Option<&Path>,
    image: &Path,
    rep: u32,
) -> std::result::Result<Sample, String> {
    let place = tempfile::Builder::new()
        .prefix("vmirq-bench-guest-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let socket = place.path().join("blk.sock");
    let image_arg = image.display().to_string();
    let backend = match target {
        TargetSpec::VmirqDefaults => {
            Backend::vmirq_serve(&opts.vmirq_exe, &socket, &["--image", image_arg.as_str()])
        }
        TargetSpec::Vmirq { moderation, poll } => {
            let m = moderation.to_string();
            let p = poll.map(|p| p.to_string());
            let mut args = vec!["--image", image_arg.as_str(), "--moderation", m.as_str()];
            if let Some(p) = &p {
                args.extend(["--poll", p.as_str()]);
            }
            Backend::vmirq_serve(&opts.vmirq_exe, &socket, &args)
        }
        TargetSpec::Qsd | TargetSpec::QsdPoll => {
            let exe = qsd.ok_or("qemu-storage-daemon is not installed")?;
            Backend::qemu_storage_daemon(exe, &socket, image, 1, false)
        }
        TargetSpec::Bare => return Err("bare has no guest path".to_owned()),
    }
    .map_err(|e| e.to_string())?;
    let per_boot = Duration::from_secs(u64::from(opts.runtime_s) * 8 + 240);
    let machine = harness
        .machine()
        .timeout(per_boot)
        .disk(VhostUserBlk::new(backend.socket(), 1));
    let run = harness
        .run(&machine, &script(opts.runtime_s))
        .map_err(|e| e.to_string())?;
    drop(backend);
    if !run.ok() {
        return Err(format!("the guest run failed:\n{}", run.diagnostics()));
    }
    Ok(Sample {
        target: *target,
        runs: measurements(&run, rep)?,
        boot_s: run.boot_time().unwrap_or(run.wall).as_secs_f64(),
    })
}

/// Group samples into cells (workload-major, targets in their order) and compute ratios to
/// the peer per repetition.
fn cells(targets: &[TargetSpec], samples: &[Sample]) -> Vec<GuestCell> {
    let peer = |rep: u32, w: usize| {
        samples
            .iter()
            .find(|s| s.target.is_peer() && s.runs.get(w).is_some_and(|r| r.rep == rep))
            .and_then(|s| s.runs.get(w))
            .map(|r| r.iops)
    };
    let mut out = Vec::new();
    for (w, workload) in WORKLOADS.iter().enumerate() {
        for target in targets {
            let runs: Vec<GuestRun> = samples
                .iter()
                .filter(|s| s.target == *target)
                .filter_map(|s| s.runs.get(w).cloned())
                .collect();
            let ratios: Vec<f64> = runs
                .iter()
                .filter_map(|r| peer(r.rep, w).map(|p| ratio(r.iops, p)))
                .collect();
            out.push(GuestCell {
                target: target.to_string(),
                workload: *workload,
                iops: Spread::over(&runs, |r| r.iops),
                interrupts_per_io: Spread::over(&runs, |r| r.interrupts_per_io),
                iops_vs_peer: (!target.is_peer() && !ratios.is_empty())
                    .then(|| Spread::of(&ratios)),
                runs,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(target: &str, rep: u32, iops: f64) -> Sample {
        Sample {
            target: target.parse().expect("target"),
            runs: WORKLOADS
                .iter()
                .map(|_| GuestRun {
                    rep,
                    iops,
                    ios: 100,
                    interrupts: 50,
                    interrupts_per_io: 0.5,
                })
                .collect(),
            boot_s: 1.0,
        }
    }

    #[test]
    fn ratios_pair_runs_of_the_same_repetition() {
        let targets: Vec<TargetSpec> = ["vmirq:none", "qemu-storage-daemon"]
            .iter()
            .map(|t| t.parse().expect("t"))
            .collect();
        let samples = vec![
            sample("vmirq:none", 0, 200.0),
            sample("qemu-storage-daemon", 0, 100.0),
            sample("qemu-storage-daemon", 1, 400.0),
            sample("vmirq:none", 1, 200.0),
        ];
        let cells = cells(&targets, &samples);
        assert_eq!(cells.len(), 2 * WORKLOADS.len());
        let v = &cells[0];
        assert_eq!(v.target, "vmirq:none");
        let r = v.iops_vs_peer.expect("ratio");
        assert!((r.min - 0.5).abs() < 1e-9 && (r.max - 2.0).abs() < 1e-9);
        assert!(
            cells[WORKLOADS.len()].iops_vs_peer.is_none(),
            "the peer has no ratio"
        );
        assert!((v.interrupts_per_io.median - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_script_brackets_each_job_with_interrupt_counts() {
        let text = script(2).render().to_owned();
        for w in &WORKLOADS {
            let irq = text.find(&format!("step irq-{} ", w.name)).expect("irq");
            let job = text.find(&format!("step fio-{} ", w.name)).expect("fio");
            assert!(irq < job);
        }
        assert!(text.contains("step irq-end "));
        assert!(text.contains("--runtime=2"));
    }
}
