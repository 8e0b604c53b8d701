//! The moderated-device driver (vCPU 0). It keeps `depth` requests outstanding: for each
//! submission it writes the TSC into the submit ring, bumps SUBMITTED and kicks the doorbell
//! (an MMIO ioeventfd), with interrupts enabled, so completions can interrupt submitting.
//! When the ring is full it re-checks with interrupts off and halts (`sti; hlt`, so no
//! wakeup is lost). The interrupt handler reads the TSC first, logs
//! (TSC, COMPLETED) for the VMM's latency computation, consumes the completions
//! (SEEN = COMPLETED), EOIs, and adds its own duration to HANDLER_TICKS.

use super::{asm_error, msr, AsmResult, Builder, Program};
use crate::error::Result;
use crate::layout::{self, mailbox, port, WAKE_VECTOR};
use iced_x86::code_asm::{
    dword_ptr, eax, ecx, edx, qword_ptr, r10, r11, r15, r8, r9, rax, rbx, rdi, rdx, rsi,
};

/// Requests the guest has submitted (guest writes).
pub const SUBMITTED: u64 = mailbox::RESULT0;
/// Completions the guest has consumed (guest writes, in its handler).
pub const SEEN: u64 = mailbox::RESULT1;
/// Completions the device has published (device writes: the used index).
pub const COMPLETED: u64 = mailbox::RESULT2;
/// Sum of handler durations in TSC ticks (guest writes).
pub const HANDLER_TICKS: u64 = mailbox::RESULT3;
/// Submit ring: TSC of request `i` at `SUBMIT_RING + (i % SUBMIT_SLOTS) * 8`.
pub const SUBMIT_RING: u64 = layout::ARRAY;
/// Slots in the submit ring (the device copies each TSC out long before it is reused).
pub const SUBMIT_SLOTS: u64 = 4096;
/// Interrupt log: entry `k` is (handler TSC, COMPLETED) at `IRQ_LOG + k * 16`.
pub const IRQ_LOG: u64 = layout::ARRAY + SUBMIT_SLOTS * 8;
/// Interrupts logged at most (later ones are counted but not logged).
pub const IRQ_LOG_MAX: u64 = (layout::ARRAY_SIZE as u64 - SUBMIT_SLOTS * 8) / 16;

/// Where the driver runs while it waits for completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverMode {
    /// Ring 0, halting when the ring is full (on hosts that emulate ring 0, interrupts reach
    /// a busy ring-0 vCPU late, so delivery mostly happens at the halt).
    Halt,
    /// Ring 3 (native, IOPL 3, interrupts always enabled: `cli`/`sti` fault in ring 3 on
    /// the PVM host), spinning when the ring is full: every signal the device sends is
    /// delivered promptly, so moderation shows in interrupts per completion.
    SpinUser,
}

/// Assemble the driver for `depth` outstanding requests (1..=1024).
///
/// # Errors
/// [`crate::Error::Config`] for a bad depth.
pub fn program(depth: u32, mode: DriverMode) -> Result<Program> {
    if depth == 0 || depth > 1024 {
        return Err(crate::Error::Config("depth must be 1..=1024".into()));
    }
    let name = "device";
    let mut b = Builder::new(name)?;
    emit(&mut b, depth, mode).map_err(|e| asm_error(name, &e))?;
    b.finish()
}

fn emit(b: &mut Builder, depth: u32, mode: DriverMode) -> AsmResult {
    b.entry()?;
    b.enable_x2apic()?;
    b.out(port::READY)?;
    let (mut top, mut full, mut done) =
        (b.a.create_label(), b.a.create_label(), b.a.create_label());
    let depth = i32::try_from(depth).unwrap_or(1024);
    if mode == DriverMode::SpinUser {
        b.enter_ring3(top)?;
    }
    // The submit loop runs with interrupts enabled and uses only registers the handler
    // leaves alone (rbx, rsi, rdi); the TSC read and store are done with interrupts off.
    let ring0 = mode == DriverMode::Halt;
    b.a.set_label(&mut top)?;
    if ring0 {
        b.a.sti()?;
    }
    b.a.cmp(qword_ptr(r15 + mailbox::STOP), 0)?;
    b.a.jne(done)?;
    b.a.mov(rbx, qword_ptr(r15 + SUBMITTED))?;
    b.a.mov(rsi, rbx)?;
    b.a.sub(rbx, qword_ptr(r15 + SEEN))?;
    b.a.cmp(rbx, depth)?;
    b.a.jae(full)?;
    // Submit request rsi: submit TSC into its ring slot, publish, kick.
    b.a.and(rsi, i32::try_from(SUBMIT_SLOTS - 1).unwrap_or(0))?;
    b.a.shl(rsi, 3)?;
    b.a.mov(rdi, SUBMIT_RING)?;
    if ring0 {
        b.a.cli()?;
    }
    b.a.rdtsc()?;
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.mov(qword_ptr(rdi + rsi), rax)?;
    if ring0 {
        b.a.sti()?;
    }
    b.a.inc(qword_ptr(r15 + SUBMITTED))?;
    b.a.mov(rdi, layout::DOORBELL_MMIO)?;
    b.a.mov(dword_ptr(rdi), eax)?;
    b.a.jmp(top)?;
    // Ring full: re-check with interrupts off, then `sti; hlt` so no wakeup is lost.
    b.a.set_label(&mut full)?;
    if ring0 {
        b.a.cli()?;
    }
    b.a.mov(rbx, qword_ptr(r15 + SUBMITTED))?;
    b.a.sub(rbx, qword_ptr(r15 + SEEN))?;
    b.a.cmp(rbx, depth)?;
    b.a.jb(top)?;
    if ring0 {
        b.a.sti()?;
        b.a.hlt()?;
    } else {
        b.a.pause()?;
    }
    b.a.jmp(top)?;
    b.a.set_label(&mut done)?;
    b.out(port::DONE)?;
    b.a.jmp(done)?;
    emit_handler(b, !ring0)
}

/// The handler. With `save`, it first preserves rax and rdx, which the ring-3 driver may be
/// using when interrupted (it cannot mask interrupts there), so its timestamp comes two
/// instructions after entry.
fn emit_handler(b: &mut Builder, save: bool) -> AsmResult {
    let mut skip = b.a.create_label();
    b.handler(WAKE_VECTOR)?;
    if save {
        b.a.push(rax)?;
        b.a.push(rdx)?;
    }
    b.a.rdtsc()?; // when the guest saw the interrupt
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.mov(r9, rax)?;
    b.a.mov(r10, qword_ptr(r15 + COMPLETED))?;
    b.a.mov(qword_ptr(r15 + SEEN), r10)?;
    b.a.mov(r11, qword_ptr(r15 + mailbox::IRQ_COUNT))?;
    b.a.cmp(r11, i32::try_from(IRQ_LOG_MAX).unwrap_or(0))?;
    b.a.jae(skip)?;
    b.a.shl(r11, 4)?;
    b.a.mov(r8, IRQ_LOG)?;
    b.a.mov(qword_ptr(r8 + r11), r9)?;
    b.a.mov(qword_ptr(r8 + r11 + 8), r10)?;
    b.a.set_label(&mut skip)?;
    b.a.inc(qword_ptr(r15 + mailbox::IRQ_COUNT))?;
    b.a.mov(ecx, msr::X2APIC_EOI)?;
    b.a.xor(eax, eax)?;
    b.a.xor(edx, edx)?;
    b.a.wrmsr()?;
    b.a.rdtsc()?;
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.sub(rax, r9)?;
    b.a.add(qword_ptr(r15 + HANDLER_TICKS), rax)?;
    if save {
        b.a.pop(rdx)?;
        b.a.pop(rax)?;
    }
    b.a.iretq()
}
