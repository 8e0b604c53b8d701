//! Table and HTML of `vmirq kvm device`.

use super::DeviceResult;
use crate::report::html::Page;
use crate::report::svg::{bar_chart, Series};
use crate::report::{us, Table};

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
    ]);
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

/// HTML page with the table and charts of throughput, interrupts and latency.
#[must_use]
pub fn html(rows: &[DeviceResult]) -> String {
    let mut page = Page::new(
        "vmirq kvm device",
        "A guest driver keeps N requests outstanding on a ring; the VMM device thread completes \
         them after the service time and interrupts the guest through an irqfd as the \
         completion policy decides.",
    );
    page.table(&table(rows));
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
    let one = |name: &str, f: &dyn Fn(&DeviceResult) -> f64| {
        vec![Series {
            name: name.into(),
            values: rows.iter().map(f).collect(),
        }]
    };
    page.svg(&bar_chart(
        "completions per second",
        "1/s",
        &cats,
        &one("compl/s", &|r| r.completions_per_sec),
    ));
    page.svg(&bar_chart(
        "interrupts per completion",
        "irq/compl",
        &cats,
        &one("irq/compl", &|r| r.irqs_per_completion),
    ));
    let lat = vec![
        Series {
            name: "p50 us".into(),
            values: rows.iter().map(|r| r.lat_ns.p50 as f64 / 1e3).collect(),
        },
        Series {
            name: "p99 us".into(),
            values: rows.iter().map(|r| r.lat_ns.p99 as f64 / 1e3).collect(),
        },
    ];
    page.svg(&bar_chart("request latency", "us", &cats, &lat));
    page.finish()
}
