//! Table and HTML of `vmirq kvm halt`.

use super::HaltCell;
use crate::gaps::GapSpec;
use crate::report::{pct, us, Table};
use vmirq_report::{BarChart, Page, Scale};

/// One row per cell. Halts and polling are counted over the measured phase; `start_us` is
/// the estimated delay from a wake's handler to the next poll's start; `intv_us` is the mean
/// gap of the `gaps` distribution.
#[must_use]
pub fn table(cells: &[HaltCell]) -> Table {
    let mut t = Table::new(&[
        "poller",
        "gaps",
        "intv_us",
        "place",
        "n",
        "p50_us",
        "p99_us",
        "halts",
        "polled%",
        "poll_ms",
        "fail_ms",
        "poll_us/halt",
        "start_us",
        "vcpu_cpu%",
        "max_win_us",
        "overrun_us",
    ])
    .left_aligned(2);
    for c in cells {
        t.row(vec![
            c.poller.clone(),
            c.gaps.to_string(),
            us(c.interval_ns),
            format!("{:?}", c.placement).to_lowercase(),
            c.samples.to_string(),
            us(c.lat_ns.p50),
            us(c.lat_ns.p99),
            c.halts.to_string(),
            pct(c.polled, c.halts),
            format!("{:.2}", c.poll_ns as f64 / 1e6),
            format!("{:.2}", c.poll_fail_ns as f64 / 1e6),
            us(c.poll_ns_per_halt()),
            c.poll_start_after_handler_ns()
                .map_or_else(|| "-".into(), us),
            pct(c.vcpu_cpu_ns, c.wall_ns),
            us(c.max_window_ns),
            us(c.max_overrun_ns),
        ]);
    }
    t
}

/// HTML page: latency and polling time per poller for each gap distribution, then the
/// table.
#[must_use]
pub fn html(cells: &[HaltCell]) -> String {
    let mut page = Page::new("vmirq kvm halt");
    page.paragraph(
        "Userspace halt path (no in-kernel irqchip, HLT exits to the VMM, vmirq wait policy, \
         KVM_INTERRUPT) against KVM's in-kernel halt polling on the same workload.",
    );
    let mut workloads: Vec<GapSpec> = cells.iter().map(|c| c.gaps).collect();
    workloads.dedup();
    for gaps in workloads {
        let sel: Vec<&HaltCell> = cells.iter().filter(|c| c.gaps == gaps).collect();
        let cats: Vec<String> = sel
            .iter()
            .map(|c| c.poller.split(':').take(2).collect::<Vec<_>>().join(":"))
            .collect();
        page.plots([
            // A tail of milliseconds next to medians of microseconds: log scale.
            BarChart::new(format!("Wake latency, gaps {gaps}"))
                .values("us (log scale)")
                .scale(Scale::Log)
                .categories(cats.clone())
                .series(
                    "p50",
                    sel.iter().map(|c| c.lat_ns.p50 as f64 / 1e3).collect(),
                )
                .series(
                    "p99",
                    sel.iter().map(|c| c.lat_ns.p99 as f64 / 1e3).collect(),
                )
                .svg(),
            BarChart::new(format!("Time spent polling, gaps {gaps}"))
                .values("ms")
                .categories(cats)
                .series("poll", sel.iter().map(|c| c.poll_ns as f64 / 1e6).collect())
                .svg(),
        ]);
    }
    page.section("Cells").table(&table(cells));
    page.finish()
}
