//! # vmirq-os: small Linux helpers the vmirq tools share
//!
//! One implementation of what the load generators, the benchmark and the KVM measurements
//! each had a copy of: pinning a thread to a CPU.

use std::io;

/// Number of CPUs this process may use.
#[must_use]
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Bits in a `cpu_set_t` (`CPU_SETSIZE`): the largest CPU number plus one that a set holds.
const CPU_SET_BITS: usize = 8 * std::mem::size_of::<libc::cpu_set_t>();

/// Set the CPU affinity of task `tid` (0 = the calling thread) to `cpu`, or to every CPU
/// this process may use for `None`.
///
/// # Errors
/// `EINVAL` for a CPU number a `cpu_set_t` cannot hold; otherwise the OS error of
/// `sched_setaffinity` (e.g. the CPU does not exist or is not allowed).
pub fn set_affinity(tid: libc::pid_t, cpu: Option<usize>) -> io::Result<()> {
    let cpus: Vec<usize> = match cpu {
        Some(c) => vec![c],
        None => (0..online_cpus()).collect(),
    };
    if cpus.iter().any(|&c| c >= CPU_SET_BITS) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus {
        // SAFETY: CPU_SET writes the bit for `c` inside `set`; `c < CPU_SET_BITS` was checked.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid, initialised cpu_set_t and the size passed is its exact size.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pin the calling thread to `cpu`.
///
/// # Errors
/// As [`set_affinity`].
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    set_affinity(0, Some(cpu))
}

/// The CPU the calling thread runs on now.
#[must_use]
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions; a negative result is an error.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// CPU time the calling thread has used, in nanoseconds (0 if the clock cannot be read).
#[must_use]
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_grows_while_the_thread_works() {
        let before = thread_cpu_ns();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        // Bounded by wall time: spin 20 ms, of which the thread runs at least some.
        while start.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(thread_cpu_ns() > before);
    }

    #[test]
    fn a_pinned_thread_runs_on_its_cpu_and_can_be_unpinned() {
        std::thread::spawn(|| {
            let mut pinned = 0;
            // Every CPU the process may use (a restricted mask refuses some: skipped).
            for cpu in 0..online_cpus() {
                if pin_current_thread(cpu).is_err() {
                    continue;
                }
                // The scheduler moves the thread at its next scheduling point at the latest.
                std::thread::yield_now();
                assert_eq!(current_cpu(), Some(cpu));
                pinned += 1;
            }
            assert!(pinned > 0, "no CPU accepted the thread");
            set_affinity(0, None).expect("unpin");
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn cpus_a_set_cannot_hold_are_refused() {
        let e = pin_current_thread(CPU_SET_BITS).expect_err("too large");
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
