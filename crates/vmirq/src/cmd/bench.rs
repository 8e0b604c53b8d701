//! `vmirq bench`: side-by-side benchmark of `vmirq serve` policies, qemu-storage-daemon and
//! bare io_uring, driven by libblkio (library `vmirq-bench`), or with `--guest` by fio in a
//! real Linux guest, or with `--net` the network workloads (vmirq-netload against serve-net,
//! testpmd and Open vSwitch). This module only maps options.

use anyhow::Context;
use clap::Args as ClapArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vmirq_bench::cpu::Placement;
use vmirq_bench::plan::Preset;
use vmirq_bench::report::{html, summary, table, Document};
use vmirq_bench::session::{self, Options};
use vmirq_bench::target::TargetSpec;

/// Options of `vmirq bench`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Small matrix, finishes in under a minute.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Every workload, queue depth and policy (about 13 minutes on 2 cores).
    #[arg(long)]
    full: bool,
    /// A vmirq target to run instead of the preset's (repeatable), e.g. `--target
    /// vmirq:vic+never --target vmirq:count:usecs=50,frames=32 --target vmirq:none+kvm`
    /// (without `+POLL` the backend's default kick wait applies); bare, qemu-storage-daemon
    /// and `vmirq` (`vmirq serve` with its defaults) always run, `qemu-storage-daemon+poll`
    /// (its polling IOThread) may be added.
    #[arg(long = "target", value_name = "SPEC")]
    targets: Option<Vec<String>>,
    /// Repetitions of each cell (default: 3; 2 with --quick).
    #[arg(long, value_name = "N")]
    reps: Option<u32>,
    /// Measured window of each run in milliseconds.
    #[arg(long, value_name = "MS")]
    measure_ms: Option<u64>,
    /// CPU placement of client and backend: split (different CPUs), same, or free.
    #[arg(long, default_value = "split", value_parser = ["split", "same", "free"])]
    placement: String,
    /// Leave out qemu-storage-daemon.
    #[arg(long)]
    no_peer: bool,
    /// Leave out the KVM section (a second of `vmirq kvm wake` where /dev/kvm is usable).
    #[arg(long)]
    no_kvm: bool,
    /// Write every cell as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a self-contained HTML report with plots.
    #[arg(long, value_name = "FILE", conflicts_with = "guest")]
    html: Option<PathBuf>,
    /// Run nothing: read a report saved with `--json` and print (and with `--html`, write)
    /// it again, for example with a newer report layout.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["quick", "full", "targets", "reps", "measure_ms", "no_peer", "no_kvm", "json", "guest", "net"]
    )]
    from_json: Option<PathBuf>,
    /// Run fio inside a real Linux guest (QEMU, KVM if it can run one, else TCG) against
    /// vmirq's defaults, vmirq vic with kick polling and qemu-storage-daemon instead of the
    /// libblkio matrix; reports IOPS ratios and guest interrupts per I/O (`--target`,
    /// `--reps`, `--measure-ms` (per fio job), `--no-peer` and `--json` apply).
    #[arg(long, conflicts_with = "full")]
    guest: bool,
    /// Network workloads instead of the block matrix: `vmirq serve-net` (its defaults, `dim`
    /// and its polling data path) against DPDK testpmd's vhost PMD (and Open vSwitch with
    /// DPDK where it runs), driven by vmirq-netload's client: poll-mode streams of 64, 1514
    /// and 9014-byte frames, an interrupt-driven request/response ping-pong and an
    /// interrupt-driven stream.
    /// `--quick`, `--target` (testpmd, ovs, vmirq[:MODERATION][+pmd]), `--reps`,
    /// `--measure-ms`, `--placement`, `--no-peer`, `--json` and `--html` apply.
    #[arg(long, conflicts_with_all = ["full", "guest"])]
    net: bool,
}

/// `vmirq bench --net`.
fn measure_net(args: &Args) -> anyhow::Result<Document> {
    use vmirq_bench::net::{plan::NetPreset, target::NetSetup, NetOptions};
    let targets = args
        .targets
        .as_ref()
        .map(|ts| {
            ts.iter()
                .map(|t| t.parse())
                .collect::<Result<Vec<_>, String>>()
        })
        .transpose()
        .map_err(|e| anyhow::anyhow!(e))?;
    let opts = NetOptions {
        preset: if args.quick {
            NetPreset::Quick
        } else {
            NetPreset::Default
        },
        targets,
        repetitions: args.reps,
        measure: args.measure_ms.map(Duration::from_millis),
        no_peer: args.no_peer,
    };
    let dir = std::env::temp_dir().join(format!("vmirq-bench-net-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context("creating a directory for the sockets")?;
    let setup = NetSetup {
        vmirq_exe: std::env::current_exe().context("locating the vmirq executable")?,
        dir: dir.clone(),
        placement: Placement::parse(&args.placement).unwrap_or(Placement::Split),
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let doc = session::run_net(&opts, &setup, &command, &vmirq_bench::progress::Bar::new());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(doc)
}

/// `vmirq bench --guest`.
fn run_guest(args: &Args) -> anyhow::Result<ExitCode> {
    let mut targets = match &args.targets {
        Some(ts) => ts
            .iter()
            .map(|t| t.parse::<TargetSpec>())
            .collect::<Result<Vec<_>, _>>()?,
        None => vmirq_bench::guest::Options::default_targets()
            .into_iter()
            .filter(|t| !t.is_peer())
            .collect(),
    };
    if !args.no_peer && !targets.iter().any(TargetSpec::is_peer) {
        targets.push(TargetSpec::Qsd);
    }
    let runtime_s = args
        .measure_ms
        .map_or(if args.quick { 2 } else { 3 }, |ms| {
            ms.div_ceil(1000).max(1)
        });
    let opts = vmirq_bench::guest::Options {
        targets,
        repetitions: args.reps.unwrap_or(if args.quick { 1 } else { 3 }).max(1),
        runtime_s: u32::try_from(runtime_s).unwrap_or(u32::MAX),
        vmirq_exe: std::env::current_exe().context("locating the vmirq executable")?,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let report = vmirq_bench::guest::run(&opts, &|line| eprintln!("{line}"))?;
    print!("{}", vmirq_bench::guest::render(&report));
    println!("{:.0} s on {}", report.wall_s, report.machine.summary());
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json()?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("JSON: {}", path.display());
    }
    if report.cells.iter().any(|c| c.runs.is_empty()) {
        eprintln!("some targets failed every repetition (see notices above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Run the bench (or read a saved report) and print the table.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.guest {
        return run_guest(&args);
    }
    let doc = match &args.from_json {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Document::from_json(&text).with_context(|| format!("reading {}", path.display()))?
        }
        None if args.net => measure_net(&args)?,
        None => measure(&args)?,
    };
    report(&args, &doc)
}

/// Run the benchmark the options describe.
fn measure(args: &Args) -> anyhow::Result<Document> {
    let targets = args
        .targets
        .as_ref()
        .map(|ts| {
            ts.iter()
                .map(|t| t.parse::<TargetSpec>())
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let opts = Options {
        preset: if args.quick {
            Preset::Quick
        } else if args.full {
            Preset::Full
        } else {
            Preset::Default
        },
        targets,
        repetitions: args.reps,
        measure: args.measure_ms.map(Duration::from_millis),
        placement: Placement::parse(&args.placement).unwrap_or(Placement::Split),
        vmirq_exe: std::env::current_exe().context("locating the vmirq executable")?,
        no_peer: args.no_peer,
        no_vmirq: false,
        no_kvm: args.no_kvm,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    Ok(session::run(&opts, &vmirq_bench::progress::Bar::new())?)
}

/// Print the table and summary; write the JSON and HTML files asked for.
fn report(args: &Args, doc: &Document) -> anyhow::Result<ExitCode> {
    if !doc.cells.is_empty() || doc.net.is_none() {
        println!("{}", table::render(&doc.cells));
        print!("{}", summary::render(&doc.cells));
        print!("{}", vmirq_bench::kvm::render_text(&doc.kvm));
    }
    let net_cells = doc.net.as_ref().map_or(&[][..], |n| &n.cells[..]);
    if let Some(net) = &doc.net {
        print!("{}", vmirq_bench::net::report::render_text(net));
    }
    println!(
        "{} runs in {:.0} s on {}",
        doc.cells.iter().map(|c| c.runs.len()).sum::<usize>()
            + net_cells.iter().map(|c| c.runs.len()).sum::<usize>(),
        doc.run.wall_s,
        doc.machine.summary()
    );
    if let Some(path) = &args.json {
        std::fs::write(path, doc.to_json()?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("JSON: {}", path.display());
    }
    if let Some(path) = &args.html {
        std::fs::write(path, html::render(doc))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("HTML: {}", path.display());
    }
    let failed = doc.cells.iter().filter(|c| c.repetitions == 0).count()
        + net_cells.iter().filter(|c| c.repetitions == 0).count();
    if failed > 0 {
        eprintln!("{failed} cells failed every repetition (see notices above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
