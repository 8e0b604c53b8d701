//! The IPI sender (vCPU 1 of the wake program): it asks the VMM when to send by reading
//! [`port::GO`] (an exit to userspace; the VMM answers 0 = send after the wake interval, 1 =
//! stop), reads the TSC, and writes the x2APIC ICR to send [`WAKE_VECTOR`] to APIC id 0
//! (fixed delivery, physical destination). The send TSC goes to the SEND_TSC cell after the
//! ICR write so that only three register moves separate the timestamp from the send.

use super::{msr, AsmResult, Builder};
use crate::layout::{mailbox, port, WAKE_VECTOR};
use iced_x86::code_asm::{al, eax, ecx, edx, esi, qword_ptr, r15, r8, r8d, r9, r9d};

pub(crate) fn emit_sender(b: &mut Builder) -> AsmResult {
    b.entry()?;
    b.enable_x2apic()?;
    let mut again = b.a.create_label();
    let mut stop = b.a.create_label();
    b.a.set_label(&mut again)?;
    b.a.in_(al, u32::from(port::GO))?;
    b.a.test(al, al)?;
    b.a.jnz(stop)?;
    b.a.mov(ecx, msr::X2APIC_ICR)?;
    b.a.mov(esi, u32::from(WAKE_VECTOR))?;
    b.a.rdtsc()?; // send timestamp
    b.a.mov(r9d, edx)?;
    b.a.xchg(eax, esi)?; // eax = vector, esi = TSC low half
    b.a.xor(edx, edx)?; // destination APIC id 0
    b.a.wrmsr()?;
    b.a.mov(r8d, esi)?;
    b.a.shl(r9, 32)?;
    b.a.or(r8, r9)?;
    b.a.mov(qword_ptr(r15 + mailbox::SEND_TSC), r8)?;
    b.a.jmp(again)?;
    b.a.set_label(&mut stop)?;
    b.a.cli()?;
    b.out(port::DONE)?;
    b.a.hlt()
}
