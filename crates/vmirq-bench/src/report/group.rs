//! How the HTML report groups cells: targets and jobs (workload, queue depth, client mode)
//! in first-seen order, a job's label, and which targets are vmirq's and which the peer.

use crate::results::CellResult;
use crate::target::TargetSpec;

/// The target of `vmirq serve` with no policy flags (its defaults).
pub const DEFAULTS: &str = "vmirq";

/// The peer's label: qemu-storage-daemon with its defaults.
#[must_use]
pub fn peer() -> String {
    TargetSpec::Qsd.to_string()
}

/// Whether `target` is a `vmirq serve` configuration.
#[must_use]
pub fn is_vmirq(target: &str) -> bool {
    target == DEFAULTS || target.starts_with("vmirq:")
}

/// Targets in first-seen order.
#[must_use]
pub fn targets(cells: &[CellResult]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for c in cells {
        if !v.contains(&c.target) {
            v.push(c.target.clone());
        }
    }
    v
}

/// Palette index of `target`: its position among the run's targets, so a target has one
/// colour in every plot of the report.
#[must_use]
pub fn color(targets: &[String], target: &str) -> usize {
    targets.iter().position(|t| t == target).unwrap_or(0)
}

/// A job's label: `workload@qdN`, with ` poll` for a polling client.
#[must_use]
pub fn job_label(c: &CellResult) -> String {
    let mode = if c.client_mode.as_str() == "poll" {
        " poll"
    } else {
        ""
    };
    format!("{}@{}{mode}", c.workload, c.queue_depth)
}

/// One cell per job (the first seen), in first-seen order.
#[must_use]
pub fn jobs(cells: &[CellResult]) -> Vec<&CellResult> {
    let mut v: Vec<&CellResult> = Vec::new();
    for c in cells {
        if !v.iter().any(|o| o.same_job(c)) {
            v.push(c);
        }
    }
    v
}

/// Workload names in first-seen order.
#[must_use]
pub fn workloads(cells: &[CellResult]) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for c in cells {
        if !v.contains(&c.workload.as_str()) {
            v.push(&c.workload);
        }
    }
    v
}

/// The cell of `target` in `job`'s job, if it has at least one successful repetition.
#[must_use]
pub fn find<'a>(cells: &'a [CellResult], job: &CellResult, target: &str) -> Option<&'a CellResult> {
    cells
        .iter()
        .find(|c| c.target == target && c.same_job(job) && c.repetitions > 0)
}
