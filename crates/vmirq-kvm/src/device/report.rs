//! Table and HTML of `vmirq kvm device`.

use super::DeviceResult;
use crate::report::{us, Table};
use vmirq_report::{BarChart, Page};

/// One row per run.
#[must_use]
pub fn table(rows: &[DeviceResult]) -> Table {
    let mut t = Table::new(&[
        "moderation",
        "driver",
        "depth",
        "svc_us",
        "compl/s",
        "notify/compl",
        "irq/compl",
        "handler%",
        "p50_us",
        "p99_us",
        "completions",
        "irqs",
    ])
    .left_aligned(2);
    for r in rows {
        t.row(vec![
            r.moderation.clone(),
            r.driver.clone(),
            r.depth.to_string(),
            us(r.service_ns),
            format!("{:.0}", r.completions_per_sec),
            format!("{:.3}", r.notifies as f64 / r.completions.max(1) as f64),
            format!("{:.3}", r.irqs_per_completion),
            format!("{:.1}", r.handler_pct),
            us(r.lat_ns.p50),
            us(r.lat_ns.p99),
            r.completions.to_string(),
            r.interrupts.to_string(),
        ]);
    }
    t
}

/// HTML page: charts of throughput, interrupts and latency, then the table.
#[must_use]
pub fn html(rows: &[DeviceResult]) -> String {
    let mut page = Page::new("vmirq kvm device");
    page.paragraph(
        "A guest driver keeps N requests outstanding on a ring; the VMM device thread completes \
         them after the service time and interrupts the guest through an irqfd as the \
         completion policy decides.",
    );
    let cats: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} d{}",
                r.moderation.split(':').next().unwrap_or(""),
                r.depth
            )
        })
        .collect();
    let chart =
        |title: &str, unit: &str| BarChart::new(title).values(unit).categories(cats.clone());
    page.plots([
        chart("Completions per second", "1/s")
            .series(
                "compl/s",
                rows.iter().map(|r| r.completions_per_sec).collect(),
            )
            .svg(),
        chart("Interrupts per completion", "irq/compl")
            .series(
                "irq/compl",
                rows.iter().map(|r| r.irqs_per_completion).collect(),
            )
            .svg(),
        chart("Request latency", "us")
            .series(
                "p50",
                rows.iter().map(|r| r.lat_ns.p50 as f64 / 1e3).collect(),
            )
            .series(
                "p99",
                rows.iter().map(|r| r.lat_ns.p99 as f64 / 1e3).collect(),
            )
            .svg(),
    ]);
    page.section("Runs").table(&table(rows));
    page.finish()
}
