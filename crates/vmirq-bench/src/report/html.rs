//! The self-contained HTML report, in the order a person reads it: what was measured
//! (revision, machine, command), the headline ([`super::headline`]: vmirq against the peer
//! per target and per job, failures), the plots ([`super::plots`]: IOPS relative to the
//! peer, IOPS and p99 versus queue depth, notifications / CPU / wakeups per I/O, the policy
//! knob over the bursty workload, KVM wake latency), then the full results, one table per
//! workload ([`super::cells`]).

use super::group::{self, workloads};
use super::{cells, headline, plots, Document};
use vmirq_report::Page;

/// Id of the section of full results (the tests check it comes after every plot).
pub const RESULTS_ID: &str = "results-per-workload";

fn header(page: &mut Page, doc: &Document) {
    page.facts(&[
        ("Revision", doc.revision.clone()),
        ("Machine", doc.machine.summary()),
        ("Command", doc.run.command.clone()),
        (
            "Runs",
            format!(
                "{} repetitions per cell, {} ms warm-up + {} ms measured per run, placement {}, \
                 {:.0} s in total",
                doc.run.repetitions,
                doc.run.warmup_ms,
                doc.run.measure_ms,
                doc.run.placement.as_str(),
                doc.run.wall_s
            ),
        ),
    ]);
}

fn headline_section(page: &mut Page, doc: &Document) {
    page.section("Headline");
    page.paragraph(&headline::sentence(&doc.cells));
    if !doc.notices.is_empty() {
        page.list(&doc.notices, true);
    }
    page.table(&headline::overview(&doc.cells));
    page.note(&format!(
        "Per target over every job: jobs with a result, jobs it won (as in the next table), \
         and the ratios to {} (its defaults) from the same repetitions. \
         Green is better than the peer by more than 2%, red worse by more than 2%.",
        group::peer()
    ));
    page.table(&headline::per_job(&doc.cells));
    page.note(
        "Per job: the target with the most IOPS (within 1% of each other, as in the \
         fixed-rate trickle, the lowest mean latency; bare left out; green when it is a vmirq \
         configuration), then vmirq's target (the defaults when the run had them, else the \
         best vmirq configuration by the same rule) against the peer: IOPS, p99 latency, \
         completion notifications per I/O and client + backend CPU per I/O.",
    );
}

fn plot_sections(page: &mut Page, doc: &Document) {
    if let Some(svg) = plots::vs_peer(&doc.cells) {
        page.section("IOPS relative to the peer");
        page.plots([svg]);
    }
    let by_qd = plots::by_queue_depth(&doc.cells);
    if !by_qd.is_empty() {
        page.section("IOPS and p99 latency versus queue depth");
        page.plots(by_qd);
    }
    page.section("Notifications, CPU and wakeups per I/O");
    page.plots(plots::costs(&doc.cells));
    page.section("Policy decisions during the bursty workload");
    match doc.knob_series.first() {
        Some(first) => {
            page.note(&format!(
                "Replay: the bursty workload's submit/complete timestamps as seen by the client \
                 (run against {}, first repetition) fed through each policy in-process; the \
                 backend does not export its policy state. The curves show what each policy \
                 decides for this arrival pattern.",
                first.trace_from
            ));
            page.plots(plots::knob(doc));
        }
        None => {
            page.note("No bursty trace was recorded in this run.");
        }
    }
    crate::kvm::render_html(&doc.kvm, page);
}

fn results_section(page: &mut Page, doc: &Document) {
    page.section("Results per workload");
    page.note(
        "Medians over repetitions. Ratios to bare and to the peer (qemu-storage-daemon) pair \
         runs of the same repetition. Other load: CPU used by everything else on the machine \
         during the runs. Backend columns: vmirq serve's own counters per request over the \
         whole connection (kicks received, notifications sent, policy notifications \
         suppressed by EVENT_IDX, completions held, hold-timer expiries, kick waits ended by \
         polling and kick waits that slept).",
    );
    for w in workloads(&doc.cells) {
        page.subsection(w);
        page.table(&cells::table(&doc.cells, w));
    }
}

/// Render the whole report as one HTML page.
#[must_use]
pub fn render(doc: &Document) -> String {
    let mut page = Page::new("vmirq bench");
    header(&mut page, doc);
    // A network-only run (`--net`) has no block cells: only its own section.
    if !doc.cells.is_empty() || doc.net.is_none() {
        headline_section(&mut page, doc);
        plot_sections(&mut page, doc);
        results_section(&mut page, doc);
    }
    if let Some(net) = &doc.net {
        crate::net::report::render_html(net, &mut page);
    }
    page.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Placement;
    use crate::knob::{replay, KnobSeries};
    use crate::machine::Machine;
    use crate::report::RunInfo;
    use crate::results::{finalize, CellResult};
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
            net: None,
        }
    }

    #[test]
    fn page_is_self_contained_with_every_section() {
        let page = render(&document());
        vmirq_report::check::page(&page).expect("well-formed page");
        for needle in [
            "IOPS relative to qemu-storage-daemon",
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
        // Peer ratios, two QD plots, three bar charts, in-flight plus one knob chart.
        assert_eq!(vmirq_report::check::svgs(&page).len(), 8);
        assert!(!page.contains("NaN") && !page.contains("inf<"));
        // User-provided text is escaped.
        assert!(page.contains("&lt;boom&gt;") && !page.contains("<boom>"));
    }

    #[test]
    fn headline_comes_first_then_plots_then_the_tables_per_workload() {
        let page = render(&document());
        let at = |needle: &str| page.find(needle).unwrap_or_else(|| panic!("no {needle}"));
        let headline = at("<h2 id=\"headline\"");
        let first_plot = at("<svg");
        let results = at(&format!("<h2 id=\"{RESULTS_ID}\""));
        assert!(headline < first_plot && first_plot < results);
        let plots_end = page.rfind("</svg>").expect("plots");
        assert!(plots_end < results, "every plot before the long tables");
        // The failure is in the headline, not only at the bottom.
        assert!(at("vmirq:vic bursty: failed") < first_plot);
        // One table per workload after the results heading, each under its own heading.
        let tail = &page[results..];
        assert!(tail.contains("<h3>randread-4k</h3>") && tail.contains("<h3>bursty</h3>"));
        assert_eq!(tail.matches("<table>").count(), 2);
        // The headline names the winner of each job and the vmirq target against the peer.
        let head = &page[headline..first_plot];
        assert!(head.contains("randread-4k@32") && head.contains("randread-4k@1<"));
        assert!(head.contains("<td class=\"l good\">vmirq:vic</td>"));
        assert!(
            head.contains("more IOPS (by over 2%) in 2 of 2 jobs"),
            "{head}"
        );
        assert!(head.contains("this run has no defaults target"));
    }

    #[test]
    fn the_headline_leads_with_the_defaults_when_the_run_had_them() {
        let mut doc = document();
        let extra: Vec<CellResult> = doc
            .cells
            .iter()
            .filter(|c| c.target == "vmirq:vic")
            .map(|c| {
                let mut d = c.clone();
                d.target = "vmirq".into();
                // The defaults are slower than vmirq:vic but still beat the peer.
                for m in d.runs.iter_mut().flatten() {
                    m.iops *= 0.8;
                }
                d
            })
            .collect();
        doc.cells.extend(extra);
        finalize(&mut doc.cells);
        let page = render(&doc);
        vmirq_report::check::page(&page).expect("well-formed page");
        assert!(page.contains("vmirq serve with its defaults (target vmirq) against"));
        assert!(
            page.contains("IOPS 1.20x the peer"),
            "geomean of 1.2 and 1.2"
        );
        // The per-job rows name vmirq:vic the winner and compare the defaults with the peer.
        assert!(page.contains(
            "<td class=\"l good\">vmirq:vic</td><td class=\"l\">vmirq</td><td>24.8k</td>\
             <td>19.8k</td><td class=\"good\">1.20x</td>"
        ));
    }

    #[test]
    fn a_report_renders_again_from_its_json() {
        let doc = document();
        let back = Document::from_json(&doc.to_json().expect("json")).expect("read back");
        assert_eq!(render(&back), render(&doc));
        assert!(Document::from_json("{\"revision\": 1}").is_err());
    }

    #[test]
    fn saved_reports_still_render() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("results dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path).expect("read");
                let doc = Document::from_json(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let page = render(&doc);
                vmirq_report::check::page(&page)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                if doc.net.is_some() && doc.cells.is_empty() {
                    // A network run (`--net`): its own section instead of the block headline.
                    assert!(
                        page.contains("Network: vmirq serve-net"),
                        "{}",
                        path.display()
                    );
                } else {
                    assert!(page.contains("<h2 id=\"headline\""));
                }
                seen += 1;
            }
        }
        assert!(seen > 0, "no saved report in {}", dir.display());
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
