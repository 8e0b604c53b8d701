//! The plots of the HTML report: IOPS relative to the peer per job, IOPS and p99 versus queue
//! depth, notifications / wakeups / CPU per I/O per job, and the policy knob replayed over
//! the bursty workload. Each target keeps one colour in every plot.

use super::group::{self, color, find, job_label, jobs, targets};
use super::Document;
use crate::results::CellResult;
use crate::stats::as_f64;
use vmirq_report::{BarChart, LineChart, Scale, Series, Svg};

/// IOPS of every target but bare and the peer divided by the peer's, per job: bars grow
/// from the peer's line at 1, on a log scale so that half and double are as long. `None`
/// when the peer did not run.
#[must_use]
pub fn vs_peer(cells: &[CellResult]) -> Option<Svg> {
    let ts = targets(cells);
    let peer = group::peer();
    let js = jobs(cells);
    let mut chart = BarChart::new(format!("IOPS relative to {peer} (1 = the peer)"))
        .values("IOPS / peer IOPS (median of repetitions, log scale)")
        .scale(Scale::Log)
        .categories(js.iter().map(|j| job_label(j)))
        .reference(1.0)
        .width(900);
    let mut any = false;
    for t in ts.iter().filter(|t| *t != "bare" && **t != peer) {
        let values: Vec<f64> = js
            .iter()
            .map(|j| {
                find(cells, j, t)
                    .and_then(|c| c.vs_peer)
                    .map_or(f64::NAN, |p| p.iops)
            })
            .collect();
        any |= values.iter().any(|v| v.is_finite());
        chart = chart.series_color(t.clone(), values, color(&ts, t));
    }
    any.then(|| chart.svg())
}

/// IOPS and p99 versus queue depth, a pair of charts per (workload, mode) run at several
/// depths.
#[must_use]
pub fn by_queue_depth(cells: &[CellResult]) -> Vec<Svg> {
    let ts = targets(cells);
    let mut out = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for c in cells {
        let key = (c.workload.as_str(), c.client_mode.as_str());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let group: Vec<&CellResult> = cells
            .iter()
            .filter(|o| (o.workload.as_str(), o.client_mode.as_str()) == key && o.repetitions > 0)
            .collect();
        let mut depths: Vec<u32> = group.iter().map(|o| o.queue_depth).collect();
        depths.sort_unstable();
        depths.dedup();
        if depths.len() < 2 {
            continue;
        }
        let series = |f: &dyn Fn(&CellResult) -> f64| -> Vec<Series> {
            ts.iter()
                .map(|t| {
                    let mut points: Vec<(f64, f64)> = group
                        .iter()
                        .filter(|o| &o.target == t)
                        .map(|o| (f64::from(o.queue_depth), f(o)))
                        .collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Series::new(t.clone(), points).color(color(&ts, t))
                })
                .filter(|s| !s.points.is_empty())
                .collect()
        };
        let title = format!("{} ({})", key.0, key.1);
        out.push(
            LineChart::new(format!("IOPS vs queue depth: {title}"))
                .x("queue depth", Scale::Log)
                .y("IOPS", Scale::Linear)
                .with_series(series(&|o| o.iops))
                .svg(),
        );
        out.push(
            LineChart::new(format!("p99 latency vs queue depth: {title}"))
                .x("queue depth", Scale::Log)
                .y("p99 (us)", Scale::Linear)
                .with_series(series(&|o| as_f64(o.lat_ns.p99) / 1000.0))
                .svg(),
        );
    }
    out
}

/// A bar per target and job of `f`.
fn per_job(
    cells: &[CellResult],
    title: &str,
    unit: &str,
    scale: Scale,
    f: &dyn Fn(&CellResult) -> f64,
) -> Svg {
    let ts = targets(cells);
    let js = jobs(cells);
    let mut chart = BarChart::new(title)
        .values(unit)
        .scale(scale)
        .categories(js.iter().map(|j| job_label(j)));
    for t in &ts {
        let values = js
            .iter()
            .map(|j| find(cells, j, t).map_or(f64::NAN, f))
            .collect();
        chart = chart.series_color(t.clone(), values, color(&ts, t));
    }
    chart.svg()
}

/// Notifications, CPU and client wakeups per I/O, per job. CPU per I/O spans two decades
/// between deep queues and a trickle, so it is drawn on a log scale.
#[must_use]
pub fn costs(cells: &[CellResult]) -> Vec<Svg> {
    vec![
        per_job(
            cells,
            "Notifications per I/O",
            "eventfd signals / I/O",
            Scale::Linear,
            &|c| c.notifications_per_io,
        ),
        per_job(
            cells,
            "CPU per I/O (client + backend)",
            "us / I/O (log scale)",
            Scale::Log,
            &|c| c.cpu_ns_per_io / 1000.0,
        ),
        per_job(
            cells,
            "Client wakeups per I/O",
            "wakeups / I/O",
            Scale::Linear,
            &|c| c.wakeups_per_io,
        ),
    ]
}

/// Commands in flight over the bursty trace, then each policy's knob over it.
#[must_use]
pub fn knob(doc: &Document) -> Vec<Svg> {
    let Some(first) = doc.knob_series.first() else {
        return Vec::new();
    };
    let in_flight = first
        .points
        .iter()
        .map(|p| (p.t_us / 1000.0, f64::from(p.in_flight)))
        .collect();
    let mut out = vec![LineChart::new("Commands in flight (bursty workload)")
        .x("time (ms)", Scale::Linear)
        .y("in flight", Scale::Linear)
        .series(Series::new("in flight", in_flight))
        .svg()];
    for (i, s) in doc.knob_series.iter().enumerate() {
        let points = s
            .points
            .iter()
            .map(|p| (p.t_us / 1000.0, p.value))
            .collect();
        out.push(
            LineChart::new(format!(
                "{}: {} notifications for {} completions",
                s.policy, s.notifications, s.completions
            ))
            .x("time (ms)", Scale::Linear)
            .y(s.unit.clone(), Scale::Linear)
            .series(Series::new(s.policy.clone(), points).color(i + 1))
            .svg(),
        );
    }
    out
}
