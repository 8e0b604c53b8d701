//! Shared helpers for scenario tests: load a bundled scenario, run it, find checks.

use vmirq_sim::checks::CheckResult;
use vmirq_sim::report::Report;
use vmirq_sim::scenario::{parse_set, Scenario};

/// Load `scenarios/<name>.toml` with `sets` applied, run it with invariant checks, and
/// print the text report (visible with --nocapture and on failure).
pub fn run_scenario(name: &str, sets: &[&str]) -> Report {
    let path = format!("{}/../../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("bundled scenario readable");
    let sets: Vec<_> = sets
        .iter()
        .map(|s| parse_set(s).expect("valid set"))
        .collect();
    let sc = Scenario::parse(&text, &sets).expect("scenario parses");
    let runs = sc.run(None, 997).expect("scenario runs");
    let r = Report::new(&sc, runs);
    println!("{}", r.text());
    r
}

/// The check named `name`.
pub fn check<'a>(r: &'a Report, name: &str) -> &'a CheckResult {
    r.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name:?}"))
}

/// A flat metric of a run.
pub fn value(r: &Report, run: &str, key: &str) -> f64 {
    r.runs
        .get(run)
        .and_then(|x| x.values.get(key).copied())
        .unwrap_or_else(|| panic!("no {key} in {run}"))
}
