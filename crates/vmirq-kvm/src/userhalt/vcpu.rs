//! The vCPU side of the userspace halt path: run until DONE; on every HLT exit ask the wait
//! policy, poll the pending flag for at most the window it grants, otherwise block on the
//! eventfd (bounded), then inject the interrupt with `KVM_INTERRUPT` and re-enter.

use crate::error::{Error, Result};
use crate::host::{rdtsc, thread_cpu_ns, TscClock};
use crate::layout::{port, WAKE_VECTOR};
use crate::runner::unexpected;
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
    /// HLT exits.
    pub halts: u64,
    /// Halts whose interrupt arrived during the poll window.
    pub polled: u64,
    /// Halts that blocked.
    pub slept: u64,
    /// Total time spent polling (successful and failed), ns.
    pub poll_ns: u64,
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
        let deadline = begin + window;
        let mut t = begin;
        while t < deadline {
            if bell.pending.swap(false, Ordering::AcqRel) {
                st.poll_ns += t - begin;
                st.polled += 1;
                policy.end(t, WakeOutcome::POLLED);
                return Ok(());
            }
            std::hint::spin_loop();
            t = now();
        }
        st.poll_ns += t - begin;
        st.max_overrun_ns = st.max_overrun_ns.max(t - deadline);
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
