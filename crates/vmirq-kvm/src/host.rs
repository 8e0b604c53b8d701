//! Host-side helpers for measurements: TSC reads and calibration, thread pinning, per-thread
//! CPU time, timer slack. Nothing here touches KVM.

use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// Read the host time-stamp counter. The guest reads the same counter (TSC offset 0 on the
/// hosts this crate targets; [`crate::wake::TscCheck`] verifies it per run).
#[must_use]
pub fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` has no memory effects and is available on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Conversion between TSC ticks and nanoseconds, measured against the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TscClock {
    /// TSC ticks per nanosecond (GHz).
    pub ghz: f64,
}

impl TscClock {
    /// Calibrate over `window` (20 ms is plenty for three significant digits).
    #[must_use]
    pub fn calibrate(window: Duration) -> Self {
        let t0 = Instant::now();
        let c0 = rdtsc();
        while t0.elapsed() < window {
            std::hint::spin_loop();
        }
        let c1 = rdtsc();
        let ns = t0.elapsed().as_nanos().max(1);
        #[allow(clippy::cast_precision_loss, reason = "ratio of two moderate counts")]
        let ghz = c1.wrapping_sub(c0) as f64 / ns as f64;
        Self { ghz }
    }

    /// Ticks to nanoseconds (saturating at 0 for negative deltas given as wrapped values).
    #[must_use]
    pub fn ns(&self, ticks: u64) -> u64 {
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "tick deltas are far below 2^52; the quotient is non-negative"
        )]
        let ns = (ticks as f64 / self.ghz).round() as u64;
        ns
    }

    /// Nanoseconds to ticks.
    #[must_use]
    pub fn ticks(&self, ns: u64) -> u64 {
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "durations are far below 2^52 ns; the product is non-negative"
        )]
        let t = (ns as f64 * self.ghz).round() as u64;
        t
    }

    /// Signed difference `later - earlier` in nanoseconds (negative if `later` is earlier).
    #[must_use]
    pub fn delta_ns(&self, earlier: u64, later: u64) -> i64 {
        if later >= earlier {
            i64::try_from(self.ns(later - earlier)).unwrap_or(i64::MAX)
        } else {
            -i64::try_from(self.ns(earlier - later)).unwrap_or(i64::MAX)
        }
    }
}

/// Number of CPUs this process may run on.
#[must_use]
pub fn online_cpus() -> usize {
    vmirq_os::online_cpus()
}

/// Pin the calling thread to one CPU. Its priority is left alone (run the measurement under
/// `nice -n -10` or `chrt` to keep CPU-bound neighbours from taking the pinned CPU).
///
/// # Errors
/// [`Error::Io`] if `sched_setaffinity` fails (for example the CPU does not exist).
pub fn pin_to(cpu: usize) -> Result<()> {
    if cpu >= online_cpus() {
        return Err(Error::Config(format!("CPU {cpu} is not available")));
    }
    vmirq_os::pin_current_thread(cpu).map_err(Error::io("sched_setaffinity"))?;
    Ok(())
}

pub use vmirq_os::thread_cpu_ns;

/// Make `nanosleep` on this thread as precise as the kernel allows (default slack is 50 µs,
/// which would distort microsecond wake intervals).
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects only this thread.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!("PR_SET_TIMERSLACK failed; sleeps may overshoot by up to 50 us");
    }
}

/// Spin until the TSC reaches `deadline` (bounded: the deadline is at most `max` away).
pub fn spin_until_tsc(deadline: u64) {
    while rdtsc() < deadline {
        std::hint::spin_loop();
    }
}

/// The host's load averages (`/proc/loadavg`, first three fields), recorded beside results:
/// KVM stops halt polling whenever another task is runnable on the vCPU's CPU, so the
/// polled share depends on the machine's load.
#[must_use]
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
