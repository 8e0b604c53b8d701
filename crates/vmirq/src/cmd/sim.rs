//! `vmirq sim`: run a simulator scenario (published vs simulated), or sweep a parameter grid.

use anyhow::Context as _;
use std::path::PathBuf;
use std::process::ExitCode;
use vmirq_sim::scenario::{parse_set, sweep, Scenario, Value};

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
    /// Run the scenario's runs at every point of a parameter grid (parallel, one run per core).
    Sweep(SweepArgs),
}

#[derive(Debug, clap::Args)]
struct Common {
    /// Seed for every run (default: the scenario's).
    #[arg(long)]
    seed: Option<u64>,
    /// Override a model key for every run: key=value (dotted keys, TOML values).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Primitive costs measured by `vmirq kvm exits` (vmirq-costs-v1 JSON).
    #[arg(long)]
    costs: Option<PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    json: Option<PathBuf>,
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

#[derive(Debug, clap::Args)]
struct SweepArgs {
    /// Scenario file.
    scenario: PathBuf,
    /// Grid axis: key=v1,v2,... (repeatable; cartesian product).
    #[arg(long = "grid", value_name = "KEY=V1,V2,...", required = true)]
    grid: Vec<String>,
    /// Metrics to print (default: all checks' metrics).
    #[arg(long = "metric")]
    metric: Vec<String>,
    /// Write an HTML page plotting each metric against the first grid axis.
    #[arg(long)]
    html: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

fn sets(c: &Common) -> anyhow::Result<Vec<(String, Value)>> {
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
        Some(Sub::Sweep(s)) => run_sweep(s),
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

fn run_sweep(a: SweepArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&a.scenario)
        .with_context(|| format!("reading {}", a.scenario.display()))?;
    let mut grid = Vec::new();
    for g in &a.grid {
        let (k, vs) = g
            .split_once('=')
            .with_context(|| format!("bad --grid {g:?}: expected key=v1,v2"))?;
        let vals = vs
            .split(',')
            .map(|v| parse_set(&format!("x={v}")).map(|p| p.1))
            .collect::<Result<Vec<_>, _>>()?;
        grid.push((k.to_string(), vals));
    }
    let metrics = if a.metric.is_empty() {
        let sc = Scenario::parse(&text, &sets(&a.common)?)?;
        let mut m: Vec<String> = sc.checks.iter().map(|c| c.metric.clone()).collect();
        m.dedup();
        m
    } else {
        a.metric.clone()
    };
    let points = sweep(&text, &sets(&a.common)?, &grid, a.common.seed)?;
    for p in &points {
        let vals: Vec<String> = metrics
            .iter()
            .map(|m| format!("{m}={:.1}", p.values.get(m).copied().unwrap_or(f64::NAN)))
            .collect();
        println!("{:<40} {:<22} {}", p.point.join(" "), p.run, vals.join(" "));
    }
    if let Some(path) = &a.common.json {
        std::fs::write(path, serde_json::to_string_pretty(&points)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.html {
        let title = format!("sweep of {}", a.scenario.display());
        std::fs::write(
            path,
            vmirq_sim::html::render_sweep(&title, &points, &metrics),
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
