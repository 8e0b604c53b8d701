//! The wake target: vCPU 0 records its boot TSC, optionally enables its x2APIC, reports
//! READY, then waits for interrupts (`sti; hlt`, or a busy loop with interrupts enabled) until
//! the VMM sets the STOP cell. Its handler for [`WAKE_VECTOR`] reads the TSC as its very first
//! instruction and publishes it with a count, then EOIs (x2APIC) and returns.
//!
//! With `sender`, vCPU 1 runs the IPI sender of [`super::ipi`].

use super::{asm_error, msr, AsmResult, Builder, Program};
use crate::error::Result;
use crate::layout::{mailbox, port, WAKE_VECTOR};
use iced_x86::code_asm::{eax, ecx, edx, qword_ptr, r15, rax, rdx};

/// How the target vCPU waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Idle {
    /// `sti; hlt`: the vCPU halts (KVM halt polling / sleeping, or a HLT exit without irqchip).
    Halt,
    /// Busy loop with interrupts enabled in ring 0: the vCPU is running when the interrupt
    /// arrives (on hosts that emulate ring 0, inside the emulator).
    Spin,
    /// Busy loop in ring 3 (IOPL 3, interrupts enabled): running natively when the
    /// interrupt arrives; the handler runs in ring 0 on the TSS stack.
    SpinUser,
}

/// Options of the wake program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeGuest {
    /// The VM has an in-kernel irqchip: enable x2APIC and EOI through it.
    pub apic: bool,
    /// How vCPU 0 waits.
    pub idle: Idle,
    /// Add vCPU 1, the x2APIC IPI sender.
    pub sender: bool,
    /// Without `apic`: run as many instructions in the handler as the EOI takes (register
    /// moves in place of the MSR write), so the HLT comes about as long after each wake as on
    /// the irqchip path. Guest ring 0 is emulated at ~1 µs per instruction here, so four
    /// missing instructions start the next halt, and any poll, ~2-3 µs earlier.
    pub pad_eoi: bool,
}

/// Assemble the wake program.
///
/// # Errors
/// [`crate::Error::Assemble`] if the assembler rejects it (a bug).
pub fn program(opts: WakeGuest) -> Result<Program> {
    let name = "wake";
    let mut b = Builder::new(name)?;
    emit(&mut b, opts).map_err(|e| asm_error(name, &e))?;
    b.finish()
}

/// Emit the wake program into `b`: vCPU 0's entry, idle loop and handler, and with
/// `opts.sender` vCPU 1's IPI sender. Other programs reuse vCPU 0 as their halted target.
pub(super) fn emit(b: &mut Builder, opts: WakeGuest) -> AsmResult {
    b.entry()?;
    store_tsc(b, mailbox::BOOT_TSC)?;
    if opts.apic {
        b.enable_x2apic()?;
    }
    b.out(port::READY)?;
    if opts.idle == Idle::SpinUser {
        return emit_user_spin(b, opts);
    }
    let mut idle = b.a.create_label();
    let mut done = b.a.create_label();
    b.a.set_label(&mut idle)?;
    b.a.cmp(qword_ptr(r15 + mailbox::STOP), 0)?;
    b.a.jne(done)?;
    b.a.sti()?;
    match opts.idle {
        Idle::Halt => b.a.hlt()?,
        Idle::Spin | Idle::SpinUser => b.a.pause()?,
    }
    b.a.jmp(idle)?;
    b.a.set_label(&mut done)?;
    b.a.cli()?;
    b.out(port::DONE)?;
    b.a.hlt()?;

    emit_handler(b, opts)
}

/// Drop to ring 3 with `iretq` and spin there until STOP, then report DONE (IOPL 3 allows
/// the `out` from ring 3).
fn emit_user_spin(b: &mut Builder, opts: WakeGuest) -> AsmResult {
    let mut spin = b.a.create_label();
    let mut done = b.a.create_label();
    b.enter_ring3(spin)?;
    b.a.set_label(&mut spin)?;
    b.a.cmp(qword_ptr(r15 + mailbox::STOP), 0)?;
    b.a.jne(done)?;
    b.a.pause()?;
    b.a.jmp(spin)?;
    b.a.set_label(&mut done)?;
    b.out(port::DONE)?;
    b.a.jmp(done)?;
    emit_handler(b, opts)
}

fn emit_handler(b: &mut Builder, opts: WakeGuest) -> AsmResult {
    b.handler(WAKE_VECTOR)?;
    b.a.rdtsc()?; // first instruction of the handler: the wake timestamp
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.mov(qword_ptr(r15 + mailbox::IRQ_TSC), rax)?;
    b.a.inc(qword_ptr(r15 + mailbox::IRQ_COUNT))?;
    if opts.apic {
        b.a.mov(ecx, msr::X2APIC_EOI)?;
        b.a.xor(eax, eax)?;
        b.a.xor(edx, edx)?;
        b.a.wrmsr()?;
    } else if opts.pad_eoi {
        b.a.mov(ecx, msr::X2APIC_EOI)?;
        b.a.xor(eax, eax)?;
        b.a.xor(edx, edx)?;
        b.a.xor(edx, edx)?; // in place of wrmsr
    }
    b.a.iretq()?;

    if opts.sender {
        super::ipi::emit_sender(b)?;
    }
    Ok(())
}

/// `rdtsc` and store the 64-bit value into a mailbox cell (clobbers rax, rdx).
pub(crate) fn store_tsc(b: &mut Builder, cell: u64) -> AsmResult {
    b.a.rdtsc()?;
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.mov(qword_ptr(r15 + cell), rax)
}
