//! `vmirq kvm exits`: per-exit costs measured by guest loops ([`crate::guest::exits`]), plus
//! the wake costs from short wake cells, summarised as a [`CostsFile`].
//!
//! Each operation is measured twice: in its own loop, its net cost (`net_p50_ns`) being its
//! p50 minus the `nop` baseline loop's p50, measured in another VM a moment earlier (the
//! fields every earlier file has); and in a [`paired`] loop that alternates it with its
//! reference span by span in one VM, its net cost the p50 of the per-pair differences
//! ([`ExitsReport::paired`]), which the baseline's drift between phases does not move.

pub mod forced;
pub mod icr;
pub mod irqfd;
pub mod paired;
pub mod reentry;
mod report;
pub mod timer;

pub use forced::{ChainedIrq, ForcedIrq};
pub use icr::IpiOther;
pub use irqfd::IrqfdWrite;
pub use paired::PairedCost;
pub use reentry::Reentry;
pub use report::{html, paired_table, table};
pub use timer::TimerWake;

use crate::costs::{Costs, CostsFile};
use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::gaps::Gaps;
use crate::guest::exits::{program, ExitOp};
use crate::guest::paired::Pair;
use crate::guest::wake::Idle;
use crate::host::{pin_to, TscClock};
use crate::layout::{self, port};
use crate::runner::{run_until_done, unexpected, Next};
use crate::vm::{Vm, VmConfig};
use crate::wake::{run_cell, Cell, CellConfig, Path, Placement};
use kvm_ioctls::{IoEventAddress, NoDatamatch, VcpuExit};
use serde::Serialize;
use vmm_sys_util::eventfd::EventFd;

/// Per-iteration samples dropped at the start of each loop (cold caches, first patching).
const SKIP: u32 = 16;
/// Longest run of one operation's loop. A hypercall gets a short bound: on the nested PVM
/// host this crate was written on, `vmcall`/`vmmcall` from guest ring 0 never completes (the
/// vCPU spins in the kernel), and the loop is then reported as failed.
fn op_timeout(op: ExitOp) -> std::time::Duration {
    std::time::Duration::from_secs(if op == ExitOp::Hypercall { 1 } else { 20 })
}

/// Cost of one operation.
#[derive(Debug, Clone, Serialize)]
pub struct OpCost {
    /// The operation.
    pub op: ExitOp,
    /// Per-iteration time including the measurement's own cost.
    pub raw_ns: Summary,
    /// `raw_ns.p50` minus the baseline's p50 (0 if negative); `raw_ns.p50` for a ring-3
    /// loop ([`ExitOp::ring3`]), whose native bracketing costs nanoseconds.
    pub net_p50_ns: u64,
    /// Exits to userspace seen by the VMM during the loop.
    pub user_exits: u64,
}

/// Everything `vmirq kvm exits` measured.
#[derive(Debug, Clone, Serialize)]
pub struct ExitsReport {
    /// Host TSC frequency (GHz).
    pub tsc_ghz: f64,
    /// Host load averages at the end of the run.
    pub loadavg: String,
    /// Loop iterations per operation.
    pub iterations: u32,
    /// Per-operation costs (baseline first). Operations that failed are listed in `failed`.
    pub ops: Vec<OpCost>,
    /// Operations this host could not run, with the reason.
    pub failed: Vec<(ExitOp, String)>,
    /// Every [`Pair::all`] pair run alternately in one loop (see [`paired`]): the net cost as
    /// the p50 of per-pair differences, beside `ops`' `net_p50_ns` of the same run.
    pub paired: Vec<PairedCost>,
    /// Pairs this host could not run, with the reason.
    pub paired_failed: Vec<(Pair, String)>,
    /// Wake cells the wake costs come from.
    pub wake_cells: Vec<(String, Cell)>,
    /// Re-entry after the vCPU thread slept (see [`Reentry`]); `None` if it failed here.
    pub reentry: Option<Reentry>,
    /// A halt woken by the vCPU's own LAPIC timer, polled / slept / running (see
    /// [`TimerWake`]); `None` if it failed here (the reason is logged).
    pub timer: Option<TimerWake>,
    /// An irqfd `write()` into a vCPU outside guest mode, from the other CPU (see
    /// [`IrqfdWrite`]); `None` if it failed here (the reason is logged).
    pub irqfd_write: Option<IrqfdWrite>,
    /// An irqfd interrupt forced into a vCPU running guest ring-3 code (see [`ForcedIrq`]);
    /// `None` if it failed here (the reason is logged).
    pub forced_irq: Option<ForcedIrq>,
    /// A second irqfd interrupt pending at the first handler's `iretq` (see
    /// [`ChainedIrq`]); `None` if it failed here (the reason is logged).
    pub chained_irq: Option<ChainedIrq>,
    /// The ICR write to the other vCPU, halted (see [`icr`]): polled, then sleeping; a
    /// variant that failed here is left out (the reason is logged).
    pub ipi_other: Vec<IpiOther>,
    /// The costs file content.
    pub costs: CostsFile,
}

/// Measure one operation on its own VM, with the vCPU pinned to CPU 0.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; [`Error::Guest`] if the guest faults or exits
/// unexpectedly (for example a hypercall this host does not handle).
pub fn measure_op(op: ExitOp, iterations: u32, clock: TscClock) -> Result<(Summary, u64)> {
    let prog = program(op, iterations + SKIP)?;
    let run = run_loop(&prog, op.irqchip(), op_timeout(op), iterations + SKIP)?;
    if op.interrupts() {
        run.check_interrupts(op, iterations + SKIP)?;
    }
    let mut ns = Vec::with_capacity(iterations as usize);
    for i in u64::from(SKIP)..u64::from(iterations + SKIP) {
        ns.push(run.span_ns(op, i, i, clock)?);
    }
    Ok((Summary::of(&mut ns), run.user_exits))
}

/// A loop program that ran to DONE, its VM kept for reading the samples.
pub(crate) struct LoopRun {
    vm: Vm,
    /// Exits to userspace during the loop (DONE not counted).
    pub(crate) user_exits: u64,
}

/// Run `prog` (an exit-cost loop of `spans` timed spans) on a fresh one-vCPU VM, the vCPU
/// thread pinned to CPU 0, with the ioeventfds the loops' ops write to.
pub(crate) fn run_loop(
    prog: &crate::guest::Program,
    irqchip: bool,
    timeout: std::time::Duration,
    spans: u32,
) -> Result<LoopRun> {
    let mut vm = Vm::new(
        VmConfig {
            irqchip,
            vcpus: 1,
            halt_poll_ns: None,
        },
        prog,
    )?;
    let evt = EventFd::new(libc::EFD_NONBLOCK).map_err(Error::io("eventfd"))?;
    vm.fd
        .register_ioevent(
            &evt,
            &IoEventAddress::Pio(u64::from(port::PIO_EVENTFD)),
            NoDatamatch,
        )
        .map_err(Error::kvm("KVM_IOEVENTFD"))?;
    let doorbell = EventFd::new(libc::EFD_NONBLOCK).map_err(Error::io("eventfd"))?;
    vm.fd
        .register_ioevent(
            &doorbell,
            &IoEventAddress::Mmio(layout::DOORBELL_MMIO),
            NoDatamatch,
        )
        .map_err(Error::kvm("KVM_IOEVENTFD"))?;
    let mut vcpu = vm.vcpus.remove(0);
    let max_exits = u64::from(spans) * 2 + 100;
    let exits = std::thread::scope(|s| {
        s.spawn(|| {
            pin_to(0)?;
            run_until_done(&mut vcpu.fd, max_exits, timeout, |exit| match exit {
                VcpuExit::IoOut(port::PIO_USER, _) | VcpuExit::Hlt => Ok(Next::Continue),
                VcpuExit::MmioWrite(layout::MMIO_ADDR, _) => Ok(Next::Continue),
                other => Err(unexpected(&other)),
            })
        })
        .join()
        .map_err(|_| Error::Guest("vCPU thread panicked".into()))?
    })?;
    Ok(LoopRun {
        vm,
        user_exits: exits.saturating_sub(1),
    })
}

impl LoopRun {
    /// Each of `want` iterations must have taken its self-IPI: a host that never injects it
    /// (as KVM's ring-0 emulator does between `sti; nop; cli`) would measure something else.
    pub(crate) fn check_interrupts(&self, op: ExitOp, want: u32) -> Result<()> {
        let taken = self.vm.ram.cell(layout::mailbox::IRQ_COUNT)?;
        if taken != u64::from(want) {
            return Err(Error::Guest(format!(
                "{op:?}: the handler ran {taken} times in {want} iterations"
            )));
        }
        Ok(())
    }

    /// The span of `op` stored at array slot `slot` (iteration `iteration`, for errors), in ns.
    pub(crate) fn span_ns(
        &self,
        op: ExitOp,
        slot: u64,
        iteration: u64,
        clock: TscClock,
    ) -> Result<u64> {
        let ticks: u64 = self.vm.ram.load(layout::ARRAY + slot * 8)?;
        if op == ExitOp::IrqEntry && ticks > 1 << 62 {
            // The handler's timestamp was older than the span's start: the interrupt was not
            // taken at the re-entry inside the span, so the sample measures nothing.
            return Err(Error::Guest(format!(
                "{op:?}: iteration {iteration} took its interrupt outside the timed span"
            )));
        }
        Ok(clock.ns(ticks))
    }
}

/// Run every operation and the wake cells; build the costs file.
///
/// # Errors
/// [`Error::Unavailable`] without KVM, or the baseline failing (nothing can be subtracted).
pub fn measure_all(
    iterations: u32,
    wake_samples: u32,
    clock: TscClock,
    source: String,
) -> Result<ExitsReport> {
    let mut ops = Vec::new();
    let mut failed = Vec::new();
    let mut baseline = 0;
    for op in ExitOp::ALL {
        match measure_op(op, iterations, clock) {
            Ok((raw_ns, user_exits)) => {
                if op == ExitOp::Baseline {
                    baseline = raw_ns.p50;
                }
                let net_p50_ns = if op.ring3() {
                    raw_ns.p50 // native ring-3 bracketing: nothing to subtract
                } else {
                    raw_ns.p50.saturating_sub(baseline)
                };
                ops.push(OpCost {
                    op,
                    raw_ns,
                    net_p50_ns,
                    user_exits,
                });
            }
            Err(e) if op == ExitOp::Baseline || e.is_unavailable() => return Err(e),
            Err(e) => failed.push((op, e.to_string())),
        }
    }
    let mut paired = Vec::new();
    let mut paired_failed = Vec::new();
    for pair in Pair::all() {
        match paired::measure(pair, iterations, clock) {
            Ok(c) => paired.push(c),
            Err(e) if e.is_unavailable() => return Err(e),
            Err(e) => paired_failed.push((pair, e.to_string())),
        }
    }
    let wake_cells = wake_cells(wake_samples, clock)?;
    let reentry = reentry::measure(iterations, clock).ok();
    let timer = timer::measure(iterations, clock)
        .map_err(|e| tracing::warn!(%e, "LAPIC timer wake loops failed"))
        .ok();
    let irqfd_write = irqfd::measure(iterations, clock)
        .map_err(|e| tracing::warn!(%e, "irqfd write loop failed"))
        .ok();
    let forced_irq = forced::measure(iterations, clock)
        .map_err(|e| tracing::warn!(%e, "forced interrupt loop failed"))
        .ok();
    let chained_irq = forced::measure_chained(iterations, clock)
        .map_err(|e| tracing::warn!(%e, "chained interrupt loop failed"))
        .ok();
    let ipi_other: Vec<IpiOther> = icr::Target::ALL
        .into_iter()
        .filter_map(|target| {
            icr::measure(target, iterations, clock)
                .map_err(|e| tracing::warn!(%e, ?target, "ICR write to the other vCPU failed"))
                .ok()
        })
        .collect();
    let costs = costs_of(&ops, &paired, &wake_cells, &ipi_other);
    Ok(ExitsReport {
        tsc_ghz: clock.ghz,
        loadavg: crate::host::loadavg(),
        iterations,
        ops,
        failed,
        paired,
        paired_failed,
        wake_cells,
        reentry,
        timer,
        irqfd_write,
        forced_irq,
        chained_irq,
        ipi_other,
        costs: CostsFile::new(source, costs),
    })
}

fn wake_cells(samples: u32, clock: TscClock) -> Result<Vec<(String, Cell)>> {
    let base = CellConfig {
        path: Path::Irqfd,
        halt_poll_ns: 0,
        placement: Placement::Other,
        gaps: Gaps::constant_ns(100_000),
        samples,
        warmup: samples / 5 + 5,
        idle: Idle::Halt,
    };
    let configs = [
        ("hlt_wakeup_sleeping", base),
        (
            "hlt_wakeup_polling",
            CellConfig {
                halt_poll_ns: 200_000,
                gaps: Gaps::constant_ns(50_000),
                ..base
            },
        ),
        (
            "irq_inject",
            CellConfig {
                idle: Idle::SpinUser,
                ..base
            },
        ),
        (
            "irq_inject_ring0",
            CellConfig {
                idle: Idle::Spin,
                ..base
            },
        ),
    ];
    configs
        .iter()
        .map(|(k, c)| Ok(((*k).to_string(), run_cell(c, clock)?)))
        .collect()
}

/// Net costs below this are indistinguishable from the loop itself: on a host that emulates
/// guest kernel mode, an instruction such as `cpuid` costs no more than a `nop` and is not an
/// exit at all. Such keys are left out of the costs file rather than written as 0.
pub const MIN_NET_NS: u64 = 100;

/// Interrupt delivery to a running vCPU slower than this is a host artefact and is left out.
/// `irq_inject` is measured with the vCPU spinning in ring 3 (native); the ring-0 variant
/// (`irq_inject_ring0`, reported but never written) sits inside KVM's ring-0 emulator on a
/// PVM host, which notices the kick only after about a millisecond.
pub const MAX_IRQ_INJECT_NS: u64 = 100_000;

/// Exit costs are the paired net p50s (against the baseline) where the pair ran, else the
/// single-operation loops' `net_p50_ns`; the ICR write to the other vCPU its paired net p50.
fn costs_of(
    ops: &[OpCost],
    paired: &[PairedCost],
    wakes: &[(String, Cell)],
    ipi_other: &[IpiOther],
) -> Costs {
    let net = |op: ExitOp| {
        let pair = paired
            .iter()
            .find(|c| c.pair.op == op && c.pair.reference == ExitOp::Baseline)
            .map(|c| u64::try_from(c.net_ns.p50).unwrap_or(0));
        pair.or_else(|| ops.iter().find(|o| o.op == op).map(|o| o.net_p50_ns))
            .filter(|&ns| ns >= MIN_NET_NS)
    };
    let other = |target: icr::Target| {
        ipi_other
            .iter()
            .find(|c| c.target == target)
            .and_then(|c| u64::try_from(c.net_ns.p50).ok())
            .filter(|&ns| ns >= MIN_NET_NS)
    };
    let wake = |k: &str| {
        wakes
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, c)| c.lat_ns.p50)
    };
    Costs {
        pio_exit_to_user: net(ExitOp::PioUser),
        ioeventfd_exit: net(ExitOp::PioEventfd),
        mmio_exit_to_user: net(ExitOp::MmioUser),
        cpuid_exit: net(ExitOp::Cpuid),
        hypercall_exit: net(ExitOp::Hypercall),
        hlt_wakeup_sleeping: wake("hlt_wakeup_sleeping"),
        hlt_wakeup_polling: wake("hlt_wakeup_polling"),
        irq_inject: wake("irq_inject").filter(|&ns| ns <= MAX_IRQ_INJECT_NS),
        ipi_send: net(ExitOp::IpiSelf),
        ipi_send_other_polled: other(icr::Target::Polled),
        ipi_send_other_sleeping: other(icr::Target::Sleeping),
    }
}
