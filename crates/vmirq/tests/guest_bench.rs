//! `vmirq bench --guest` end to end, as small as it gets (one target, one repetition, 1 s
//! per fio job): the report names the accelerator, and every workload has a run with IOPS
//! and interrupts per I/O that the guest's counters support. QEMU missing: a SKIPPED line.

mod guest;

use std::process::Command;

#[test]
fn guest_bench_reports_iops_and_interrupts_per_io() {
    let test = "guest_bench_reports_iops_and_interrupts_per_io";
    if guest::harness(test).is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("guest.json");
    let out = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args([
            "bench",
            "--guest",
            "--quick",
            "--measure-ms",
            "1000",
            "--target",
            "vmirq:vic+kvm",
            "--no-peer",
            "--json",
        ])
        .arg(&json)
        .output()
        .expect("run vmirq bench --guest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("vmirq:vic+kvm") && stdout.contains("irq/IO"),
        "{stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
    assert!(
        matches!(doc["accel"].as_str(), Some("kvm" | "tcg")),
        "{doc}"
    );
    assert!(doc["accel_reason"].as_str().is_some_and(|r| !r.is_empty()));
    let cells = doc["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 3, "one cell per workload");
    for c in cells {
        let run = &c["runs"][0];
        let ios = run["ios"].as_u64().expect("ios");
        let irqs = run["interrupts"].as_u64().expect("interrupts");
        assert!(
            ios > 0 && run["iops"].as_f64().is_some_and(|x| x > 0.0),
            "{c}"
        );
        // At most one interrupt per completion (the job's last requests, up to its queue
        // depth, may complete after fio stopped counting); none at all would not be the
        // guest's count.
        let qd = c["workload"]["qd"].as_u64().expect("qd");
        assert!(irqs > 0 && irqs <= ios + qd, "{c}");
        assert!(c["iops_vs_peer"].is_null(), "no peer, no ratio: {c}");
    }
}
