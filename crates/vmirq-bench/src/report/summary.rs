//! The short reading printed under the table: per target, how it compares with the peer
//! across all jobs (geometric mean of IOPS ratios, median p99 and CPU ratios) and the latency
//! it adds over bare at queue depth 1.

use crate::results::CellResult;
use crate::stats::Spread;
use std::fmt::Write;

/// Geometric mean of the finite, positive values (NaN if there are none).
#[must_use]
pub fn geomean(values: &[f64]) -> f64 {
    let logs: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(f64::ln)
        .collect();
    if logs.is_empty() {
        return f64::NAN;
    }
    (logs.iter().sum::<f64>() / crate::stats::as_f64(logs.len() as u64)).exp()
}

/// One line per non-bare target.
#[must_use]
pub fn render(cells: &[CellResult]) -> String {
    let mut targets: Vec<&str> = Vec::new();
    for c in cells {
        if c.target != "bare" && !targets.contains(&c.target.as_str()) {
            targets.push(&c.target);
        }
    }
    let mut out = String::new();
    for t in targets {
        let mine: Vec<&CellResult> = cells
            .iter()
            .filter(|c| c.target == t && c.repetitions > 0)
            .collect();
        let peer: Vec<_> = mine.iter().filter_map(|c| c.vs_peer).collect();
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
        if peer.is_empty() {
            let _ = writeln!(
                out,
                "{t}: {} cells, median {notif:.2} notifications/IO{added}",
                mine.len()
            );
        } else {
            let iops = geomean(&peer.iter().map(|p| p.iops).collect::<Vec<_>>());
            let p99 = Spread::over(&peer, |p| p.p99).median;
            let cpu = Spread::over(&peer, |p| p.cpu_ns_per_io).median;
            let _ = writeln!(
                out,
                "{t}: vs qemu-storage-daemon over {} cells: IOPS x{iops:.2} (geomean), p99 x{p99:.2}, \
                 CPU/IO x{cpu:.2} (medians); {notif:.2} notifications/IO{added}",
                peer.len()
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geomean_ignores_non_positive() {
        assert!((geomean(&[2.0, 8.0]) - 4.0).abs() < 1e-12);
        assert!((geomean(&[1.0, f64::NAN, 0.0, 1.0]) - 1.0).abs() < 1e-12);
        assert!(geomean(&[]).is_nan());
    }
}
