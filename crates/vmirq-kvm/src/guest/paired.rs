//! Paired exit-cost loops: one loop runs an operation and its reference alternately, one
//! span each per iteration (`op, reference, op, reference, ...`), in the same VM, so that
//! sample `i` of each was taken microseconds apart and their difference is the operation's
//! net cost with whatever both share cancelled ([`crate::pairs`]).
//!
//! Each half is exactly the single-operation loop's timed span ([`super::exits`]): the same
//! bracketing instructions, the same store of its tick delta, so the two halves differ only
//! in their operation. Samples land interleaved in [`crate::layout::ARRAY`]: the operation's
//! at even indices, the reference's at odd ones. The switch is per iteration for every
//! operation, ring 3 included (the reference then runs in ring 3 as well); nothing here needs
//! blocks.

use super::exits::{epilogue, prologue, span, ExitOp, MAX_ITERATIONS};
use super::{asm_error, Builder, Program};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// An operation and the reference it is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    /// The operation.
    pub op: ExitOp,
    /// The reference: [`ExitOp::Baseline`] (the `nop`), or [`ExitOp::PioUser`] for an
    /// operation that is that exit plus something (the interrupt delivery of
    /// [`ExitOp::IrqEntry`]).
    pub reference: ExitOp,
}

/// Largest number of pairs (two samples each in the array).
pub const MAX_PAIRS: u32 = MAX_ITERATIONS / 2;

impl Pair {
    /// Every pair `vmirq kvm exits` measures: each operation against the baseline, then the
    /// interrupt delivery ([`ExitOp::IrqEntry`] against [`ExitOp::PioUser`], the difference
    /// host profiles charge as `guest_irq_entry_ns`), then the null pair (the baseline
    /// against itself: two identical `nop` spans, whose differences show the method's own
    /// bias, e.g. from the span's position in the iteration).
    #[must_use]
    pub fn all() -> Vec<Self> {
        let mut v: Vec<Self> = ExitOp::ALL
            .into_iter()
            .filter(|&op| op != ExitOp::Baseline)
            .map(|op| Self {
                op,
                reference: ExitOp::Baseline,
            })
            .collect();
        v.push(Self {
            op: ExitOp::IrqEntry,
            reference: ExitOp::PioUser,
        });
        v.push(Self {
            op: ExitOp::Baseline,
            reference: ExitOp::Baseline,
        });
        v
    }

    /// A pair that one loop can run.
    ///
    /// # Errors
    /// [`Error::Config`] if the reference is neither [`ExitOp::Baseline`] nor
    /// [`ExitOp::PioUser`], if the operation is its own [`ExitOp::PioUser`] reference, or if
    /// an [`ExitOp::PioUser`] reference would have to run in ring 3 (an `out` faults there)
    /// or without the in-kernel irqchip the operation refuses. The baseline against itself
    /// is the null pair.
    pub fn new(op: ExitOp, reference: ExitOp) -> Result<Self> {
        let ok = match reference {
            ExitOp::Baseline => true,
            ExitOp::PioUser => op != ExitOp::PioUser && !op.ring3() && op.irqchip(),
            _ => false,
        };
        if ok {
            Ok(Self { op, reference })
        } else {
            Err(Error::Config(format!(
                "{op:?} cannot be paired with {reference:?} in one loop"
            )))
        }
    }

    /// Whether the loop needs the in-kernel irqchip (the operation decides: the references
    /// run with or without it).
    #[must_use]
    pub fn irqchip(self) -> bool {
        self.op.irqchip()
    }

    /// Whether the loop takes interrupts.
    #[must_use]
    pub fn interrupts(self) -> bool {
        self.op.interrupts() || self.reference.interrupts()
    }
}

/// Assemble the paired loop of `pair` with `pairs` iterations (two spans each).
///
/// # Errors
/// [`Error::Config`] if `pairs` is 0 or above [`MAX_PAIRS`], or the pair is not one
/// [`Pair::new`] accepts.
pub fn program(pair: Pair, pairs: u32) -> Result<Program> {
    let pair = Pair::new(pair.op, pair.reference)?;
    if pairs == 0 || pairs > MAX_PAIRS {
        return Err(Error::Config(format!("pairs must be 1..={MAX_PAIRS}")));
    }
    let name = "exits-paired";
    let mut b = Builder::new(name)?;
    let ops = [pair.op, pair.reference];
    let emit = |b: &mut Builder| {
        let top = prologue(b, &ops, pairs)?;
        span(b, pair.op)?;
        span(b, pair.reference)?;
        epilogue(b, &ops, top)
    };
    emit(&mut b).map_err(|e| asm_error(name, &e))?;
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::decode::{bytes, decode_from, loop_body, split_after_spans};
    use crate::layout;
    use iced_x86::{Instruction, Mnemonic, Register};

    /// The loop body's timed spans, each ending with its `add rdi, 8`; checks the loop end.
    fn spans(p: &Program) -> Vec<Vec<Instruction>> {
        let body = loop_body(p, p.entries[0]);
        let n = body.len();
        assert_eq!(body[n - 2].mnemonic(), Mnemonic::Dec);
        assert_eq!(body[n - 2].op0_register(), Register::R12);
        let mut out = split_after_spans(&body[..n - 2]);
        assert!(
            out.pop().expect("tail").is_empty(),
            "the loop ends after a span"
        );
        out
    }

    fn count(span: &[Instruction], m: Mnemonic) -> usize {
        span.iter().filter(|i| i.mnemonic() == m).count()
    }

    #[test]
    fn every_pair_alternates_op_and_reference_once_per_iteration_with_the_single_loops_spans() {
        for pair in Pair::all() {
            let p = program(pair, 10).expect("assembles");
            let s = spans(&p);
            assert_eq!(s.len(), 2, "{pair:?}: two spans per iteration");
            for (span, op) in s.iter().zip([pair.op, pair.reference]) {
                // Exactly the span the single-operation loop of `op` times.
                let single = super::super::exits::program(op, 10).expect("assembles");
                let one = spans(&single);
                assert_eq!(one.len(), 1, "{op:?}: one span per iteration");
                assert_eq!(bytes(&p, span), bytes(&single, &one[0]), "{pair:?}: {op:?}");
            }
            if pair.reference == ExitOp::Baseline && pair.op != ExitOp::Baseline {
                assert_eq!(count(&s[0], Mnemonic::Nop), 0, "{pair:?}: op first");
                assert_eq!(count(&s[1], Mnemonic::Nop), 1, "{pair:?}: then the nop");
            }
        }
    }

    #[test]
    fn the_delivery_pair_ends_its_first_span_at_the_handler_and_its_second_after_the_out() {
        let pair = Pair::new(ExitOp::IrqEntry, ExitOp::PioUser).expect("valid");
        let p = program(pair, 10).expect("assembles");
        let s = spans(&p);
        // Span 1: self-IPI (wrmsr) before the first rdtsc, sti; out; cli, the end read from
        // the mailbox (one rdtsc). Span 2: out, two rdtscs, no interrupt window.
        assert_eq!(s[0][3].mnemonic(), Mnemonic::Wrmsr);
        assert_eq!(
            (count(&s[0], Mnemonic::Sti), count(&s[0], Mnemonic::Out)),
            (1, 1)
        );
        assert_eq!(count(&s[0], Mnemonic::Rdtsc), 1);
        let mailbox_read = s[0]
            .iter()
            .any(|i| i.memory_base() == Register::R15 && i.op0_register() == Register::RAX);
        assert!(mailbox_read, "span 1 ends at the handler's timestamp");
        assert_eq!(
            (count(&s[1], Mnemonic::Sti), count(&s[1], Mnemonic::Out)),
            (0, 1)
        );
        assert_eq!(count(&s[1], Mnemonic::Rdtsc), 2);
    }

    #[test]
    fn the_loop_counts_pairs_and_ring3_pairs_run_both_halves_in_ring3() {
        let pair = Pair::new(ExitOp::DoorbellUser3, ExitOp::Baseline).expect("valid");
        let p = program(pair, 7).expect("assembles");
        let all = decode_from(&p, layout::CODE);
        let top = loop_body(&p, p.entries[0])[0].ip();
        let before: Vec<&Instruction> = all.iter().filter(|i| i.ip() < top).collect();
        let loads_r12 = before
            .iter()
            .any(|i| i.op0_register() == Register::R12 && i.immediate64() == 7);
        assert!(loads_r12, "r12 counts pairs, not spans");
        assert_eq!(
            before.last().map(|i| i.mnemonic()),
            Some(Mnemonic::Iretq),
            "the loop is entered in ring 3"
        );
    }

    #[test]
    fn pairs_one_loop_cannot_run_are_refused() {
        for (op, reference) in [
            (ExitOp::PioUser, ExitOp::PioUser),
            (ExitOp::DoorbellUser3, ExitOp::PioUser),
            (ExitOp::HltUser, ExitOp::PioUser),
            (ExitOp::Cpuid, ExitOp::IpiSelf),
        ] {
            assert!(Pair::new(op, reference).is_err(), "{op:?} / {reference:?}");
            assert!(program(Pair { op, reference }, 10).is_err());
        }
        let ok = Pair::new(ExitOp::Cpuid, ExitOp::Baseline).expect("valid");
        assert!(program(ok, 0).is_err());
        assert!(program(ok, MAX_PAIRS + 1).is_err());
        assert!(program(ok, MAX_PAIRS).is_ok());
        // Every op against the baseline (the baseline itself: the null pair), and one more.
        assert_eq!(Pair::all().len(), ExitOp::ALL.len() + 1);
        let null = Pair::new(ExitOp::Baseline, ExitOp::Baseline).expect("the null pair");
        let s = spans(&program(null, 10).expect("assembles"));
        assert_eq!(
            (count(&s[0], Mnemonic::Nop), count(&s[1], Mnemonic::Nop)),
            (1, 1)
        );
    }
}
