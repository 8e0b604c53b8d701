//! `vmirq kvm device`: a moderated virtual device, for real. The guest driver
//! ([`crate::guest::device`]) keeps `depth` requests outstanding on a ring in guest memory and
//! kicks an MMIO ioeventfd; the VMM device thread (its own host CPU, polling the ring) completes
//! each request `service_ns` after it saw it, publishes the used index, and signals the guest
//! through an irqfd when a vmirq-policy completion policy says so. The guest handler logs
//! when it ran and how far the used index had advanced, so per-request latency (guest submit
//! TSC to the guest handler that consumed it) is computed afterwards.

mod engine;
mod report;

pub use crate::guest::device::DriverMode;
pub use report::{html, table};

use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::guest::device::{program, HANDLER_TICKS, IRQ_LOG, IRQ_LOG_MAX, SEEN};
use crate::host::{pin_to, TscClock};
use crate::layout::{self, mailbox, WAKE_GSI, WAKE_VECTOR};
use crate::memory::GuestRam;
use crate::vm::{Vm, VmConfig};
use crate::wake::target;
use engine::{DeviceCounts, Engine};
use kvm_ioctls::{IoEventAddress, NoDatamatch};
use serde::Serialize;
use std::time::Duration;
use vmirq_policy::spec::ModerationSpec;
use vmm_sys_util::eventfd::EventFd;

/// One device run.
#[derive(Debug, Clone, Copy)]
pub struct DeviceConfig {
    /// Completion moderation policy.
    pub moderation: ModerationSpec,
    /// Requests the guest keeps outstanding.
    pub depth: u32,
    /// Time from the device seeing a request to completing it.
    pub service_ns: u64,
    /// Length of the run.
    pub duration: Duration,
    /// Where the guest driver waits.
    pub mode: DriverMode,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceResult {
    /// Policy (canonical spec).
    pub moderation: String,
    /// Outstanding requests.
    pub depth: u32,
    /// Service time.
    pub service_ns: u64,
    /// Driver mode (`halt` or `spin-user`).
    pub driver: String,
    /// Completions the guest consumed.
    pub completions: u64,
    /// Interrupts the guest handled.
    pub interrupts: u64,
    /// irqfd signals the device sent (several may merge into one interrupt).
    pub notifies: u64,
    /// The device thread's own time in each irqfd `write()` (it polls nothing meanwhile).
    pub notify_write_ns: Summary,
    /// Completions per second of wall time.
    pub completions_per_sec: f64,
    /// Interrupts per completion.
    pub irqs_per_completion: f64,
    /// Total guest time in the interrupt handler, ns.
    pub handler_ns: u64,
    /// Share of wall time the guest spent in the handler (percent).
    pub handler_pct: f64,
    /// Guest submit to the guest handler that consumed the completion.
    pub lat_ns: Summary,
    /// Wall time, ns.
    pub wall_ns: u64,
}

/// Run the device.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; guest or timeout errors.
pub fn run_device(cfg: &DeviceConfig, clock: TscClock) -> Result<DeviceResult> {
    let mut vm = Vm::new(
        VmConfig {
            irqchip: true,
            vcpus: 1,
            halt_poll_ns: None,
        },
        &program(cfg.depth, cfg.mode)?,
    )?;
    let irqfd = vm.msi_irqfd(WAKE_GSI, 0, WAKE_VECTOR)?;
    let kick = EventFd::new(libc::EFD_NONBLOCK).map_err(Error::io("eventfd"))?;
    vm.fd
        .register_ioevent(
            &kick,
            &IoEventAddress::Mmio(layout::DOORBELL_MMIO),
            NoDatamatch,
        )
        .map_err(Error::kvm("KVM_IOEVENTFD"))?;
    let cpu = vm.vcpus.remove(0);
    let running = target::spawn(cpu.fd, 0);
    let ram = &vm.ram;
    let counts = running.wait_ready(Duration::from_secs(5)).and_then(|()| {
        std::thread::scope(|s| {
            s.spawn(|| -> Result<DeviceCounts> {
                pin_to(1)?;
                let mut engine = Engine::new(
                    ram,
                    &irqfd,
                    &kick,
                    cfg.moderation.build(),
                    clock,
                    cfg.service_ns,
                );
                engine.run(cfg.duration)
            })
            .join()
            .map_err(|_| Error::Guest("device thread panicked".into()))?
        })
    });
    ram.set_cell(mailbox::STOP, 1)?;
    irqfd.write(1).map_err(Error::io("irqfd write"))?;
    if let Err(e) = running.join(Duration::from_secs(5)) {
        let w0 = ram.cell(mailbox::FAULT_STACK0).unwrap_or(0);
        let w1 = ram.cell(mailbox::FAULT_STACK1).unwrap_or(0);
        return Err(Error::Guest(format!(
            "{e} (stack at fault {w0:#x} {w1:#x})"
        )));
    }
    let counts = counts?;
    summarise(cfg, ram, &counts, clock)
}

fn summarise(
    cfg: &DeviceConfig,
    ram: &GuestRam,
    c: &DeviceCounts,
    clock: TscClock,
) -> Result<DeviceResult> {
    let completions = ram.cell(SEEN)?;
    let interrupts = ram.cell(mailbox::IRQ_COUNT)?;
    let handler_ns = clock.ns(ram.cell(HANDLER_TICKS)?);
    let mut lats = latencies(ram, &c.submit_tsc, interrupts.min(IRQ_LOG_MAX), clock)?;
    let secs = c.wall_ns as f64 / 1e9;
    Ok(DeviceResult {
        moderation: cfg.moderation.to_string(),
        depth: cfg.depth,
        service_ns: cfg.service_ns,
        driver: match cfg.mode {
            DriverMode::Halt => "halt".into(),
            DriverMode::SpinUser => "spin-user".into(),
        },
        completions,
        interrupts,
        notifies: c.notifies,
        notify_write_ns: Summary::of(
            &mut c
                .notify_write_ticks
                .iter()
                .map(|&t| clock.ns(t))
                .collect::<Vec<_>>(),
        ),
        completions_per_sec: completions as f64 / secs.max(1e-9),
        irqs_per_completion: interrupts as f64 / (completions.max(1) as f64),
        handler_ns,
        handler_pct: handler_ns as f64 * 100.0 / (c.wall_ns.max(1) as f64),
        lat_ns: Summary::of(&mut lats),
        wall_ns: c.wall_ns,
    })
}

/// For each request, the first logged interrupt whose used index covers it.
fn latencies(ram: &GuestRam, submit_tsc: &[u64], logged: u64, clock: TscClock) -> Result<Vec<u64>> {
    let mut out = Vec::with_capacity(submit_tsc.len());
    let mut req = 0usize;
    for k in 0..logged {
        let tsc = ram.load(IRQ_LOG + k * 16)?;
        let upto = usize::try_from(ram.load(IRQ_LOG + k * 16 + 8)?).unwrap_or(usize::MAX);
        while req < upto.min(submit_tsc.len()) {
            if let Ok(ns) = u64::try_from(clock.delta_ns(submit_tsc[req], tsc)) {
                out.push(ns);
            }
            req += 1;
        }
    }
    Ok(out)
}
