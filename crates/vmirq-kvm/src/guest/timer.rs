//! The vCPU's own LAPIC timer as a wake source: a primitive that separates what a halt-poll
//! wake costs on the woken vCPU's side from the cross-CPU part (no sender, same CPU).
//!
//! vCPU 0 arms its x2APIC timer (one-shot, divide by 1, so one count is one KVM APIC bus
//! cycle, 1 ns) for `count` cycles, then waits for the interrupt either
//! - [`TimerIdle::Halt`]: `sti; hlt; cli` (KVM polls or sleeps, as the VM's halt-poll setting
//!   says), or
//! - [`TimerIdle::OutLoop`]: `sti`, then `out` to a port with no in-kernel handler (an exit to
//!   the VMM, as `pio_user`) until the handler has run, then `cli`: the timer fires while the
//!   vCPU runs, and KVM injects it when it re-enters after the exit it is in.
//!
//! The handler reads the TSC as its first instruction and stores it; the loop stores, per
//! iteration, the ticks from just before the arming `wrmsr` to that handler timestamp (the
//! count itself included: the caller subtracts it).

use super::{asm_error, msr, AsmResult, Builder, Program};
use crate::error::{Error, Result};
use crate::layout::{self, mailbox, port, WAKE_VECTOR};
use iced_x86::code_asm::{eax, ecx, edx, qword_ptr, r12, r13, r8, rax, rdi, rdx};
use serde::{Deserialize, Serialize};

/// x2APIC LVT timer register.
const X2APIC_LVT_TIMER: u32 = 0x832;
/// x2APIC timer initial count register (writing it arms the one-shot timer).
const X2APIC_TMICT: u32 = 0x838;
/// x2APIC timer divide configuration register (0b1011: divide by 1).
const X2APIC_TDCR: u32 = 0x83e;

/// How vCPU 0 waits for its timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerIdle {
    /// `sti; hlt; cli`.
    Halt,
    /// `sti`, `out` to the VMM until the handler ran, `cli`.
    OutLoop,
}

/// Assemble the timer loop: `iterations` rounds of a `count`-cycle one-shot timer.
///
/// # Errors
/// [`Error::Config`] if `iterations` is 0 or above the array's capacity, or `count` is 0 or
/// does not fit the 32-bit initial count register.
pub fn program(idle: TimerIdle, iterations: u32, count: u32) -> Result<Program> {
    if iterations == 0 || iterations > super::exits::MAX_ITERATIONS {
        return Err(Error::Config(format!(
            "iterations must be 1..={}",
            super::exits::MAX_ITERATIONS
        )));
    }
    if count == 0 {
        return Err(Error::Config("timer count must be at least 1".into()));
    }
    let name = "timer";
    let mut b = Builder::new(name)?;
    emit(&mut b, idle, iterations, count).map_err(|e| asm_error(name, &e))?;
    b.finish()
}

fn emit(b: &mut Builder, idle: TimerIdle, iterations: u32, count: u32) -> AsmResult {
    b.entry()?;
    b.enable_x2apic()?;
    b.wrmsr_const(X2APIC_TDCR, 0b1011)?;
    b.wrmsr_const(X2APIC_LVT_TIMER, u64::from(WAKE_VECTOR))?; // one-shot, unmasked
    b.a.mov(rdi, layout::ARRAY)?;
    b.a.mov(r12, u64::from(iterations))?;
    b.a.mov(r13, 1u64)?; // the handler count this iteration waits for
    let mut top = b.a.create_label();
    b.a.set_label(&mut top)?;
    b.a.rdtsc()?;
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.mov(r8, rax)?; // the arming timestamp
    b.a.mov(ecx, X2APIC_TMICT)?;
    b.a.mov(eax, count)?;
    b.a.xor(edx, edx)?;
    b.a.wrmsr()?; // arm
    b.a.sti()?;
    match idle {
        TimerIdle::Halt => b.a.hlt()?, // in sti's shadow: no interrupt between them
        TimerIdle::OutLoop => {
            let mut spin = b.a.create_label();
            b.a.set_label(&mut spin)?;
            b.out(port::PIO_USER)?;
            b.a.cmp(qword_ptr(b_mailbox(mailbox::IRQ_COUNT)), r13)?;
            b.a.jb(spin)?;
        }
    }
    b.a.cli()?;
    b.a.mov(rax, qword_ptr(b_mailbox(mailbox::IRQ_TSC)))?;
    b.a.sub(rax, r8)?;
    b.a.mov(qword_ptr(rdi), rax)?;
    b.a.add(rdi, 8)?;
    b.a.inc(r13)?;
    b.a.dec(r12)?;
    b.a.jnz(top)?;
    b.out(port::DONE)?;
    b.a.hlt()?;

    // Timestamp first, then count, EOI and return (clobbers rax, rcx, rdx only).
    b.handler(WAKE_VECTOR)?;
    b.a.rdtsc()?;
    b.a.shl(rdx, 32)?;
    b.a.or(rax, rdx)?;
    b.a.mov(qword_ptr(b_mailbox(mailbox::IRQ_TSC)), rax)?;
    b.a.inc(qword_ptr(b_mailbox(mailbox::IRQ_COUNT)))?;
    b.a.mov(ecx, msr::X2APIC_EOI)?;
    b.a.xor(eax, eax)?;
    b.a.xor(edx, edx)?;
    b.a.wrmsr()?;
    b.a.iretq()
}

/// A mailbox cell addressed through `r15` (which holds [`layout::MAILBOX`]).
fn b_mailbox(cell: u64) -> iced_x86::code_asm::AsmMemoryOperand {
    iced_x86::code_asm::r15 + cell
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_loops_assemble_and_bad_arguments_are_refused() {
        for idle in [TimerIdle::Halt, TimerIdle::OutLoop] {
            let p = program(idle, 10, 20_000).expect("assembles");
            assert!(p.code.len() < layout::CODE_MAX);
            assert_ne!(p.handler(WAKE_VECTOR), p.handler(WAKE_VECTOR + 1));
        }
        assert!(program(TimerIdle::Halt, 0, 20_000).is_err());
        assert!(program(TimerIdle::Halt, 10, 0).is_err());
    }
}
