//! Real-KVM tests of the exit-cost loops and the costs file. Skipped, with the reason
//! printed, when `/dev/kvm` is unusable.

mod common;

use std::time::Duration;
use vmirq_kvm::guest::exits::ExitOp;
use vmirq_kvm::host::TscClock;

#[test]
fn every_exit_loop_runs_with_the_expected_userspace_exits() {
    let Some(_serial) = common::kvm_or_skip("every_exit_loop_runs") else {
        return;
    };
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let n = 40;
    for op in ExitOp::ALL {
        let t = std::time::Instant::now();
        let result = vmirq_kvm::exits::measure_op(op, n, clock);
        eprintln!("{op:?}: {result:?} in {:?}", t.elapsed());
        if op == ExitOp::Hypercall {
            if let Err(vmirq_kvm::Error::Timeout(why)) = &result {
                eprintln!(
                    "NOTE hypercall did not complete on this host ({why}); reported as failed"
                );
                continue;
            }
        }
        let (summary, user_exits) = result.expect("loop runs");
        assert_eq!(summary.n, u64::from(n));
        let expect_user = matches!(
            op,
            ExitOp::PioUser
                | ExitOp::MmioUser
                | ExitOp::HltUser
                | ExitOp::IrqPending
                | ExitOp::IrqEntry
        );
        if expect_user {
            assert!(
                user_exits >= u64::from(n),
                "{op:?} exits to userspace every time"
            );
        } else {
            assert_eq!(user_exits, 0, "{op:?} is handled in the kernel");
        }
    }
}

#[test]
fn reentry_after_sleep_subtracts_the_vmm_sleep_from_every_iteration() {
    let Some(_serial) = common::kvm_or_skip("reentry_after_sleep") else {
        return;
    };
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let r = vmirq_kvm::exits::reentry::measure(40, clock).expect("both loops run");
    eprintln!("{r:?}");
    assert_eq!(r.hot_ns.n, 40);
    assert_eq!(r.cold_ns.n, 40);
    // The VMM slept 100 us on every exit; what is left is a round trip, far below the sleep.
    assert!(r.cold_ns.p50 > 0 && r.cold_ns.p50 < r.sleep_ns, "{r:?}");
    assert_eq!(r.penalty_ns, r.cold_ns.p50.saturating_sub(r.hot_ns.p50));
}

#[test]
fn irq_entry_ends_at_the_handler_and_costs_more_than_the_plain_exit() {
    let Some(_serial) = common::kvm_or_skip("irq_entry_ends_at_the_handler") else {
        return;
    };
    let clock = TscClock::calibrate(Duration::from_millis(20));
    // measure_op fails if a sample's handler timestamp precedes the span (interrupt not
    // taken at the re-entry inside it) or the handler did not run once per iteration.
    let (entry, _) = vmirq_kvm::exits::measure_op(ExitOp::IrqEntry, 200, clock).expect("runs");
    let (plain, _) = vmirq_kvm::exits::measure_op(ExitOp::PioUser, 200, clock).expect("runs");
    eprintln!("irq_entry {entry:?}\npio_user {plain:?}");
    // The same exit plus an `sti` and an interrupt delivery: never cheaper at the median.
    assert!(entry.p50 > plain.p50, "{entry:?} vs {plain:?}");
}

#[test]
fn irqfd_write_loop_times_every_write_and_the_guest_takes_each_interrupt() {
    let Some(_serial) = common::kvm_or_skip("irqfd_write_loop") else {
        return;
    };
    if vmirq_kvm::host::online_cpus() < 2 {
        eprintln!("SKIPPED irqfd_write_loop: needs 2 CPUs");
        return;
    }
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let w = vmirq_kvm::exits::irqfd::measure(100, clock).expect("loop runs");
    eprintln!("{w:?}");
    assert_eq!(w.irqfd_ns.n, 100);
    assert_eq!(w.plain_ns.n, 100);
    assert!(w.irqfd_ns.p50 > 0 && w.plain_ns.p50 > 0);
    assert_eq!(w.msi_ns, w.irqfd_ns.p50.saturating_sub(w.plain_ns.p50));
}

#[test]
fn forced_interrupt_loop_logs_every_round_in_order() {
    let Some(_serial) = common::kvm_or_skip("forced_interrupt_loop") else {
        return;
    };
    if vmirq_kvm::host::online_cpus() < 2 {
        eprintln!("SKIPPED forced_interrupt_loop: needs 2 CPUs");
        return;
    }
    let clock = TscClock::calibrate(Duration::from_millis(20));
    let f = vmirq_kvm::exits::forced::measure(100, clock).expect("loop runs");
    eprintln!("{f:?}");
    // measure() fails unless the handler ran once per write; every kept round has its four
    // timestamps in order and sums as documented.
    let kept = 100 - u64::from(f.rejected);
    assert_eq!(f.to_handler_ns.n, kept);
    assert_eq!(f.lost_ns.n, kept);
    assert!(f.rejected <= 10, "{f:?}");
    // The interrupt reaches the handler after the writer's TSC and stops the running loop
    // for a real exit and delivery: more than a native loop iteration.
    assert!(f.to_handler_ns.p50 > 100, "{f:?}");
    assert!(f.lost_ns.max >= f.to_handler_ns.max, "{f:?}");
}
