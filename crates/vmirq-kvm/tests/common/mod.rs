//! What every real-KVM test file shares: skip with a printed reason when `/dev/kvm` is
//! unusable, and run one test at a time (measurements pin threads to CPUs 0 and 1).

use std::io::Write;
use std::sync::{Mutex, MutexGuard, PoisonError};

static SERIAL: Mutex<()> = Mutex::new(());

/// `None` (after printing `SKIPPED <test>: <reason>`) when KVM is unusable; otherwise a guard
/// that keeps the other KVM tests of this binary waiting until the test ends.
///
/// The line goes to the process's stderr directly, not through `eprintln!`: the test harness
/// captures the `print!` family and hides it for passing tests, so a skip would pass silently.
pub fn kvm_or_skip(test: &str) -> Option<MutexGuard<'static, ()>> {
    if let Err(e) = vmirq_kvm::vm::probe() {
        // Nothing useful can be done if stderr itself fails.
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {e}");
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(PoisonError::into_inner))
}

/// As [`kvm_or_skip`], for a loop whose writer and vCPU need a CPU each: skipped (and said
/// so) on a 1-CPU machine.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all need two CPUs"
)]
pub fn kvm_two_cpus_or_skip(test: &str) -> Option<MutexGuard<'static, ()>> {
    let serial = kvm_or_skip(test)?;
    if vmirq_kvm::host::online_cpus() < 2 {
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs 2 CPUs");
        return None;
    }
    Some(serial)
}
