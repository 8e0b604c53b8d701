//! The terminal table of `vmirq bench --guest`: per workload and target, the guest's fio IOPS
//! (median, min..max), the ratio to the peer from the same repetitions, and completion
//! interrupts per I/O as the guest's `/proc/interrupts` counted them.

use super::GuestReport;
use crate::report::table::iops;
use std::fmt::Write as _;

/// The report as text.
#[must_use]
pub fn render(r: &GuestReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Guest fio: Linux {} virtio_blk under QEMU {}, {} repetition(s) of {} s per job",
        r.guest_kernel,
        r.accel.to_string().to_uppercase(),
        r.repetitions,
        r.runtime_s
    );
    let _ = writeln!(out, "accelerator: {}", r.accel_reason);
    let _ = writeln!(out, "note: {}", r.timing_note);
    let _ = writeln!(
        out,
        "guest boot (QEMU start to /init's list): median {:.1} s ({:.1}..{:.1})\n",
        r.boot_s.median, r.boot_s.min, r.boot_s.max
    );
    let _ = writeln!(
        out,
        "{:<18} {:<22} {:>22} {:>22} {:>20}",
        "workload", "target", "IOPS (min..max)", "vs peer (min..max)", "irq/IO (min..max)"
    );
    let mut last = "";
    for c in &r.cells {
        if c.workload.name != last && !last.is_empty() {
            out.push('\n');
        }
        last = c.workload.name;
        if c.runs.is_empty() {
            let _ = writeln!(
                out,
                "{:<20} {:<26} {:>22}",
                c.workload.name, c.target, "failed"
            );
            continue;
        }
        let vs = c.iops_vs_peer.map_or_else(
            || "-".to_owned(),
            |s| format!("{:.2}x ({:.2}..{:.2})", s.median, s.min, s.max),
        );
        let irq = c.interrupts_per_io;
        let _ = writeln!(
            out,
            "{:<18} {:<22} {:>22} {:>22} {:>20}",
            c.workload.name,
            c.target,
            format!(
                "{} ({}..{})",
                iops(c.iops.median),
                iops(c.iops.min),
                iops(c.iops.max)
            ),
            vs,
            format!("{:.3} ({:.2}..{:.2})", irq.median, irq.min, irq.max)
        );
    }
    for n in &r.notices {
        let _ = writeln!(out, "notice: {}", n.lines().next().unwrap_or(""));
    }
    out
}
