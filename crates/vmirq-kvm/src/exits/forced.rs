//! An interrupt forced into a running vCPU: a primitive for host profiles (issue 16).
//!
//! `vmirq kvm device`'s driver spins in guest ring 3 while the device signals it through an
//! irqfd, so every interrupt takes a vCPU that is running guest code out of the guest (the
//! forced exit: KVM's kick IPI, or on a PVM host the switcher), injects it at the re-entry
//! and delivers it to the handler. This loop times that with nothing else in it:
//! - vCPU 0 (thread pinned to CPU 0) runs [`crate::guest::forced`]: a ring-3 loop storing
//!   its TSC, a handler that logs the loop's last TSC, its own first TSC and its TSC before
//!   `iretq`, and the loop's first TSC after the return;
//! - a writer on CPU 1 writes the irqfd (an MSI route to the handler's vector) once per
//!   round, waits until the loop logged its return, then lets the guest spin [`GAP_NS`].
//!
//! Per round:
//! - `to_handler_ns`: the handler's first TSC minus the loop's last one: the running guest's
//!   progress stops, the exit, the injection, the delivery up to the handler's first
//!   instruction (plus at most one loop iteration, tens of ns native);
//! - `handler_ns`: the handler's own instructions up to `iretq`;
//! - `return_ns`: `iretq` to the loop's first TSC after it;
//! - `lost_ns`: `to_handler_ns + return_ns`, what the interrupt costs the running guest
//!   beyond its handler's body;
//! - `arrival_ns`: the handler's first TSC minus the writer's TSC before `write()` (the irqfd
//!   write included; recorded, not a primitive: `irqfd_write` measures the write alone).
//! - `write_ns`: the writer's own `write()` to the irqfd while the vCPU runs guest code (a
//!   primitive: what a polling device thread spends on each notification before it polls
//!   again; `irqfd_write` times the same call into a vCPU outside guest mode, where KVM's
//!   kick sends no IPI).
//!
//! [`measure_chained`] runs the same VM with two signals per round, the second sent once the
//! first handler has logged its entry: the second interrupt is then pending at the first
//! handler's `iretq`, and the span to the second handler's first TSC is what taking a held
//! interrupt at the return costs.

use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::guest::forced::{program, RECORDS, RECORDS_MAX, RECORD_BYTES};
use crate::host::{pin_to, rdtsc, spin_until_tsc, TscClock};
use crate::layout::{mailbox, WAKE_GSI, WAKE_VECTOR};
use crate::memory::GuestRam;
use crate::vm::{Vm, VmConfig};
use crate::wake::target;
use serde::Serialize;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;

/// Rounds dropped at the start (cold caches).
const SKIP: u32 = 16;
/// Longest wait for the guest to log one round.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// Spinning time the guest gets between two interrupts.
pub const GAP_NS: u64 = 30_000;

/// Result of [`measure`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ForcedIrq {
    /// The loop's last TSC to the handler's first.
    pub to_handler_ns: Summary,
    /// The handler's first TSC to its TSC before `iretq`.
    pub handler_ns: Summary,
    /// The handler's TSC before `iretq` to the loop's first TSC after it.
    pub return_ns: Summary,
    /// `to_handler + return` per round.
    pub lost_ns: Summary,
    /// The writer's TSC before its irqfd `write()` to the handler's first TSC.
    pub arrival_ns: Summary,
    /// The writer's TSC before its irqfd `write()` to its TSC after it returned (the vCPU
    /// in guest mode).
    pub write_ns: Summary,
    /// Rounds left out because their timestamps were out of order (an interrupt that was
    /// not taken inside the loop, which would measure something else).
    pub rejected: u32,
}

/// The forced-interrupt VM: vCPU 0 runs [`program`] on its own thread (CPU 0), an irqfd
/// routed to its handler's vector.
fn start() -> Result<(Vm, EventFd, target::Running)> {
    let mut vm = Vm::new(
        VmConfig {
            irqchip: true,
            vcpus: 1,
            halt_poll_ns: None,
        },
        &program()?,
    )?;
    let irqfd = vm.msi_irqfd(WAKE_GSI, 0, WAKE_VECTOR)?;
    let cpu = vm.vcpus.remove(0);
    let running = target::spawn(cpu.fd, 0);
    Ok((vm, irqfd, running))
}

/// Spin until the guest wrote a non-zero value at `at`, at most [`HANDSHAKE`].
fn wait_logged(ram: &GuestRam, at: u64, what: &'static str) -> Result<()> {
    let t = Instant::now();
    while ram.load(at)? == 0 {
        if t.elapsed() > HANDSHAKE {
            return Err(Error::Timeout(what));
        }
        std::hint::spin_loop();
    }
    Ok(())
}

/// Run `iterations` timed rounds.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; guest, KVM or handshake errors; more than a tenth of
/// the rounds rejected.
pub fn measure(iterations: u32, clock: TscClock) -> Result<ForcedIrq> {
    let n = iterations + SKIP;
    if u64::from(n) > RECORDS_MAX {
        return Err(Error::Config(format!("at most {RECORDS_MAX} rounds")));
    }
    let (vm, irqfd, running) = start()?;
    let ram = &vm.ram;
    let gap = clock.ticks(GAP_NS);
    let sent = running.wait_ready(Duration::from_secs(5)).and_then(|()| {
        std::thread::scope(|s| {
            s.spawn(|| -> Result<Vec<(u64, u64)>> {
                pin_to(1)?;
                let mut sent = Vec::with_capacity(n as usize);
                for i in 0..u64::from(n) {
                    spin_until_tsc(rdtsc() + gap);
                    let before = rdtsc();
                    irqfd.write(1).map_err(Error::io("irqfd write"))?;
                    sent.push((before, rdtsc()));
                    wait_logged(
                        ram,
                        RECORDS + i * RECORD_BYTES + 24,
                        "the guest to log a forced interrupt",
                    )?;
                }
                Ok(sent)
            })
            .join()
            .map_err(|_| Error::Guest("irqfd writer thread panicked".into()))?
        })
    });
    ram.set_cell(mailbox::STOP, 1)?;
    running.join(Duration::from_secs(5))?;
    let sent = sent?;
    let taken = ram.cell(mailbox::IRQ_COUNT)?;
    if taken != u64::from(n) {
        return Err(Error::Guest(format!(
            "forced interrupt loop: the handler ran {taken} times for {n} writes"
        )));
    }
    let (mut to, mut hd, mut ret, mut lost, mut arr, mut wr) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let mut rejected = 0u32;
    for i in SKIP..n {
        let at = RECORDS + u64::from(i) * RECORD_BYTES;
        let (last, entry, end, resume) = (
            ram.load(at)?,
            ram.load(at + 8)?,
            ram.load(at + 16)?,
            ram.load(at + 24)?,
        );
        let (s, returned) = sent[i as usize];
        if !(last <= entry && entry <= end && end <= resume && s <= entry && s <= returned) {
            rejected += 1;
            continue;
        }
        let d = |a: u64, b: u64| clock.ns(b - a);
        to.push(d(last, entry));
        hd.push(d(entry, end));
        ret.push(d(end, resume));
        lost.push(d(last, entry) + d(end, resume));
        arr.push(d(s, entry));
        wr.push(d(s, returned));
    }
    if rejected > iterations / 10 {
        return Err(Error::Guest(format!(
            "forced interrupt loop: {rejected} of {iterations} rounds out of order"
        )));
    }
    Ok(ForcedIrq {
        to_handler_ns: Summary::of(&mut to),
        handler_ns: Summary::of(&mut hd),
        return_ns: Summary::of(&mut ret),
        lost_ns: Summary::of(&mut lost),
        arrival_ns: Summary::of(&mut arr),
        write_ns: Summary::of(&mut wr),
        rejected,
    })
}

/// Result of [`measure_chained`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ChainedIrq {
    /// The first handler's TSC before `iretq` to the second handler's first TSC, in the
    /// rounds where the ring-3 loop did not run between them (the second interrupt was
    /// delivered at the `iretq`).
    pub iret_to_handler_ns: Summary,
    /// Rounds in which the ring-3 loop ran between the two handlers (the second interrupt
    /// was taken from running guest code, not at the `iretq`): left out of the summary.
    pub ran_between: u32,
    /// Rounds left out because their timestamps were out of order.
    pub rejected: u32,
}

/// Run `iterations` chained rounds: the writer signals the irqfd, waits until the handler
/// has logged its entry, and signals again, so that the second interrupt is pending in the
/// IRR (the handler runs with IF = 0) when the first handler executes `iretq`. This is what
/// a device that signals while the guest handles its previous interrupt causes (`vmirq kvm
/// device` with `none`): the cost of taking a pending interrupt at the handler's return.
///
/// # Errors
/// As [`measure`]; more than a tenth of the rounds rejected.
pub fn measure_chained(iterations: u32, clock: TscClock) -> Result<ChainedIrq> {
    let n = iterations + SKIP;
    if 2 * u64::from(n) > RECORDS_MAX {
        return Err(Error::Config(format!("at most {} rounds", RECORDS_MAX / 2)));
    }
    let (vm, irqfd, running) = start()?;
    let ram = &vm.ram;
    let gap = clock.ticks(GAP_NS);
    let written = running.wait_ready(Duration::from_secs(5)).and_then(|()| {
        std::thread::scope(|s| {
            s.spawn(|| -> Result<()> {
                pin_to(1)?;
                for i in 0..u64::from(n) {
                    let first = RECORDS + 2 * i * RECORD_BYTES;
                    spin_until_tsc(rdtsc() + gap);
                    irqfd.write(1).map_err(Error::io("irqfd write"))?;
                    wait_logged(
                        ram,
                        first + 8,
                        "the guest to enter the first chained handler",
                    )?;
                    irqfd.write(1).map_err(Error::io("irqfd write"))?;
                    wait_logged(
                        ram,
                        first + RECORD_BYTES + 24,
                        "the guest to resume after the second chained handler",
                    )?;
                }
                Ok(())
            })
            .join()
            .map_err(|_| Error::Guest("irqfd writer thread panicked".into()))?
        })
    });
    ram.set_cell(mailbox::STOP, 1)?;
    running.join(Duration::from_secs(5))?;
    written?;
    let taken = ram.cell(mailbox::IRQ_COUNT)?;
    if taken != 2 * u64::from(n) {
        return Err(Error::Guest(format!(
            "chained interrupt loop: the handler ran {taken} times for {} writes",
            2 * n
        )));
    }
    let (mut chain, mut ran_between, mut rejected) = (Vec::new(), 0u32, 0u32);
    for i in SKIP..n {
        let a = RECORDS + 2 * u64::from(i) * RECORD_BYTES;
        let b = a + RECORD_BYTES;
        let (end1, resumed1) = (ram.load(a + 16)?, ram.load(a + 24)?);
        let (last2, entry2) = (ram.load(b)?, ram.load(b + 8)?);
        if end1 == 0 || entry2 < end1 {
            rejected += 1;
        } else if resumed1 != 0 || last2 > end1 {
            ran_between += 1;
        } else {
            chain.push(clock.ns(entry2 - end1));
        }
    }
    if rejected > iterations / 10 {
        return Err(Error::Guest(format!(
            "chained interrupt loop: {rejected} of {iterations} rounds out of order"
        )));
    }
    Ok(ChainedIrq {
        iret_to_handler_ns: Summary::of(&mut chain),
        ran_between,
        rejected,
    })
}
