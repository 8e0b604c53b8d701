//! One wake cell: build the VM, run the halted vCPU and the sender, collect.

use super::collect::{Collector, Pace};
use super::target::{self, Running};
use super::{Cell, CellConfig, Path, Placement, TscCheck};
use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::guest::wake::{program, WakeGuest};
use crate::host::{online_cpus, pin_to, rdtsc, tight_timer_slack, TscClock};
use crate::layout::{mailbox, port, WAKE_GSI, WAKE_VECTOR};
use crate::memory::GuestRam;
use crate::runner::{run_until_done, unexpected, Next};
use crate::stats::{HaltCounters, StatsFd};
use crate::vm::{Vm, VmConfig};
use kvm_ioctls::{VcpuExit, VcpuFd};
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;

const READY_TIMEOUT: Duration = Duration::from_secs(5);
const JOIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Run one cell.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; [`Error::Config`] for `other` placement on one CPU;
/// guest or timeout errors if the wake does not arrive.
pub fn run_cell(cfg: &CellConfig, clock: TscClock) -> Result<Cell> {
    if cfg.placement == Placement::Other && online_cpus() < 2 {
        return Err(Error::Config("placement 'other' needs two CPUs".into()));
    }
    let ipi = cfg.path == Path::Ipi;
    let guest = WakeGuest {
        apic: true,
        idle: cfg.idle,
        sender: ipi,
        pad_eoi: false,
    };
    let vm_cfg = VmConfig {
        irqchip: true,
        vcpus: if ipi { 2 } else { 1 },
        halt_poll_ns: Some(cfg.halt_poll_ns),
    };
    let mut vm = Vm::new(vm_cfg, &program(guest)?)?;
    let irqfd = vm.msi_irqfd(WAKE_GSI, 0, WAKE_VECTOR)?;
    let mut vcpus = std::mem::take(&mut vm.vcpus).into_iter();
    let target = vcpus
        .next()
        .ok_or_else(|| Error::Config("no vCPU".into()))?;
    let sender = vcpus.next();
    let stats = target.stats;
    let host_before = rdtsc();
    let running = target::spawn(target.fd, 0);
    let measured = start_and_measure(
        cfg,
        clock,
        &vm.ram,
        &running,
        stats.as_ref(),
        &irqfd,
        sender.map(|v| v.fd),
    );
    let host_after_ready = running_ready_tsc(&measured);
    // Always stop the target, even after an error, so its thread ends.
    vm.ram.set_cell(mailbox::STOP, 1)?;
    irqfd.write(1).map_err(Error::io("irqfd write"))?;
    let done = running.join(JOIN_TIMEOUT);
    if let (Err(m), Err(d)) = (&measured, &done) {
        // The vCPU's own error usually explains the measuring side's.
        let w0 = vm.ram.cell(mailbox::FAULT_STACK0).unwrap_or(0);
        let w1 = vm.ram.cell(mailbox::FAULT_STACK1).unwrap_or(0);
        return Err(Error::Guest(format!(
            "{m}; vCPU: {d} (stack at fault {w0:#x} {w1:#x})"
        )));
    }
    let (col, wall_ns) = measured?;
    let done = done?;
    let boot = vm.ram.cell(mailbox::BOOT_TSC)?;
    let tsc = tsc_check(boot, host_before, host_after_ready.unwrap_or(host_before));
    Ok(assemble(cfg, col, wall_ns, done.cpu_ns, tsc))
}

/// Results of the measuring phase, owned so the VM can be torn down afterwards.
struct Measured {
    lats_ns: Vec<u64>,
    negative: u32,
    period_ns: u64,
    handler_to_send_ns: u64,
    stats: crate::stats::VcpuStats,
    ready_tsc: u64,
}

fn running_ready_tsc(m: &Result<(Measured, u64)>) -> Option<u64> {
    m.as_ref().ok().map(|(m, _)| m.ready_tsc)
}

fn start_and_measure(
    cfg: &CellConfig,
    clock: TscClock,
    ram: &GuestRam,
    running: &Running,
    stats: Option<&StatsFd>,
    irqfd: &EventFd,
    sender: Option<VcpuFd>,
) -> Result<(Measured, u64)> {
    running.wait_ready(READY_TIMEOUT)?;
    let ready_tsc = rdtsc();
    let pace = match cfg.placement {
        Placement::Same => Pace::Yield,
        Placement::Other => Pace::Spin,
    };
    let start = Instant::now();
    let col = std::thread::scope(|s| {
        s.spawn(|| -> Result<Collector<'_>> {
            pin_to(cfg.placement.sender_cpu())?;
            tight_timer_slack();
            let mut col = Collector::new(
                ram,
                clock,
                stats.map(|s| s as &dyn HaltCounters),
                pace,
                cfg.gaps,
                (cfg.warmup, cfg.samples),
            );
            match sender {
                None => send_irqfd(&mut col, irqfd)?,
                Some(mut vcpu) => send_ipi(&mut col, &mut vcpu)?,
            }
            Ok(col)
        })
        .join()
        .map_err(|_| Error::Guest("sender thread panicked".into()))?
    })?;
    let wall_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let measured = Measured {
        period_ns: col.period_ns(),
        handler_to_send_ns: col.handler_to_send_ns(),
        stats: col.stats_end.since(&col.stats_begin),
        negative: col.negative,
        lats_ns: col.lats_ns,
        ready_tsc,
    };
    Ok((measured, wall_ns))
}

fn send_irqfd(col: &mut Collector<'_>, irqfd: &EventFd) -> Result<()> {
    for k in 0..col.total {
        col.before_send(k)?;
        let t0 = rdtsc();
        irqfd.write(1).map_err(Error::io("irqfd write"))?;
        let irq_tsc = col.wait_ack()?;
        col.record(k, t0, irq_tsc)?;
    }
    Ok(())
}

/// Run the sender vCPU: each GO exit first collects the previous IPI, then waits the
/// interval and lets the guest send the next one (or stop).
fn send_ipi(col: &mut Collector<'_>, vcpu: &mut VcpuFd) -> Result<()> {
    let mut k = 0u32;
    let mut failure = None;
    let max_exits = u64::from(col.total) * 4 + 100;
    run_until_done(
        vcpu,
        max_exits,
        Duration::from_secs(120),
        |exit| match exit {
            VcpuExit::IoIn(port::GO, data) => {
                let step = (|| -> Result<u8> {
                    if k > 0 {
                        let irq_tsc = col.wait_ack()?;
                        let send_tsc = col.ram.cell(mailbox::SEND_TSC)?;
                        col.record(k - 1, send_tsc, irq_tsc)?;
                    }
                    if k == col.total {
                        return Ok(1);
                    }
                    col.before_send(k)?;
                    k += 1;
                    Ok(0)
                })();
                match step {
                    Ok(v) => data.fill(v),
                    Err(e) => {
                        failure = Some(e);
                        data.fill(1);
                    }
                }
                Ok(Next::Continue)
            }
            other => Err(unexpected(&other)),
        },
    )?;
    failure.map_or(Ok(()), Err)
}

fn tsc_check(guest_boot: u64, host_before: u64, host_after: u64) -> TscCheck {
    let diff = |a: u64, b: u64| i64::try_from(i128::from(a) - i128::from(b)).unwrap_or(i64::MAX);
    let min = diff(guest_boot, host_after);
    let max = diff(guest_boot, host_before);
    TscCheck {
        offset_min_ticks: min,
        offset_max_ticks: max,
        zero_offset: min <= 0 && max >= 0,
    }
}

fn assemble(cfg: &CellConfig, mut m: Measured, wall_ns: u64, cpu_ns: u64, tsc: TscCheck) -> Cell {
    let s = m.stats;
    let samples = m.lats_ns.len() as u64;
    // Without a stats fd every counter reads 0; fall back to the wake count.
    let halts = if s.exits > 0 { s.halt_exits } else { samples };
    Cell {
        path: cfg.path,
        halt_poll_ns: cfg.halt_poll_ns,
        placement: cfg.placement,
        interval_ns: cfg.gaps.spec.mean_ns(),
        period_ns: m.period_ns,
        handler_to_send_ns: m.handler_to_send_ns,
        samples,
        negative: m.negative,
        lat_ns: Summary::of(&mut m.lats_ns),
        halts,
        polls_successful: s.halt_successful_poll,
        polls_attempted: s.halt_attempted_poll,
        wakeups: s.halt_wakeup,
        poll_ns: s.poll_ns(),
        kvm_stats: s,
        vcpu_cpu_ns: cpu_ns,
        wall_ns,
        tsc,
    }
}
