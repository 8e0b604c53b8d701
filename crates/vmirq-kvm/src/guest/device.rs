//! The moderated-device driver (vCPU 0). It keeps `depth` requests outstanding: for each
//! submission it writes the TSC into the submit ring, bumps SUBMITTED and kicks the doorbell
//! (an ioeventfd port). When the ring is full it halts (`sti; hlt` with interrupts otherwise
//! off, so no wakeup is lost). The interrupt handler reads the TSC first, logs
//! (TSC, COMPLETED) for the VMM's latency computation, consumes the completions
//! (SEEN = COMPLETED), EOIs, and adds its own duration to HANDLER_TICKS.

use super::{asm_error, msr, AsmResult, Builder, Program};
use crate::error::Result;
use crate::layout::{self, mailbox, port, WAKE_VECTOR};
use iced_x86::code_asm::{al, eax, ecx, edx, qword_ptr, r10, r11, r15, r8, r9, rax, rcx, rdx};

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

/// Assemble the driver for `depth` outstanding requests (1..=1024).
///
/// # Errors
/// [`crate::Error::Config`] for a bad depth.
pub fn program(depth: u32) -> Result<Program> {
    if depth == 0 || depth > 1024 {
        return Err(crate::Error::Config("depth must be 1..=1024".into()));
    }
    let name = "device";
    let mut b = Builder::new(name)?;
    emit(&mut b, depth).map_err(|e| asm_error(name, &e))?;
    b.finish()
}

fn emit(b: &mut Builder, depth: u32) -> AsmResult {
    b.entry()?;
    b.enable_x2apic()?;
    b.out(port::READY)?;
    let (mut top, mut full, mut done) =
        (b.a.create_label(), b.a.create_label(), b.a.create_label());
    b.a.set_label(&mut top)?;
    b.a.cli()?;
    b.a.cmp(qword_ptr(r15 + mailbox::STOP), 0)?;
    b.a.jne(done)?;
    b.a.mov(rax, qword_ptr(r15 + SUBMITTED))?;
    b.a.mov(rcx, rax)?;
    b.a.sub(rax, qword_ptr(r15 + SEEN))?;
    b.a.cmp(rax, i32::try_from(depth).unwrap_or(1024))?;
    b.a.jae(full)?;
    // Submit request rcx: submit TSC into its ring slot, publish, kick.
    b.a.and(rcx, i32::try_from(SUBMIT_SLOTS - 1).unwrap_or(0))?;
    b.a.shl(rcx, 3)?;
    b.a.rdtsc()?;
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.mov(r8, SUBMIT_RING)?;
    b.a.mov(qword_ptr(r8 + rcx), rax)?;
    b.a.inc(qword_ptr(r15 + SUBMITTED))?;
    b.a.out(u32::from(port::DOORBELL), al)?;
    b.a.jmp(top)?;
    b.a.set_label(&mut full)?;
    b.a.sti()?;
    b.a.hlt()?;
    b.a.jmp(top)?;
    b.a.set_label(&mut done)?;
    b.out(port::DONE)?;
    b.a.hlt()?;
    emit_handler(b)
}

fn emit_handler(b: &mut Builder) -> AsmResult {
    let mut skip = b.a.create_label();
    b.handler(WAKE_VECTOR)?;
    b.a.rdtsc()?; // first instruction: when the guest saw the interrupt
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
    b.a.iretq()
}
