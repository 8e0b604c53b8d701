//! The few system calls the run loop needs: sleeping on call eventfds (`ppoll`), the
//! thread's CPU time, timer slack, and CPU pinning.

use std::os::fd::RawFd;
use std::time::Duration;

/// Most eventfds one sleep waits on (two per port).
pub const POLL_FDS_MAX: usize = 16;

/// Wait until one of `fds` (the first [`POLL_FDS_MAX`]) is readable or `timeout` passes; returns a bit mask
/// of the readable ones (0 on timeout or EINTR).
///
/// # Errors
/// The OS error of `ppoll`.
pub fn wait_readable(fds: &[RawFd], timeout: Duration) -> std::io::Result<u64> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; POLL_FDS_MAX];
    let n = fds.len().min(POLL_FDS_MAX);
    for (p, &fd) in pfds.iter_mut().zip(&fds[..n]) {
        p.fd = fd;
    }
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(i32::try_from(timeout.subsec_nanos()).unwrap_or(0)),
    };
    let nfds = libc::nfds_t::try_from(n).unwrap_or(0);
    // SAFETY: `pfds` holds at least `nfds` valid pollfd entries, `ts` is a valid timespec and a null
    // signal mask is allowed.
    let ready = unsafe { libc::ppoll(pfds.as_mut_ptr(), nfds, &ts, std::ptr::null()) };
    if ready < 0 {
        let err = std::io::Error::last_os_error();
        return if err.kind() == std::io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(err)
        };
    }
    if ready == 0 {
        return Ok(0);
    }
    Ok(pfds[..n]
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents & libc::POLLIN != 0)
        .fold(0, |mask, (i, _)| mask | (1 << i)))
}

pub use vmirq_os::thread_cpu_ns;

/// Whole-machine CPU time from `/proc/stat` in clock ticks: (busy, total), busy being all
/// but idle and iowait. `None` if unreadable.
#[must_use]
pub fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .take(8)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// CPU time of every thread of process `pid` so far, in nanoseconds (the first field of
/// each `/proc/PID/task/TID/schedstat`); `None` when the process is gone.
#[must_use]
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for entry in dir.flatten() {
        let ns = std::fs::read_to_string(entry.path().join("schedstat"))
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok());
        total = total.saturating_add(ns.unwrap_or(0));
    }
    Some(total)
}

/// Make the calling thread's timed sleeps precise (the default slack is 50 us, longer than
/// the gaps a paced sender sleeps for).
pub fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and affects only the calling thread.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    if rc != 0 {
        tracing::debug!("PR_SET_TIMERSLACK failed; sleeps are up to 50 us late");
    }
}

/// Pin the calling thread to `cpu`. Failure is logged, not fatal (the run is only noisier).
pub fn pin_to(cpu: usize) {
    if let Err(err) = vmirq_os::pin_current_thread(cpu) {
        tracing::warn!(cpu, %err, "could not pin the client thread");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

    #[test]
    fn wakes_on_a_signalled_eventfd_and_times_out_otherwise() {
        let a = EventFd::new(EFD_NONBLOCK).expect("eventfd");
        let b = EventFd::new(EFD_NONBLOCK).expect("eventfd");
        let fds = [a.as_raw_fd(), b.as_raw_fd()];
        let t = std::time::Instant::now();
        assert_eq!(wait_readable(&fds, Duration::from_millis(20)).ok(), Some(0));
        assert!(t.elapsed() >= Duration::from_millis(15));
        b.write(2).expect("write");
        assert_eq!(wait_readable(&fds, Duration::from_secs(5)).ok(), Some(0b10));
        assert_eq!(b.read().ok(), Some(2));
    }

    #[test]
    fn machine_ticks_are_consistent() {
        let (busy, total) = machine_ticks().expect("/proc/stat");
        assert!(busy <= total && total > 0);
    }

    #[test]
    fn process_cpu_time_counts_this_process() {
        let ns = process_cpu_ns(std::process::id()).expect("own process");
        assert!(ns > 0);
        assert!(process_cpu_ns(u32::MAX).is_none());
    }

    #[test]
    fn thread_cpu_time_advances_with_work() {
        let before = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > before);
    }
}
