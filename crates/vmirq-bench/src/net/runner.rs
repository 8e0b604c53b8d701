//! Runs a [`NetPlan`]: in every repetition each target is started once (a fresh process),
//! runs every job with a fresh client connection (vmirq-netload's session, one run each),
//! and is stopped; targets alternate within a repetition (their order rotating from one
//! repetition to the next) so that the machine's noise hits them alike, and ratios pair runs of the same repetition. A failed start or run is recorded
//! in its cells and reported, never fatal.

use super::plan::{NetJob, NetPlan};
use super::results::{finalize, NetCell, NetMetrics};
use super::target::{NetRunning, NetSetup, NetTarget};
use crate::runner::Progress;
use std::time::Duration;
use vmirq_netload::bench::{bench, run_config, BenchConfig};
use vmirq_netload::port::PortConfig;

/// Longest wait for in-flight frames after a run's window (vmirq-netload's default: on a
/// loaded machine serve-net's workers can be off the CPU for longer than 200 ms, whose
/// frames then counted as lost).
const DRAIN: Duration = Duration::from_millis(500);

/// Run `plan` against the targets; returns the finalized cells and the notices.
pub fn run_plan(
    plan: &NetPlan,
    setup: &NetSetup,
    progress: &dyn Progress,
) -> (Vec<NetCell>, Vec<String>) {
    let reps = usize::try_from(plan.repetitions.max(1)).unwrap_or(1);
    let mut cells: Vec<NetCell> = plan
        .jobs
        .iter()
        .flat_map(|j| {
            plan.targets
                .iter()
                .map(move |t| NetCell::new(t.to_string(), j, reps))
        })
        .collect();
    let mut notices = Vec::new();
    progress.begin(plan.runs());
    for rep in 0..reps {
        // The order rotates per repetition, so no target always runs first (or right after
        // a given other one).
        let n = plan.targets.len();
        for ti in (0..n).map(|k| (k + rep) % n) {
            let target = &plan.targets[ti];
            let tag = format!("rep{rep}-t{ti}");
            let running = match NetRunning::start(target, setup, &tag) {
                Ok(r) => r,
                Err(e) => {
                    let text = format!("{target}: repetition {rep}: {}", chain(&e));
                    progress.notice(&text);
                    notices.push(text.clone());
                    for (ji, _) in plan.jobs.iter().enumerate() {
                        progress.finish();
                        cells[ji * plan.targets.len() + ti]
                            .errors
                            .push(text.clone());
                    }
                    continue;
                }
            };
            for (ji, job) in plan.jobs.iter().enumerate() {
                progress.start(&format!("{target} {} (rep {})", job.name(), rep + 1));
                let cell = &mut cells[ji * plan.targets.len() + ti];
                if cell.describe.is_empty() {
                    cell.describe.clone_from(&running.describe);
                }
                match run_job(plan, setup, job, &running) {
                    Ok((m, features)) => {
                        if cell.features.is_empty() {
                            cell.features = features;
                        }
                        cell.runs[rep] = Some(m);
                    }
                    Err(e) => {
                        let text = format!("{target} {}: repetition {rep}: {e}", job.name());
                        progress.notice(&text);
                        notices.push(text.clone());
                        cell.errors.push(text);
                    }
                }
                progress.finish();
            }
            if let Err(e) = running.stop() {
                let text = format!("{target}: stopping after repetition {rep}: {}", chain(&e));
                progress.notice(&text);
                notices.push(text);
            }
        }
    }
    finalize(&mut cells);
    (cells, notices)
}

fn run_job(
    plan: &NetPlan,
    setup: &NetSetup,
    job: &NetJob,
    running: &NetRunning,
) -> Result<(NetMetrics, Vec<String>), String> {
    let mut run = run_config(plan.measure);
    run.warmup = plan.warmup;
    run.drain_max = DRAIN;
    run.cpu = setup.placement.client_cpu();
    run.backend_pid = running.pid();
    // Lengths, headers and trailers are still checked; comparing every payload byte would
    // add client CPU per packet that no device causes.
    run.verify_payload = false;
    let cfg = BenchConfig {
        sockets: running.sockets.clone(),
        testpmd_ports: running.sockets.len(),
        workload: job.workload,
        modes: vec![job.mode],
        repeat: 1,
        run,
        port: PortConfig::default(),
    };
    // vmirq-netload pins the thread that runs the client: a thread of its own, so that the
    // bench's main thread (which starts the next targets, and whose affinity their helper
    // processes inherit) stays unpinned.
    let result = std::thread::scope(|s| {
        s.spawn(|| bench(&cfg, |_| {}))
            .join()
            .map_err(|_| "the client thread panicked".to_string())
    })?
    .map_err(|e| chain(&e))?;
    let report = result
        .runs
        .first()
        .ok_or_else(|| "the session returned no run".to_string())?;
    if report.packets == 0 {
        let (sent, received) = report.bulk.map_or((0, 0), |b| (b.sent, b.received));
        return Err(format!(
            "no packet received in the measured window (bulk frames over the whole run: \
             {sent} sent, {received} received; {} transactions lost)",
            report.rr.map_or(0, |r| r.lost)
        ));
    }
    let features = report.features.iter().map(|f| (*f).to_owned()).collect();
    Ok((NetMetrics::of(report), features))
}

/// An error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Whether `target` can run here, or why not (OVS needs its package and hugepages).
#[must_use]
pub fn unavailable(target: &NetTarget) -> Option<String> {
    match target {
        NetTarget::Testpmd => vmirq_netload::peer::testpmd_exe()
            .is_none()
            .then(|| "dpdk-testpmd not found (Debian: apt-get install dpdk)".to_string()),
        NetTarget::Ovs => super::ovs::unavailable(),
        NetTarget::Vmirq { .. } => None,
    }
}
