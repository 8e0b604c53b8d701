//! Evaluating checks (published vs simulated) and comparisons over a scenario's results.

use crate::scenario::{CheckSpec, CompareSpec, Op};
use crate::sim::RunResult;
use serde::Serialize;

/// Outcome of one check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckResult {
    /// Check name.
    pub name: String,
    /// Published value (low end if a range).
    pub published: f64,
    /// High end of the published range.
    pub published_hi: f64,
    /// Simulated value (NaN if a metric was missing).
    pub simulated: f64,
    /// Unit.
    pub unit: String,
    /// Distance from the published value or range, percent of it.
    pub off_pct: f64,
    /// `reproduced`, `not reproduced` or `input` (consistency check of a model input).
    pub status: &'static str,
    /// Explanation when not reproduced.
    pub note: String,
}

fn metric(runs: &[(String, RunResult)], label: &str, key: &str) -> f64 {
    runs.iter()
        .find(|(l, _)| l == label)
        .and_then(|(_, r)| r.values.get(key).copied())
        .unwrap_or(f64::NAN)
}

/// The largest ratio (or reduction in percent) of `metric` over the check's run pairs.
fn max_over_pairs(c: &CheckSpec, runs: &[(String, RunResult)]) -> f64 {
    c.pairs
        .iter()
        .map(|(a, b)| {
            let r = metric(runs, a, &c.metric) / metric(runs, b, &c.metric);
            if c.op == Op::MaxReduction {
                (1.0 - r) * 100.0
            } else {
                r
            }
        })
        .fold(f64::NAN, f64::max)
}

/// Evaluate one check.
#[must_use]
pub fn evaluate(c: &CheckSpec, runs: &[(String, RunResult)]) -> CheckResult {
    let a = metric(runs, &c.run, &c.metric);
    let b = c
        .run_b
        .as_deref()
        .map_or(f64::NAN, |l| metric(runs, l, &c.metric));
    let raw = match c.op {
        Op::Value => a,
        Op::Diff => a - b,
        Op::Ratio => a / b,
        Op::Gain => (a / b - 1.0) * 100.0,
        Op::MaxRatio | Op::MaxReduction => max_over_pairs(c, runs),
        Op::Max => c
            .over
            .iter()
            .map(|l| metric(runs, l, &c.metric))
            .fold(f64::NAN, f64::max),
    };
    let sim = if matches!(c.op, Op::Ratio | Op::Gain | Op::MaxRatio | Op::MaxReduction) {
        raw
    } else {
        raw * c.scale
    };
    let lo = c.published;
    let hi = c.published_hi.unwrap_or(lo).max(lo);
    let off_pct = if sim < lo {
        (lo - sim) / lo.abs() * 100.0
    } else if sim > hi {
        (sim - hi) / hi.abs() * 100.0
    } else {
        0.0
    };
    let ok = sim.is_finite() && off_pct <= c.tolerance_pct;
    let status = match (c.input, ok) {
        (true, _) => "input",
        (false, true) => "reproduced",
        (false, false) => "not reproduced",
    };
    let note = if ok { String::new() } else { c.note.clone() };
    CheckResult {
        name: c.name.clone(),
        published: lo,
        published_hi: hi,
        simulated: sim,
        unit: c.unit.clone(),
        off_pct,
        status,
        note,
    }
}

/// Outcome of a comparison for one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareResult {
    /// Comparison name.
    pub name: String,
    /// Metric.
    pub metric: String,
    /// Baseline run and value.
    pub baseline: (String, f64),
    /// Candidate run and value.
    pub candidate: (String, f64),
    /// `better`, `worse`, or `same` (within 2% of the baseline).
    pub verdict: &'static str,
}

/// Evaluate a comparison.
#[must_use]
pub fn compare(c: &CompareSpec, runs: &[(String, RunResult)]) -> Vec<CompareResult> {
    let base = metric(runs, &c.baseline, &c.metric);
    c.candidates
        .iter()
        .map(|l| {
            let v = metric(runs, l, &c.metric);
            let better = if c.lower_is_better {
                v < base
            } else {
                v > base
            };
            let verdict = if (v - base).abs() <= 0.02 * base.abs() {
                "same"
            } else if better {
                "better"
            } else {
                "worse"
            };
            CompareResult {
                name: c.name.clone(),
                metric: c.metric.clone(),
                baseline: (c.baseline.clone(), base),
                candidate: (l.clone(), v),
                verdict,
            }
        })
        .collect()
}
