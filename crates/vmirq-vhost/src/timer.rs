//! A non-blocking timerfd armed at absolute `CLOCK_MONOTONIC` deadlines, one per queue, for
//! completions the moderation policy holds back.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use vmirq_policy::Nanos;

/// A timer's deadline as other threads may read it without the timer's lock: `u64::MAX`
/// when disarmed. A hint only (stores and loads are relaxed): a
/// reader that finds a deadline due still checks the timer itself under its lock.
pub type DeadlineWatch = Arc<AtomicU64>;

/// A one-shot timer.
#[derive(Debug)]
pub struct HoldTimer {
    fd: File,
    armed_at: Option<Nanos>,
    /// Mirrors `armed_at` for lock-free readers, once one asked ([`HoldTimer::watch`]).
    watch: Option<DeadlineWatch>,
}

impl HoldTimer {
    /// A disarmed timer.
    ///
    /// # Errors
    /// When the kernel refuses to create the timerfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain system call with constant valid flags; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { File::from_raw_fd(fd) };
        Ok(Self {
            fd,
            armed_at: None,
            watch: None,
        })
    }

    /// The timer's deadline as other threads may read it without the timer's lock (the
    /// same one at every call); `u64::MAX` while disarmed.
    pub fn watch(&mut self) -> DeadlineWatch {
        let at = self.armed_at;
        Arc::clone(
            self.watch
                .get_or_insert_with(|| Arc::new(AtomicU64::new(at.unwrap_or(u64::MAX)))),
        )
    }

    fn set_armed(&mut self, at: Option<Nanos>) {
        self.armed_at = at;
        if let Some(w) = &self.watch {
            w.store(at.unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }

    /// Fire at absolute time `deadline` (replaces any earlier setting). Re-arming at the same
    /// deadline is a no-op.
    ///
    /// # Errors
    /// When `timerfd_settime` fails.
    pub fn arm(&mut self, deadline: Nanos) -> io::Result<()> {
        if self.armed_at == Some(deadline) {
            return Ok(());
        }
        // A zero it_value would disarm; the earliest meaningful deadline is 1 ns.
        self.set(deadline.max(1))?;
        self.set_armed(Some(deadline));
        Ok(())
    }

    /// Disarm.
    ///
    /// # Errors
    /// When `timerfd_settime` fails.
    pub fn cancel(&mut self) -> io::Result<()> {
        if self.armed_at.is_none() {
            return Ok(());
        }
        self.set(0)?;
        self.set_armed(None);
        Ok(())
    }

    /// Consume a pending expiry (after epoll reported the fd readable). Returns whether the
    /// timer had expired; a stale readiness (re-armed meanwhile) returns `false`.
    pub fn consume(&mut self) -> bool {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live 8-byte buffer; the fd is non-blocking.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n == 8 {
            self.set_armed(None);
            true
        } else {
            false
        }
    }

    /// The deadline the timer is armed for.
    #[must_use]
    pub fn deadline(&self) -> Option<Nanos> {
        self.armed_at
    }

    fn set(&self, at: Nanos) -> io::Result<()> {
        let secs = libc::time_t::try_from(at / 1_000_000_000)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let nsecs = libc::c_long::try_from(at % 1_000_000_000)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: secs,
                tv_nsec: nsecs,
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the old-value pointer may be null.
        let ret = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsRawFd for HoldTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::HoldTimer;
    use std::sync::atomic::Ordering;

    #[test]
    fn the_watch_follows_arm_cancel_and_expiry() {
        let mut t = HoldTimer::new().expect("timerfd");
        t.arm(1_000).expect("arm");
        // Asked for after the timer was armed: it starts at the armed deadline.
        let w = t.watch();
        assert_eq!(w.load(Ordering::Relaxed), 1_000);
        t.arm(2_000).expect("re-arm");
        assert_eq!(w.load(Ordering::Relaxed), 2_000);
        t.cancel().expect("cancel");
        assert_eq!(w.load(Ordering::Relaxed), u64::MAX);
        // A deadline long past: the fd is readable at once, and consuming it disarms.
        t.arm(1).expect("arm in the past");
        assert_eq!(w.load(Ordering::Relaxed), 1);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !t.consume() {
            assert!(
                std::time::Instant::now() < until,
                "the expired timer never fired"
            );
            std::thread::yield_now();
        }
        assert_eq!(w.load(Ordering::Relaxed), u64::MAX);
        assert!(
            std::sync::Arc::ptr_eq(&w, &t.watch()),
            "one watch per timer"
        );
    }
}
