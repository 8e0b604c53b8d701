//! Real-KVM tests of the userspace halt path. Skipped, with the reason printed, when
//! `/dev/kvm` is unusable.

mod common;

use std::time::Duration;
use vmirq_kvm::host::TscClock;
use vmirq_kvm::userhalt::{parse_wait, run_halt_cell, Poller};
use vmirq_kvm::wake::Placement;

fn run(spec: &str) -> vmirq_kvm::userhalt::HaltCell {
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let poller = Poller::User(parse_wait(spec).expect("valid spec"));
    let c = run_halt_cell(poller, 50_000, Placement::Other, (10, 80), clock).expect("cell runs");
    eprintln!("{c:?}");
    c
}

#[test]
fn never_policy_sleeps_on_every_halt_and_injection_reaches_the_handler() {
    let Some(_serial) = common::kvm_or_skip("never_policy_sleeps_on_every_halt") else {
        return;
    };
    let c = run("never");
    assert_eq!(
        c.samples, 80,
        "every KVM_INTERRUPT injection reached the guest handler"
    );
    // Counted over the measured phase only, like KVM's stats for kernel cells: one halt per
    // measured wake, none of the 10 warm-up halts nor the final one.
    assert_eq!(
        c.halts, 80,
        "one HLT exit per measured wake, warm-up excluded"
    );
    assert_eq!((c.polled, c.poll_ns, c.max_window_ns), (0, 0, 0));
}

#[test]
fn fixed_policy_polls_within_its_window_and_catches_wakes() {
    let Some(_serial) = common::kvm_or_skip("fixed_policy_polls_within_its_window") else {
        return;
    };
    let c = run("fixed:ns=400000");
    assert_eq!(c.samples, 80);
    assert_eq!(c.max_window_ns, 400_000, "the policy's window was used");
    assert!(
        c.polled > 0,
        "a 400 us window catches some 50 us-interval wakes"
    );
    // A poll loop checks its deadline on every iteration; only preemption of the vCPU thread
    // (other builds on this 2-CPU machine) can overrun it, so the bound is loose.
    assert!(
        c.max_overrun_ns < 20_000_000,
        "poll overran its window by {} ns",
        c.max_overrun_ns
    );
    assert!(
        c.poll_ns <= c.halts * (400_000 + c.max_overrun_ns),
        "total polling bounded by windows"
    );
    assert_eq!(c.halts, 80, "measured phase only");
    assert_eq!(
        c.poll_success_ns + c.poll_fail_ns,
        c.poll_ns,
        "success and fail parts add up"
    );
    assert!(
        c.handler_to_send_ns >= 50_000,
        "the sender waited the interval"
    );
}

#[test]
fn adaptive_policies_run_on_the_halt_path() {
    let Some(_serial) = common::kvm_or_skip("adaptive_policies_run_on_the_halt_path") else {
        return;
    };
    for spec in [
        "kvm:max_ns=200000",
        "guest-haltpoll:max_ns=200000",
        "histogram:max_ns=200000",
    ] {
        let c = run(spec);
        assert_eq!(c.samples, 80, "{spec}");
        assert!(
            c.max_window_ns <= 200_000,
            "{spec} stays within max_ns: {}",
            c.max_window_ns
        );
    }
}
