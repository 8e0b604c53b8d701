//! The terminal table: one row per cell, fio-like units (`12.3k` IOPS, `45.6us` latency),
//! median over repetitions with the IOPS spread, and ratios to bare and to the peer.

use crate::results::CellResult;
use std::fmt::Write;

/// IOPS the way fio prints them: `850`, `12.3k`, `1.20M`.
#[must_use]
pub fn iops(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else if x >= 1e3 {
        format!("{:.2}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// A duration in nanoseconds as `850ns`, `12.3us`, `4.56ms`, `1.20s`.
#[must_use]
pub fn ns(x: f64) -> String {
    let a = x.abs();
    if a >= 1e9 {
        format!("{:.2}s", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}ms", x / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}us", x / 1e3)
    } else {
        format!("{x:.0}ns")
    }
}

fn opt_ratio(x: Option<f64>) -> String {
    match x {
        Some(r) if r.is_finite() => format!("{r:.2}x"),
        _ => "-".into(),
    }
}

const HEADER: [&str; 15] = [
    "target",
    "workload",
    "qd",
    "mode",
    "IOPS",
    "+/-",
    "p50",
    "p99",
    "p99.9",
    "notif/io",
    "wake/io",
    "cpu/io",
    "+lat/bare",
    "vs peer iops|p99",
    "other%",
];

fn row(c: &CellResult) -> [String; 15] {
    let f = crate::stats::as_f64;
    [
        c.target.clone(),
        c.workload.clone(),
        c.queue_depth.to_string(),
        c.client_mode.as_str().to_owned(),
        if c.repetitions == 0 {
            "FAILED".into()
        } else {
            iops(c.iops)
        },
        format!("{:.0}%", 100.0 * c.spread.iops.relative_range()),
        ns(f(c.lat_ns.p50)),
        ns(f(c.lat_ns.p99)),
        ns(f(c.lat_ns.p999)),
        format!("{:.2}", c.notifications_per_io),
        format!("{:.2}", c.wakeups_per_io),
        ns(c.cpu_ns_per_io),
        c.added_latency_ns
            .map_or_else(|| "-".into(), |a| ns(a.mean)),
        c.vs_peer.map_or_else(
            || "-".into(),
            |p| format!("{}|{}", opt_ratio(Some(p.iops)), opt_ratio(Some(p.p99))),
        ),
        c.others_busy_pct
            .map_or_else(|| "-".into(), |o| format!("{o:.0}%")),
    ]
}

/// Render every cell as an aligned text table.
#[must_use]
pub fn render(cells: &[CellResult]) -> String {
    let rows: Vec<[String; 15]> = cells.iter().map(row).collect();
    let mut width = HEADER.map(str::len);
    for r in &rows {
        for (w, s) in width.iter_mut().zip(r) {
            *w = (*w).max(s.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, r: &[String]| {
        for (i, (s, w)) in r.iter().zip(width).enumerate() {
            let sep = if i == 0 { "" } else { "  " };
            if i < 4 {
                let _ = write!(out, "{sep}{s:<w$}");
            } else {
                let _ = write!(out, "{sep}{s:>w$}");
            }
        }
        out.push('\n');
    };
    line(&mut out, &HEADER.map(str::to_owned));
    let mut last_job: Option<&CellResult> = None;
    for (c, r) in cells.iter().zip(&rows) {
        if last_job.is_some_and(|l| !l.same_job(c)) {
            out.push('\n');
        }
        line(&mut out, r);
        last_job = Some(c);
    }
    out.push_str(
        "IOPS and latencies: median of repetitions; +/-: half the min..max range of IOPS; \
         notif/io: completion-eventfd signals per I/O; wake/io: client blocked and woken per I/O;\n\
         cpu/io: client + backend CPU per I/O; +lat/bare: mean latency added over bare io_uring; \
         vs peer: ratio to qemu-storage-daemon in the same repetition (median);\n\
         other%: CPU used by everything else on the machine during the runs (noise).\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Latency, Metrics};
    use crate::target::TargetSpec;
    use crate::workload::{ClientMode, Workload};

    #[test]
    fn units_like_fio() {
        assert_eq!(iops(850.0), "850");
        assert_eq!(iops(1234.0), "1.23k");
        assert_eq!(iops(123_456.0), "123.5k");
        assert_eq!(iops(2_500_000.0), "2.50M");
        assert_eq!(ns(850.0), "850ns");
        assert_eq!(ns(12_345.0), "12.3us");
        assert_eq!(ns(-2_000.0), "-2.0us");
        assert_eq!(ns(4_560_000.0), "4.56ms");
    }

    #[test]
    fn table_has_a_row_per_cell_and_marks_failures() {
        let mut ok = CellResult::new(
            &TargetSpec::Bare,
            &Workload::randread(4),
            ClientMode::Poll,
            1,
        );
        ok.runs[0] = Some(Metrics {
            iops: 50_000.0,
            lat_ns: Latency {
                mean: 20_000.0,
                p50: 19_000,
                p99: 40_000,
                p999: 80_000,
                max: 90_000,
            },
            ..Metrics::default()
        });
        ok.summarize();
        let failed = CellResult::new(
            &TargetSpec::Qsd,
            &Workload::randread(4),
            ClientMode::Poll,
            1,
        );
        let text = render(&[ok, failed]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("target"));
        assert!(
            lines[1].contains("bare") && lines[1].contains("50.0k") && lines[1].contains("40.0us")
        );
        assert!(lines[2].contains("qemu-storage-daemon") && lines[2].contains("FAILED"));
    }
}
