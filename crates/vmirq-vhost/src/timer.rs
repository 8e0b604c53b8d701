//! A non-blocking timerfd armed at absolute `CLOCK_MONOTONIC` deadlines, one per queue, for
//! completions the moderation policy holds back.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use vmirq_policy::Nanos;

/// A one-shot timer.
#[derive(Debug)]
pub struct HoldTimer {
    fd: File,
    armed_at: Option<Nanos>,
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
        Ok(Self { fd, armed_at: None })
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
        self.armed_at = Some(deadline);
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
        self.armed_at = None;
        Ok(())
    }

    /// Consume a pending expiry (after epoll reported the fd readable). Returns whether the
    /// timer had expired; a stale readiness (re-armed meanwhile) returns `false`.
    pub fn consume(&mut self) -> bool {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live 8-byte buffer; the fd is non-blocking.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n == 8 {
            self.armed_at = None;
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
