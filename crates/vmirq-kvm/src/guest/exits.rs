//! Exit-cost loops: vCPU 0 performs one operation `iterations` times, bracketing each with
//! `rdtsc`, and stores every per-iteration tick delta in the array at [`layout::ARRAY`]. A
//! [`ExitOp::Baseline`] program runs the same loop with a `nop`, so its deltas measure the
//! bracketing itself (which is emulated, and slow, in guest kernel mode on this host).
//!
//! Every operation starts with `xor eax, eax; xor ecx, ecx` (a defined CPUID leaf, hypercall
//! number and MSR input), included in the baseline too.

use super::{asm_error, msr, AsmResult, Builder, Program};
use crate::error::{Error, Result};
use crate::layout::{self, mailbox, port, WAKE_VECTOR};
use iced_x86::code_asm::{
    dword_ptr, eax, ecx, edx, qword_ptr, r12, r15, r8, r8d, r9, r9d, rax, rbp, rdi, rdx, CodeLabel,
};
use serde::{Deserialize, Serialize};

/// The operation whose cost one loop measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitOp {
    /// `nop`: the cost of the measurement itself.
    Baseline,
    /// `out` to a port with no in-kernel handler: KVM_EXIT_IO to the VMM and back.
    PioUser,
    /// `out` to a port with an ioeventfd: handled in the kernel.
    PioEventfd,
    /// 32-bit store to guest-physical memory with no RAM behind it: KVM_EXIT_MMIO.
    MmioUser,
    /// `cpuid` (leaf 0): handled in the kernel.
    Cpuid,
    /// `vmmcall` (AMD; KVM treats it like `vmcall`) with an unknown hypercall number:
    /// handled in the kernel (returns -ENOSYS).
    Hypercall,
    /// `hlt` with interrupts disabled and no in-kernel irqchip: KVM_EXIT_HLT to the VMM.
    HltUser,
    /// x2APIC ICR write sending a fixed IPI to itself (interrupts disabled; in-kernel LAPIC).
    IpiSelf,
    /// [`Self::IpiSelf`], then `sti; out; cli` with the `out` to a port with no in-kernel
    /// handler (an exit to the VMM, as [`Self::PioUser`]): the pending interrupt is injected
    /// when KVM re-enters after that exit (its handler EOIs and returns). The reference for
    /// [`Self::HltPending`]: the same instructions, interrupt and handler, with an exit to the
    /// VMM in place of the HLT. (A `nop`, or an `out` to the ioeventfd port, in place of it
    /// does not do: on a host that emulates guest ring 0, KVM's emulator steps `sti; nop;
    /// cli` and `sti; out; cli` without injecting the interrupt, so it is never taken; seen
    /// with the `kvm_emulate_insn` tracepoint.)
    IrqPending,
    /// [`Self::IpiSelf`], then `sti; hlt; cli`: a HLT that finds an interrupt already pending,
    /// so KVM leaves the halt at once (no poll, no sleep) and re-enters the guest, which
    /// takes the interrupt. Minus [`Self::IrqPending`], plus [`Self::PioUser`]'s net cost:
    /// what a HLT and KVM's halt handling cost beyond an emulated instruction, with no
    /// cross-CPU wake, no poll loop and no sleep.
    HltPending,
    /// Interrupt delivery at a VM entry, up to the handler's first instruction: a self-IPI
    /// with interrupts disabled (before the timed span), then, timed, `sti; out` with the
    /// `out` to the VMM (as [`Self::PioUser`]); KVM injects the pending interrupt when it
    /// re-enters after that exit, and the span ends at the handler's first `rdtsc` instead of
    /// the loop's. Minus [`Self::PioUser`] (the same span with the loop's `rdtsc` after the
    /// `out`): the `sti` plus the delivery (the emulated IDT walk and frame push on a host
    /// that emulates guest ring 0), the model's `guest_irq_entry_ns` without its `rdtsc`.
    IrqEntry,
    /// From guest **ring 3** (native on a host that emulates only ring 0): a 32-bit store to
    /// an MMIO address with an ioeventfd behind it, as `vmirq kvm device`'s ring-3 driver
    /// rings its doorbell. The store faults out of the guest, KVM decodes and emulates it and
    /// signals the eventfd, and resumes ring 3. The loop runs in ring 3 (its `rdtsc`s are
    /// native), so its raw time is the doorbell's cost: no ring-0 baseline is subtracted.
    DoorbellUser3,
    /// From guest ring 3: `cpuid` (leaf 0), handled in the kernel. If it exits (as on a host
    /// that runs guest ring 3 natively and intercepts `cpuid`), the lightest real exit from
    /// ring 3 and back: the world switch of a vCPU running guest code, e.g. forced out to
    /// take an interrupt (the ring-3 driver of `vmirq kvm device`). Raw time, as
    /// [`Self::DoorbellUser3`]. (An `out` from ring 3 faults on the PVM host even with IOPL
    /// 3, as `cli`/`sti` do.)
    CpuidUser3,
}

impl ExitOp {
    /// Every operation, baseline first.
    pub const ALL: [Self; 13] = [
        Self::Baseline,
        Self::PioUser,
        Self::PioEventfd,
        Self::MmioUser,
        Self::Cpuid,
        Self::Hypercall,
        Self::HltUser,
        Self::IpiSelf,
        Self::IrqPending,
        Self::HltPending,
        Self::IrqEntry,
        Self::DoorbellUser3,
        Self::CpuidUser3,
    ];

    /// Whether the loop takes interrupts (x2APIC enabled, a handler for [`WAKE_VECTOR`]).
    #[must_use]
    pub fn interrupts(self) -> bool {
        matches!(self, Self::IrqPending | Self::HltPending | Self::IrqEntry)
    }

    /// Whether the loop runs in guest ring 3 (its raw time is its cost: no baseline).
    #[must_use]
    pub fn ring3(self) -> bool {
        matches!(self, Self::DoorbellUser3 | Self::CpuidUser3)
    }

    /// Whether the loop needs the in-kernel irqchip (and must not have it for `HltUser`).
    #[must_use]
    pub fn irqchip(self) -> bool {
        !matches!(self, Self::HltUser)
    }
}

/// Largest iteration count (the array holds one u64 per iteration).
#[allow(
    clippy::cast_possible_truncation,
    reason = "ARRAY_SIZE / 8 is 256 Ki, far below u32::MAX"
)]
pub const MAX_ITERATIONS: u32 = (layout::ARRAY_SIZE / 8) as u32;

/// Assemble the loop for `op` with `iterations` rounds.
///
/// # Errors
/// [`Error::Config`] if `iterations` is 0 or above [`MAX_ITERATIONS`].
pub fn program(op: ExitOp, iterations: u32) -> Result<Program> {
    if iterations == 0 || iterations > MAX_ITERATIONS {
        return Err(Error::Config(format!(
            "iterations must be 1..={MAX_ITERATIONS}"
        )));
    }
    let name = "exits";
    let mut b = Builder::new(name)?;
    emit(&mut b, op, iterations).map_err(|e| asm_error(name, &e))?;
    b.finish()
}

fn emit(b: &mut Builder, op: ExitOp, iterations: u32) -> AsmResult {
    let top = prologue(b, &[op], iterations)?;
    span(b, op)?;
    epilogue(b, &[op], top)
}

/// Entry, x2APIC if any of `ops` needs it, the loop registers (`rdi` the sample array,
/// `rbp` the MMIO address, `r12` the iteration count), the switch to ring 3 if `ops[0]` runs
/// there (every op of one loop runs in the same ring), and the loop's top label.
pub(super) fn prologue(b: &mut Builder, ops: &[ExitOp], iterations: u32) -> AsmResult<CodeLabel> {
    b.entry()?;
    if ops
        .iter()
        .any(|&op| op == ExitOp::IpiSelf || op.interrupts())
    {
        b.enable_x2apic()?;
    }
    b.a.mov(rdi, layout::ARRAY)?;
    b.a.mov(rbp, layout::MMIO_ADDR)?;
    b.a.mov(r12, u64::from(iterations))?;
    let mut top = b.a.create_label();
    if ops.first().is_some_and(|op| op.ring3()) {
        b.a.mov(rbp, layout::DOORBELL_MMIO)?;
        b.enter_ring3(top)?; // keeps rdi, rbp, r12 (it uses rax only)
    }
    b.a.set_label(&mut top)?;
    Ok(top)
}

/// One timed span of `op` and its sample: the tick delta stored at `[rdi]`, `rdi` advanced
/// by 8. The bracketing (`rdtsc; mov; mov; xor; xor` before the op, `rdtsc` after it, or the
/// handler's timestamp for [`ExitOp::IrqEntry`]) is the same for every op, so two spans
/// differ only in their op.
pub(super) fn span(b: &mut Builder, op: ExitOp) -> AsmResult {
    if op == ExitOp::IrqEntry {
        self_ipi(b)?; // pending, interrupts off: outside the timed span
    }
    b.a.rdtsc()?;
    b.a.mov(r8d, eax)?;
    b.a.mov(r9d, edx)?;
    b.a.xor(eax, eax)?;
    b.a.xor(ecx, ecx)?;
    emit_op(b, op)?;
    if op == ExitOp::IrqEntry {
        b.a.mov(rax, qword_ptr(r15 + mailbox::IRQ_TSC))?; // the handler's first rdtsc
    } else {
        b.a.rdtsc()?;
        b.a.shl(rdx, 32)?;
        b.a.or(rax, rdx)?;
    }
    b.a.shl(r9, 32)?;
    b.a.or(r8, r9)?;
    b.a.sub(rax, r8)?;
    b.a.mov(qword_ptr(rdi), rax)?;
    b.a.add(rdi, 8)
}

/// The loop's end (`dec r12; jnz top`), DONE, and the interrupt handler if any of `ops`
/// takes interrupts.
pub(super) fn epilogue(b: &mut Builder, ops: &[ExitOp], top: CodeLabel) -> AsmResult {
    b.a.dec(r12)?;
    b.a.jnz(top)?;
    let mut done = b.a.create_label();
    b.a.set_label(&mut done)?;
    b.out(port::DONE)?;
    if ops.first().is_some_and(|op| op.ring3()) {
        b.a.jmp(done)?; // `hlt` faults in ring 3; the VMM stops at DONE anyway
    } else {
        b.a.hlt()?;
    }
    if ops.iter().any(|op| op.interrupts()) {
        // Count, EOI and return. Clobbers eax, ecx, edx only: the loop reloads them (rdtsc)
        // after the operation, and keeps its own state in r8, r9, rdi, rbp, r12 (r15: the
        // mailbox). The count lets the VMM check that every iteration took its interrupt.
        b.handler(WAKE_VECTOR)?;
        if ops.contains(&ExitOp::IrqEntry) {
            // Timestamp first (the end of the timed span), kept in the mailbox.
            b.a.rdtsc()?;
            b.a.shl(rdx, 32)?;
            b.a.or(rax, rdx)?;
            b.a.mov(qword_ptr(r15 + mailbox::IRQ_TSC), rax)?;
        }
        b.a.inc(qword_ptr(r15 + mailbox::IRQ_COUNT))?;
        b.a.mov(ecx, msr::X2APIC_EOI)?;
        b.a.xor(eax, eax)?;
        b.a.xor(edx, edx)?;
        b.a.wrmsr()?;
        b.a.iretq()?;
    }
    Ok(())
}

fn emit_op(b: &mut Builder, op: ExitOp) -> AsmResult {
    match op {
        ExitOp::Baseline => b.a.nop(),
        ExitOp::PioUser => b.out(port::PIO_USER),
        ExitOp::PioEventfd => b.out(port::PIO_EVENTFD),
        ExitOp::MmioUser => b.a.mov(dword_ptr(rbp), eax),
        ExitOp::Cpuid => b.a.cpuid(),
        ExitOp::Hypercall => b.a.vmmcall(),
        ExitOp::HltUser => b.a.hlt(),
        ExitOp::IpiSelf => self_ipi(b),
        ExitOp::IrqPending => {
            self_ipi(b)?;
            b.a.sti()?;
            b.out(port::PIO_USER)?; // exit to the VMM: the interrupt is injected on re-entry
            b.a.cli()
        }
        ExitOp::HltPending => {
            self_ipi(b)?;
            b.a.sti()?;
            b.a.hlt()?; // in sti's shadow: the HLT runs, finds the interrupt pending
            b.a.cli()
        }
        ExitOp::DoorbellUser3 => b.a.mov(dword_ptr(rbp), eax),
        ExitOp::CpuidUser3 => b.a.cpuid(),
        ExitOp::IrqEntry => {
            // The self-IPI was sent before the span; injected on re-entry after the `out`.
            b.a.sti()?;
            b.out(port::PIO_USER)?;
            b.a.cli()
        }
    }
}

/// x2APIC ICR write: fixed IPI on [`WAKE_VECTOR`] to APIC id 0, this vCPU.
fn self_ipi(b: &mut Builder) -> AsmResult {
    b.a.mov(ecx, msr::X2APIC_ICR)?;
    b.a.mov(eax, u32::from(WAKE_VECTOR))?;
    b.a.xor(edx, edx)?; // destination: APIC id 0, itself
    b.a.wrmsr()
}
