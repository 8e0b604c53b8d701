//! The vCPU side of the userspace halt path: run until DONE; on every HLT exit ask the wait
//! policy, poll the pending flag for at most the window it grants, otherwise block on the
//! eventfd (bounded), then inject the interrupt with `KVM_INTERRUPT` and re-enter.
//!
//! Polling time is counted like KVM's `halt_poll_success_ns`/`halt_poll_fail_ns`: from the
//! poll's start to the last clock read before the check that saw the interrupt (or to the end
//! of the window). The counters are published after every halt ([`UserCounters`]) so the
//! injector reads them at the same two moments as it reads KVM's stats fd for kernel cells.

use crate::error::{Error, Result};
use crate::host::{rdtsc, thread_cpu_ns, TscClock};
use crate::layout::{port, WAKE_VECTOR};
use crate::runner::unexpected;
use crate::stats::{HaltCounters, VcpuStats};
use crate::vm::inject_interrupt;
use crate::watchdog::Watchdog;
use kvm_ioctls::{VcpuExit, VcpuFd};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vmirq_policy::wait::{Wait, WaitDecision, Waiter, WakeOutcome};
use vmm_sys_util::eventfd::EventFd;

/// Longest a halted vCPU blocks in total before the run is declared stuck.
const BLOCK_LIMIT: Duration = Duration::from_secs(2);
/// Exits allowed per run.
const MAX_EXITS: u64 = 10_000_000;

/// Hard cap on iterations of one poll window (each reads the clock and the pending flag,
/// well over a nanosecond), independent of the clock.
const MAX_POLL_SPINS: u64 = 100_000_000;
/// Wall-time bound of a run.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Shared between the injector and the vCPU thread.
#[derive(Debug)]
pub struct Doorbell {
    /// An interrupt is waiting to be injected.
    pub pending: AtomicBool,
    /// Host TSC at the last send (for the policy's wake-cost input).
    pub sent_tsc: AtomicU64,
    /// Wakes a blocked vCPU thread.
    pub event: EventFd,
    /// The guest reported READY.
    pub ready: AtomicBool,
    /// The halt path's counters so far.
    pub counters: UserCounters,
}

/// The userspace halt path's counters, published by the vCPU thread after every halt (the
/// twin of KVM's stats fd, read through [`HaltCounters`]).
#[derive(Debug, Default)]
pub struct UserCounters {
    halts: AtomicU64,
    attempted: AtomicU64,
    polled: AtomicU64,
    woken: AtomicU64,
    success_ns: AtomicU64,
    fail_ns: AtomicU64,
}

impl UserCounters {
    /// Publish the totals (single writer: the vCPU thread).
    fn publish(&self, st: &HaltStats) {
        self.halts.store(st.halts, Ordering::Release);
        self.attempted.store(st.attempted, Ordering::Release);
        self.polled.store(st.polled, Ordering::Release);
        self.woken.store(st.slept, Ordering::Release);
        self.success_ns.store(st.poll_success_ns, Ordering::Release);
        self.fail_ns.store(st.poll_fail_ns, Ordering::Release);
    }
}

impl HaltCounters for UserCounters {
    fn snapshot(&self) -> Result<VcpuStats> {
        Ok(VcpuStats {
            halt_exits: self.halts.load(Ordering::Acquire),
            halt_attempted_poll: self.attempted.load(Ordering::Acquire),
            halt_successful_poll: self.polled.load(Ordering::Acquire),
            halt_poll_invalid: 0,
            halt_wakeup: self.woken.load(Ordering::Acquire),
            halt_poll_success_ns: self.success_ns.load(Ordering::Acquire),
            halt_poll_fail_ns: self.fail_ns.load(Ordering::Acquire),
            exits: self.halts.load(Ordering::Acquire),
        })
    }
}

impl Doorbell {
    /// A fresh doorbell.
    ///
    /// # Errors
    /// [`Error::Io`] if the eventfd cannot be created.
    pub fn new() -> Result<Self> {
        Ok(Self {
            pending: AtomicBool::new(false),
            sent_tsc: AtomicU64::new(0),
            event: EventFd::new(libc::EFD_NONBLOCK).map_err(Error::io("eventfd"))?,
            ready: AtomicBool::new(false),
            counters: UserCounters::default(),
        })
    }

    /// Raise the interrupt (host injector side).
    ///
    /// # Errors
    /// [`Error::Io`] if the eventfd write fails.
    pub fn ring(&self, tsc: u64) -> Result<()> {
        self.sent_tsc.store(tsc, Ordering::Relaxed);
        self.pending.store(true, Ordering::Release);
        self.event.write(1).map_err(Error::io("eventfd write"))
    }
}

/// What the vCPU thread measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct HaltStats {
    /// HLT exits (counted when the halt ends).
    pub halts: u64,
    /// Halts where the policy granted a poll.
    pub attempted: u64,
    /// Halts whose interrupt arrived during the poll window.
    pub polled: u64,
    /// Halts that blocked.
    pub slept: u64,
    /// Time spent in polls that caught the interrupt, ns.
    pub poll_success_ns: u64,
    /// Time spent in polls that ran out (the vCPU then blocked), ns.
    pub poll_fail_ns: u64,
    /// Largest window the policy granted, ns.
    pub max_window_ns: u64,
    /// Largest amount by which a poll outlasted its window, ns.
    pub max_overrun_ns: u64,
    /// CPU time of the vCPU thread, ns.
    pub cpu_ns: u64,
}

/// Run the vCPU until DONE with `policy` deciding every halt.
///
/// # Errors
/// Guest faults, unexpected exits, a stuck guest or a failed injection.
pub fn run(
    vcpu: &mut VcpuFd,
    bell: &Doorbell,
    mut policy: Wait,
    clock: TscClock,
) -> Result<HaltStats> {
    let mut st = HaltStats::default();
    let cpu0 = thread_cpu_ns();
    let base = rdtsc();
    let now = || clock.ns(rdtsc().saturating_sub(base));
    let watchdog = Watchdog::arm(RUN_TIMEOUT);
    for _ in 0..MAX_EXITS {
        let exit = match vcpu.run() {
            Ok(exit) => exit,
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                if watchdog.fired() {
                    return Err(Error::Timeout("the guest (userspace halt path)"));
                }
                continue;
            }
            Err(e) => return Err(Error::kvm("KVM_RUN")(e)),
        };
        match exit {
            VcpuExit::IoOut(port::READY, _) => bell.ready.store(true, Ordering::Release),
            VcpuExit::IoOut(port::DONE, _) => {
                st.cpu_ns = thread_cpu_ns() - cpu0;
                return Ok(st);
            }
            VcpuExit::IoOut(port::FAULT, d) => {
                return Err(Error::Guest(format!(
                    "exception {:#x}",
                    d.first().copied().unwrap_or(0)
                )))
            }
            VcpuExit::Hlt => {
                halt(&mut policy, bell, &mut st, &now, clock)?;
                bell.counters.publish(&st);
                inject_interrupt(vcpu, WAKE_VECTOR)?;
            }
            other => return Err(unexpected(&other)),
        }
    }
    Err(Error::Guest("too many exits".into()))
}

/// One halt: poll within the policy's window, else block; returns once an interrupt is pending.
fn halt(
    policy: &mut Wait,
    bell: &Doorbell,
    st: &mut HaltStats,
    now: &impl Fn() -> u64,
    clock: TscClock,
) -> Result<()> {
    st.halts += 1;
    let begin = now();
    let decision = policy.begin(begin);
    let window = decision.window_ns(begin).min(policy.max_window_ns());
    st.max_window_ns = st.max_window_ns.max(window);
    if let WaitDecision::Poll { .. } = decision {
        st.attempted += 1;
        let deadline = begin + window;
        let mut t = begin;
        // Bounded by the window and, should the clock stall, by a spin count.
        for _ in 0..MAX_POLL_SPINS {
            if t >= deadline {
                break;
            }
            // A plain load first: the line stays shared until the injector writes it, and
            // the atomic swap (which takes it exclusive) runs only once the flag is seen.
            if bell.pending.load(Ordering::Acquire) && bell.pending.swap(false, Ordering::AcqRel) {
                st.poll_success_ns += t - begin;
                st.polled += 1;
                policy.end(t, WakeOutcome::POLLED);
                return Ok(());
            }
            std::hint::spin_loop();
            t = now();
        }
        st.poll_fail_ns += t - begin;
        st.max_overrun_ns = st.max_overrun_ns.max(t.saturating_sub(deadline));
    }
    block(bell)?;
    st.slept += 1;
    let end = now();
    let sent = bell.sent_tsc.load(Ordering::Relaxed);
    let wake_cost_ns = clock.ns(rdtsc().saturating_sub(sent));
    policy.end(
        end,
        WakeOutcome {
            slept: true,
            valid: true,
            wake_cost_ns,
        },
    );
    Ok(())
}

/// Block on the eventfd until the pending flag is set (bounded by [`BLOCK_LIMIT`]).
fn block(bell: &Doorbell) -> Result<()> {
    let start = Instant::now();
    loop {
        if bell.pending.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        if start.elapsed() > BLOCK_LIMIT {
            return Err(Error::Timeout("an interrupt for the halted vCPU"));
        }
        let mut pfd = libc::pollfd {
            fd: bell.event.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, 100) };
        if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io("poll")(std::io::Error::last_os_error()));
        }
        // Drain; a stale count only causes one extra loop.
        let _ = bell.event.read();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_map_to_kvm_stat_names() {
        let c = UserCounters::default();
        c.publish(&HaltStats {
            halts: 10,
            attempted: 9,
            polled: 7,
            slept: 3,
            poll_success_ns: 700,
            poll_fail_ns: 200,
            ..HaltStats::default()
        });
        let s = c.snapshot().expect("atomics cannot fail");
        assert_eq!(
            (
                s.halt_exits,
                s.halt_attempted_poll,
                s.halt_successful_poll,
                s.halt_wakeup
            ),
            (10, 9, 7, 3)
        );
        assert_eq!(s.poll_ns(), 900);
        assert_eq!(
            s.since(&VcpuStats::default()).halt_poll_fail_ns,
            200,
            "a snapshot differences like KVM's"
        );
    }
}
