//! Scenario files: a base `[model]`, named run variants (`[[runs]]`, each a set of
//! overrides), published-vs-simulated checks (`[[checks]]`) and policy comparisons
//! (`[[compare]]`). Runs execute in parallel (rayon), one per core; each run is
//! deterministic on its own, so the result does not depend on the thread count. Sweeps
//! over parameter grids live in [`crate::sweep`].

use crate::model::ModelConfig;
use crate::sim::{run, RunResult, SimError};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use toml::Table;
/// A TOML value (for `--set` overrides and sweep grids).
pub use toml::Value;

/// Errors loading or running a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// TOML syntax or shape.
    #[error("scenario file is invalid")]
    Toml(#[from] toml::de::Error),
    /// A `--set` or run override is malformed.
    #[error("bad override {0:?}: expected key=value with a dotted key")]
    Override(String),
    /// A check or comparison names a run or metric that does not exist.
    #[error("{0}")]
    Reference(String),
    /// A run failed.
    #[error("run {label:?} failed")]
    Run {
        /// Run label.
        label: String,
        /// Cause.
        #[source]
        source: SimError,
    },
}

/// Result alias.
pub type Result<T> = core::result::Result<T, ScenarioError>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    title: String,
    #[serde(default)]
    source: String,
    model: Table,
    #[serde(default)]
    runs: Vec<RunSpec>,
    #[serde(default)]
    checks: Vec<CheckSpec>,
    #[serde(default)]
    compare: Vec<CompareSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunSpec {
    label: String,
    #[serde(default)]
    set: Table,
}

/// How a check derives its simulated value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// `metric(run)`.
    #[default]
    Value,
    /// `metric(run) - metric(run_b)`.
    Diff,
    /// `metric(run) / metric(run_b)`.
    Ratio,
    /// `(metric(run) / metric(run_b) - 1) * 100`, a gain in percent.
    Gain,
    /// The largest `metric(a) / metric(b)` over `pairs` ("up to N x").
    MaxRatio,
    /// The largest `(1 - metric(a) / metric(b)) * 100` over `pairs` ("up to N% faster").
    MaxReduction,
    /// The largest `metric(r)` over the runs `over` ("up to N%"), times `scale`.
    Max,
}

/// A published number and how to compute its simulated counterpart.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// Name shown in tables and JSON.
    pub name: String,
    /// Published value, or the low end of a published range.
    pub published: f64,
    /// High end of a published range (equal to `published` if a single value).
    #[serde(default)]
    pub published_hi: Option<f64>,
    /// Unit of `published` (after `scale`).
    pub unit: String,
    /// Run label.
    pub run: String,
    /// Second run for diff/ratio/gain.
    #[serde(default)]
    pub run_b: Option<String>,
    /// `(a, b)` run pairs for `max-ratio` / `max-reduction`.
    #[serde(default)]
    pub pairs: Vec<(String, String)>,
    /// Runs for `max`.
    #[serde(default)]
    pub over: Vec<String>,
    /// Metric key in the run's values.
    pub metric: String,
    /// Operation.
    #[serde(default)]
    pub op: Op,
    /// Multiply the simulated value (e.g. 0.001 for ns to µs).
    #[serde(default = "one")]
    pub scale: f64,
    /// Allowed relative distance from the published value (or range).
    #[serde(default = "tolerance")]
    pub tolerance_pct: f64,
    /// The published value is also a model input: a consistency check, not a prediction.
    #[serde(default)]
    pub input: bool,
    /// What explains a miss (shown when not reproduced).
    #[serde(default)]
    pub note: String,
}

fn one() -> f64 {
    1.0
}
fn tolerance() -> f64 {
    25.0
}

/// A comparison of vmirq's own policies against the published mechanism.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareSpec {
    /// Name shown in tables.
    pub name: String,
    /// Metric key.
    pub metric: String,
    /// Whether lower is better.
    #[serde(default = "yes")]
    pub lower_is_better: bool,
    /// The published mechanism's run.
    pub baseline: String,
    /// vmirq's runs.
    pub candidates: Vec<String>,
}

fn yes() -> bool {
    true
}

/// A loaded scenario: every run's validated configuration.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Short name.
    pub name: String,
    /// Title.
    pub title: String,
    /// Where the published numbers come from.
    pub source: String,
    /// Run variants.
    pub runs: Vec<(String, ModelConfig)>,
    /// Checks.
    pub checks: Vec<CheckSpec>,
    /// Comparisons.
    pub compare: Vec<CompareSpec>,
}

/// Parse `key=value` (value as a TOML literal, else a plain string).
///
/// # Errors
/// [`ScenarioError::Override`].
pub fn parse_set(s: &str) -> Result<(String, Value)> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| ScenarioError::Override(s.to_string()))?;
    let k = k.trim();
    if k.is_empty() {
        return Err(ScenarioError::Override(s.to_string()));
    }
    let v = v.trim();
    let value = toml::from_str::<Table>(&format!("v = {v}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(v.to_string()));
    Ok((k.to_string(), value))
}

/// Set a dotted key in a table, creating intermediate tables.
///
/// # Errors
/// [`ScenarioError::Override`] if a path component is not a table.
pub fn set_path(t: &mut Table, key: &str, value: Value) -> Result<()> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts
        .pop()
        .ok_or_else(|| ScenarioError::Override(key.to_string()))?;
    let mut cur = t;
    for p in parts {
        let e = cur
            .entry(p.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        cur = e
            .as_table_mut()
            .ok_or_else(|| ScenarioError::Override(key.to_string()))?;
    }
    cur.insert(last.to_string(), value);
    Ok(())
}

impl Scenario {
    /// Parse scenario text and apply `sets` (after each run's own overrides).
    ///
    /// # Errors
    /// [`ScenarioError`].
    pub fn parse(text: &str, sets: &[(String, Value)]) -> Result<Self> {
        let f: File = toml::from_str(text)?;
        let specs = if f.runs.is_empty() {
            vec![RunSpec {
                label: "default".into(),
                set: Table::new(),
            }]
        } else {
            f.runs
        };
        let mut runs = Vec::new();
        for r in specs {
            let mut t = f.model.clone();
            for (k, v) in r.set.iter().chain(sets.iter().map(|(k, v)| (k, v))) {
                set_path(&mut t, k, v.clone())?;
            }
            let cfg: ModelConfig = Value::Table(t).try_into()?;
            runs.push((r.label, cfg));
        }
        let s = Self {
            name: f.name,
            title: f.title,
            source: f.source,
            runs,
            checks: f.checks,
            compare: f.compare,
        };
        s.validate_refs()?;
        Ok(s)
    }

    fn validate_refs(&self) -> Result<()> {
        let has = |l: &str| self.runs.iter().any(|(x, _)| x == l);
        for c in &self.checks {
            let pairs = c.pairs.iter().flat_map(|(a, b)| [a, b]).chain(&c.over);
            for l in std::iter::once(&c.run).chain(c.run_b.iter()).chain(pairs) {
                if !has(l) {
                    return Err(ScenarioError::Reference(format!(
                        "check {:?} names unknown run {l:?}",
                        c.name
                    )));
                }
            }
        }
        for c in &self.compare {
            for l in std::iter::once(&c.baseline).chain(c.candidates.iter()) {
                if !has(l) {
                    return Err(ScenarioError::Reference(format!(
                        "compare {:?} names unknown run {l:?}",
                        c.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// Run every variant (in parallel) with `seed` (or each run's configured seed).
    ///
    /// # Errors
    /// [`ScenarioError::Run`] for the first failing run.
    pub fn run(&self, seed: Option<u64>, check_every: u64) -> Result<Vec<(String, RunResult)>> {
        self.runs
            .par_iter()
            .map(|(label, cfg)| {
                let s = seed.unwrap_or(cfg.seed);
                run(cfg, s, check_every)
                    .map(|r| (label.clone(), r))
                    .map_err(|source| ScenarioError::Run {
                        label: label.clone(),
                        source,
                    })
            })
            .collect()
    }
}

pub use crate::sweep::{sweep, SweepPoint};
