//! `vmirq bench --from-json`: a saved run is printed and rendered again without running
//! anything, and a file that is not a report is refused with a message.

use std::process::Command;

fn saved_report() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../vmirq-bench/results/bench-2026-11-22-b.json")
}

#[test]
fn a_saved_run_renders_again_as_table_and_html() {
    let dir = tempfile::tempdir().expect("tempdir");
    let html = dir.path().join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args(["bench", "--from-json"])
        .arg(saved_report())
        .arg("--html")
        .arg(&html)
        .output()
        .expect("vmirq runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("qemu-storage-daemon") && stdout.contains("randread-4k"));
    let page = std::fs::read_to_string(&html).expect("html written");
    assert_reads_in_order(&page);
}

/// The page is complete, leads with the headline and has plots before the tables.
fn assert_reads_in_order(page: &str) {
    assert!(page.starts_with("<!DOCTYPE html>"));
    let headline = page.find("id=\"headline\"").expect("headline");
    let plot = page.find("<svg").expect("a plot");
    let results = page.find("id=\"results-per-workload\"").expect("results");
    assert!(headline < plot && plot < results);
}

#[test]
fn a_file_that_is_not_a_report_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"cells\": 3}").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args(["bench", "--from-json"])
        .arg(&bad)
        .output()
        .expect("vmirq runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a vmirq bench JSON report"), "{stderr}");
    // --from-json runs nothing, so options of a run conflict with it.
    let out = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .args(["bench", "--quick", "--from-json"])
        .arg(&bad)
        .output()
        .expect("vmirq runs");
    assert!(!out.status.success());
}
