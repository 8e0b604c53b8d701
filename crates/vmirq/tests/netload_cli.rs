//! `vmirq netload` end to end: it starts testpmd's vhost PMD as the peer, runs a paced stream
//! in both modes, prints the comparison table and writes every run as JSON, with no frame
//! lost (SKIPPED on stderr when dpdk-testpmd is not installed); `--frames udp` against
//! serve-net in the same process, and its refusal of frames too short for udp.

use std::io::Write as _;
use std::process::Command;

#[test]
fn netload_against_testpmd_prints_a_table_and_json() {
    if vmirq_netload::peer::testpmd_exe().is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED netload_against_testpmd_prints_a_table_and_json: dpdk-testpmd not installed"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("netload.json");
    let out = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args([
            "netload",
            "--workload",
            "stream:1514@10k",
            "--repeat",
            "1",
            "--seconds",
            "0.4",
            "--warmup",
            "0.1",
            "--window",
            "256",
            "--rx-queue-size",
            "1024",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("vmirq runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("dpdk-testpmd"), "{stdout}");
    assert!(
        stdout.contains("interrupt/poll") && stdout.contains("interrupts/packet"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "one interrupt and one poll run");
    for r in runs {
        assert_eq!(r["bulk"]["lost"], 0, "{r}");
        assert!(
            r["bulk"]["received"].as_u64().is_some_and(|n| n > 500),
            "{r}"
        );
    }
}

/// `--frames udp` with 64-byte messages: refused before anything starts, naming the
/// shortest udp frame (82 bytes).
#[test]
fn netload_refuses_frames_too_short_for_udp() {
    let out = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args([
            "netload",
            "--peer",
            "vmirq",
            "--workload",
            "mix:1514@812744+64/200",
            "--frames",
            "udp",
        ])
        .output()
        .expect("vmirq runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("frame length 64") && stderr.contains("82 bytes"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args(["netload", "--frames", "tcp"])
        .output()
        .expect("vmirq runs");
    assert!(!out.status.success());
}

/// `--frames udp` against serve-net in this process: a short mix, nothing lost, every
/// frame received a udp one, and the JSON says so.
#[test]
fn netload_sends_udp_frames_through_serve_net() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("netload.json");
    let out = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args([
            "netload",
            "--peer",
            "vmirq",
            "--workload",
            "mix:1514@5k+96/200",
            "--frames",
            "udp",
            "--mode",
            "interrupt",
            "--repeat",
            "1",
            "--seconds",
            "0.3",
            "--warmup",
            "0.1",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("vmirq runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(udp frames)"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    assert_eq!(report["frames"], "udp", "{report}");
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(r["frames"], "udp", "{r}");
    assert_eq!(r["received_frames"]["raw"], 0, "{r}");
    assert!(
        r["received_frames"]["udp"].as_u64().is_some_and(|n| n > 0),
        "{r}"
    );
    assert_eq!(r["bulk"]["lost"], 0, "{r}");
    assert_eq!(r["rr"]["lost"], 0, "{r}");
}
