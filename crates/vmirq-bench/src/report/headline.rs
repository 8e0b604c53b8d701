//! The headline of the HTML report, what a person reads first: one sentence on vmirq against
//! the peer, a line per target over all jobs, and a line per job (the winner, and vmirq's
//! lead target against the peer with notifications and CPU per I/O).
//!
//! The lead target is `vmirq` (the defaults) when the run had it; otherwise, per job, the
//! vmirq configuration with the most IOPS, named in its row.

use super::group::{self, find, is_vmirq, job_label, jobs, targets, DEFAULTS};
use super::table::{iops, ns};
use super::versus::Versus;
use crate::results::CellResult;
use crate::stats::Spread;
use vmirq_report::{Cell, Table, Tone};

/// Ratios within this distance of 1 are shown without colour (run-to-run noise).
const NOISE: f64 = 0.02;

/// A ratio to the peer as `1.84x`, green when better, red when worse; `higher_is_better`
/// says which way is better.
fn ratio(r: Option<f64>, higher_is_better: bool) -> Cell {
    match r {
        Some(r) if r.is_finite() => {
            let better = if higher_is_better { r - 1.0 } else { 1.0 - r };
            let tone = if better > NOISE {
                Tone::Good
            } else if better < -NOISE {
                Tone::Bad
            } else {
                Tone::Plain
            };
            Cell::new(format!("{r:.2}x"), tone)
        }
        _ => Cell::new("-", Tone::Muted),
    }
}

/// IOPS this close (relative) count as a tie: a fixed-rate workload (trickle) runs at the
/// same IOPS on every target.
const TIE: f64 = 0.01;

/// The best of `cells`: the most IOPS; among those within [`TIE`] of the most, the lowest
/// mean latency.
fn best<'a>(cells: impl Iterator<Item = &'a CellResult> + Clone) -> Option<&'a CellResult> {
    let top = cells.clone().map(|c| c.iops).fold(f64::NAN, f64::max);
    cells
        .filter(|c| c.iops >= top * (1.0 - TIE))
        .min_by(|a, b| a.lat_ns.mean.total_cmp(&b.lat_ns.mean))
}

/// The best non-bare cell of `job`'s job.
fn winner<'a>(cells: &'a [CellResult], job: &CellResult) -> Option<&'a CellResult> {
    best(
        cells
            .iter()
            .filter(|c| c.same_job(job) && c.repetitions > 0 && c.target != "bare"),
    )
}

/// vmirq's cell for `job`: the defaults if the run had them, else the best vmirq cell.
fn lead<'a>(cells: &'a [CellResult], job: &CellResult, defaults: bool) -> Option<&'a CellResult> {
    if defaults {
        return find(cells, job, DEFAULTS);
    }
    best(
        cells
            .iter()
            .filter(|c| c.same_job(job) && c.repetitions > 0 && is_vmirq(&c.target)),
    )
}

/// Whether the run had the defaults target.
fn has_defaults(cells: &[CellResult]) -> bool {
    cells.iter().any(|c| c.target == DEFAULTS)
}

/// One sentence: the lead against the peer over every job (or why there is no comparison).
#[must_use]
pub fn sentence(cells: &[CellResult]) -> String {
    let peer = group::peer();
    let defaults = has_defaults(cells);
    let leads: Vec<&CellResult> = jobs(cells)
        .into_iter()
        .filter_map(|j| lead(cells, j, defaults))
        .collect();
    let leads_wins = leads
        .iter()
        .filter(|c| c.vs_peer.is_some_and(|p| p.iops > 1.0 + NOISE))
        .count();
    let who = if defaults {
        "vmirq serve with its defaults (target vmirq)".to_owned()
    } else {
        "The best vmirq configuration of each job (this run has no defaults target \"vmirq\")"
            .to_owned()
    };
    let Some(v) = Versus::over(leads) else {
        return format!("{who}: no job has a {peer} run to compare with.");
    };
    let wins = leads_wins;
    format!(
        "{who} against {peer} with its defaults: IOPS {:.2}x the peer's (geometric mean over {} \
         jobs, {:.2}x to {:.2}x), more IOPS (by over 2%) in {wins} of {} jobs; CPU per I/O {:.2}x \
         the peer's (median).",
        v.iops_geomean, v.jobs, v.iops.min, v.iops.max, v.jobs, v.cpu_median,
    )
}

/// A row per target (bare left out) over every job.
#[must_use]
pub fn overview(cells: &[CellResult]) -> Table {
    let mut t = Table::new(&[
        "target",
        "jobs",
        "wins",
        "IOPS vs peer (geomean)",
        "min..max",
        "p99 vs peer (median)",
        "CPU/IO vs peer (median)",
        "notif/IO (median)",
    ])
    .left_aligned(1);
    let js = jobs(cells);
    for target in targets(cells).into_iter().filter(|t| t != "bare") {
        let mine: Vec<&CellResult> = cells
            .iter()
            .filter(|c| c.target == target && c.repetitions > 0)
            .collect();
        let wins = js
            .iter()
            .filter(|j| winner(cells, j).is_some_and(|w| w.target == target))
            .count();
        let versus = Versus::over(mine.iter().copied());
        let range = versus.map_or_else(
            || Cell::new("-", Tone::Muted),
            |v| Cell::from(format!("{:.2}..{:.2}", v.iops.min, v.iops.max)),
        );
        let name_tone = if target == DEFAULTS {
            Tone::Strong
        } else {
            Tone::Plain
        };
        t.row([
            Cell::new(target.clone(), name_tone),
            Cell::from(mine.len().to_string()),
            Cell::from(wins.to_string()),
            ratio(versus.map(|v| v.iops_geomean), true),
            range,
            ratio(versus.map(|v| v.p99_median), false),
            ratio(versus.map(|v| v.cpu_median), false),
            Cell::from(format!(
                "{:.3}",
                Spread::over(&mine, |c| c.notifications_per_io).median
            )),
        ]);
    }
    t
}

/// A row per job: the winner, and the lead target against the peer.
#[must_use]
pub fn per_job(cells: &[CellResult]) -> Table {
    let mut t = Table::new(&[
        "job",
        "winner",
        "vmirq target",
        "winner IOPS",
        "vmirq IOPS",
        "IOPS vs peer",
        "p99 vs peer",
        "notif/IO",
        "peer notif/IO",
        "CPU/IO",
        "peer CPU/IO",
        "CPU/IO vs peer",
    ])
    .left_aligned(3);
    let peer = group::peer();
    let defaults = has_defaults(cells);
    for j in jobs(cells) {
        let w = winner(cells, j);
        let l = lead(cells, j, defaults);
        let p = find(cells, j, &peer);
        let dash = || Cell::new("-", Tone::Muted);
        let w_name = w.map_or_else(dash, |w| {
            let tone = if is_vmirq(&w.target) {
                Tone::Good
            } else {
                Tone::Bad
            };
            Cell::new(w.target.clone(), tone)
        });
        let num = |c: Option<&CellResult>, f: &dyn Fn(&CellResult) -> String| {
            c.map_or_else(dash, |c| Cell::from(f(c)))
        };
        t.row([
            Cell::from(job_label(j)),
            w_name,
            num(l, &|c| c.target.clone()),
            num(w, &|c| iops(c.iops)),
            num(l, &|c| iops(c.iops)),
            ratio(l.and_then(|c| c.vs_peer).map(|v| v.iops), true),
            ratio(l.and_then(|c| c.vs_peer).map(|v| v.p99), false),
            num(l, &|c| format!("{:.3}", c.notifications_per_io)),
            num(p, &|c| format!("{:.3}", c.notifications_per_io)),
            num(l, &|c| ns(c.cpu_ns_per_io)),
            num(p, &|c| ns(c.cpu_ns_per_io)),
            ratio(l.and_then(|c| c.vs_peer).map(|v| v.cpu_ns_per_io), false),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_cell_has_the_most_iops_or_at_a_tie_the_lowest_latency() {
        use crate::target::TargetSpec;
        use crate::workload::{ClientMode, Workload};
        let cell = |iops: f64, mean: f64| {
            let mut c = CellResult::new(
                &TargetSpec::Qsd,
                &Workload::trickle(),
                ClientMode::Interrupt,
                1,
            );
            c.iops = iops;
            c.lat_ns.mean = mean;
            c
        };
        let cells = [cell(300.0, 90.0), cell(299.0, 50.0), cell(250.0, 10.0)];
        assert_eq!(best(cells.iter()).map(|c| c.lat_ns.mean), Some(50.0));
        let cells = [cell(400.0, 90.0), cell(299.0, 50.0)];
        assert_eq!(best(cells.iter()).map(|c| c.iops), Some(400.0));
        assert!(best([].iter()).is_none());
    }

    #[test]
    fn ratios_are_toned_beyond_noise_the_right_way() {
        assert_eq!(ratio(Some(1.5), true).tone, Tone::Good);
        assert_eq!(ratio(Some(1.5), false).tone, Tone::Bad);
        assert_eq!(ratio(Some(1.01), true).tone, Tone::Plain);
        assert_eq!(ratio(Some(0.5), false).text, "0.50x");
        assert_eq!(ratio(None, true).text, "-");
        assert_eq!(ratio(Some(f64::NAN), true).text, "-");
    }
}
