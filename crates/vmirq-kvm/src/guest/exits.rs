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
    dword_ptr, eax, ecx, edx, qword_ptr, r12, r15, r8, r8d, r9, r9d, rax, rbp, rdi, rdx,
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
}

impl ExitOp {
    /// Every operation, baseline first.
    pub const ALL: [Self; 10] = [
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
    ];

    /// Whether the loop takes interrupts (x2APIC enabled, a handler for [`WAKE_VECTOR`]).
    #[must_use]
    pub fn interrupts(self) -> bool {
        matches!(self, Self::IrqPending | Self::HltPending)
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
    b.entry()?;
    if op == ExitOp::IpiSelf || op.interrupts() {
        b.enable_x2apic()?;
    }
    b.a.mov(rdi, layout::ARRAY)?;
    b.a.mov(rbp, layout::MMIO_ADDR)?;
    b.a.mov(r12, u64::from(iterations))?;
    let mut top = b.a.create_label();
    b.a.set_label(&mut top)?;
    b.a.rdtsc()?;
    b.a.mov(r8d, eax)?;
    b.a.mov(r9d, edx)?;
    b.a.xor(eax, eax)?;
    b.a.xor(ecx, ecx)?;
    emit_op(b, op)?;
    b.a.rdtsc()?;
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.shl(r9, 32)?;
    b.a.or(r8, r9)?;
    b.a.sub(rax, r8)?;
    b.a.mov(iced_x86::code_asm::qword_ptr(rdi), rax)?;
    b.a.add(rdi, 8)?;
    b.a.dec(r12)?;
    b.a.jnz(top)?;
    b.out(port::DONE)?;
    b.a.hlt()?;
    if op.interrupts() {
        // Count, EOI and return. Clobbers eax, ecx, edx only: the loop reloads them (rdtsc)
        // after the operation, and keeps its own state in r8, r9, rdi, rbp, r12 (r15: the
        // mailbox). The count lets the VMM check that every iteration took its interrupt.
        b.handler(WAKE_VECTOR)?;
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
    }
}

/// x2APIC ICR write: fixed IPI on [`WAKE_VECTOR`] to APIC id 0, this vCPU.
fn self_ipi(b: &mut Builder) -> AsmResult {
    b.a.mov(ecx, msr::X2APIC_ICR)?;
    b.a.mov(eax, u32::from(WAKE_VECTOR))?;
    b.a.xor(edx, edx)?; // destination: APIC id 0, itself
    b.a.wrmsr()
}
