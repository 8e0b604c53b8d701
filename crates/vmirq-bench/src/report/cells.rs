//! The full results of the HTML report, one table per workload: a row per cell with the
//! medians, spreads, ratios to bare and to the peer, and vmirq serve's own counters.

use super::table::{iops, ns};
use crate::results::CellResult;
use crate::stats::as_f64;
use vmirq_report::{Cell, Table, Tone};

const HEADER: [&str; 25] = [
    "target",
    "qd",
    "mode",
    "IOPS",
    "min..max",
    "mean",
    "p50",
    "p99",
    "p99.9",
    "notif/io",
    "wake/io",
    "cpu/io",
    "client cpu/io",
    "backend cpu/io",
    "+lat/bare",
    "iops/peer",
    "p99/peer",
    "other load",
    "backend kicks/io",
    "sent/io",
    "suppressed/io",
    "held/io",
    "timer fires/io",
    "poll hits/io",
    "poll misses/io",
];

/// The backend's own counters per request (vmirq serve only).
fn backend(c: &CellResult) -> Vec<Cell> {
    match c.backend_per_io {
        Some(b) => [
            b.kicks,
            b.notifications,
            b.suppressed,
            b.held,
            b.timer_fires,
            b.poll_hits,
            b.poll_misses,
        ]
        .iter()
        .map(|x| Cell::from(format!("{x:.3}")))
        .collect(),
        None => vec![Cell::new("-", Tone::Muted); 7],
    }
}

/// A ratio coloured when it is more than 2% from 1 (`higher_is_better` says which way).
fn ratio(r: Option<f64>, higher_is_better: bool) -> Cell {
    match r {
        Some(r) if r.is_finite() => {
            let d = if higher_is_better { r - 1.0 } else { 1.0 - r };
            let tone = if d > 0.02 {
                Tone::Good
            } else if d < -0.02 {
                Tone::Bad
            } else {
                Tone::Plain
            };
            Cell::new(format!("{r:.2}"), tone)
        }
        _ => Cell::new("-", Tone::Muted),
    }
}

fn row(c: &CellResult) -> Vec<Cell> {
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| {
        v.map_or_else(|| Cell::new("-", Tone::Muted), |v| Cell::from(f(v)))
    };
    let mut cells = vec![
        Cell::from(c.target.as_str()),
        Cell::from(c.queue_depth.to_string()),
        Cell::from(c.client_mode.as_str()),
        if c.repetitions == 0 {
            Cell::new("FAILED", Tone::Bad)
        } else {
            Cell::new(iops(c.iops), Tone::Strong)
        },
        Cell::from(format!(
            "{}..{}",
            iops(c.spread.iops.min),
            iops(c.spread.iops.max)
        )),
        Cell::from(ns(c.lat_ns.mean)),
        Cell::from(ns(as_f64(c.lat_ns.p50))),
        Cell::from(ns(as_f64(c.lat_ns.p99))),
        Cell::from(ns(as_f64(c.lat_ns.p999))),
        Cell::from(format!("{:.3}", c.notifications_per_io)),
        Cell::from(format!("{:.3}", c.wakeups_per_io)),
        Cell::from(ns(c.cpu_ns_per_io)),
        Cell::from(ns(c.client_cpu_ns_per_io)),
        opt(c.backend_cpu_ns_per_io, &ns),
        opt(c.added_latency_ns.map(|a| a.mean), &ns),
        ratio(c.vs_peer.map(|p| p.iops), true),
        ratio(c.vs_peer.map(|p| p.p99), false),
        opt(c.others_busy_pct, &|o| format!("{o:.0}%")),
    ];
    cells.extend(backend(c));
    cells
}

/// The cells of `workload`, in run order, a group of rows per job.
#[must_use]
pub fn table(cells: &[CellResult], workload: &str) -> Table {
    let mut t = Table::new(&HEADER).left_aligned(3);
    let mut last: Option<&CellResult> = None;
    for c in cells.iter().filter(|c| c.workload == workload) {
        if last.is_some_and(|l| !l.same_job(c)) {
            t.group();
        }
        t.row(row(c));
        last = Some(c);
    }
    t
}
