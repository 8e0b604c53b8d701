//! The monotonic clock the backend passes to the policies, in nanoseconds.
//!
//! It is `CLOCK_MONOTONIC` itself, so a policy deadline can be given straight to a timerfd
//! armed with `TFD_TIMER_ABSTIME`.

use vmirq_policy::Nanos;

/// Current `CLOCK_MONOTONIC` time in nanoseconds.
#[must_use]
pub fn now_ns() -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}
