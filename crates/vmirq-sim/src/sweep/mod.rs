//! Parameter sweeps: the cartesian product of grid axes × a scenario's runs, as independent
//! jobs. A [`SweepJob`] is self-contained (scenario text, overrides, grid point, run label,
//! resolved seed), so it gives the same [`SweepPoint`] bit for bit wherever it runs: in
//! this process on the rayon pool ([`run_local`]), or in a `vmirq sim point` process on a
//! Dask worker ([`dask::run_dask`]). Results stream to a JSON-lines file as they arrive
//! ([`ResultsFile`]), which also makes an interrupted sweep resumable.

pub mod dask;
mod file;

pub use file::ResultsFile;

use crate::scenario::{parse_set, Scenario, ScenarioError, Value};
use crate::sim::run;
use rayon::prelude::*;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// Errors of a sweep.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The scenario, an override or a run failed.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A job names a run the scenario does not have.
    #[error("scenario has no run {0:?}")]
    NoRun(String),
    /// Reading or writing the results file.
    #[error("results file {path}")]
    Io {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A results line is not a sweep point, or belongs to another sweep.
    #[error("results file {path} line {line}: {why}")]
    Results {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// The distributed engine failed.
    #[error("dask engine: {0}")]
    Engine(String),
}

/// Result alias.
pub type Result<T> = core::result::Result<T, SweepError>;

/// One (grid point, run) of a sweep, with everything needed to run it anywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepJob {
    /// The scenario file's text.
    pub scenario: String,
    /// `key=value` overrides for every run (`--set`, `--costs`).
    pub sets: Vec<String>,
    /// `key=value` assignments of this grid point.
    pub point: Vec<String>,
    /// Run label.
    pub run: String,
    /// Seed (the `--seed` or the run's configured one, resolved when the job is made).
    pub seed: u64,
}

/// One result of a sweep: the grid assignment, the run label, and the run's flat metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepPoint {
    /// `key=value` assignments of this grid point.
    pub point: Vec<String>,
    /// Run label.
    pub run: String,
    /// Seed of the run.
    #[serde(default)]
    pub seed: u64,
    /// Digest of the scenario text and overrides ([`digest`]): results of another
    /// scenario or other overrides are never mixed into one results file.
    #[serde(default)]
    pub digest: String,
    /// Flat metrics (`NaN` is written as JSON `null`).
    #[serde(deserialize_with = "nan_from_null")]
    pub values: BTreeMap<String, f64>,
}

fn nan_from_null<'de, D: Deserializer<'de>>(
    d: D,
) -> core::result::Result<BTreeMap<String, f64>, D::Error> {
    let m = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(m.into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}

/// FNV-1a 64 of the scenario text and the overrides, as 16 hex digits.
#[must_use]
pub fn digest(scenario: &str, sets: &[String]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff; // separator: ("ab","c") and ("a","bc") differ
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    eat(scenario.as_bytes());
    for s in sets {
        eat(s.as_bytes());
    }
    format!("{h:016x}")
}

/// Identity of a result within its sweep (digest, point, run, seed).
#[must_use]
pub fn key(digest: &str, point: &[String], run: &str, seed: u64) -> String {
    format!("{digest} {} | {run} | seed={seed}", point.join(" "))
}

impl SweepJob {
    /// This job's [`key`].
    #[must_use]
    pub fn key(&self) -> String {
        key(
            &digest(&self.scenario, &self.sets),
            &self.point,
            &self.run,
            self.seed,
        )
    }

    /// Run the job.
    ///
    /// # Errors
    /// [`SweepError`] for a bad override, an unknown run or a failed run.
    pub fn execute(&self) -> Result<SweepPoint> {
        let all = self
            .sets
            .iter()
            .chain(&self.point)
            .map(|s| parse_set(s))
            .collect::<core::result::Result<Vec<_>, _>>()?;
        // Applied after each run's own overrides, as in a plain run.
        let sc = Scenario::parse(&self.scenario, &all)?;
        let cfg = sc
            .runs
            .iter()
            .find(|(l, _)| *l == self.run)
            .map(|(_, c)| c)
            .ok_or_else(|| SweepError::NoRun(self.run.clone()))?;
        let r = run(cfg, self.seed, 0).map_err(|source| ScenarioError::Run {
            label: self.run.clone(),
            source,
        })?;
        Ok(SweepPoint {
            point: self.point.clone(),
            run: self.run.clone(),
            seed: self.seed,
            digest: digest(&self.scenario, &self.sets),
            values: r.values,
        })
    }
}

impl SweepPoint {
    /// This result's [`key`].
    #[must_use]
    pub fn key(&self) -> String {
        key(&self.digest, &self.point, &self.run, self.seed)
    }
}

/// `key=value` text of an override, parsed back by [`parse_set`] to the same value.
#[must_use]
pub fn set_text(k: &str, v: &Value) -> String {
    format!("{k}={v}")
}

/// The jobs of a sweep, in grid order (first axis outermost), runs in scenario order.
///
/// # Errors
/// [`ScenarioError`] if the scenario does not parse at some grid point.
pub fn jobs(
    text: &str,
    sets: &[(String, Value)],
    grid: &[(String, Vec<Value>)],
    seed: Option<u64>,
) -> Result<Vec<SweepJob>> {
    let mut points: Vec<Vec<(String, Value)>> = vec![Vec::new()];
    for (k, vals) in grid {
        points = points
            .into_iter()
            .flat_map(|p| {
                vals.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((k.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    let set_texts: Vec<String> = sets.iter().map(|(k, v)| set_text(k, v)).collect();
    let mut out = Vec::new();
    for p in &points {
        let point: Vec<String> = p.iter().map(|(k, v)| set_text(k, v)).collect();
        let mut all = sets.to_vec();
        all.extend(p.iter().cloned());
        let sc = Scenario::parse(text, &all)?;
        for (label, cfg) in sc.runs {
            out.push(SweepJob {
                scenario: text.to_string(),
                sets: set_texts.clone(),
                point: point.clone(),
                run: label,
                seed: seed.unwrap_or(cfg.seed),
            });
        }
    }
    Ok(out)
}

/// Run `jobs` on this machine (rayon, one run per core) and hand each result to `sink` as
/// it arrives (in completion order). Stops at the first error `sink` returns.
///
/// # Errors
/// The first error of `sink`.
pub fn run_local<F>(jobs: &[SweepJob], mut sink: F) -> Result<()>
where
    F: FnMut(usize, Result<SweepPoint>) -> Result<()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            jobs.par_iter().enumerate().for_each_with(tx, |tx, (i, j)| {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                // The receiver is gone only after a sink error: then nothing is needed.
                let _ = tx.send((i, j.execute()));
            });
        });
        for (i, r) in rx {
            if let Err(e) = sink(i, r) {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    })
}

/// Run every run of the scenario at every point of the grid on this machine and return the
/// results in grid order.
///
/// # Errors
/// [`SweepError`].
pub fn sweep(
    text: &str,
    sets: &[(String, Value)],
    grid: &[(String, Vec<Value>)],
    seed: Option<u64>,
) -> Result<Vec<SweepPoint>> {
    let js = jobs(text, sets, grid, seed)?;
    let mut out: Vec<Option<SweepPoint>> = vec![None; js.len()];
    run_local(&js, |i, r| {
        out[i] = Some(r?);
        Ok(())
    })?;
    Ok(out.into_iter().flatten().collect())
}
