//! The short reading printed under the table. It leads with the headline, defaults against
//! defaults: `vmirq` (`vmirq serve` with no policy flags) against qemu-storage-daemon with no
//! options, job by job ([`headline`]); then per target how it compares with the peer across
//! all jobs (geometric mean of IOPS ratios, median p99 and CPU ratios) and the latency it adds
//! over bare at queue depth 1.

use super::versus::Versus;
use crate::results::CellResult;
use crate::stats::Spread;
use crate::target::TargetSpec;
use serde::Serialize;
use std::fmt::Write;

/// One job of the headline: `vmirq` against the peer, ratios paired per repetition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadlineJob {
    /// Workload name.
    pub workload: String,
    /// Queue depth.
    pub queue_depth: u32,
    /// `interrupt` or `poll`.
    pub client_mode: String,
    /// vmirq's median IOPS.
    pub iops: f64,
    /// The peer's median IOPS.
    pub peer_iops: f64,
    /// IOPS ratio (above 1: vmirq ahead).
    pub iops_ratio: f64,
    /// p50 latency ratio (below 1: vmirq faster; absent in reports written before it was).
    pub p50_ratio: Option<f64>,
    /// p99 latency ratio.
    pub p99_ratio: f64,
    /// CPU per I/O ratio, client plus backend (below 1: vmirq cheaper).
    pub cpu_ratio: f64,
    /// vmirq's notifications per I/O.
    pub notifications_per_io: f64,
    /// The peer's notifications per I/O.
    pub peer_notifications_per_io: f64,
}

/// Defaults against defaults over every job both ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Headline {
    /// The vmirq target (`vmirq`).
    pub target: String,
    /// The peer (`qemu-storage-daemon`).
    pub peer: String,
    /// Per job, in plan order.
    pub jobs: Vec<HeadlineJob>,
    /// Geometric mean of the IOPS ratios.
    pub iops_ratio_geomean: f64,
    /// The lowest IOPS ratio of any job.
    pub iops_ratio_min: f64,
    /// Median of the CPU-per-I/O ratios.
    pub cpu_ratio_median: f64,
}

/// The headline, if both `vmirq` and the peer have cells with paired repetitions.
#[must_use]
pub fn headline(cells: &[CellResult]) -> Option<Headline> {
    let target = TargetSpec::VmirqDefaults.to_string();
    let peer = TargetSpec::Qsd.to_string();
    let jobs: Vec<HeadlineJob> = cells
        .iter()
        .filter(|c| c.target == target)
        .filter_map(|c| {
            let vs = c.vs_peer?;
            let p = cells.iter().find(|p| p.target == peer && p.same_job(c))?;
            Some(HeadlineJob {
                workload: c.workload.clone(),
                queue_depth: c.queue_depth,
                client_mode: c.client_mode.as_str().to_owned(),
                iops: c.iops,
                peer_iops: p.iops,
                iops_ratio: vs.iops,
                p50_ratio: vs.p50,
                p99_ratio: vs.p99,
                cpu_ratio: vs.cpu_ns_per_io,
                notifications_per_io: c.notifications_per_io,
                peer_notifications_per_io: p.notifications_per_io,
            })
        })
        .collect();
    let cells_vs: Vec<&CellResult> = cells
        .iter()
        .filter(|c| c.target == target && c.vs_peer.is_some())
        .filter(|c| cells.iter().any(|p| p.target == peer && p.same_job(c)))
        .collect();
    let v = Versus::over(cells_vs)?;
    Some(Headline {
        target,
        peer,
        iops_ratio_geomean: v.iops_geomean,
        iops_ratio_min: v.iops.min,
        cpu_ratio_median: v.cpu_median,
        jobs,
    })
}

/// The headline as text (empty without one).
#[must_use]
pub fn render_headline(h: Option<&Headline>) -> String {
    let Some(h) = h else {
        return String::new();
    };
    let mut out = format!(
        "Defaults against defaults: {} (no policy flags) vs {} (no options); ratios paired per \
         repetition, medians:\n",
        h.target, h.peer
    );
    for j in &h.jobs {
        let p50 = j
            .p50_ratio
            .map_or_else(|| "    -".to_owned(), |r| format!("{r:>5.2}x"));
        let _ = writeln!(
            out,
            "  {:<13} QD {:<3} {:<9}  IOPS {:>5.2}x  p50 {p50}  p99 {:>5.2}x  CPU/IO {:>5.2}x  \
             notif/IO {:.3} (peer {:.3})",
            j.workload,
            j.queue_depth,
            j.client_mode,
            j.iops_ratio,
            j.p99_ratio,
            j.cpu_ratio,
            j.notifications_per_io,
            j.peer_notifications_per_io
        );
    }
    let _ = writeln!(
        out,
        "  over {} jobs: IOPS x{:.2} (geomean), lowest x{:.2}; CPU/IO x{:.2} (median)\n",
        h.jobs.len(),
        h.iops_ratio_geomean,
        h.iops_ratio_min,
        h.cpu_ratio_median
    );
    out
}

/// The headline, then one line per non-bare target.
#[must_use]
pub fn render(cells: &[CellResult]) -> String {
    let mut targets: Vec<&str> = Vec::new();
    for c in cells {
        if c.target != "bare" && !targets.contains(&c.target.as_str()) {
            targets.push(&c.target);
        }
    }
    let mut out = render_headline(headline(cells).as_ref());
    for t in targets {
        let mine: Vec<&CellResult> = cells
            .iter()
            .filter(|c| c.target == t && c.repetitions > 0)
            .collect();
        let versus = Versus::over(mine.iter().copied());
        let qd1 = mine.iter().find(|c| {
            c.workload == "randread-4k"
                && c.queue_depth == 1
                && c.client_mode.as_str() == "interrupt"
        });
        let added = qd1
            .and_then(|c| c.added_latency_ns)
            .map_or_else(String::new, |a| {
                format!(
                    "; adds {} mean latency over bare at randread QD1",
                    super::table::ns(a.mean)
                )
            });
        let notif = Spread::over(&mine, |c| c.notifications_per_io).median;
        match versus {
            None => {
                let _ = writeln!(
                    out,
                    "{t}: {} cells, median {notif:.2} notifications/IO{added}",
                    mine.len()
                );
            }
            Some(v) => {
                let _ = writeln!(
                    out,
                    "{t}: vs qemu-storage-daemon over {} cells: IOPS x{:.2} (geomean), p99 x{:.2}, \
                     CPU/IO x{:.2} (medians); {notif:.2} notifications/IO{added}",
                    v.jobs, v.iops_geomean, v.p99_median, v.cpu_median
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::finalize;
    use crate::stats::Metrics;
    use crate::workload::{ClientMode, Workload};

    fn cell(target: &TargetSpec, workload: &Workload, iops: &[u64]) -> CellResult {
        let mut c = CellResult::new(target, workload, ClientMode::Interrupt, iops.len());
        for (slot, &x) in c.runs.iter_mut().zip(iops) {
            let mut m = Metrics {
                iops: crate::stats::as_f64(x),
                cpu_ns_per_io: 1e9 / crate::stats::as_f64(x),
                ..Metrics::default()
            };
            m.lat_ns.p50 = 1_000_000_000 / x;
            m.lat_ns.p99 = 2 * m.lat_ns.p50;
            *slot = Some(m);
        }
        c
    }

    #[test]
    fn headline_pairs_vmirq_defaults_with_the_peer_job_by_job() {
        let (qd1, qd32) = (Workload::randread(1), Workload::randread(32));
        let other: TargetSpec = "vmirq:none+never".parse().expect("spec");
        let mut cells = vec![
            cell(&TargetSpec::Qsd, &qd1, &[100, 100]),
            cell(&TargetSpec::VmirqDefaults, &qd1, &[200, 300]),
            cell(&other, &qd1, &[1000, 1000]),
            cell(&TargetSpec::Qsd, &qd32, &[1000, 1000]),
            cell(&TargetSpec::VmirqDefaults, &qd32, &[500, 500]),
        ];
        finalize(&mut cells);
        let h = headline(&cells).expect("headline");
        assert_eq!(
            (h.target.as_str(), h.peer.as_str()),
            ("vmirq", "qemu-storage-daemon")
        );
        assert_eq!(h.jobs.len(), 2);
        assert!((h.jobs[0].iops_ratio - 2.5).abs() < 1e-9, "{:?}", h.jobs[0]);
        assert!((h.jobs[1].iops_ratio - 0.5).abs() < 1e-9);
        assert!((h.jobs[1].p50_ratio.expect("p50") - 2.0).abs() < 1e-9);
        assert!((h.iops_ratio_min - 0.5).abs() < 1e-9);
        assert!((h.iops_ratio_geomean - 1.25f64.sqrt()).abs() < 1e-9);
        let text = render(&cells);
        assert!(
            text.starts_with("Defaults against defaults: vmirq"),
            "{text}"
        );
        assert!(text.contains("lowest x0.50"), "{text}");
        // Without the peer there is no headline.
        let alone: Vec<CellResult> = cells
            .into_iter()
            .filter(|c| c.target != "qemu-storage-daemon")
            .collect();
        assert!(headline(&alone).is_none());
        assert!(!render(&alone).starts_with("Defaults"));
    }
}
