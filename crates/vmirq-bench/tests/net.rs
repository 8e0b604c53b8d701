//! End to end, network: the tiny net preset (a 64-byte poll stream and a 64-byte
//! request/response ping-pong, two repetitions) against DPDK testpmd's vhost PMD and
//! `vmirq serve-net`, checking that the JSON has both devices' cells with packets, that the
//! ratios to testpmd were computed, and that the HTML renders. testpmd's vhost peer runs
//! without hugepages too (`--no-huge`); the test prints a SKIPPED line only where
//! dpdk-testpmd is not installed or the `vmirq` binary (for serve-net) is not built.

mod common;

use common::{skipped, vmirq_bin, Quiet};
use vmirq_bench::cpu::Placement;
use vmirq_bench::net::plan::NetPreset;
use vmirq_bench::net::target::{NetSetup, NetTarget};
use vmirq_bench::net::NetOptions;
use vmirq_bench::report::{html, Document};
use vmirq_bench::session;

fn net_cell<'a>(json: &'a serde_json::Value, target: &str, job: &str) -> &'a serde_json::Value {
    json["net"]["cells"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["target"] == target && c["job"] == job))
        .unwrap_or_else(|| panic!("no {target} cell for {job}"))
}

#[test]
fn net_tiny_preset_against_testpmd() {
    if vmirq_netload::peer::testpmd_exe().is_none() {
        skipped(
            "net_tiny_preset_against_testpmd: dpdk-testpmd is not installed (apt-get install dpdk)",
        );
        return;
    }
    let Some(exe) = vmirq_bin() else {
        skipped("net_tiny_preset_against_testpmd: the vmirq binary is not built (cargo build -p vmirq, or set VMIRQ_BIN)");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let opts = NetOptions {
        preset: NetPreset::Tiny,
        // Open vSwitch is left out even where installed: it would double the test's time.
        targets: Some(vec![
            NetTarget::Testpmd,
            NetTarget::Vmirq {
                moderation: None,
                pmd: false,
            },
        ]),
        repetitions: None,
        measure: None,
        no_peer: false,
    };
    let setup = NetSetup {
        vmirq_exe: exe,
        dir: dir.path().to_path_buf(),
        placement: Placement::Split,
    };
    let doc = session::run_net(&opts, &setup, "net e2e test", &Quiet);
    let text = doc.to_json().expect("json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("parse");
    let net = doc.net.as_ref().expect("net section");
    assert_eq!(net.targets, ["testpmd", "vmirq"]);
    assert_eq!(net.versus.len(), 1);
    assert!(net.versus[0].pps_geomean > 0.0 && net.versus[0].jobs == 2);
    for job in ["stream-64/poll", "rr-64/interrupt"] {
        for target in ["testpmd", "vmirq"] {
            let c = net_cell(&json, target, job);
            assert!(
                c["errors"].as_array().is_some_and(Vec::is_empty),
                "{target} {job} failed: {}",
                c["errors"]
            );
            assert_eq!(c["repetitions"], 2, "{target} {job}");
            let pps = c["pps"]["median"].as_f64().unwrap_or(0.0);
            assert!(pps > 0.0, "{target} {job}: no packets");
            assert!(c["runs"][0]["packets"].as_u64().unwrap_or(0) > 0);
            assert!(c["cpu_ns_per_packet"]["median"].as_f64().unwrap_or(0.0) > 0.0);
            // Both devices merge receive buffers (what 9000-byte frames need).
            assert!(
                c["features"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "MRG_RXBUF")),
                "{target}: {}",
                c["features"]
            );
        }
        let vm = net_cell(&json, "vmirq", job);
        let ratio = vm["vs_peer"]["pps"]["median"].as_f64().unwrap_or(0.0);
        assert!(ratio.is_finite() && ratio > 0.0, "{job}: ratio {ratio}");
        assert_eq!(vm["vs_peer"]["pairs"], 2);
        assert!(net_cell(&json, "testpmd", job)["vs_peer"].is_null());
    }
    // The ping-pong has latency and interrupts at both devices; the poll stream none.
    let rr = net_cell(&json, "vmirq", "rr-64/interrupt");
    assert!(rr["rtt_p50_ns"]["median"].as_f64().unwrap_or(0.0) > 0.0);
    assert!(rr["vs_peer"]["rtt_p99"]["median"].as_f64().unwrap_or(0.0) > 0.0);
    assert!(
        rr["interrupts_per_packet"]["median"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );
    let stream = net_cell(&json, "vmirq", "stream-64/poll");
    assert!(stream["rtt_p50_ns"].is_null());
    assert!(stream["vs_peer"]["rtt_p50"].is_null());
    // The report reads back and renders.
    let back = Document::from_json(&text).expect("read back");
    let page = html::render(&back);
    vmirq_report::check::page(&page).expect("well-formed page");
    assert!(page.contains("Network: vmirq serve-net against testpmd"));
    assert!(page.contains("stream-64/poll") && page.contains("rr-64/interrupt"));
    let terminal = vmirq_bench::net::report::render_text(net);
    assert!(
        terminal.contains("vmirq / testpmd, rr-64/interrupt"),
        "{terminal}"
    );
}
