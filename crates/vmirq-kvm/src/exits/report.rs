//! Table and HTML of `vmirq kvm exits`.

use super::ExitsReport;
use crate::report::html::Page;
use crate::report::svg::{bar_chart, Series};
use crate::report::{us, Table};

/// One row per operation, then one per wake cell.
#[must_use]
pub fn table(r: &ExitsReport) -> Table {
    let mut t = Table::new(&["what", "n", "p50_us", "p99_us", "net_p50_us", "user_exits"]);
    for o in &r.ops {
        t.row(vec![
            format!("{:?}", o.op),
            o.raw_ns.n.to_string(),
            us(o.raw_ns.p50),
            us(o.raw_ns.p99),
            us(o.net_p50_ns),
            o.user_exits.to_string(),
        ]);
    }
    for (name, c) in &r.wake_cells {
        t.row(vec![
            name.clone(),
            c.samples.to_string(),
            us(c.lat_ns.p50),
            us(c.lat_ns.p99),
            us(c.lat_ns.p50),
            "-".into(),
        ]);
    }
    for (op, why) in &r.failed {
        t.row(vec![format!("{op:?}"), "failed".into(), why.clone()]);
    }
    t
}

/// HTML page with the table, a chart of net costs and the costs file.
#[must_use]
pub fn html(r: &ExitsReport) -> String {
    let mut page = Page::new(
        "vmirq kvm exits",
        "Per-operation cost measured by guest rdtsc around each operation (baseline = the same \
         loop with a nop, subtracted for net_p50); wake rows are irqfd-to-handler latencies.",
    );
    page.table(&table(r));
    let cats: Vec<String> = r
        .ops
        .iter()
        .skip(1)
        .map(|o| format!("{:?}", o.op))
        .collect();
    let vals = r
        .ops
        .iter()
        .skip(1)
        .map(|o| o.net_p50_ns as f64 / 1000.0)
        .collect();
    page.svg(&bar_chart(
        "net exit cost, p50",
        "us",
        &cats,
        &[Series {
            name: "net p50 us".into(),
            values: vals,
        }],
    ));
    if let Ok(json) = r.costs.to_json() {
        page.heading("costs file");
        page.pre(&json);
    }
    page.finish()
}
