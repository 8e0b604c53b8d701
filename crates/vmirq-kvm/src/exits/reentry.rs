//! Re-entering the guest after the vCPU thread slept: a primitive for host profiles.
//!
//! The `pio_user` loop (an `out` that exits to the VMM, which re-enters at once) is run twice:
//! hot, and with the VMM thread sleeping `SLEEP_NS` in `nanosleep` on every exit before it
//! calls `KVM_RUN` again, so its CPU idles as under a halted vCPU. Per iteration the guest
//! measures the whole round trip and the VMM the time it spent in `nanosleep` (host TSC around
//! the call, wake-up latency included); their difference is the exit to the VMM plus the
//! entry after sleeping. `penalty_ns` is how much more that costs than the hot round trip:
//! what re-entering a guest costs once the thread has slept (cold caches and TLB, the nested
//! host's state reloads), with no interrupt delivery and no cross-CPU wake involved.

use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::guest::exits::{program, ExitOp};
use crate::host::{pin_to, rdtsc, TscClock};
use crate::layout::{self, port};
use crate::runner::{run_until_done, unexpected, Next};
use crate::vm::{Vm, VmConfig};
use kvm_ioctls::VcpuExit;
use serde::Serialize;
use std::time::Duration;

/// How long the VMM sleeps on each exit.
pub const SLEEP_NS: u64 = 100_000;
/// Iterations dropped at the start (as for the other operations).
const SKIP: u32 = 16;

/// Result of [`measure`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Reentry {
    /// Sleep requested per exit.
    pub sleep_ns: u64,
    /// Hot round trip (exit to the VMM and entry), per iteration.
    pub hot_ns: Summary,
    /// Round trip minus the VMM's time in `nanosleep`, per iteration.
    pub cold_ns: Summary,
    /// `cold_ns.p50 - hot_ns.p50` (0 if negative).
    pub penalty_ns: u64,
}

/// Run the hot and the sleeping loop, `iterations` each, vCPU thread pinned to CPU 0.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; guest or KVM errors.
pub fn measure(iterations: u32, clock: TscClock) -> Result<Reentry> {
    let hot = run(iterations, clock, false)?;
    let cold = run(iterations, clock, true)?;
    Ok(Reentry {
        sleep_ns: SLEEP_NS,
        penalty_ns: cold.p50.saturating_sub(hot.p50),
        hot_ns: hot,
        cold_ns: cold,
    })
}

fn run(iterations: u32, clock: TscClock, sleep: bool) -> Result<Summary> {
    let n = iterations + SKIP;
    let prog = program(ExitOp::PioUser, n)?;
    let mut vm = Vm::new(
        VmConfig {
            irqchip: true,
            vcpus: 1,
            halt_poll_ns: None,
        },
        &prog,
    )?;
    let mut vcpu = vm.vcpus.remove(0);
    let mut slept: Vec<u64> = Vec::with_capacity(n as usize);
    let timeout = Duration::from_secs(20) + Duration::from_nanos(SLEEP_NS * u64::from(n) * 4);
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_to(0)?;
            let max_exits = u64::from(n) + 100;
            run_until_done(&mut vcpu.fd, max_exits, timeout, |exit| match exit {
                VcpuExit::IoOut(port::PIO_USER, _) => {
                    if sleep {
                        let t0 = rdtsc();
                        std::thread::sleep(Duration::from_nanos(SLEEP_NS));
                        slept.push(rdtsc().saturating_sub(t0));
                    }
                    Ok(Next::Continue)
                }
                other => Err(unexpected(&other)),
            })
        })
        .join()
        .map_err(|_| Error::Guest("vCPU thread panicked".into()))?
    })?;
    if sleep && slept.len() != n as usize {
        return Err(Error::Guest(format!(
            "expected {n} exits to the VMM, saw {}",
            slept.len()
        )));
    }
    let mut ns = Vec::with_capacity(iterations as usize);
    for i in SKIP..n {
        let total = vm.ram.load(layout::ARRAY + u64::from(i) * 8)?;
        let away = if sleep { slept[i as usize] } else { 0 };
        ns.push(clock.ns(total.saturating_sub(away)));
    }
    Ok(Summary::of(&mut ns))
}
