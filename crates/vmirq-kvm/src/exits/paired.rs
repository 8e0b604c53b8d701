//! Paired exit-cost loops ([`crate::guest::paired`]): each operation runs alternately with its
//! reference in one VM, and its net cost is the p50 of the per-pair differences
//! ([`crate::pairs`]), next to the single-operation loops' `net_p50_ns` (an op's p50 minus
//! the separately measured baseline's p50), which `vmirq kvm exits` still reports.

use super::{op_timeout, run_loop, SKIP};
use crate::dist::Summary;
use crate::error::Result;
use crate::guest::paired::{program, Pair};
use crate::host::TscClock;
use crate::pairs::{paired, DiffSummary};
use serde::Serialize;

/// One pair's samples and their differences.
#[derive(Debug, Clone, Serialize)]
pub struct PairedCost {
    /// The operation and its reference.
    #[serde(flatten)]
    pub pair: Pair,
    /// The operation's spans (raw, the bracketing included).
    pub op_raw_ns: Summary,
    /// The reference's spans, taken alternately with the operation's in the same loop.
    pub reference_raw_ns: Summary,
    /// Operation minus reference, pair by pair; `p50` is the net cost.
    pub net_ns: DiffSummary,
    /// Exits to userspace seen by the VMM during the loop (both halves).
    pub user_exits: u64,
}

/// Run `pairs` iterations (plus the dropped warm-up) of `pair`'s loop on its own VM, the vCPU
/// pinned to CPU 0.
///
/// # Errors
/// [`crate::Error::Unavailable`] without KVM; [`crate::Error::Guest`] if the guest faults,
/// exits unexpectedly or misses an interrupt; [`crate::Error::Pairs`] never in practice (the
/// two halves always have as many samples).
pub fn measure(pair: Pair, pairs: u32, clock: TscClock) -> Result<PairedCost> {
    let n = pairs + SKIP;
    let prog = program(pair, n)?;
    let run = run_loop(&prog, pair.irqchip(), op_timeout(pair.op), 2 * n)?;
    if pair.interrupts() {
        run.check_interrupts(pair.op, n)?;
    }
    let mut op = Vec::with_capacity(pairs as usize);
    let mut reference = Vec::with_capacity(pairs as usize);
    for i in u64::from(SKIP)..u64::from(n) {
        op.push(run.span_ns(pair.op, 2 * i, i, clock)?);
        reference.push(run.span_ns(pair.reference, 2 * i + 1, i, clock)?);
    }
    let net_ns = paired(&op, &reference)?;
    Ok(PairedCost {
        pair,
        op_raw_ns: Summary::of(&mut op),
        reference_raw_ns: Summary::of(&mut reference),
        net_ns,
        user_exits: run.user_exits,
    })
}
