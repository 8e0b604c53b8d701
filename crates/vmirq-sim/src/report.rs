//! Reports of a scenario run: the "paper vs vmirq-sim" text table and the JSON document
//! (top-level `checks` array of `{name, published, simulated, unit}` plus all raw metrics).

use crate::checks::{compare, evaluate, CheckResult, CompareResult};
use crate::scenario::Scenario;
use crate::sim::RunResult;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Time series of one run by name.
pub type Timelines = BTreeMap<&'static str, Vec<(u64, i64)>>;

/// Everything a scenario run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Title.
    pub title: String,
    /// Source of the published numbers.
    pub source: String,
    /// Published vs simulated.
    pub checks: Vec<CheckResult>,
    /// vmirq policies vs the published mechanism.
    pub compare: Vec<CompareResult>,
    /// Raw results per run label.
    pub runs: BTreeMap<String, RunResult>,
    /// Raw counters per run label.
    pub counters: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// Time series per run label.
    pub timelines: BTreeMap<String, Timelines>,
}

impl Report {
    /// Evaluate checks and comparisons over the runs.
    #[must_use]
    pub fn new(s: &Scenario, runs: Vec<(String, RunResult)>) -> Self {
        let checks = s.checks.iter().map(|c| evaluate(c, &runs)).collect();
        let compare = s.compare.iter().flat_map(|c| compare(c, &runs)).collect();
        let counters = runs
            .iter()
            .map(|(l, r)| (l.clone(), r.metrics.counters.clone()))
            .collect();
        let timelines = runs
            .iter()
            .map(|(l, r)| (l.clone(), r.metrics.timeline.clone()))
            .collect();
        Self {
            scenario: s.name.clone(),
            title: s.title.clone(),
            source: s.source.clone(),
            checks,
            compare,
            runs: runs.into_iter().collect(),
            counters,
            timelines,
        }
    }

    /// Whether no check is "not reproduced".
    #[must_use]
    pub fn all_reproduced(&self) -> bool {
        self.checks.iter().all(|c| c.status != "not reproduced")
    }

    /// The text report.
    #[must_use]
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "{} ({})\n{}\n", self.title, self.scenario, self.source);
        let _ = writeln!(
            o,
            "{:<52} {:>14} {:>12} {:>7} {:>6}  status",
            "paper vs vmirq-sim", "published", "simulated", "unit", "off%"
        );
        for c in &self.checks {
            let p = if (c.published_hi - c.published).abs() > f64::EPSILON {
                format!("{}-{}", c.published, c.published_hi)
            } else {
                format!("{}", c.published)
            };
            let _ = writeln!(
                o,
                "{:<52} {:>14} {:>12.2} {:>7} {:>6.1}  {}",
                c.name, p, c.simulated, c.unit, c.off_pct, c.status
            );
            if !c.note.is_empty() {
                let _ = writeln!(o, "    why: {}", c.note);
            }
        }
        if !self.compare.is_empty() {
            let _ = writeln!(
                o,
                "\nvmirq policies vs the published mechanism (same = within 2%)"
            );
            for c in &self.compare {
                let _ = writeln!(
                    o,
                    "{:<40} {:<22} {:>12.2} vs {:<22} {:>12.2}  {}",
                    c.name, c.candidate.0, c.candidate.1, c.baseline.0, c.baseline.1, c.verdict
                );
            }
        }
        let _ = writeln!(o, "\nruns: events delivered, wall-independent");
        for (l, r) in &self.runs {
            let _ = writeln!(
                o,
                "  {l:<28} seed {:<6} events {:>10} busy {:>5.1}%",
                r.seed,
                r.engine.delivered,
                r.values.get("cpu.busy_pct").copied().unwrap_or(0.0)
            );
        }
        o
    }
}
