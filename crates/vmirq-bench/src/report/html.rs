//! The self-contained HTML report: header (revision, machine, command), the results table,
//! and inline SVG plots: IOPS and p99 versus queue depth per target, notifications per I/O,
//! CPU per I/O, and the policy knob over the bursty workload (a labelled replay).

use super::svg::{bar_chart, escape, line_chart, Series};
use super::table;
use super::Document;
use crate::results::CellResult;
use crate::stats::as_f64;
use std::fmt::Write;

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1400px}\
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;\
text-align:right;white-space:nowrap}td:nth-child(-n+4){text-align:left}h2{margin-top:1.5em}\
.plots{display:flex;flex-wrap:wrap;gap:12px}.note{color:#555;font-size:13px}";

/// Targets in first-seen order.
fn targets(cells: &[CellResult]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for c in cells {
        if !v.contains(&c.target) {
            v.push(c.target.clone());
        }
    }
    v
}

/// Job labels (`workload@qdN mode`) in first-seen order.
fn jobs(cells: &[CellResult]) -> Vec<(String, &CellResult)> {
    let mut v: Vec<(String, &CellResult)> = Vec::new();
    for c in cells {
        if !v.iter().any(|(_, o)| o.same_job(c)) {
            let mode = if c.client_mode.as_str() == "poll" {
                " poll"
            } else {
                ""
            };
            v.push((format!("{}@{}{mode}", c.workload, c.queue_depth), c));
        }
    }
    v
}

/// The backend's own counters per request (vmirq serve only).
fn backend_cols(c: &CellResult) -> [String; 4] {
    match c.backend_per_io {
        Some(b) => [b.kicks, b.notifications, b.suppressed, b.held].map(|x| format!("{x:.3}")),
        None => ["-", "-", "-", "-"].map(str::to_owned),
    }
}

fn results_table(cells: &[CellResult]) -> String {
    let mut out = String::from("<table><tr>");
    for h in [
        "target",
        "workload",
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
    ] {
        let _ = write!(out, "<th>{h}</th>");
    }
    out.push_str("</tr>");
    for c in cells {
        let f = as_f64;
        let cols = [
            escape(&c.target),
            escape(&c.workload),
            c.queue_depth.to_string(),
            c.client_mode.as_str().into(),
            if c.repetitions == 0 {
                "FAILED".into()
            } else {
                table::iops(c.iops)
            },
            format!(
                "{}..{}",
                table::iops(c.spread.iops.min),
                table::iops(c.spread.iops.max)
            ),
            table::ns(c.lat_ns.mean),
            table::ns(f(c.lat_ns.p50)),
            table::ns(f(c.lat_ns.p99)),
            table::ns(f(c.lat_ns.p999)),
            format!("{:.3}", c.notifications_per_io),
            format!("{:.3}", c.wakeups_per_io),
            table::ns(c.cpu_ns_per_io),
            table::ns(c.client_cpu_ns_per_io),
            c.backend_cpu_ns_per_io
                .map_or_else(|| "-".into(), table::ns),
            c.added_latency_ns
                .map_or_else(|| "-".into(), |a| table::ns(a.mean)),
            c.vs_peer
                .map_or_else(|| "-".into(), |p| format!("{:.2}", p.iops)),
            c.vs_peer
                .map_or_else(|| "-".into(), |p| format!("{:.2}", p.p99)),
            c.others_busy_pct
                .map_or_else(|| "-".into(), |o| format!("{o:.0}%")),
        ];
        let backend = backend_cols(c);
        out.push_str("<tr>");
        for col in cols.iter().chain(&backend) {
            let _ = write!(out, "<td>{col}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

/// IOPS and p99 versus queue depth, one chart pair per (workload, mode) with several depths.
fn qd_plots(cells: &[CellResult]) -> String {
    let mut out = String::new();
    let mut seen: Vec<(String, &str)> = Vec::new();
    for c in cells {
        let key = (c.workload.clone(), c.client_mode.as_str());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key.clone());
        let group: Vec<&CellResult> = cells
            .iter()
            .filter(|o| o.workload == key.0 && o.client_mode.as_str() == key.1 && o.repetitions > 0)
            .collect();
        let mut depths: Vec<u32> = group.iter().map(|o| o.queue_depth).collect();
        depths.sort_unstable();
        depths.dedup();
        if depths.len() < 2 {
            continue;
        }
        let series = |f: &dyn Fn(&CellResult) -> f64| -> Vec<Series> {
            targets(cells)
                .into_iter()
                .map(|t| {
                    let mut points: Vec<(f64, f64)> = group
                        .iter()
                        .filter(|o| o.target == t)
                        .map(|o| (f64::from(o.queue_depth), f(o)))
                        .collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Series { name: t, points }
                })
                .filter(|s| !s.points.is_empty())
                .collect()
        };
        let title = format!("{} ({})", key.0, key.1);
        out.push_str(&line_chart(
            &format!("IOPS vs queue depth: {title}"),
            "queue depth",
            "IOPS",
            &series(&|o| o.iops),
            true,
        ));
        out.push_str(&line_chart(
            &format!("p99 latency vs queue depth: {title}"),
            "queue depth",
            "p99 (us)",
            &series(&|o| as_f64(o.lat_ns.p99) / 1000.0),
            true,
        ));
    }
    out
}

fn per_job_bars(
    cells: &[CellResult],
    title: &str,
    y: &str,
    f: &dyn Fn(&CellResult) -> f64,
) -> String {
    let js = jobs(cells);
    let ts = targets(cells);
    let values: Vec<Vec<f64>> = ts
        .iter()
        .map(|t| {
            js.iter()
                .map(|(_, j)| {
                    cells
                        .iter()
                        .find(|c| &c.target == t && c.same_job(j) && c.repetitions > 0)
                        .map_or(f64::NAN, f)
                })
                .collect()
        })
        .collect();
    let cats: Vec<String> = js.into_iter().map(|(l, _)| l).collect();
    bar_chart(title, y, &cats, &ts, &values)
}

fn knob_plots(doc: &Document) -> String {
    let mut out = String::new();
    let Some(first) = doc.knob_series.first() else {
        return "<p class=note>No bursty trace was recorded in this run.</p>".into();
    };
    let _ = write!(out, "<p class=note>Replay: the bursty workload's submit/complete timestamps as seen by \
        the client (run against <b>{}</b>, first repetition) fed through each policy in-process; the backend \
        does not export its policy state. The curves show what each policy decides for this arrival pattern.</p>",
        escape(&first.trace_from));
    out.push_str("<div class=plots>");
    let cif = Series {
        name: "in flight".into(),
        points: first
            .points
            .iter()
            .map(|p| (p.t_us / 1000.0, f64::from(p.in_flight)))
            .collect(),
    };
    out.push_str(&line_chart(
        "Commands in flight (bursty workload)",
        "time (ms)",
        "in flight",
        &[cif],
        false,
    ));
    for s in &doc.knob_series {
        let series = Series {
            name: s.policy.clone(),
            points: s
                .points
                .iter()
                .map(|p| (p.t_us / 1000.0, p.value))
                .collect(),
        };
        let title = format!(
            "{}: {} notifications for {} completions",
            s.policy, s.notifications, s.completions
        );
        out.push_str(&line_chart(&title, "time (ms)", &s.unit, &[series], false));
    }
    out.push_str("</div>");
    out
}

/// Render the whole report as one HTML page.
#[must_use]
pub fn render(doc: &Document) -> String {
    let mut out = String::new();
    let _ = write!(out, "<!DOCTYPE html><html><head><meta charset=utf-8><title>vmirq bench</title><style>{STYLE}</style></head><body>");
    let _ = write!(out, "<h1>vmirq bench</h1><p>Revision <code>{}</code> on {}.<br>Command: <code>{}</code><br>\
        {} repetitions per cell, {} ms warm-up + {} ms measured per run, placement {}, {:.0} s in total.</p>",
        escape(&doc.revision), escape(&doc.machine.summary()), escape(&doc.run.command),
        doc.run.repetitions, doc.run.warmup_ms, doc.run.measure_ms, doc.run.placement.as_str(), doc.run.wall_s);
    out.push_str(
        "<h2>Results</h2><p class=note>Medians over repetitions. Ratios to bare and to the peer \
        (qemu-storage-daemon) pair runs of the same repetition. Other load: CPU used by everything \
        else on the machine during the runs. Backend columns: vmirq serve's own counters per \
        request over the whole connection (kicks received, notifications sent, policy \
        notifications suppressed by EVENT_IDX, completions held).</p>",
    );
    out.push_str(&results_table(&doc.cells));
    out.push_str("<h2>IOPS and p99 latency versus queue depth</h2><div class=plots>");
    out.push_str(&qd_plots(&doc.cells));
    out.push_str("</div><h2>Notifications and CPU per I/O</h2><div class=plots>");
    out.push_str(&per_job_bars(
        &doc.cells,
        "Notifications per I/O",
        "eventfd signals / I/O",
        &|c| c.notifications_per_io,
    ));
    out.push_str(&per_job_bars(
        &doc.cells,
        "CPU per I/O (client + backend)",
        "us / I/O",
        &|c| c.cpu_ns_per_io / 1000.0,
    ));
    out.push_str(&per_job_bars(
        &doc.cells,
        "Client wakeups per I/O",
        "wakeups / I/O",
        &|c| c.wakeups_per_io,
    ));
    out.push_str("</div><h2>Policy decisions during the bursty workload</h2>");
    out.push_str(&knob_plots(doc));
    out.push_str(&crate::kvm::render_html(&doc.kvm));
    if !doc.notices.is_empty() {
        out.push_str("<h2>Notices</h2><ul>");
        for n in &doc.notices {
            let _ = write!(out, "<li>{}</li>", escape(n));
        }
        out.push_str("</ul>");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Placement;
    use crate::knob::{replay, KnobSeries};
    use crate::machine::Machine;
    use crate::report::RunInfo;
    use crate::results::finalize;
    use crate::stats::{Latency, Metrics};
    use crate::target::TargetSpec;
    use crate::workload::{ClientMode, Workload};

    fn metrics(iops: f64) -> Metrics {
        Metrics {
            iops,
            lat_ns: Latency {
                mean: 1e5,
                p50: 90_000,
                p99: 200_000,
                p999: 300_000,
                max: 400_000,
            },
            notifications_per_io: 0.5,
            cpu_ns_per_io: 2_000.0,
            ..Metrics::default()
        }
    }

    /// A document with two targets at two depths, one failed cell and a knob series.
    fn document() -> Document {
        let vm: TargetSpec = "vmirq:vic".parse().expect("spec");
        let mut cells = Vec::new();
        for qd in [1, 32] {
            for (t, iops) in [(TargetSpec::Qsd, 1000.0), (vm, 1500.0)] {
                let mut c = CellResult::new(&t, &Workload::randread(qd), ClientMode::Interrupt, 2);
                c.runs = vec![Some(metrics(iops * f64::from(qd))), Some(metrics(iops))];
                cells.push(c);
            }
        }
        let mut failed = CellResult::new(&vm, &Workload::bursty(), ClientMode::Interrupt, 2);
        failed
            .errors
            .push("vmirq:vic did not become ready: <boom>".into());
        cells.push(failed);
        finalize(&mut cells);
        let trace: Vec<crate::client::TraceEvent> = (0..200u64)
            .map(|i| crate::client::TraceEvent {
                t_ns: i * 1_000,
                complete: i % 2 == 1,
            })
            .collect();
        let knob: KnobSeries = replay(&trace, &"vic".parse().expect("vic"), "vmirq:none");
        Document {
            revision: "abc123".into(),
            machine: Machine::describe(None),
            run: RunInfo {
                preset: "tiny".into(),
                command: "vmirq bench --html <x>".into(),
                repetitions: 2,
                warmup_ms: 10,
                measure_ms: 20,
                placement: Placement::Split,
                seed: 1,
                targets: vec!["qemu-storage-daemon".into(), "vmirq:vic".into()],
                wall_s: 1.0,
                finished_unix_s: 0,
            },
            cells,
            knob_series: vec![knob],
            notices: vec!["vmirq:vic bursty: failed <boom>".into()],
            kvm: crate::kvm::KvmSection::skipped("no <kvm> here"),
        }
    }

    #[test]
    fn page_is_self_contained_with_every_section() {
        let page = render(&document());
        assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
        for needle in [
            "IOPS vs queue depth: randread-4k",
            "p99 latency vs queue depth",
            "Notifications per I/O",
            "CPU per I/O",
            "Replay:",
            "vic: ",
            "FAILED",
            "abc123",
            "KVM on this host",
            "no &lt;kvm&gt; here",
        ] {
            assert!(page.contains(needle), "missing {needle}");
        }
        // Two QD plots, three bar charts, in-flight plus one knob chart.
        assert_eq!(page.matches("<svg").count(), 7);
        assert!(!page.contains("<script"), "scripts are not allowed");
        assert!(!page.contains("src=\"http"), "external resource");
        assert!(!page.contains("NaN") && !page.contains("inf"));
        // User-provided text is escaped.
        assert!(page.contains("&lt;boom&gt;") && !page.contains("<boom>"));
    }

    #[test]
    fn json_keeps_the_contract() {
        let json: serde_json::Value =
            serde_json::from_str(&document().to_json().expect("json")).expect("parse");
        assert_eq!(json["revision"], "abc123");
        assert!(json["machine"]["cpus"].as_u64().is_some_and(|c| c >= 1));
        let cells = json["cells"].as_array().expect("cells");
        assert_eq!(cells.len(), 5);
        let vic = &cells[3];
        assert_eq!(vic["target"], "vmirq:vic");
        assert_eq!(vic["workload"], "randread-4k");
        assert_eq!(vic["queue_depth"], 32);
        assert_eq!(vic["client_mode"], "interrupt");
        assert!(vic["iops"].as_f64().is_some_and(|x| x > 0.0));
        assert_eq!(vic["lat_ns"]["p50"], 90_000);
        assert_eq!(vic["lat_ns"]["p99"], 200_000);
        assert!(vic["notifications_per_io"].is_number() && vic["cpu_ns_per_io"].is_number());
        assert!(vic["vs_peer"]["iops"].as_f64().is_some_and(|r| r > 1.0));
        // A failed cell has no numbers to fake: zero repetitions and its error.
        assert_eq!(cells[4]["repetitions"], 0);
        assert_eq!(cells[4]["errors"].as_array().map(Vec::len), Some(1));
    }
}
