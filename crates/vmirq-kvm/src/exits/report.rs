//! Table and HTML of `vmirq kvm exits`.

use super::ExitsReport;
use crate::guest::exits::ExitOp;
use crate::guest::paired::Pair;
use crate::report::{us, Table};
use vmirq_report::{BarChart, Page};

/// One row per operation, then one per wake cell.
#[must_use]
pub fn table(r: &ExitsReport) -> Table {
    let mut t =
        Table::new(&["what", "n", "p50_us", "p99_us", "net_p50_us", "user_exits"]).left_aligned(1);
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
    if let Some(e) = &r.reentry {
        t.row(vec![
            "reentry_after_sleep".into(),
            e.cold_ns.n.to_string(),
            us(e.cold_ns.p50),
            us(e.cold_ns.p99),
            us(e.penalty_ns),
            "-".into(),
        ]);
    }
    if let Some(w) = &r.timer {
        for (name, l, extra) in [
            ("timer_hlt_polled", &w.polled, Some(w.polled_extra_ns)),
            ("timer_hlt_slept", &w.slept, Some(w.slept_extra_ns)),
            ("timer_running_out", &w.running, None),
        ] {
            t.row(vec![
                name.into(),
                l.lat_ns.n.to_string(),
                us(l.lat_ns.p50),
                us(l.lat_ns.p99),
                extra.map_or_else(|| "-".into(), signed_us),
                l.user_exits.to_string(),
            ]);
        }
    }
    if let Some(w) = &r.irqfd_write {
        for (name, d, net) in [
            ("irqfd_write_other_cpu", &w.irqfd_ns, w.msi_ns),
            ("eventfd_write_other_cpu", &w.plain_ns, w.plain_ns.p50),
        ] {
            t.row(vec![
                name.into(),
                d.n.to_string(),
                us(d.p50),
                us(d.p99),
                us(net),
                "-".into(),
            ]);
        }
    }
    if let Some(f) = &r.forced_irq {
        for (name, d) in [
            ("forced_irq_to_handler", &f.to_handler_ns),
            ("forced_irq_handler", &f.handler_ns),
            ("forced_irq_return", &f.return_ns),
            ("forced_irq_lost", &f.lost_ns),
            ("forced_irq_arrival", &f.arrival_ns),
            ("forced_irq_write", &f.write_ns),
        ] {
            t.row(vec![
                name.into(),
                d.n.to_string(),
                us(d.p50),
                us(d.p99),
                "-".into(),
                "-".into(),
            ]);
        }
    }
    if let Some(c) = &r.chained_irq {
        let d = &c.iret_to_handler_ns;
        t.row(vec![
            "chained_irq_iret_to_handler".into(),
            d.n.to_string(),
            us(d.p50),
            us(d.p99),
            format!("{} ran between", c.ran_between),
            "-".into(),
        ]);
    }
    for (op, why) in &r.failed {
        t.row(vec![format!("{op:?}"), "failed".into(), why.clone()]);
    }
    t
}

/// One row per pair: the single-operation loops' net p50 (`old_net`: the op's p50 minus the
/// separately measured baseline's, or for a [`ExitOp::PioUser`] reference the difference of
/// the two ops' net p50s, as host profiles v5-v7 take it) beside the paired net (p10, p50,
/// p90 of op minus reference, pair by pair), then the ICR write to the other vCPU
/// ([`super::icr`]) per target state, with the share of its halts a poll ended.
#[must_use]
pub fn paired_table(r: &ExitsReport) -> Table {
    let mut t = Table::new(&[
        "op",
        "reference",
        "n",
        "op_p50_us",
        "ref_p50_us",
        "old_net_p50_us",
        "pair_p10_us",
        "pair_p50_us",
        "pair_p90_us",
        "user_exits",
    ])
    .left_aligned(2);
    for c in &r.paired {
        t.row(vec![
            format!("{:?}", c.pair.op),
            format!("{:?}", c.pair.reference),
            c.net_ns.n.to_string(),
            us(c.op_raw_ns.p50),
            us(c.reference_raw_ns.p50),
            old_net(r, c.pair).map_or_else(|| "-".into(), signed_us),
            signed_us(c.net_ns.p10),
            signed_us(c.net_ns.p50),
            signed_us(c.net_ns.p90),
            c.user_exits.to_string(),
        ]);
    }
    for c in &r.ipi_other {
        // The ICR write of `IpiSelf`, sent from vCPU 1 to the halted vCPU 0.
        t.row(vec![
            format!(
                "IpiOther({:?}, {:.0}% polled)",
                c.target, c.polled_share_pct
            ),
            format!("{:?}", ExitOp::Baseline),
            c.net_ns.n.to_string(),
            us(c.op_raw_ns.p50),
            us(c.reference_raw_ns.p50),
            "-".into(),
            signed_us(c.net_ns.p10),
            signed_us(c.net_ns.p50),
            signed_us(c.net_ns.p90),
            "0".into(),
        ]);
    }
    for (pair, why) in &r.paired_failed {
        t.row(vec![
            format!("{:?}", pair.op),
            format!("{:?}", pair.reference),
            "failed".into(),
            why.clone(),
        ]);
    }
    t
}

/// The single-operation loops' net cost of `pair` in the same run, if both ops ran.
fn old_net(r: &ExitsReport, pair: Pair) -> Option<i64> {
    let net = |op: ExitOp| {
        r.ops
            .iter()
            .find(|o| o.op == op)
            .and_then(|o| i64::try_from(o.net_p50_ns).ok())
    };
    match pair.reference {
        ExitOp::Baseline => net(pair.op),
        reference => Some(net(pair.op)? - net(reference)?),
    }
}

/// Signed nanoseconds as microseconds with one decimal.
fn signed_us(ns: i64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let v = ns as f64 / 1000.0;
    format!("{v:.1}")
}

/// HTML page: a chart of net costs, the table and the costs file.
#[must_use]
pub fn html(r: &ExitsReport) -> String {
    let mut page = Page::new("vmirq kvm exits");
    page.paragraph(
        "Per-operation cost measured by guest rdtsc around each operation (baseline = the same \
         loop with a nop, subtracted for net_p50); wake rows are irqfd-to-handler latencies.",
    );
    let ops = r.ops.iter().skip(1);
    page.plots([BarChart::new("Net exit cost, p50")
        .values("us")
        .categories(ops.clone().map(|o| format!("{:?}", o.op)))
        .series(
            "net p50",
            ops.map(|o| o.net_p50_ns as f64 / 1000.0).collect(),
        )
        .svg()]);
    page.section("Operations").table(&table(r));
    page.section("Paired with their reference")
        .paragraph(
            "Each operation alternates with its reference in one loop; the net cost is the \
             p50 of the per-pair differences (old_net: the separate loops' p50s subtracted).",
        )
        .table(&paired_table(r));
    if let Ok(json) = r.costs.to_json() {
        page.section("Costs file").pre(&json);
    }
    page.finish()
}
