//! What every real-KVM test file shares: skip with a printed reason when `/dev/kvm` is
//! unusable, and run one test at a time (measurements pin threads to CPUs 0 and 1).

use std::sync::{Mutex, MutexGuard, PoisonError};

static SERIAL: Mutex<()> = Mutex::new(());

/// `None` (after printing `SKIPPED <test>: <reason>`) when KVM is unusable; otherwise a guard
/// that keeps the other KVM tests of this binary waiting until the test ends.
pub fn kvm_or_skip(test: &str) -> Option<MutexGuard<'static, ()>> {
    if let Err(e) = vmirq_kvm::vm::probe() {
        eprintln!("SKIPPED {test}: {e}");
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(PoisonError::into_inner))
}
