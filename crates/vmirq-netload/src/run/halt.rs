//! The client's halts as a KVM guest's vCPU has them (`--halt-poll`): before the client
//! sleeps on its call eventfds it polls them for a vmirq-policy wait policy's window, as
//! KVM polls a halted vCPU for a pending interrupt before it schedules the vCPU's thread
//! out (`kvm_vcpu_halt()`; on by default on x86 hosts, `halt_poll_ns` 200 µs). A device
//! signal or the client's own timer inside the window ends the halt without a sleep; the
//! policy learns from how long each halt was (`kvm`: grow, shrink, keep).
//!
//! Without it (the default, so that earlier numbers stay comparable) the client sleeps at
//! once, which is a guest on a host with halt polling off. The moderation talk's guests ran
//! on KVM with its defaults, where a vCPU that halted a moment ago is often still polled
//! when the next interrupt comes; a moderated stream, which leaves the vCPU idle more
//! often, pays for every idle exit without it.

use super::os;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;
use vmirq_policy::spec::WaitSpec;
use vmirq_policy::wait::{Wait, WaitDecision, Waiter, WakeOutcome};

/// A client's halt polling: the policy and what it did.
#[derive(Debug, Clone)]
pub struct HaltPoll {
    /// The policy's name, for the report.
    name: &'static str,
    wait: Wait,
    /// Halts (sleeps the client began).
    pub halts: u64,
    /// Halts ended inside the poll window (no sleep).
    pub caught: u64,
    /// Time spent polling (ns).
    pub polled_ns: u64,
}

impl HaltPoll {
    /// Halt polling by `spec`.
    #[must_use]
    pub fn new(spec: WaitSpec) -> Self {
        Self {
            name: spec.name(),
            wait: spec.build(),
            halts: 0,
            caught: 0,
            polled_ns: 0,
        }
    }

    /// The policy's name (`kvm`, `fixed`, ...).
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Halt until one of `fds` is readable or `deadline` (ns on the clock `now`): poll
    /// first for the policy's window (never past `deadline`), then sleep. Returns the
    /// readable fds' bit mask, as [`os::wait_readable`] does (0: the deadline).
    ///
    /// # Errors
    /// The poll or the sleep failed.
    pub fn halt(&mut self, fds: &[RawFd], now: impl Fn() -> u64, deadline: u64) -> io::Result<u64> {
        self.halts += 1;
        let start = now();
        if let WaitDecision::Poll { until } = self.wait.begin(start) {
            let until = until.min(deadline);
            loop {
                let ready = os::wait_readable(fds, Duration::ZERO)?;
                let t = now();
                if ready != 0 || t >= deadline {
                    self.polled_ns += t.saturating_sub(start);
                    self.caught += 1;
                    self.wait.end(t, WakeOutcome::POLLED);
                    return Ok(ready);
                }
                if t >= until {
                    self.polled_ns += t.saturating_sub(start);
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let t = now();
        let ready = os::wait_readable(fds, Duration::from_nanos(deadline.saturating_sub(t)))?;
        self.wait.end(now(), WakeOutcome::SLEPT);
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::HaltPoll;
    use std::os::fd::AsRawFd;
    use std::time::Instant;
    use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

    fn clock() -> impl Fn() -> u64 {
        let t0 = Instant::now();
        move || u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    #[test]
    fn a_signal_already_there_is_caught_by_the_poll_and_a_deadline_inside_the_window_too() {
        let mut h = HaltPoll::new("fixed:us=50000".parse().expect("spec"));
        let fd = EventFd::new(EFD_NONBLOCK).expect("eventfd");
        fd.write(1).expect("signal");
        let now = clock();
        assert_eq!(
            h.halt(&[fd.as_raw_fd()], &now, 5_000_000_000)
                .expect("halt"),
            1
        );
        fd.read().expect("reset");
        // Nothing comes: the 1 ms deadline ends the halt inside the 50 ms window.
        let dl = now() + 1_000_000;
        assert_eq!(h.halt(&[fd.as_raw_fd()], &now, dl).expect("halt"), 0);
        assert!(now() >= dl);
        assert_eq!((h.halts, h.caught), (2, 2));
        assert!(h.polled_ns >= 900_000, "polled {} ns", h.polled_ns);
    }

    #[test]
    fn never_sleeps_at_once_and_a_window_shorter_than_the_wait_sleeps_after_it() {
        let fd = EventFd::new(EFD_NONBLOCK).expect("eventfd");
        let now = clock();
        let mut never = HaltPoll::new("never".parse().expect("spec"));
        let dl = now() + 2_000_000;
        assert_eq!(never.halt(&[fd.as_raw_fd()], &now, dl).expect("halt"), 0);
        assert_eq!((never.halts, never.caught, never.polled_ns), (1, 0, 0));
        let mut short = HaltPoll::new("fixed:us=100".parse().expect("spec"));
        let dl = now() + 5_000_000;
        assert_eq!(short.halt(&[fd.as_raw_fd()], &now, dl).expect("halt"), 0);
        assert!(now() >= dl, "woke before its deadline");
        assert_eq!((short.halts, short.caught), (1, 0));
        assert!(short.polled_ns >= 100_000 && short.polled_ns < 5_000_000);
    }
}
