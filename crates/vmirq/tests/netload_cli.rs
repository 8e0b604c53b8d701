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
    let json_arg = json.to_str().expect("utf-8 path");
    let out = udp_mix(&["--peer", "vmirq", "--json", json_arg]);
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

/// `vmirq netload` with the arguments of a short 3-port mix and `extra`.
fn three_port_mix(extra: &[&str]) -> std::process::Output {
    udp_mix(&[&["--ports", "3"], extra].concat())
}

/// `vmirq netload` with the arguments of a short mix in udp frames and `extra`.
fn udp_mix(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args([
            "netload",
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
        .args(extra)
        .output()
        .expect("vmirq runs")
}

/// The 3-port mix is refused before any peer starts without the wire sender, and with
/// testpmd as the peer (it forwards fixed pairs: port 2 would have no partner).
#[test]
fn netload_refuses_three_ports_without_the_wire_or_with_testpmd() {
    let out = three_port_mix(&["--peer", "vmirq"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("mix on 3 ports needs the wire sender (--sender wire)"),
        "{stderr}"
    );
    for peers in ["testpmd", "vmirq,testpmd"] {
        let out = three_port_mix(&["--peer", peers, "--sender", "wire"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{peers}: {stderr}");
        assert!(
            stderr.contains("--peer testpmd") && stderr.contains("fixed pairs"),
            "{peers}: {stderr}"
        );
        // Nothing ran: no run's summary, no serve-net counters.
        assert!(!stderr.contains("port 0:"), "{peers}: {stderr}");
    }
}

/// The 3-port mix through serve-net in this process: it runs with `--switch learn`, loses
/// nothing, every request is answered by the responder, and nothing reaches the wire's
/// port but the path probes flooded before port 2's address was learned.
#[test]
fn netload_runs_the_three_port_mix_through_serve_net() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("netload.json");
    let json_arg = json.to_str().expect("utf-8 path");
    let out = three_port_mix(&["--peer", "vmirq", "--sender", "wire", "--json", json_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("--switch learn"), "{stdout}");
    assert!(stdout.contains("RTT p50"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let r = &report["runs"][0];
    assert_eq!(r["bulk"]["lost"], 0, "{r}");
    assert_eq!(r["rr"]["lost"], 0, "{r}");
    assert!(
        r["rr"]["transactions"].as_u64().is_some_and(|n| n > 0),
        "{r}"
    );
    assert!(r["rr"]["answered"].as_u64().is_some_and(|n| n > 0), "{r}");
    // The round trip's halves, from the responder's stamps: each positive, their medians
    // within the whole's p99 (sums of medians are no medians, but neither half can be
    // longer than most whole round trips).
    assert!(stdout.contains("request half p50"), "{stdout}");
    let rtt_p99 = r["rr"]["rtt"]["p99_ns"].as_u64().expect("rtt p99");
    for half in ["out", "far", "back"] {
        let p50 = r["rr"][half]["p50_ns"].as_u64().unwrap_or(0);
        assert!(p50 > 0 && p50 <= rtt_p99, "{half}: {r}");
    }
    // serve-net's summary: port 0 received only flooded path probes (a handful), port 2
    // the requests.
    let rx = |port: usize| -> u64 {
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("port {port}: ")))
            .unwrap_or_else(|| panic!("port {port} counters: {stderr}"));
        let v = line.split("rx_frames=").nth(1).expect("rx_frames");
        v.split_whitespace()
            .next()
            .expect("a number")
            .parse()
            .expect("a count")
    };
    assert!(rx(0) < 20, "{stderr}");
    assert!(
        rx(2) >= r["rr"]["answered"].as_u64().expect("count"),
        "{stderr}"
    );
}
