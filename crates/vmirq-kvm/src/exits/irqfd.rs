//! An irqfd write into a vCPU that is not asleep: a primitive for host profiles (issue 16).
//!
//! A polled irqfd wake starts with the sender's `write()` to the irqfd: the eventfd signal,
//! KVM's irqfd wake-up callback (the MSI is injected from it, in the sender's context), the
//! MSI routing, the LAPIC's IRR set and a kick that wakes no thread because the vCPU thread
//! is not sleeping. Only after that can the vCPU's poll loop see the interrupt. This loop
//! times that `write()` alone.
//!
//! vCPU 0 (thread pinned to CPU 0) runs the [`ExitOp::IrqEntry`] loop, with x2APIC enabled
//! and interrupts enabled at each `out` to the VMM. On every such exit the vCPU thread asks a
//! writer thread pinned to CPU 1 (the other core, as `vmirq kvm wake`'s sender) for one round
//! and spins in user space until it is done, so the vCPU is outside guest mode (as in KVM's
//! halt-poll loop) while the writer times:
//! - `irqfd_ns`: `write()` to the irqfd (an MSI route to the vCPU's wake vector);
//! - `plain_ns`: `write()` to an eventfd nobody waits on (the signal alone; read back untimed).
//!
//! `msi_ns = irqfd_ns.p50 - plain_ns.p50` is what KVM's irqfd path adds to an eventfd write.
//! The interrupt merges with the loop's own pending self-IPI (same vector), so the guest's
//! handler still runs once per iteration (checked).

use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::guest::exits::{program, ExitOp};
use crate::host::{pin_to, rdtsc, TscClock};
use crate::layout::{self, port, WAKE_GSI, WAKE_VECTOR};
use crate::runner::{run_until_done, unexpected, Next};
use crate::vm::{Vm, VmConfig};
use kvm_ioctls::VcpuExit;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;

/// Iterations dropped at the start (cold caches).
const SKIP: u32 = 16;
/// Longest wait for the other thread at one handshake.
const HANDSHAKE: Duration = Duration::from_secs(5);

/// Result of [`measure`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IrqfdWrite {
    /// `write()` to the irqfd, per iteration.
    pub irqfd_ns: Summary,
    /// `write()` to an eventfd without waiter or irqfd, per iteration.
    pub plain_ns: Summary,
    /// `irqfd_ns.p50 - plain_ns.p50` (0 if negative).
    pub msi_ns: u64,
}

/// Run the loop, `iterations` timed rounds.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; guest, KVM or handshake errors.
pub fn measure(iterations: u32, clock: TscClock) -> Result<IrqfdWrite> {
    let n = iterations + SKIP;
    let prog = program(ExitOp::IrqEntry, n)?;
    let mut vm = Vm::new(
        VmConfig {
            irqchip: true,
            vcpus: 1,
            halt_poll_ns: None,
        },
        &prog,
    )?;
    let irqfd = vm.msi_irqfd(WAKE_GSI, 0, WAKE_VECTOR)?;
    let plain = EventFd::new(libc::EFD_NONBLOCK).map_err(Error::io("eventfd"))?;
    let mut vcpu = vm.vcpus.remove(0);
    let asked = AtomicU32::new(0);
    let done = AtomicU32::new(0);
    let stop = AtomicBool::new(false);
    let (irqfd_ticks, plain_ticks) = std::thread::scope(|s| {
        let writer = s.spawn(|| -> Result<(Vec<u64>, Vec<u64>)> {
            pin_to(1)?;
            let mut a = Vec::with_capacity(n as usize);
            let mut b = Vec::with_capacity(n as usize);
            let mut served = 0;
            while !stop.load(Ordering::Acquire) {
                if asked.load(Ordering::Acquire) == served {
                    std::hint::spin_loop();
                    continue;
                }
                let t0 = rdtsc();
                irqfd.write(1).map_err(Error::io("irqfd write"))?;
                let t1 = rdtsc();
                plain.write(1).map_err(Error::io("eventfd write"))?;
                let t2 = rdtsc();
                plain.read().map_err(Error::io("eventfd read"))?;
                a.push(t1.saturating_sub(t0));
                b.push(t2.saturating_sub(t1));
                served += 1;
                done.store(served, Ordering::Release);
            }
            Ok((a, b))
        });
        let run = s
            .spawn(|| {
                pin_to(0)?;
                let timeout = Duration::from_secs(20);
                run_until_done(
                    &mut vcpu.fd,
                    u64::from(n) + 100,
                    timeout,
                    |exit| match exit {
                        VcpuExit::IoOut(port::PIO_USER, _) => {
                            let want = asked.fetch_add(1, Ordering::AcqRel) + 1;
                            let t = Instant::now();
                            while done.load(Ordering::Acquire) != want {
                                if t.elapsed() > HANDSHAKE {
                                    return Err(Error::Timeout("the irqfd writer thread"));
                                }
                                std::hint::spin_loop();
                            }
                            Ok(Next::Continue)
                        }
                        other => Err(unexpected(&other)),
                    },
                )
            })
            .join();
        stop.store(true, Ordering::Release);
        let written = writer
            .join()
            .map_err(|_| Error::Guest("irqfd writer thread panicked".into()))?;
        run.map_err(|_| Error::Guest("vCPU thread panicked".into()))??;
        written
    })?;
    let taken = vm.ram.cell(layout::mailbox::IRQ_COUNT)?;
    if taken != u64::from(n) || irqfd_ticks.len() != n as usize {
        return Err(Error::Guest(format!(
            "irqfd loop: {taken} handler runs and {} writes in {n} iterations",
            irqfd_ticks.len()
        )));
    }
    let skip = SKIP as usize;
    let mut a: Vec<u64> = irqfd_ticks[skip..].iter().map(|&t| clock.ns(t)).collect();
    let mut b: Vec<u64> = plain_ticks[skip..].iter().map(|&t| clock.ns(t)).collect();
    let irqfd_ns = Summary::of(&mut a);
    let plain_ns = Summary::of(&mut b);
    Ok(IrqfdWrite {
        msi_ns: irqfd_ns.p50.saturating_sub(plain_ns.p50),
        irqfd_ns,
        plain_ns,
    })
}
