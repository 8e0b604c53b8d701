//! The optional "kvm" section of a bench report: where `/dev/kvm` is usable, a short
//! `vmirq kvm wake` sweep on the host's real KVM (a halted vCPU woken by an irqfd MSI, the
//! device-completion path, and by an x2APIC IPI from another vCPU, the TCP_RR path; halt
//! polling off and at 200 µs; sender on the other core), so the storage numbers sit next to
//! what a virtual interrupt and halt polling cost on the same machine. Where KVM is not
//! usable the section says why instead.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Duration;
use vmirq_kvm::host::TscClock;
use vmirq_kvm::wake::{self, Path, Sweep, WakeReport};
use vmirq_report::{BarChart, Page};

/// The section: the sweep's report, or why it was not run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KvmSection {
    /// `ran`, `skipped` (KVM not usable, or `--no-kvm`) or `failed`.
    pub status: String,
    /// Why it was skipped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The `vmirq kvm wake` report (same contract as `vmirq kvm wake --json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake: Option<WakeReport>,
}

impl Default for KvmSection {
    /// What a report saved before the section existed reads back as.
    fn default() -> Self {
        Self::skipped("not recorded in this report")
    }
}

impl KvmSection {
    /// The section of a run that left KVM out on purpose.
    #[must_use]
    pub fn skipped(reason: &str) -> Self {
        Self {
            status: "skipped".to_owned(),
            reason: Some(reason.to_owned()),
            wake: None,
        }
    }
}

/// The sweep the bench runs: about a second on this kind of machine.
#[must_use]
pub fn bench_sweep() -> Sweep {
    // `vmirq kvm wake --quick` (both paths, polling off and 200 µs, other core) with a
    // shorter interval and more samples.
    Sweep {
        intervals_ns: vec![50_000],
        samples: 200,
        warmup: 30,
        ..Sweep::quick()
    }
}

/// Run the section: probe KVM, then the sweep.
#[must_use]
pub fn run() -> KvmSection {
    if let Err(e) = vmirq_kvm::vm::probe() {
        return KvmSection::skipped(&e.to_string());
    }
    let clock = TscClock::calibrate(Duration::from_millis(50));
    match wake::run_sweep(&bench_sweep(), clock, |_| {}) {
        Ok(report) => KvmSection {
            status: "ran".to_owned(),
            reason: None,
            wake: Some(report),
        },
        Err(e) => KvmSection {
            status: "failed".to_owned(),
            reason: Some(e.to_string()),
            wake: None,
        },
    }
}

/// Text for the terminal: the sweep's table, or one line saying why there is none.
#[must_use]
pub fn render_text(section: &KvmSection) -> String {
    let mut out = String::from(
        "\nKVM on this host (vmirq kvm wake, halted vCPU woken from the other core)\n",
    );
    match (&section.wake, &section.reason) {
        (Some(w), _) => out.push_str(&wake::table(&w.cells).to_text()),
        (None, reason) => {
            let _ = writeln!(
                out,
                "{}: {}",
                section.status,
                reason.as_deref().unwrap_or("no reason given")
            );
        }
    }
    out
}

/// The report's section: a p50/p99 bar chart per path and window, or why there is none.
pub fn render_html(section: &KvmSection, page: &mut Page) {
    page.section("KVM on this host");
    page.note(
        "A halted vCPU woken by an irqfd MSI (device completion) or an x2APIC IPI from another \
         vCPU (TCP_RR), sender on the other core, with KVM halt polling off and at 200 µs \
         (vmirq kvm wake).",
    );
    let Some(w) = &section.wake else {
        page.paragraph(&format!(
            "{}: {}",
            section.status,
            section.reason.as_deref().unwrap_or("no reason given")
        ));
        return;
    };
    let us = |ns: u64| crate::stats::as_f64(ns) / 1000.0;
    page.plots([BarChart::new("Wake latency of a halted vCPU")
        .values("us")
        .categories(w.cells.iter().map(|c| {
            format!(
                "{} poll {} us",
                match c.path {
                    Path::Irqfd => "irqfd",
                    Path::Ipi => "ipi",
                },
                c.halt_poll_ns / 1000
            )
        }))
        .series("p50", w.cells.iter().map(|c| us(c.lat_ns.p50)).collect())
        .series("p99", w.cells.iter().map(|c| us(c.lat_ns.p99)).collect())
        .svg()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skipped_section_says_why_in_text_json_and_html() {
        let s = KvmSection::skipped("KVM is not usable here: /dev/kvm missing");
        assert!(render_text(&s).contains("skipped: KVM is not usable here"));
        let mut page = Page::new("t");
        render_html(&s, &mut page);
        assert!(page.finish().contains("/dev/kvm missing"));
        let json = serde_json::to_value(&s).expect("json");
        assert_eq!(json["status"], "skipped");
        assert!(json.get("wake").is_none());
    }

    #[test]
    fn the_bench_sweep_covers_both_paths_with_and_without_polling() {
        let cells = bench_sweep().cells();
        assert_eq!(cells.len(), 4);
        assert!(cells
            .iter()
            .any(|c| c.path == Path::Ipi && c.halt_poll_ns == 0));
        assert!(cells
            .iter()
            .any(|c| c.path == Path::Irqfd && c.halt_poll_ns == 200_000));
    }
}
