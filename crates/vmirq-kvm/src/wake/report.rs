//! The wake sweep's report: run every cell, then table, JSON object and HTML.

use super::{run_cell, Cell, Path, Placement, Sweep};
use crate::error::Result;
use crate::host::TscClock;
use crate::report::{pct, us, Table};
use serde::{Deserialize, Serialize};
use vmirq_report::{BarChart, Page, Svg};

/// The `vmirq kvm wake --json` object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WakeReport {
    /// Host TSC frequency measured for this run (GHz).
    pub tsc_ghz: f64,
    /// Host load averages at the end of the sweep (1, 5, 15 min).
    pub loadavg: String,
    /// Every cell of the sweep.
    pub cells: Vec<Cell>,
}

/// Run every cell of `sweep`, calling `progress` after each.
///
/// # Errors
/// The first cell that fails.
pub fn run_sweep(
    sweep: &Sweep,
    clock: TscClock,
    mut progress: impl FnMut(&Cell),
) -> Result<WakeReport> {
    let mut cells = Vec::new();
    for cfg in sweep.cells() {
        let cell = run_cell(&cfg, clock)?;
        progress(&cell);
        cells.push(cell);
    }
    Ok(WakeReport {
        tsc_ghz: clock.ghz,
        loadavg: crate::host::loadavg(),
        cells,
    })
}

fn path_name(p: Path) -> &'static str {
    match p {
        Path::Irqfd => "irqfd",
        Path::Ipi => "ipi",
    }
}

fn placement_name(p: Placement) -> &'static str {
    match p {
        Placement::Same => "same",
        Placement::Other => "other",
    }
}

/// One row per cell.
#[must_use]
pub fn table(cells: &[Cell]) -> Table {
    let mut t = Table::new(&[
        "path",
        "place",
        "intv_us",
        "poll_us",
        "period_us",
        "n",
        "p50_us",
        "p99_us",
        "halts",
        "polled%",
        "wakeups",
        "poll_ms",
        "vcpu_cpu%",
    ])
    .left_aligned(2);
    for c in cells {
        t.row(vec![
            path_name(c.path).into(),
            placement_name(c.placement).into(),
            us(c.interval_ns),
            us(c.halt_poll_ns),
            us(c.period_ns),
            c.samples.to_string(),
            us(c.lat_ns.p50),
            us(c.lat_ns.p99),
            c.halts.to_string(),
            pct(c.polls_successful, c.halts),
            c.wakeups.to_string(),
            format!("{:.2}", c.poll_ns as f64 / 1e6),
            pct(c.vcpu_cpu_ns, c.wall_ns),
        ]);
    }
    t
}

/// The HTML page: per (path, placement, interval), p50/p99 by poll window; then the table.
#[must_use]
pub fn html(report: &WakeReport) -> String {
    let mut page = Page::new("vmirq kvm wake");
    page.paragraph(
        "Latency from the sender's TSC to the first instruction of the guest's interrupt \
         handler, for a halted vCPU woken by an irqfd (MSI) or an x2APIC IPI, by KVM halt-poll \
         window. polled% = halt_successful_poll / halts from KVM's own statistics.",
    );
    page.facts(&[
        ("host load averages", report.loadavg.clone()),
        ("TSC", format!("{:.3} GHz", report.tsc_ghz)),
    ]);
    let mut groups: Vec<(Path, Placement, u64)> = Vec::new();
    for c in &report.cells {
        let key = (c.path, c.placement, c.interval_ns);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let plots: Vec<Svg> = groups
        .into_iter()
        .map(|(path, placement, interval)| {
            let cells: Vec<&Cell> = report
                .cells
                .iter()
                .filter(|c| (c.path, c.placement, c.interval_ns) == (path, placement, interval))
                .collect();
            let f = |v: u64| v as f64 / 1000.0;
            BarChart::new(format!(
                "{} wake, {} core, interval {} us",
                path_name(path),
                placement_name(placement),
                us(interval)
            ))
            .values("latency (us)")
            .categories(
                cells
                    .iter()
                    .map(|c| format!("poll {} us", us(c.halt_poll_ns))),
            )
            .series("p50", cells.iter().map(|c| f(c.lat_ns.p50)).collect())
            .series("p99", cells.iter().map(|c| f(c.lat_ns.p99)).collect())
            .svg()
        })
        .collect();
    page.plots(plots);
    page.section("Cells").table(&table(&report.cells));
    page.finish()
}
