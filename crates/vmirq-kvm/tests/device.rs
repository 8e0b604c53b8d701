//! Real-KVM test of the moderated device. Skipped, with the reason printed, when `/dev/kvm`
//! is unusable.

use std::time::Duration;
use vmirq_kvm::device::{run_device, DeviceConfig};
use vmirq_kvm::host::TscClock;

fn kvm_or_skip(test: &str) -> bool {
    match vmirq_kvm::vm::probe() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("SKIPPED {test}: {e}");
            false
        }
    }
}

fn run(spec: &str) -> vmirq_kvm::device::DeviceResult {
    let cfg = DeviceConfig {
        moderation: spec.parse().expect("valid spec"),
        depth: 16,
        service_ns: 20_000,
        duration: Duration::from_millis(300),
    };
    let r = run_device(&cfg, TscClock::calibrate(Duration::from_millis(20))).expect("device runs");
    eprintln!("{r:?}");
    r
}

#[test]
fn completions_flow_and_a_count_policy_coalesces_interrupts() {
    if !kvm_or_skip("completions_flow_and_a_count_policy_coalesces_interrupts") {
        return;
    }
    let none = run("none");
    assert!(none.completions > 100, "requests complete through the ring");
    assert!(
        none.interrupts > 0 && none.handler_ns > 0,
        "irqfd interrupts reach the handler"
    );
    assert!(none.lat_ns.n > 0, "per-request latency is computed");
    let count = run("count:usecs=200,frames=16");
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
