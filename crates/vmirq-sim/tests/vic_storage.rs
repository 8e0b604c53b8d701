//! Reproduction test for scenarios/vic_storage.toml (vIC, ATC 2011).

mod common;
use common::{check, run_scenario, value};

#[test]
fn vic_gains_at_high_cif_and_no_loss_at_low_cif() {
    let r = run_scenario("vic_storage", &["duration_us=40000"]);
    // Since pending MSI-X vectors merge (README, "dim_virtio_net mechanisms"), the
    // unmoderated guest takes fewer interrupts and vIC's IOPS gain sits on the 25% edge of
    // the published 19% (14.4% at the scenario's length, 14.2% at this test's 40 ms):
    // assert its size, and the exact status for the other two.
    let iops = check(&r, "IOPS gain at high OIO (vic vs none, up to)").simulated;
    assert!((10.0..=19.0).contains(&iops), "IOPS gain {iops}%");
    for name in [
        "CPU efficiency gain at high OIO (vic vs none, up to)",
        "no loss at low CIF (IOPS vic / none, OIO 4)",
    ] {
        assert_eq!(
            check(&r, name).status,
            "reproduced",
            "{name}: {:?}",
            check(&r, name)
        );
    }
    // Fewer interrupts is the mechanism. The guest is CPU-bound, so most of the 32 I/Os wait
    // in the guest and the device sees a CIF of only ~5-10: vIC's ratio there is 4/5..1/2.
    assert!(value(&r, "vic-oio32", "irqs_per_io") * 1.5 < value(&r, "none-oio32", "irqs_per_io"));
    // At OIO 4 vIC does not coalesce (CIF <= cif_low): one interrupt per I/O as without it.
    assert!(
        (value(&r, "vic-oio4", "irqs_per_io") - value(&r, "none-oio4", "irqs_per_io")).abs() < 0.01
    );
}

#[test]
fn vic_ratio_adapts_to_bursty_outstanding_io() {
    let r = run_scenario(
        "vic_storage",
        &["duration_us=200000", "workload.burst_phase_us=5000"],
    );
    // R follows CIF: several distinct ratios, changing many times.
    assert!(value(&r, "vic-bursty", "vic_ratio_permille.distinct") >= 4.0);
    assert!(value(&r, "vic-bursty", "vic_ratio_permille.changes") >= 20.0);
}

#[test]
fn every_io_completes_exactly_once() {
    let r = run_scenario("vic_storage", &["duration_us=20000", "warmup_us=0"]);
    for (label, run) in &r.runs {
        let c = &run.metrics.counters;
        let done = c.get("ios_completed").copied().unwrap_or(0);
        let seen: u64 = run
            .metrics
            .series
            .get("io_latency_ns")
            .map_or(0, |s| s.len() as u64);
        // Every completion the guest processed was seen exactly once in an ISR, the guest
        // never processes more than it saw, and at most the outstanding ones are unprocessed.
        assert!(
            done <= seen && seen - done <= 48,
            "{label}: processed {done}, seen {seen}"
        );
        let submitted = c.get("exits_io_kick").copied().unwrap_or(0);
        assert!(
            seen <= submitted && submitted - seen <= 48,
            "{label}: submitted {submitted}, completed {seen}"
        );
    }
}

#[test]
fn vic_storage_html_report_has_the_checks_the_cdfs_and_the_time_series() {
    let r = run_scenario("vic_storage", &[]);
    let page = vmirq_sim::html::render(&r);
    vmirq_report::check::page(&page).expect("well-formed page");
    let svgs = vmirq_report::check::svgs(&page);
    assert!(page.contains("Paper vs vmirq-sim"));
    for c in &r.checks {
        assert!(
            page.contains(&vmirq_report::escape(&c.name)),
            "check {}",
            c.name
        );
    }
    let cdfs = page.matches("CDF of ").count();
    let series = page.matches(" over time").count();
    assert!(cdfs > 0 && series > 0, "{cdfs} CDFs, {series} time series");
    assert_eq!(svgs.len(), cdfs + series);
    // Every run is a line of the first CDF, named in its legend (or title).
    for label in r.runs.keys() {
        assert!(
            svgs[0].contains(&vmirq_report::escape(label)),
            "run {label}"
        );
    }
}
