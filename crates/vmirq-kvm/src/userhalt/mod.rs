//! `vmirq kvm halt`: the userspace halt path. Without an in-kernel irqchip every HLT exits to
//! the VMM, which runs one of vmirq's wait policies ([`vmirq_policy::wait`]): poll a pending
//! flag for the window the policy grants, then block; the interrupt goes in with
//! `KVM_INTERRUPT`. The same workload (a host thread waking the halted vCPU after gaps drawn
//! from a [`Gaps`] distribution, the same seeded sequence for every poller) also runs with
//! KVM's in-kernel halt polling for comparison, including the CPU time each spends polling.
//!
//! Both sides are counted over the same measured wakes: KVM's stats fd for kernel cells, the
//! VMM's [`vcpu::UserCounters`] (same fields) for user cells, read by the collector at the
//! same two moments. The user guest pads its handler to the irqchip guest's instruction count
//! so each halt, and any poll, starts as long after its wake on both paths.

mod report;
pub mod vcpu;

pub use report::{html, table};

use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::gaps::{GapSpec, Gaps};
use crate::guest::wake::{program, Idle, WakeGuest};
use crate::host::{online_cpus, pin_to, rdtsc, tight_timer_slack, TscClock};
use crate::layout::mailbox;
use crate::vm::{Vm, VmConfig};
use crate::wake::collect::{Collector, Pace};
use crate::wake::{run_cell, CellConfig, Path, Placement};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vcpu::{Doorbell, HaltStats};
use vmirq_policy::spec::WaitSpec;

/// Who decides how long a halted vCPU polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poller {
    /// KVM's in-kernel halt polling with this `KVM_CAP_HALT_POLL` value.
    Kernel(u64),
    /// A vmirq wait policy in the VMM (no in-kernel irqchip).
    User(WaitSpec),
}

/// One comparison cell.
#[derive(Debug, Clone, Serialize)]
pub struct HaltCell {
    /// `kernel:halt_poll_ns=N` or `user:<wait spec>`.
    pub poller: String,
    /// Wake interval: the mean gap of `gaps` (the constant gap for `const`).
    pub interval_ns: u64,
    /// Gap distribution, as a spec (`const:us=30`, `exp:mean_us=80`, `bimodal:...`).
    pub gaps: GapSpec,
    /// Seed of the gap draws.
    pub seed: u64,
    /// Placement of the injector.
    pub placement: Placement,
    /// Latencies measured.
    pub samples: u64,
    /// Injector TSC to the handler's first instruction.
    pub lat_ns: Summary,
    /// Halts over the measured phase.
    pub halts: u64,
    /// Halts where a poll started (`halt_attempted_poll`); `attempted - polled` polls ran
    /// out and were wasted.
    pub attempted: u64,
    /// Halts caught by polling.
    pub polled: u64,
    /// Total time spent polling over the measured phase, ns: KVM's
    /// `halt_poll_success_ns + halt_poll_fail_ns` for kernel cells, the same two sums
    /// measured the same way by the VMM for user cells.
    pub poll_ns: u64,
    /// Part of `poll_ns` in polls that caught the interrupt.
    pub poll_success_ns: u64,
    /// Part of `poll_ns` in polls that ran out before the vCPU blocked.
    pub poll_fail_ns: u64,
    /// Mean time from a wake's handler to the next send (the idle gap the workload offers).
    pub handler_to_send_ns: u64,
    /// CPU time of the vCPU thread over the cell, ns.
    pub vcpu_cpu_ns: u64,
    /// Wall time of the measured phase, ns.
    pub wall_ns: u64,
    /// Largest window granted (user cells), ns.
    pub max_window_ns: u64,
    /// Largest poll overrun past its window (user cells), ns.
    pub max_overrun_ns: u64,
}

impl HaltCell {
    /// Mean polling time per halt, ns.
    #[must_use]
    pub fn poll_ns_per_halt(&self) -> u64 {
        self.poll_ns / self.halts.max(1)
    }

    /// Estimated delay from a wake's handler to the start of the next poll: the idle gap
    /// minus the mean length of a successful poll (which ends when it sees the next send).
    /// It is where the poll starts in the workload: a later start leaves less to poll for
    /// the same wake. `None` without successful polls.
    #[must_use]
    pub fn poll_start_after_handler_ns(&self) -> Option<u64> {
        (self.polled > 0).then(|| {
            self.handler_to_send_ns
                .saturating_sub(self.poll_success_ns / self.polled)
        })
    }
}

/// Run one cell.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; guest or timeout errors.
pub fn run_halt_cell(
    poller: Poller,
    gaps: Gaps,
    placement: Placement,
    (warmup, samples): (u32, u32),
    clock: TscClock,
) -> Result<HaltCell> {
    match poller {
        Poller::Kernel(ns) => {
            let cfg = CellConfig {
                path: Path::Irqfd,
                halt_poll_ns: ns,
                placement,
                gaps,
                samples,
                warmup,
                idle: Idle::Halt,
            };
            let c = run_cell(&cfg, clock)?;
            Ok(HaltCell {
                poller: format!("kernel:halt_poll_ns={ns}"),
                interval_ns: gaps.spec.mean_ns(),
                gaps: gaps.spec,
                seed: gaps.seed,
                placement,
                samples: c.samples,
                lat_ns: c.lat_ns,
                halts: c.halts,
                attempted: c.polls_attempted,
                polled: c.polls_successful,
                poll_ns: c.poll_ns,
                poll_success_ns: c.kvm_stats.halt_poll_success_ns,
                poll_fail_ns: c.kvm_stats.halt_poll_fail_ns,
                handler_to_send_ns: c.handler_to_send_ns,
                vcpu_cpu_ns: c.vcpu_cpu_ns,
                wall_ns: c.wall_ns,
                max_window_ns: ns,
                max_overrun_ns: 0,
            })
        }
        Poller::User(spec) => run_user(spec, gaps, placement, (warmup, samples), clock),
    }
}

fn run_user(
    spec: WaitSpec,
    gaps: Gaps,
    placement: Placement,
    (warmup, samples): (u32, u32),
    clock: TscClock,
) -> Result<HaltCell> {
    if placement == Placement::Other && online_cpus() < 2 {
        return Err(Error::Config("placement 'other' needs two CPUs".into()));
    }
    let guest = WakeGuest {
        apic: false,
        idle: Idle::Halt,
        sender: false,
        pad_eoi: true,
    };
    let mut vm = Vm::new(
        VmConfig {
            irqchip: false,
            vcpus: 1,
            halt_poll_ns: None,
        },
        &program(guest)?,
    )?;
    let mut cpu = vm.vcpus.remove(0);
    let bell = Doorbell::new()?;
    let ram = &vm.ram;
    let pace = if placement == Placement::Same {
        Pace::Yield
    } else {
        Pace::Spin
    };
    let start = Instant::now();
    let (halt, col) = std::thread::scope(|s| {
        let vcpu_thread = s.spawn(|| -> Result<HaltStats> {
            pin_to(0)?;
            vcpu::run(&mut cpu.fd, &bell, spec.build(), clock)
        });
        let col = (|| -> Result<Collector<'_>> {
            wait_ready(&bell)?;
            let mut col = Collector::new(
                ram,
                clock,
                Some(&bell.counters),
                pace,
                gaps,
                (warmup, samples),
            );
            s.spawn(|| -> Result<Collector<'_>> {
                pin_to(placement.sender_cpu())?;
                tight_timer_slack();
                for k in 0..col.total {
                    col.before_send(k)?;
                    let t0 = rdtsc();
                    bell.ring(t0)?;
                    let irq = col.wait_ack()?;
                    col.record(k, t0, irq)?;
                }
                Ok(col)
            })
            .join()
            .map_err(|_| Error::Guest("injector panicked".into()))?
        })();
        // Stop the guest whatever happened: set STOP, then one more interrupt.
        let stop = ram
            .set_cell(mailbox::STOP, 1)
            .and_then(|()| bell.ring(rdtsc()));
        let halt = vcpu_thread
            .join()
            .map_err(|_| Error::Guest("vCPU thread panicked".into()))?;
        stop?;
        Ok::<_, Error>((halt?, col?))
    })?;
    let wall_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let s = col.stats_end.since(&col.stats_begin);
    let handler_to_send_ns = col.handler_to_send_ns();
    let mut lats = col.lats_ns;
    Ok(HaltCell {
        poller: format!("user:{spec}"),
        interval_ns: gaps.spec.mean_ns(),
        gaps: gaps.spec,
        seed: gaps.seed,
        placement,
        samples: lats.len() as u64,
        lat_ns: Summary::of(&mut lats),
        halts: s.halt_exits,
        attempted: s.halt_attempted_poll,
        polled: s.halt_successful_poll,
        poll_ns: s.poll_ns(),
        poll_success_ns: s.halt_poll_success_ns,
        poll_fail_ns: s.halt_poll_fail_ns,
        handler_to_send_ns,
        vcpu_cpu_ns: halt.cpu_ns,
        wall_ns,
        max_window_ns: halt.max_window_ns,
        max_overrun_ns: halt.max_overrun_ns,
    })
}

fn wait_ready(bell: &Doorbell) -> Result<()> {
    let start = Instant::now();
    while !bell.ready.load(Ordering::Acquire) {
        if start.elapsed() > Duration::from_secs(5) {
            return Err(Error::Timeout("the guest to become ready"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// Parse a wait spec, mapping the error.
///
/// # Errors
/// [`Error::Spec`] with the parser's message.
pub fn parse_wait(s: &str) -> Result<WaitSpec> {
    s.parse::<WaitSpec>()
        .map_err(|e| Error::Spec(format!("{s}: {e}")))
}

/// The default comparison: kernel polling off and 200 µs, then the five user policies.
///
/// # Errors
/// Never for the built-in specs ([`Error::Spec`] otherwise).
pub fn default_pollers() -> Result<Vec<Poller>> {
    let mut v = vec![Poller::Kernel(0), Poller::Kernel(200_000)];
    for s in [
        "never",
        "fixed:ns=200000",
        "kvm:max_ns=200000",
        "guest-haltpoll:max_ns=200000",
        "histogram:max_ns=200000",
    ] {
        v.push(Poller::User(parse_wait(s)?));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(polled: u64, success_ns: u64, gap_ns: u64) -> HaltCell {
        HaltCell {
            poller: "user:never".into(),
            interval_ns: 30_000,
            gaps: GapSpec::Const { us: 30 },
            seed: 0,
            placement: Placement::Other,
            samples: 4,
            lat_ns: Summary::default(),
            halts: 4,
            attempted: 4,
            polled,
            poll_ns: success_ns + 1_000,
            poll_success_ns: success_ns,
            poll_fail_ns: 1_000,
            handler_to_send_ns: gap_ns,
            vcpu_cpu_ns: 0,
            wall_ns: 0,
            max_window_ns: 0,
            max_overrun_ns: 0,
        }
    }

    #[test]
    fn poll_start_is_the_gap_minus_a_successful_poll() {
        // 4 polls of 20 µs in a 34 µs gap: polling started 14 µs after the handler.
        assert_eq!(
            cell(4, 80_000, 34_000).poll_start_after_handler_ns(),
            Some(14_000)
        );
        assert_eq!(cell(0, 0, 34_000).poll_start_after_handler_ns(), None);
        assert_eq!(cell(4, 80_000, 34_000).poll_ns_per_halt(), 20_250);
    }
}
