//! Executes a [`Plan`]: for each repetition, for each job, every target in an order rotated
//! per repetition (so no target always runs first or last); each run starts its target,
//! connects a fresh client, measures, and stops the target again.

use crate::client::{self, Device, RunConfig, Sample, TraceEvent};
use crate::cpu;
use crate::error::{BenchError, Result};
use crate::plan::{Job, Plan};
use crate::results::{finalize, CellResult};
use crate::stats::Metrics;
use crate::target::{Running, Setup, TargetSpec};
use crate::workload::Shape;
use std::time::Duration;

/// Connection attempts while a fresh backend finishes starting up.
const CONNECT_TRIES: u32 = 50;

/// Observer of progress (the CLI draws a progress bar with it).
pub trait Progress {
    /// The bench is about to do `runs` runs in total.
    fn begin(&self, runs: u64);
    /// A run is about to start.
    fn start(&self, label: &str);
    /// A run finished (successfully or not).
    fn finish(&self);
    /// Something the user must know (a skipped target, a failed run).
    fn notice(&self, text: &str);
}

/// Everything a bench run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every cell, in plan order (job-major, then target).
    pub cells: Vec<CellResult>,
    /// The bursty workload's submit/complete trace (first repetition) and whose it is.
    pub bursty_trace: Option<(String, Vec<TraceEvent>)>,
    /// Notices shown to the user (skips, failures).
    pub notices: Vec<String>,
}

/// The target whose bursty run is recorded for the knob replay: unmoderated, so completions
/// reach the client when the device finished them.
fn trace_source(plan: &Plan) -> Option<TargetSpec> {
    let unmoderated = |t: &&TargetSpec| {
        matches!(
            t,
            TargetSpec::Vmirq {
                moderation: vmirq_policy::spec::ModerationSpec::None,
                ..
            }
        )
    };
    plan.targets
        .iter()
        .find(unmoderated)
        .or_else(|| plan.targets.iter().find(|t| t.is_peer()))
        .or_else(|| plan.targets.first())
        .copied()
}

/// Run the whole plan.
#[must_use]
pub fn run_plan(plan: &Plan, setup: &Setup, progress: &dyn Progress) -> Outcome {
    let reps = usize::try_from(plan.repetitions).unwrap_or(1);
    let mut cells: Vec<CellResult> = Vec::new();
    for job in &plan.jobs {
        for t in &plan.targets {
            cells.push(CellResult::new(t, &job.workload, job.mode, reps));
        }
    }
    let tracer = trace_source(plan);
    progress.begin(plan.runs());
    let mut outcome = Outcome {
        cells: Vec::new(),
        bursty_trace: None,
        notices: Vec::new(),
    };
    let n_targets = plan.targets.len();
    for rep in 0..reps {
        for (j, job) in plan.jobs.iter().enumerate() {
            for k in 0..n_targets {
                let t_index = (k + rep) % n_targets;
                let target = plan.targets[t_index];
                let record = rep == 0
                    && Some(target) == tracer
                    && matches!(job.workload.shape, Shape::Bursty { .. });
                let label = format!(
                    "{target} {} {} #{}",
                    job.workload.label(),
                    job.mode.as_str(),
                    rep + 1
                );
                progress.start(&label);
                let cell = &mut cells[j * n_targets + t_index];
                match run_one(plan, setup, &target, job, record) {
                    Ok(mut sample) => {
                        cell.runs[rep] = Some(Metrics::from_sample(&sample));
                        if record {
                            outcome.bursty_trace =
                                Some((target.to_string(), std::mem::take(&mut sample.trace)));
                        }
                    }
                    Err(err) => {
                        let text = format!("{label}: {err}");
                        progress.notice(&text);
                        cell.errors.push(err.to_string());
                        outcome.notices.push(text);
                    }
                }
                progress.finish();
            }
        }
    }
    finalize(&mut cells);
    outcome.cells = cells;
    outcome
}

/// Start `target`, run `job` once from a pinned client thread, stop the target.
///
/// # Errors
/// The target does not start, the client cannot connect, or the run fails.
pub fn run_one(
    plan: &Plan,
    setup: &Setup,
    target: &TargetSpec,
    job: &Job,
    record: bool,
) -> Result<Sample> {
    let tag = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let running = Running::start(target, setup, &tag)?;
    let cfg = RunConfig {
        workload: job.workload,
        mode: job.mode,
        warmup: plan.warmup,
        measure: plan.measure,
        seed: plan.seed,
        backend_pid: running.pid(),
        record_trace: record,
        target: target.to_string(),
    };
    let client_cpu = setup.placement.client_cpu();
    let endpoint = running.endpoint.clone();
    let buf = usize::try_from(
        u64::from(job.workload.block_size) * u64::from(job.workload.queue_depth().max(1)),
    )
    .unwrap_or(usize::MAX);
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            cpu::pin_current_thread(client_cpu);
            let mut dev = connect(&endpoint, buf)?;
            client::run(&mut dev, &cfg)
        })
        .join()
        .unwrap_or_else(|_| {
            Err(BenchError::NotReady {
                target: target.to_string(),
                reason: "client thread panicked".into(),
            })
        })
    });
    let counters = running.stop();
    result.map(|mut sample| {
        sample.backend_counters = counters;
        sample
    })
}

/// Connect, retrying briefly while the backend finishes setting up its listener.
fn connect(endpoint: &client::Endpoint, buf: usize) -> Result<Device> {
    let mut last = None;
    for _ in 0..CONNECT_TRIES {
        match Device::open(endpoint, buf) {
            Ok(dev) => return Ok(dev),
            Err(
                err @ BenchError::Blkio {
                    what: "connect", ..
                },
            ) => {
                last = Some(err);
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or(BenchError::NotReady {
        target: format!("{endpoint:?}"),
        reason: "no connection".into(),
    }))
}
