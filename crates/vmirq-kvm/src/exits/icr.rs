//! The ICR write to another vCPU, as its sender pays it (issue 16): the send half of
//! `vmirq kvm wake`'s IPI cells, which profiles up to v8 charge at the self-IPI's cost.
//!
//! A two-vCPU VM runs [`crate::guest::icr`]: vCPU 0 (thread pinned to CPU 0) halts as the
//! wake cells' target does, with the VM's halt polling set as the cell's (`KVM_CAP_HALT_POLL`
//! [`Target::halt_poll_ns`]: 200 µs polled, 0 sleeping); vCPU 1 (thread pinned to CPU 1, the
//! wake cells' `other` placement) alternates the ICR write to APIC id 0 with a `nop`, each
//! span after the target took the previous IPI and [`SETTLE_NS`] more. The net cost is the
//! p50 of the per-pair differences ([`crate::pairs`]), as for the other paired loops.

use super::SKIP;
use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::guest::icr::program;
use crate::host::{online_cpus, pin_to, TscClock};
use crate::layout::{self, mailbox, WAKE_GSI, WAKE_VECTOR};
use crate::pairs::{paired, DiffSummary};
use crate::runner::{run_until_done, unexpected};
use crate::stats::VcpuStats;
use crate::vm::{Vm, VmConfig};
use crate::wake::{target, Placement};
use serde::Serialize;
use std::time::Duration;

/// Time from the target's handler having run to the next span: long enough for the handler's
/// `iretq` and the idle loop's few emulated instructions (~1 µs each on a host that emulates
/// guest ring 0) to reach the next `hlt` and KVM's halt handling to start, i.e. the target is
/// back in its poll (or asleep) as a wake cell's target is when the next send comes. 30 µs
/// is also one of the wake cells' intervals (20-100 µs), measured from the same point.
pub const SETTLE_NS: u64 = 30_000;
/// `KVM_CAP_HALT_POLL` of the polled wake cells (`measure-composites.sh`: 0 and 200000).
pub const POLLED_HALT_POLL_NS: u64 = 200_000;
const READY_TIMEOUT: Duration = Duration::from_secs(5);
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
const JOIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The state of the IPI's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Halted with KVM halt polling ([`POLLED_HALT_POLL_NS`]): the polled IPI cells.
    Polled,
    /// Halted with polling off: the vCPU thread sleeps (the sleeping IPI cells).
    Sleeping,
}

impl Target {
    /// Both, polled first.
    pub const ALL: [Self; 2] = [Self::Polled, Self::Sleeping];

    /// The VM's `KVM_CAP_HALT_POLL`.
    #[must_use]
    pub fn halt_poll_ns(self) -> u64 {
        match self {
            Self::Polled => POLLED_HALT_POLL_NS,
            Self::Sleeping => 0,
        }
    }
}

/// Result of [`measure`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IpiOther {
    /// The destination's state.
    pub target: Target,
    /// The VM's `KVM_CAP_HALT_POLL`.
    pub halt_poll_ns: u64,
    /// Settle before each span.
    pub settle_ns: u64,
    /// The ICR write spans (raw, the bracketing included).
    pub op_raw_ns: Summary,
    /// The `nop` spans, alternating with them.
    pub reference_raw_ns: Summary,
    /// ICR write minus `nop`, pair by pair; `p50` is the net cost of the send.
    pub net_ns: DiffSummary,
    /// IPIs the sender wrote (warm-up included).
    pub ipis_sent: u64,
    /// Wake-vector handler runs of the target when the sender was done.
    pub ipis_taken: u64,
    /// The target's KVM counters over the run (halts, polls, wakeups).
    pub target_stats: VcpuStats,
    /// Share of the target's halts that a poll ended (`halt_successful_poll / halt_exits`).
    pub polled_share_pct: f64,
}

/// Run `pairs` measured iterations (plus the dropped warm-up) against a target in state
/// `target`.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; [`Error::Config`] on a host with one CPU;
/// [`Error::Guest`] or [`Error::Timeout`] if the guest faults, an IPI is lost or the
/// target takes more than were sent.
pub fn measure(target: Target, pairs: u32, clock: TscClock) -> Result<IpiOther> {
    if online_cpus() < 2 {
        return Err(Error::Config("the ICR probe needs two CPUs".into()));
    }
    let n = pairs + SKIP;
    let prog = program(n, clock.ticks(SETTLE_NS).max(1))?;
    let mut vm = Vm::new(
        VmConfig {
            irqchip: true,
            vcpus: 2,
            halt_poll_ns: Some(target.halt_poll_ns()),
        },
        &prog,
    )?;
    // Only to wake the target for its STOP at the end.
    let irqfd = vm.msi_irqfd(WAKE_GSI, 0, WAKE_VECTOR)?;
    let mut vcpus = std::mem::take(&mut vm.vcpus).into_iter();
    let (Some(halted), Some(mut sender)) = (vcpus.next(), vcpus.next()) else {
        return Err(Error::Config("the ICR probe needs two vCPUs".into()));
    };
    let stats = halted.stats;
    let running = target::spawn(halted.fd, 0);
    let sent = (|| -> Result<(VcpuStats, u64)> {
        running.wait_ready(READY_TIMEOUT)?;
        let before = stats.as_ref().map(|s| s.read()).transpose()?;
        std::thread::scope(|s| {
            s.spawn(|| {
                pin_to(Placement::Other.sender_cpu())?;
                run_until_done(&mut sender.fd, 16, RUN_TIMEOUT, |exit| {
                    Err(unexpected(&exit))
                })
            })
            .join()
            .map_err(|_| Error::Guest("sender vCPU thread panicked".into()))?
        })?;
        let taken = vm.ram.cell(mailbox::IRQ_COUNT)?;
        let after = stats.as_ref().map(|s| s.read()).transpose()?;
        let delta = match (after, before) {
            (Some(a), Some(b)) => a.since(&b),
            _ => VcpuStats::default(),
        };
        Ok((delta, taken))
    })();
    // Always stop the target, even after an error, so its thread ends.
    vm.ram.set_cell(mailbox::STOP, 1)?;
    irqfd.write(1).map_err(Error::io("irqfd write"))?;
    let done = running.join(JOIN_TIMEOUT);
    let (target_stats, taken) = sent?;
    done?;
    if taken != u64::from(n) {
        return Err(Error::Guest(format!(
            "ICR probe: the target took {taken} IPIs of {n} sent"
        )));
    }
    summarise(&vm, target, n, clock, target_stats, taken)
}

fn summarise(
    vm: &Vm,
    target: Target,
    n: u32,
    clock: TscClock,
    target_stats: VcpuStats,
    taken: u64,
) -> Result<IpiOther> {
    let pairs = (n - SKIP) as usize;
    let mut op = Vec::with_capacity(pairs);
    let mut reference = Vec::with_capacity(pairs);
    for i in u64::from(SKIP)..u64::from(n) {
        let icr: u64 = vm.ram.load(layout::ARRAY + 2 * i * 8)?;
        let nop: u64 = vm.ram.load(layout::ARRAY + (2 * i + 1) * 8)?;
        op.push(clock.ns(icr));
        reference.push(clock.ns(nop));
    }
    let net_ns = paired(&op, &reference)?;
    #[allow(clippy::cast_precision_loss, reason = "a percentage of counts")]
    let polled_share_pct = if target_stats.halt_exits == 0 {
        0.0
    } else {
        100.0 * target_stats.halt_successful_poll as f64 / target_stats.halt_exits as f64
    };
    Ok(IpiOther {
        target,
        halt_poll_ns: target.halt_poll_ns(),
        settle_ns: SETTLE_NS,
        op_raw_ns: Summary::of(&mut op),
        reference_raw_ns: Summary::of(&mut reference),
        net_ns,
        ipis_sent: u64::from(n),
        ipis_taken: taken,
        target_stats,
        polled_share_pct,
    })
}
