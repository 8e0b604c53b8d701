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
            ExitOp::PioUser | ExitOp::MmioUser | ExitOp::HltUser | ExitOp::IrqPending
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
