//! One whole `vmirq bench` invocation: check what is installed, build the plan and the
//! shared disk, run every cell, replay the bursty trace, and assemble the report document.

use crate::cpu::Placement;
use crate::error::Result;
use crate::knob;
use crate::machine::{git_revision, Machine};
use crate::plan::{Plan, Preset};
use crate::report::{Document, RunInfo};
use crate::runner::{run_plan, Progress};

use crate::target::{find_on_path, DiskFile, Setup, TargetSpec};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Size of the in-memory disk file every target serves.
pub const DISK_BYTES: u64 = 256 << 20;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// Size preset.
    pub preset: Preset,
    /// Replace the preset's vmirq targets (bare and the peer stay unless excluded).
    pub targets: Option<Vec<TargetSpec>>,
    /// Override repetitions.
    pub repetitions: Option<u32>,
    /// Override the measured window.
    pub measure: Option<Duration>,
    /// CPU placement.
    pub placement: Placement,
    /// The `vmirq` executable providing `serve`.
    pub vmirq_exe: PathBuf,
    /// Leave out qemu-storage-daemon even if installed.
    pub no_peer: bool,
    /// Leave out every vmirq target (bare and peer only).
    pub no_vmirq: bool,
    /// Leave out the KVM section even where /dev/kvm is usable.
    pub no_kvm: bool,
    /// The command line, for the report.
    pub command: String,
}

fn preset_name(p: Preset) -> &'static str {
    match p {
        Preset::Quick => "quick",
        Preset::Default => "default",
        Preset::Full => "full",
        Preset::Tiny => "tiny",
    }
}

/// The plan and the notices about what was left out.
#[must_use]
pub fn plan_for(opts: &Options, qsd: Option<&PathBuf>) -> (Plan, Vec<String>) {
    let mut notices = Vec::new();
    let peer = qsd.is_some() && !opts.no_peer;
    if qsd.is_none() && !opts.no_peer {
        notices.push(
            "qemu-storage-daemon is not installed: the peer is skipped (Debian: apt-get install \
             qemu-system-common)"
                .to_owned(),
        );
    }
    let mut plan = Plan::preset(opts.preset, peer);
    if let Some(ts) = &opts.targets {
        plan.targets
            .retain(|t| !matches!(t, TargetSpec::Vmirq { .. }));
        for t in ts {
            let wanted = match t {
                TargetSpec::Vmirq { .. } => true,
                TargetSpec::QsdPoll => peer,
                // always in the plan
                TargetSpec::Bare | TargetSpec::Qsd | TargetSpec::VmirqDefaults => false,
            };
            if wanted && !plan.targets.contains(t) {
                plan.targets.push(*t);
            }
        }
    }
    if opts.no_vmirq {
        plan.targets.retain(|t| !t.is_vmirq());
    }
    if let Some(r) = opts.repetitions {
        plan.repetitions = r.max(1);
    }
    if let Some(m) = opts.measure {
        plan.measure = m;
    }
    (plan, notices)
}

/// Run the bench described by `opts`, reporting progress to `progress`.
///
/// # Errors
/// The shared disk file cannot be created, or the report cannot be assembled.
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Document> {
    let started = Instant::now();
    let qsd = find_on_path("qemu-storage-daemon");
    let (plan, mut notices) = plan_for(opts, qsd.as_ref());
    for n in &notices {
        progress.notice(n);
    }
    let shm = PathBuf::from("/dev/shm");
    let dir = if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    };
    let setup = Setup {
        disk: DiskFile::create(&dir, DISK_BYTES)?,
        vmirq_exe: opts.vmirq_exe.clone(),
        qsd_exe: qsd.clone(),
        socket_dir: std::env::temp_dir(),
        placement: opts.placement,
    };
    let outcome = run_plan(&plan, &setup, progress);
    notices.extend(outcome.notices);
    let kvm = if opts.no_kvm {
        crate::kvm::KvmSection::skipped("--no-kvm")
    } else {
        progress.notice("kvm: wake latency sweep on the host's KVM (about a second)");
        crate::kvm::run()
    };
    let knob_series = outcome
        .bursty_trace
        .as_ref()
        .map_or_else(Vec::new, |(from, trace)| {
            knob::plotted_policies()
                .iter()
                .map(|p| knob::replay(trace, p, from))
                .collect()
        });
    Ok(Document {
        revision: git_revision(),
        machine: Machine::describe(qsd.as_deref()),
        run: RunInfo {
            preset: preset_name(opts.preset).to_owned(),
            command: opts.command.clone(),
            repetitions: plan.repetitions,
            warmup_ms: u64::try_from(plan.warmup.as_millis()).unwrap_or(u64::MAX),
            measure_ms: u64::try_from(plan.measure.as_millis()).unwrap_or(u64::MAX),
            placement: opts.placement,
            seed: plan.seed,
            targets: plan.targets.iter().map(ToString::to_string).collect(),
            wall_s: started.elapsed().as_secs_f64(),
            finished_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        },
        cells: outcome.cells,
        knob_series,
        notices,
        kvm,
        net: None,
    })
}

/// Run the network workloads (`vmirq bench --net`): a document with no block cells and
/// its `net` section.
#[must_use]
pub fn run_net(
    opts: &crate::net::NetOptions,
    setup: &crate::net::target::NetSetup,
    command: &str,
    progress: &dyn Progress,
) -> Document {
    let started = Instant::now();
    let machine = Machine::describe(None);
    let net = crate::net::run(opts, setup, progress);
    Document {
        revision: git_revision(),
        machine,
        run: RunInfo {
            preset: net.preset.clone(),
            command: command.to_owned(),
            repetitions: net.repetitions,
            warmup_ms: net.warmup_ms,
            measure_ms: net.measure_ms,
            placement: setup.placement,
            seed: 0,
            targets: net.targets.clone(),
            wall_s: started.elapsed().as_secs_f64(),
            finished_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        },
        cells: Vec::new(),
        knob_series: Vec::new(),
        notices: Vec::new(),
        kvm: crate::kvm::KvmSection::skipped("network run (--net)"),
        net: Some(net),
    }
}
