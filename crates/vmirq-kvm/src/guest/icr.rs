//! The ICR write to another vCPU, as its sender sees it: a paired loop ([`super::paired`]'s
//! method) run by vCPU 1 while vCPU 0 is halted.
//!
//! vCPU 0 is the wake program's target ([`super::wake`], x2APIC, `sti; hlt` until STOP, its
//! handler counts [`crate::layout::WAKE_VECTOR`] in IRQ_COUNT, EOIs and halts again): exactly
//! the state of `vmirq kvm wake`'s IPI cells' target. vCPU 1 alternates, per iteration:
//! - settle, then the [`ExitOp::IpiSelf`] span: byte for byte the ICR write the `ipi_self`
//!   loops time (fixed IPI on the wake vector to APIC id 0). On vCPU 0 it is a self-IPI; here
//!   APIC id 0 is the other, halted vCPU, so the only difference is the destination's state;
//! - settle, then the [`ExitOp::Baseline`] span (the `nop`), its reference.
//!
//! Settle = spin until IRQ_COUNT has reached the number of IPIs sent (the target took the
//! last one), then spin `settle_ticks` more TSC ticks, so that every span starts with the
//! target back in its halt (KVM's poll, or asleep without polling). The nop span is settled
//! too, so that neither half runs while the target is waking. Samples land as in
//! [`super::paired`]: the ICR write's at even indices of [`crate::layout::ARRAY`], the nop's
//! at odd ones.
//!
//! Registers of vCPU 1: `rdi` the sample array, `r12` the pairs left, `r13` IPIs sent, `r14`
//! the settle in ticks, `rsi` the settle's deadline (the spans use rax, rcx, rdx, r8, r9).

use super::exits::{span, ExitOp, MAX_ITERATIONS};
use super::wake::{Idle, WakeGuest};
use super::{asm_error, AsmResult, Builder, Program};
use crate::error::{Error, Result};
use crate::layout::{self, mailbox, port};
use iced_x86::code_asm::{qword_ptr, r12, r13, r14, r15, rax, rdi, rsi, CodeLabel};

/// Largest number of pairs (two samples each in the array).
pub const MAX_PAIRS: u32 = MAX_ITERATIONS / 2;

/// Assemble the two-vCPU program: vCPU 0 the halted target, vCPU 1 the paired sender with
/// `pairs` iterations, each span preceded by a settle of `settle_ticks` TSC ticks.
///
/// # Errors
/// [`Error::Config`] if `pairs` is 0 or above [`MAX_PAIRS`], or `settle_ticks` is 0.
pub fn program(pairs: u32, settle_ticks: u64) -> Result<Program> {
    if pairs == 0 || pairs > MAX_PAIRS {
        return Err(Error::Config(format!("pairs must be 1..={MAX_PAIRS}")));
    }
    if settle_ticks == 0 {
        return Err(Error::Config("the settle must be at least one tick".into()));
    }
    let name = "icr-other";
    let mut b = Builder::new(name)?;
    let target = WakeGuest {
        apic: true,
        idle: Idle::Halt,
        sender: false,
        pad_eoi: false,
    };
    super::wake::emit(&mut b, target).map_err(|e| asm_error(name, &e))?;
    emit_sender(&mut b, pairs, settle_ticks).map_err(|e| asm_error(name, &e))?;
    b.finish()
}

fn emit_sender(b: &mut Builder, pairs: u32, settle_ticks: u64) -> AsmResult {
    b.entry()?;
    b.enable_x2apic()?;
    b.a.mov(rdi, layout::ARRAY)?;
    b.a.mov(r12, u64::from(pairs))?;
    b.a.xor(r13, r13)?;
    b.a.mov(r14, settle_ticks)?;
    let mut top = b.a.create_label();
    settle(b, &mut top)?;
    span(b, ExitOp::IpiSelf)?; // to APIC id 0: the other vCPU
    b.a.inc(r13)?;
    let mut again = b.a.create_label();
    settle(b, &mut again)?;
    span(b, ExitOp::Baseline)?;
    b.a.dec(r12)?;
    b.a.jnz(top)?;
    b.a.cli()?;
    b.out(port::DONE)?;
    b.a.hlt()
}

/// Wait until the target has taken every IPI sent (IRQ_COUNT >= r13), then `r14` ticks.
/// Bounded by the VMM's watchdog: an IPI that never arrives ends the run as a timeout.
/// `taken` labels the first instruction (the loop's top for the first settle).
fn settle(b: &mut Builder, taken: &mut CodeLabel) -> AsmResult {
    b.a.set_label(taken)?;
    b.a.cmp(qword_ptr(r15 + mailbox::IRQ_COUNT), r13)?;
    b.a.jb(*taken)?;
    b.tsc_to_rax()?;
    b.a.lea(rsi, qword_ptr(rax + r14))?;
    let mut spin = b.a.create_label();
    b.a.set_label(&mut spin)?;
    b.tsc_to_rax()?;
    b.a.cmp(rax, rsi)?;
    b.a.jb(spin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::decode::{bytes, decode_from, loop_body, split_after_spans};
    use crate::layout::WAKE_VECTOR;
    use iced_x86::{Instruction, Mnemonic, Register};

    /// vCPU 1's loop: from the `jnz`'s target to the `jnz` after `dec r12`.
    fn sender_loop(p: &Program) -> Vec<Instruction> {
        loop_body(p, p.entries[1])
    }

    /// The single-operation loop's timed span of `op` (its loop body minus `dec; jnz`).
    fn single_span(op: ExitOp) -> Vec<u8> {
        let p = super::super::exits::program(op, 10).expect("assembles");
        let body = loop_body(&p, p.entries[0]);
        bytes(&p, &body[..body.len() - 2])
    }

    fn is_settle(chunk: &[Instruction]) -> bool {
        let waits_for_count = chunk.windows(2).any(|w| {
            w[0].mnemonic() == Mnemonic::Cmp
                && w[0].memory_base() == Register::R15
                && w[0].memory_displacement64() == mailbox::IRQ_COUNT
                && w[0].op1_register() == Register::R13
                && w[1].mnemonic() == Mnemonic::Jb
                && w[1].near_branch_target() == w[0].ip()
        });
        let spins_on_tsc = chunk.windows(2).any(|w| {
            w[0].mnemonic() == Mnemonic::Cmp
                && w[0].op0_register() == Register::RAX
                && w[0].op1_register() == Register::RSI
                && w[1].mnemonic() == Mnemonic::Jb
        });
        waits_for_count && spins_on_tsc
    }

    #[test]
    fn the_sender_settles_before_each_span_and_times_the_ipi_self_bytes_then_the_nop() {
        let p = program(10, 60_000).expect("assembles");
        assert_eq!(p.entries.len(), 2, "target and sender");
        let body = sender_loop(&p);
        let c = split_after_spans(&body);
        assert_eq!(c.len(), 3, "two spans, then inc-free dec/jnz tail");
        let icr = single_span(ExitOp::IpiSelf);
        let nop = single_span(ExitOp::Baseline);
        for (chunk, span) in c[..2].iter().zip([&icr, &nop]) {
            assert!(is_settle(chunk), "a settle before each span");
            let all = bytes(&p, chunk);
            assert!(all.ends_with(span), "the single loop's span, byte for byte");
        }
        // The ICR span writes APIC id 0 (edx = 0), not this vCPU (1).
        let wrmsr = c[0].iter().filter(|i| i.mnemonic() == Mnemonic::Wrmsr);
        assert_eq!(wrmsr.count(), 1);
        assert!(c[0]
            .iter()
            .any(|i| i.mnemonic() == Mnemonic::Xor && i.op0_register() == Register::EDX));
        assert_eq!(
            c[1].iter()
                .filter(|i| i.mnemonic() == Mnemonic::Wrmsr)
                .count(),
            0
        );
        // r13 counts the IPI once, after the ICR span and before the nop's settle.
        let inc = c[1]
            .iter()
            .position(|i| i.mnemonic() == Mnemonic::Inc && i.op0_register() == Register::R13);
        assert_eq!(inc, Some(0));
        assert_eq!(
            c[2].iter().map(Instruction::mnemonic).collect::<Vec<_>>(),
            [Mnemonic::Dec, Mnemonic::Jne]
        );
    }

    #[test]
    fn the_loop_counts_pairs_and_settles_for_the_given_ticks_and_the_target_is_the_wake_target() {
        let p = program(7, 12_345).expect("assembles");
        let top = sender_loop(&p)[0].ip();
        let before: Vec<Instruction> = decode_from(&p, p.entries[1])
            .into_iter()
            .filter(|i| i.ip() < top)
            .collect();
        let loads = |r: Register, v: u64| {
            before
                .iter()
                .any(|i| i.op0_register() == r && i.immediate64() == v)
        };
        assert!(loads(Register::R12, 7), "r12 counts pairs");
        assert!(loads(Register::R14, 12_345), "r14 holds the settle");
        // vCPU 0 runs the wake target: same handler bytes as the wake program's.
        let wake = super::super::wake::program(WakeGuest {
            apic: true,
            idle: Idle::Halt,
            sender: false,
            pad_eoi: false,
        })
        .expect("assembles");
        assert_eq!(p.entries[0], wake.entries[0]);
        assert_eq!(p.handler(WAKE_VECTOR), wake.handler(WAKE_VECTOR));
        let iretq = decode_from(&wake, wake.handler(WAKE_VECTOR))
            .into_iter()
            .find(|i| i.mnemonic() == Mnemonic::Iretq)
            .expect("the handler returns");
        let end = usize::try_from(iretq.next_ip() - layout::CODE).expect("small");
        assert_eq!(
            p.code[..end],
            wake.code[..end],
            "entry, idle loop and handler"
        );
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert!(program(0, 1).is_err());
        assert!(program(MAX_PAIRS + 1, 1).is_err());
        assert!(program(1, 0).is_err());
        assert!(program(MAX_PAIRS, 1).is_ok());
    }
}
