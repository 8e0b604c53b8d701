//! `vmirq sim sweep` and `vmirq sim point`: a parameter grid run on this machine (rayon) or
//! on a Dask cluster, results streamed to a JSON-lines file (resumable), progress on
//! stderr, then the table (and HTML) in grid order.

use super::sim::{sets, Common};
use anyhow::Context as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vmirq_sim::scenario::{parse_set, Scenario};
use vmirq_sim::sweep::dask::{run_dask, DaskEngine};
use vmirq_sim::sweep::{self, ResultsFile, SweepJob, SweepPoint};

/// Where the sweep's runs execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// This machine, one run per core.
    Local,
    /// A Dask distributed cluster (`--scheduler`).
    Dask,
}

/// `vmirq sim sweep`.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
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
    /// Append each result to this JSON-lines file as it arrives; points already in it are
    /// skipped (resume after an interruption).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where the runs execute.
    #[arg(long, value_enum, default_value_t = Engine::Local)]
    engine: Engine,
    /// Dask scheduler address (tcp://host:8786), or local[:N] for a LocalCluster of N
    /// single-threaded worker processes on this machine.
    #[arg(long, default_value = "local")]
    scheduler: String,
    /// Python with `distributed` installed (default: $VMIRQ_PYTHON, else target/py/bin/python
    /// of the checkout if present, else python3).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Path of the vmirq binary on the Dask workers (default: this binary's path).
    #[arg(long)]
    worker_vmirq: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// `vmirq sim point`.
#[derive(Debug, clap::Args)]
pub struct PointArgs {
    /// Job file (JSON, as `vmirq sim sweep --engine dask` sends it), or `-` for stdin.
    job: PathBuf,
}

/// Run one job, print its point as one JSON line.
///
/// # Errors
/// Unreadable or invalid job, failed run.
pub fn run_point(a: &PointArgs) -> anyhow::Result<ExitCode> {
    let text = if a.job == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(&a.job).with_context(|| format!("reading {}", a.job.display()))?
    };
    let job: SweepJob = serde_json::from_str(&text).context("job is not valid JSON")?;
    let p = job.execute()?;
    println!("{}", serde_json::to_string(&p)?);
    Ok(ExitCode::SUCCESS)
}

fn python(a: &SweepArgs) -> PathBuf {
    if let Some(p) = &a.python {
        return p.clone();
    }
    if let Some(p) = std::env::var_os("VMIRQ_PYTHON") {
        return p.into();
    }
    // scripts/setup.sh's venv, next to the binary (target/<profile>/vmirq -> target/py).
    let venv = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.join("py/bin/python")));
    venv.filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

fn grid(a: &SweepArgs) -> anyhow::Result<Vec<(String, Vec<vmirq_sim::scenario::Value>)>> {
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
    Ok(grid)
}

/// Run `vmirq sim sweep`.
///
/// # Errors
/// Unreadable or invalid scenario, failed run or engine, unwritable output.
pub fn run_sweep(a: SweepArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&a.scenario)
        .with_context(|| format!("reading {}", a.scenario.display()))?;
    let sets = sets(&a.common)?;
    let jobs = sweep::jobs(&text, &sets, &grid(&a)?, a.common.seed)?;
    let digest = jobs.first().map(|j| sweep::digest(&j.scenario, &j.sets));
    let mut file = match (&a.out, &digest) {
        (Some(p), Some(d)) => Some(ResultsFile::open(p, d)?),
        _ => None,
    };
    let todo: Vec<SweepJob> = jobs
        .iter()
        .filter(|j| !file.as_ref().is_some_and(|f| f.has(&j.key())))
        .cloned()
        .collect();
    if let (Some(f), Some(p)) = (&file, &a.out) {
        if !f.is_empty() {
            eprintln!(
                "resuming {}: {} of {} points already there",
                p.display(),
                jobs.len() - todo.len(),
                jobs.len()
            );
        }
    }
    let mut got: Vec<SweepPoint> = Vec::new();
    let total = todo.len();
    let mut failed = 0usize;
    let sink = |i: usize, r: sweep::Result<SweepPoint>| -> sweep::Result<()> {
        let n = got.len() + failed + 1;
        match r {
            Ok(p) => {
                eprintln!("[{n}/{total}] {} {}", p.point.join(" "), p.run);
                if let Some(f) = file.as_mut() {
                    f.append(&p)?;
                }
                got.push(p);
            }
            Err(e) => {
                failed += 1;
                eprintln!("[{n}/{total}] FAILED {}: {e}", todo[i].key());
            }
        }
        Ok(())
    };
    match a.engine {
        Engine::Local => sweep::run_local(&todo, sink)?,
        Engine::Dask if todo.is_empty() => {}
        Engine::Dask => {
            let engine = DaskEngine {
                python: python(&a),
                scheduler: a.scheduler.clone(),
                vmirq: match &a.worker_vmirq {
                    Some(p) => p.clone(),
                    None => std::env::current_exe()?,
                },
            };
            run_dask(&engine, &todo, sink)?;
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {total} sweep points failed");
    report(&a, &text, &jobs, file.as_ref(), got)
}

/// Print the table in grid order and write the JSON and HTML reports.
fn report(
    a: &SweepArgs,
    text: &str,
    jobs: &[SweepJob],
    file: Option<&ResultsFile>,
    got: Vec<SweepPoint>,
) -> anyhow::Result<ExitCode> {
    let metrics = if a.metric.is_empty() {
        let sc = Scenario::parse(text, &sets(&a.common)?)?;
        let mut m: Vec<String> = sc.checks.iter().map(|c| c.metric.clone()).collect();
        m.dedup();
        m
    } else {
        a.metric.clone()
    };
    let by_key: std::collections::BTreeMap<String, SweepPoint> =
        got.into_iter().map(|p| (p.key(), p)).collect();
    let points: Vec<SweepPoint> = jobs
        .iter()
        .filter_map(|j| {
            let k = j.key();
            by_key
                .get(&k)
                .or_else(|| file.and_then(|f| f.get(&k)))
                .cloned()
        })
        .collect();
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
