//! Real-KVM test of the moderated device. Skipped, with the reason printed, when `/dev/kvm`
//! is unusable.

mod common;

use std::time::Duration;
use vmirq_kvm::device::{run_device, DeviceConfig, DriverMode};
use vmirq_kvm::host::TscClock;

fn run(spec: &str, mode: DriverMode) -> vmirq_kvm::device::DeviceResult {
    let cfg = DeviceConfig {
        moderation: spec.parse().expect("valid spec"),
        depth: 16,
        service_ns: 20_000,
        duration: Duration::from_millis(300),
        mode,
    };
    let r = run_device(&cfg, TscClock::calibrate(Duration::from_millis(20))).expect("device runs");
    eprintln!("{r:?}");
    r
}

#[test]
fn completions_flow_and_a_count_policy_coalesces_interrupts() {
    let Some(_serial) =
        common::kvm_or_skip("completions_flow_and_a_count_policy_coalesces_interrupts")
    else {
        return;
    };
    let none = run("none", DriverMode::Halt);
    assert!(none.completions > 100, "requests complete through the ring");
    assert!(
        none.interrupts > 0 && none.handler_ns > 0,
        "irqfd interrupts reach the handler"
    );
    assert!(none.lat_ns.n > 0, "per-request latency is computed");
    let count = run("count:usecs=200,frames=16", DriverMode::Halt);
    assert!(count.completions > 100);
    // The guest takes interrupts only while halted and the LAPIC merges pending ones, so
    // delivered interrupts coalesce under any policy; the device's signals show the policy.
    assert!(
        none.notifies >= none.completions,
        "none signals every completion"
    );
    assert!(
        count.notifies * 2 <= count.completions,
        "count:frames=16 signals far less than once per completion ({} for {})",
        count.notifies,
        count.completions
    );
}

#[test]
fn a_ring3_driver_sees_fewer_interrupts_under_a_count_policy() {
    let Some(_serial) =
        common::kvm_or_skip("a_ring3_driver_sees_fewer_interrupts_under_a_count_policy")
    else {
        return;
    };
    let none = run("none", DriverMode::SpinUser);
    let count = run("count:usecs=200,frames=16", DriverMode::SpinUser);
    assert!(none.completions > 100 && count.completions > 100);
    assert!(
        count.irqs_per_completion < none.irqs_per_completion,
        "a driver that is running when signals arrive takes fewer interrupts when they are \
         coalesced ({} vs {})",
        count.irqs_per_completion,
        none.irqs_per_completion
    );
}
