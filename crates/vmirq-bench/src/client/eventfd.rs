//! The client's interrupt line: the queue's completion eventfd. Reading it returns how many
//! times the device signalled since the last read, which is exactly the notification count.

use std::os::unix::io::RawFd;
use std::time::Duration;

/// Wait up to `timeout` (zero = just look) for `fd` to become readable, then read and return
/// its counter (0 if nothing arrived in time).
///
/// # Errors
/// The OS error of `ppoll` or `read` (EINTR is reported as 0 signals).
pub fn take(fd: RawFd, timeout: Duration) -> std::io::Result<u64> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(i32::try_from(timeout.subsec_nanos()).unwrap_or(0)),
    };
    // SAFETY: `pfd` is one valid pollfd, `ts` a valid timespec, and a null sigmask is allowed.
    let ready = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if ready < 0 {
        let err = std::io::Error::last_os_error();
        return if err.kind() == std::io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(err)
        };
    }
    if ready == 0 || pfd.revents & libc::POLLIN == 0 {
        return Ok(0);
    }
    let mut value = [0u8; 8];
    // SAFETY: `value` is 8 writable bytes, the size an eventfd read requires.
    let got = unsafe { libc::read(fd, value.as_mut_ptr().cast(), value.len()) };
    if got == 8 {
        Ok(u64::from_ne_bytes(value))
    } else {
        let err = std::io::Error::last_os_error();
        // Another reader (or a spurious wakeup) emptied it first: nothing to count.
        if err.kind() == std::io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::take;
    use std::os::unix::io::RawFd;
    use std::time::Duration;

    fn eventfd() -> RawFd {
        // SAFETY: eventfd has no memory-safety preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd failed");
        fd
    }

    fn signal(fd: RawFd, n: u64) {
        let bytes = n.to_ne_bytes();
        // SAFETY: writing 8 readable bytes to an eventfd.
        let w = unsafe { libc::write(fd, bytes.as_ptr().cast(), 8) };
        assert_eq!(w, 8);
    }

    #[test]
    fn counts_accumulated_signals_and_times_out_empty() {
        let fd = eventfd();
        assert_eq!(take(fd, Duration::ZERO).ok(), Some(0));
        signal(fd, 1);
        signal(fd, 2);
        assert_eq!(take(fd, Duration::from_millis(10)).ok(), Some(3));
        let t = std::time::Instant::now();
        assert_eq!(take(fd, Duration::from_millis(20)).ok(), Some(0));
        assert!(t.elapsed() >= Duration::from_millis(15));
        // SAFETY: closing the fd this test created.
        unsafe { libc::close(fd) };
    }
}
