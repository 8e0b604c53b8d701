//! Real-KVM tests of the wake path. Each test prints why and returns early when `/dev/kvm`
//! is unusable (the skip reason is visible with `--nocapture` and in the test output).

mod common;

use std::time::Duration;
use vmirq_kvm::gaps::Gaps;
use vmirq_kvm::guest::wake::Idle;
use vmirq_kvm::host::TscClock;
use vmirq_kvm::wake::{run_cell, CellConfig, Path, Placement};

fn cell(path: Path, halt_poll_ns: u64) -> CellConfig {
    CellConfig {
        path,
        halt_poll_ns,
        placement: Placement::Other,
        gaps: Gaps::constant_ns(50_000),
        samples: 60,
        warmup: 10,
        idle: Idle::Halt,
    }
}

#[test]
fn irqfd_msi_interrupt_reaches_the_handler_and_stats_count_halts() {
    let Some(_serial) = common::kvm_or_skip("irqfd_msi_interrupt_reaches_the_handler") else {
        return;
    };
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let c = run_cell(&cell(Path::Irqfd, 200_000), clock).expect("wake cell runs");
    eprintln!("{c:?}");
    assert_eq!(
        c.samples + u64::from(c.negative),
        60,
        "every send reached the handler"
    );
    assert!(c.lat_ns.p50 > 0 && c.lat_ns.p50 < 10_000_000);
    assert!(c.halts >= 50, "KVM counted the halts: {}", c.halts);
    assert!(c.kvm_stats.exits > 0);
    assert!(c.tsc.zero_offset, "guest TSC offset is 0 here: {:?}", c.tsc);
}

#[test]
fn ipi_from_second_vcpu_reaches_the_handler() {
    let Some(_serial) = common::kvm_or_skip("ipi_from_second_vcpu_reaches_the_handler") else {
        return;
    };
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let c = run_cell(&cell(Path::Ipi, 0), clock).expect("ipi cell runs");
    eprintln!("{c:?}");
    assert_eq!(c.samples + u64::from(c.negative), 60);
    assert_eq!(c.polls_successful, 0, "halt polling is off in this cell");
    assert!(c.wakeups > 0, "the halted vCPU slept and was woken");
}

#[test]
fn irqfd_interrupt_reaches_a_vcpu_spinning_in_ring3() {
    let Some(_serial) = common::kvm_or_skip("irqfd_interrupt_reaches_a_vcpu_spinning_in_ring3")
    else {
        return;
    };
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let cfg = CellConfig {
        idle: Idle::SpinUser,
        ..cell(Path::Irqfd, 0)
    };
    let c = run_cell(&cfg, clock).expect("ring-3 spin cell runs");
    eprintln!("{c:?}");
    assert_eq!(
        c.samples + u64::from(c.negative),
        60,
        "every interrupt reached the handler"
    );
    assert_eq!(c.kvm_stats.halt_exits, 0, "the vCPU never halted");
}
