//! `vmirq sim`: run a simulator scenario (published vs simulated), or sweep a parameter grid
//! (on this machine or a Dask cluster, see `sim_sweep.rs`).

use anyhow::Context as _;
use std::path::PathBuf;
use std::process::ExitCode;
use vmirq_sim::scenario::{parse_set, Scenario, Value};

/// Run a vmirq-sim scenario, or `sweep` one over a parameter grid.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    sub: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Run the scenario's runs at every point of a parameter grid: on this machine (one run
    /// per core) or on a Dask cluster (`--engine dask`).
    Sweep(Box<super::sim_sweep::SweepArgs>),
    /// Run one sweep job (JSON on stdin with `-`, or a file) and print its point as one JSON
    /// line: what `--engine dask` workers execute.
    Point(super::sim_sweep::PointArgs),
}

#[derive(Debug, clap::Args)]
pub(super) struct Common {
    /// Seed for every run (default: the scenario's).
    #[arg(long)]
    pub(super) seed: Option<u64>,
    /// Override a model key for every run: key=value (dotted keys, TOML values).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Primitive costs: measured by `vmirq kvm exits` (vmirq-costs-v1 JSON) or a host profile
    /// that sets simulator costs by name (vmirq-sim-costs-v1, e.g. the this-host profile).
    #[arg(long)]
    costs: Option<PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Scenario file (see scenarios/).
    scenario: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
    /// Write an HTML report (CDFs, time series) here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Check model invariants every N events (0 = off).
    #[arg(long, default_value_t = 0)]
    check_every: u64,
    /// Exit with failure if any check is not reproduced.
    #[arg(long)]
    strict: bool,
}

pub(super) fn sets(c: &Common) -> anyhow::Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    if let Some(p) = &c.costs {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let (over, ignored) = vmirq_sim::costs::file_overrides(&text)?;
        for k in ignored {
            tracing::warn!(key = %k, "costs file key not used by the simulator");
        }
        for (k, v) in over {
            out.push((format!("costs.{k}"), Value::Integer(i64::try_from(v)?)));
        }
    }
    for s in &c.set {
        out.push(parse_set(s)?);
    }
    Ok(out)
}

/// Run `vmirq sim`.
///
/// # Errors
/// Unreadable or invalid scenario, failed run, unwritable output.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.sub {
        Some(Sub::Sweep(s)) => super::sim_sweep::run_sweep(*s),
        Some(Sub::Point(p)) => super::sim_sweep::run_point(&p),
        None => run_one(args.run),
    }
}

fn run_one(a: RunArgs) -> anyhow::Result<ExitCode> {
    let path = a
        .scenario
        .context("a scenario file is required (see scenarios/)")?;
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let sc = Scenario::parse(&text, &sets(&a.common)?)?;
    let runs = sc.run(a.common.seed, a.check_every)?;
    let report = vmirq_sim::report::Report::new(&sc, runs);
    print!("{}", report.text());
    if let Some(p) = &a.common.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.html {
        std::fs::write(p, vmirq_sim::html::render(&report))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(if a.strict && !report.all_reproduced() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
