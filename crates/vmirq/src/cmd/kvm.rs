//! `vmirq kvm`: measurements on the host's real KVM (see crate `vmirq-kvm`).

use anyhow::Context;
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vmirq_kvm::gaps::{GapSpec, Gaps};
use vmirq_kvm::host::TscClock;
use vmirq_kvm::report::us;
use vmirq_kvm::wake::{self, Path, Placement, Sweep};

/// Arguments of `vmirq kvm`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: KvmCommand,
}

#[derive(Debug, Subcommand)]
enum KvmCommand {
    /// Wake a halted vCPU by irqfd/MSI or x2APIC IPI; sweep KVM's halt-poll window.
    Wake(WakeArgs),
    /// Per-exit costs (port I/O, ioeventfd, MMIO, cpuid, hypercall, HLT, IPI, injection).
    Exits(ExitsArgs),
    /// Userspace halt path with vmirq wait policies versus KVM's in-kernel halt polling.
    Halt(HaltArgs),
    /// A moderated virtual device: guest ring driver, VMM device thread, irqfd policy.
    Device(DeviceArgs),
}

/// Output options shared by every `vmirq kvm` command.
#[derive(Debug, clap::Args)]
struct Output {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report with charts.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// A few-second version (fewer cells and samples).
    #[arg(long)]
    quick: bool,
}

#[derive(Debug, clap::Args)]
struct WakeArgs {
    #[command(flatten)]
    out: Output,
    /// Senders: irqfd, ipi.
    #[arg(long, value_delimiter = ',', value_parser = parse_path)]
    path: Vec<Path>,
    /// KVM_CAP_HALT_POLL values in ns.
    #[arg(long, value_delimiter = ',')]
    halt_poll_ns: Vec<u64>,
    /// Wake intervals in microseconds.
    #[arg(long, value_delimiter = ',')]
    interval_us: Vec<u64>,
    /// Sender placement: same, other.
    #[arg(long, value_delimiter = ',', value_parser = parse_placement)]
    placement: Vec<Placement>,
    /// Measured wakes per cell.
    #[arg(long)]
    samples: Option<u32>,
    /// Warm-up wakes per cell.
    #[arg(long)]
    warmup: Option<u32>,
}

#[derive(Debug, clap::Args)]
struct ExitsArgs {
    #[command(flatten)]
    out: Output,
    /// Write the vmirq-costs-v1 file for `vmirq sim --costs FILE` here.
    #[arg(long, value_name = "FILE")]
    costs: Option<PathBuf>,
    /// Loop iterations per operation.
    #[arg(long)]
    iterations: Option<u32>,
}

#[derive(Debug, clap::Args)]
struct HaltArgs {
    #[command(flatten)]
    out: Output,
    /// Wait policies for the userspace path (repeatable), e.g. `kvm:max_ns=200000`.
    /// Default: never, fixed, kvm, guest-haltpoll, histogram (200 us caps).
    #[arg(long = "poll", value_name = "SPEC")]
    poll: Vec<String>,
    /// In-kernel halt-poll values to compare against (ns).
    #[arg(long, value_delimiter = ',')]
    kernel_halt_poll_ns: Vec<u64>,
    /// Constant wake intervals in microseconds (each is `--gaps const:us=N`).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    interval_us: Vec<u64>,
    /// Gap distributions (repeatable): `const:us=N`, `exp:mean_us=M`,
    /// `bimodal:short_us=S,long_us=L,short_pct=P`, `phased:short_us=S,long_us=L,short_n=A,long_n=B`
    /// (A gaps of S µs, then B of L µs, repeated). Run after the `--interval-us` ones.
    #[arg(long = "gaps", value_name = "SPEC", value_parser = parse_gaps)]
    gaps: Vec<GapSpec>,
    /// Seed of the gap draws (every cell replays the same sequence).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Injector placement: same, other.
    #[arg(long, default_value = "other", value_parser = parse_placement)]
    placement: Placement,
    /// Measured wakes per cell.
    #[arg(long)]
    samples: Option<u32>,
}

fn parse_gaps(s: &str) -> Result<GapSpec, String> {
    s.parse()
        .map_err(|e: vmirq_kvm::gaps::GapSpecError| e.to_string())
}

#[derive(Debug, clap::Args)]
struct DeviceArgs {
    #[command(flatten)]
    out: Output,
    /// Completion policies (repeatable). Default: none, count, vic, dim, budget.
    #[arg(long = "moderation", value_name = "SPEC")]
    moderation: Vec<String>,
    /// Outstanding requests in the guest (comma list).
    #[arg(long, value_delimiter = ',')]
    depth: Vec<u32>,
    /// Device service time per request, microseconds.
    #[arg(long, default_value_t = 20)]
    service_us: u64,
    /// Run length per cell, milliseconds.
    #[arg(long)]
    duration_ms: Option<u64>,
    /// Guest driver: `spin-user` (ring 3, running when signals arrive) or `halt` (ring 0,
    /// halts when its ring is full).
    #[arg(long, default_value = "spin-user", value_parser = parse_driver)]
    driver: vmirq_kvm::device::DriverMode,
}

fn parse_driver(s: &str) -> Result<vmirq_kvm::device::DriverMode, String> {
    match s {
        "spin-user" => Ok(vmirq_kvm::device::DriverMode::SpinUser),
        "halt" => Ok(vmirq_kvm::device::DriverMode::Halt),
        _ => Err(format!("unknown driver {s:?} (spin-user, halt)")),
    }
}

fn parse_path(s: &str) -> Result<Path, String> {
    match s {
        "irqfd" => Ok(Path::Irqfd),
        "ipi" => Ok(Path::Ipi),
        _ => Err(format!("unknown path {s:?} (irqfd, ipi)")),
    }
}

fn parse_placement(s: &str) -> Result<Placement, String> {
    match s {
        "same" => Ok(Placement::Same),
        "other" => Ok(Placement::Other),
        _ => Err(format!("unknown placement {s:?} (same, other)")),
    }
}

/// Run `vmirq kvm`.
///
/// # Errors
/// Measurement or output failures (an unusable KVM is reported in one line and exit code 2).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Err(e) = vmirq_kvm::vm::probe() {
        eprintln!("vmirq kvm: {e}");
        return Ok(ExitCode::from(2));
    }
    match args.command {
        KvmCommand::Wake(a) => run_wake(a),
        KvmCommand::Exits(a) => run_exits(a),
        KvmCommand::Halt(a) => run_halt(a),
        KvmCommand::Device(a) => run_device(a),
    }
}

fn clock() -> TscClock {
    TscClock::calibrate(Duration::from_millis(50))
}

fn run_wake(a: WakeArgs) -> anyhow::Result<ExitCode> {
    let mut sweep = if a.out.quick {
        Sweep::quick()
    } else {
        Sweep::default_sweep()
    };
    if !a.path.is_empty() {
        sweep.paths = a.path;
    }
    if !a.halt_poll_ns.is_empty() {
        sweep.halt_poll_ns = a.halt_poll_ns;
    }
    if !a.interval_us.is_empty() {
        sweep.intervals_ns = a.interval_us.iter().map(|v| v * 1000).collect();
    }
    if !a.placement.is_empty() {
        sweep.placements = a.placement;
    }
    sweep.samples = a.samples.unwrap_or(sweep.samples);
    sweep.warmup = a.warmup.unwrap_or(sweep.warmup);
    let report = wake::run_sweep(&sweep, clock(), |c| {
        eprintln!(
            "  {:?} {:?} interval {} us poll {} us: p50 {} us, {} of {} halts polled",
            c.path,
            c.placement,
            us(c.interval_ns),
            us(c.halt_poll_ns),
            us(c.lat_ns.p50),
            c.polls_successful,
            c.halts
        );
    })?;
    if let Some(path) = &a.out.html {
        std::fs::write(path, wake::html(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if a.out.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", wake::table(&report.cells).to_text());
    }
    Ok(ExitCode::SUCCESS)
}

fn run_exits(a: ExitsArgs) -> anyhow::Result<ExitCode> {
    let iterations = a.iterations.unwrap_or(if a.out.quick { 300 } else { 2000 });
    let wake_samples = if a.out.quick { 100 } else { 400 };
    let source = format!(
        "vmirq kvm exits --iterations {iterations}, host {}, unix time {}",
        hostname(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
    let report = vmirq_kvm::exits::measure_all(iterations, wake_samples, clock(), source)?;
    if let Some(path) = &a.costs {
        std::fs::write(path, report.costs.to_json()? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.out.html {
        std::fs::write(path, vmirq_kvm::exits::html(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if a.out.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", vmirq_kvm::exits::table(&report).to_text());
        println!();
        print!("{}", vmirq_kvm::exits::paired_table(&report).to_text());
        println!("{}", report.costs.to_json()?);
    }
    Ok(ExitCode::SUCCESS)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

fn run_halt(a: HaltArgs) -> anyhow::Result<ExitCode> {
    use vmirq_kvm::userhalt::{self, Poller};
    let mut pollers = Vec::new();
    if a.poll.is_empty() && a.kernel_halt_poll_ns.is_empty() {
        pollers = userhalt::default_pollers()?;
    } else {
        pollers.extend(a.kernel_halt_poll_ns.iter().map(|&ns| Poller::Kernel(ns)));
        for p in &a.poll {
            pollers.push(Poller::User(userhalt::parse_wait(p)?));
        }
    }
    let mut workloads: Vec<GapSpec> = a
        .interval_us
        .iter()
        .map(|&us| GapSpec::Const { us })
        .chain(a.gaps.iter().copied())
        .collect();
    if workloads.is_empty() {
        let default_us: &[u64] = if a.out.quick { &[50] } else { &[30, 100, 300] };
        workloads = default_us.iter().map(|&us| GapSpec::Const { us }).collect();
    }
    let samples = a.samples.unwrap_or(if a.out.quick { 100 } else { 400 });
    let clock = clock();
    let mut cells = Vec::new();
    for &spec in &workloads {
        for &poller in &pollers {
            let c = userhalt::run_halt_cell(
                poller,
                Gaps { spec, seed: a.seed },
                a.placement,
                (samples / 5, samples),
                clock,
            )?;
            eprintln!(
                "  {} gaps {}: p50 {} us, {} of {} halts polled, {} ms polling",
                c.poller,
                c.gaps,
                us(c.lat_ns.p50),
                c.polled,
                c.halts,
                c.poll_ns / 1_000_000
            );
            cells.push(c);
        }
    }
    if let Some(path) = &a.out.html {
        std::fs::write(path, userhalt::html(&cells))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if a.out.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "cells": cells }))?
        );
    } else {
        print!("{}", userhalt::table(&cells).to_text());
    }
    Ok(ExitCode::SUCCESS)
}

fn run_device(a: DeviceArgs) -> anyhow::Result<ExitCode> {
    use vmirq_kvm::device::{self, DeviceConfig};
    let specs: Vec<String> = if a.moderation.is_empty() {
        [
            "none",
            "count:usecs=50,frames=32",
            "vic",
            "dim",
            "budget:us=20",
        ]
        .map(String::from)
        .to_vec()
    } else {
        a.moderation.clone()
    };
    let depths = if a.depth.is_empty() {
        vec![4, 32]
    } else {
        a.depth.clone()
    };
    let duration_ms = a
        .duration_ms
        .unwrap_or(if a.out.quick { 300 } else { 1000 });
    let clock = clock();
    let mut rows = Vec::new();
    for &depth in &depths {
        for spec in &specs {
            let moderation = spec
                .parse()
                .map_err(|e| anyhow::anyhow!("--moderation {spec}: {e}"))?;
            let cfg = DeviceConfig {
                moderation,
                depth,
                service_ns: a.service_us * 1000,
                duration: Duration::from_millis(duration_ms),
                mode: a.driver,
            };
            let r = device::run_device(&cfg, clock)?;
            eprintln!(
                "  {} depth {depth}: {:.0} completions/s, {:.3} irq/completion, p50 {} us",
                r.moderation,
                r.completions_per_sec,
                r.irqs_per_completion,
                us(r.lat_ns.p50)
            );
            rows.push(r);
        }
    }
    if let Some(path) = &a.out.html {
        std::fs::write(path, device::html(&rows))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if a.out.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "runs": rows }))?
        );
    } else {
        print!("{}", device::table(&rows).to_text());
    }
    Ok(ExitCode::SUCCESS)
}
