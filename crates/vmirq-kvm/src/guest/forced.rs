//! The forced-interrupt program (vCPU 0): the guest runs ring-3 code (native on a PVM host,
//! as `vmirq kvm device`'s `spin-user` driver does) that reads the TSC in a tight loop and
//! stores it in [`LAST`]; an interrupt forced into it (an irqfd written from another CPU)
//! exits the running vCPU, is injected at the re-entry and delivered to the handler.
//!
//! The handler's first instruction reads the TSC. It logs record `k` (the interrupt count
//! before it) at `RECORDS + k * 32`: `[0]` the loop's last TSC before the interrupt (from
//! [`LAST`]), `[8]` the handler's first TSC, `[16]` its TSC after the EOI, just before
//! `iretq`; then it sets [`FLAG`]. The ring-3 loop, seeing [`FLAG`], reads the TSC again and
//! stores it at `[24]` (the first progress after the interrupt), then clears [`FLAG`].
//!
//! Nothing in the handler saves registers: the loop holds a TSC in rax/rdx only between
//! its `rdtsc` and the store to [`LAST`], and a clobbered value stored there is overwritten
//! by the next iteration long before the next interrupt (the VMM sends one only after the
//! previous record is complete); the branch that writes `[24]` runs with no interrupt
//! pending and reads its own TSC.

use super::{asm_error, msr, AsmResult, Builder, Program};
use crate::error::Result;
use crate::layout::{self, mailbox, port, WAKE_VECTOR};
use iced_x86::code_asm::{eax, ecx, edx, qword_ptr, r15, r8, r9, rax, rbx, rcx};

/// The loop's latest TSC (ring 3 writes, the handler reads).
pub const LAST: u64 = mailbox::RESULT0;
/// Set by the handler, cleared by the loop once it logged its first TSC after the interrupt.
pub const FLAG: u64 = mailbox::RESULT1;
/// Per-interrupt records, 32 bytes each.
pub const RECORDS: u64 = layout::ARRAY;
/// Bytes per record.
pub const RECORD_BYTES: u64 = 32;
/// Records that fit.
pub const RECORDS_MAX: u64 = layout::ARRAY_SIZE as u64 / RECORD_BYTES;

/// Assemble the program.
///
/// # Errors
/// [`crate::Error::Assemble`] if the assembler rejects it (a bug).
pub fn program() -> Result<Program> {
    let name = "forced";
    let mut b = Builder::new(name)?;
    emit(&mut b).map_err(|e| asm_error(name, &e))?;
    b.finish()
}

fn emit(b: &mut Builder) -> AsmResult {
    b.entry()?;
    b.enable_x2apic()?;
    b.out(port::READY)?;
    let (mut spin, mut resumed, mut done) =
        (b.a.create_label(), b.a.create_label(), b.a.create_label());
    b.enter_ring3(spin)?;
    b.a.set_label(&mut spin)?;
    b.a.cmp(qword_ptr(r15 + mailbox::STOP), 0)?;
    b.a.jne(done)?;
    b.tsc_to_rax()?;
    b.a.mov(qword_ptr(r15 + LAST), rax)?;
    b.a.cmp(qword_ptr(r15 + FLAG), 0)?;
    b.a.jne(resumed)?;
    b.a.jmp(spin)?;
    b.a.set_label(&mut resumed)?;
    b.tsc_to_rax()?;
    b.a.mov(rcx, qword_ptr(r15 + mailbox::IRQ_COUNT))?;
    b.a.dec(rcx)?;
    b.a.shl(rcx, 5)?;
    b.a.mov(rbx, RECORDS + 24)?;
    b.a.mov(qword_ptr(rbx + rcx), rax)?;
    b.a.mov(qword_ptr(r15 + FLAG), 0)?;
    b.a.jmp(spin)?;
    b.a.set_label(&mut done)?;
    b.out(port::DONE)?;
    b.a.jmp(done)?;

    b.handler(WAKE_VECTOR)?;
    b.tsc_to_rax()?; // first instruction: the handler's entry
    b.a.mov(r9, qword_ptr(r15 + mailbox::IRQ_COUNT))?;
    b.a.shl(r9, 5)?;
    b.a.mov(r8, RECORDS)?;
    b.a.add(r8, r9)?;
    b.a.mov(qword_ptr(r8 + 8), rax)?;
    b.a.mov(rax, qword_ptr(r15 + LAST))?;
    b.a.mov(qword_ptr(r8), rax)?;
    b.a.inc(qword_ptr(r15 + mailbox::IRQ_COUNT))?;
    b.a.mov(ecx, msr::X2APIC_EOI)?;
    b.a.xor(eax, eax)?;
    b.a.xor(edx, edx)?;
    b.a.wrmsr()?;
    b.tsc_to_rax()?;
    b.a.mov(qword_ptr(r8 + 16), rax)?;
    b.a.mov(qword_ptr(r15 + FLAG), 1)?;
    b.a.iretq()
}
