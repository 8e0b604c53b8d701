//! A halt woken by the vCPU's own LAPIC timer: what a polled (or slept) wake costs on the
//! woken vCPU's side alone, with no sender and no cross-CPU signal (a primitive for host
//! profiles, issue 16).
//!
//! Three loops of the same one-shot timer ([`crate::guest::timer`]), vCPU thread pinned to
//! CPU 0, each on its own VM:
//! - `polled`: `sti; hlt` with `KVM_CAP_HALT_POLL` at [`POLL_NS`], longer than the timer, so
//!   KVM's poll loop sees the timer fire (its share is checked with KVM's halt counters);
//! - `slept`: the same with halt polling off: the vCPU thread sleeps and the timer's
//!   callback wakes it on its own CPU;
//! - `running`: the timer fires while the vCPU loops on `out` exits to the VMM; KVM injects
//!   it when it re-enters after the exit in progress.
//!
//! Each sample is arming-to-handler time minus the timer's count. In `running`, the timer
//! lands at a uniformly spread point of an `out` iteration and waits for that iteration's
//! re-entry: on average half an iteration (`running_period_ns`, measured as the loop's time
//! over its exits). So `running.p50 - running_period_ns / 2` is a timer taken at a re-entry
//! with nothing to wait for, and `polled_extra_ns` / `slept_extra_ns` are what a halt that
//! polls / sleeps adds to that: KVM's halt handling, its poll loop noticing the timer and
//! leaving it (polled), or the vCPU thread's wake on its own CPU (slept).

use crate::dist::Summary;
use crate::error::{Error, Result};
use crate::guest::timer::{program, TimerIdle};
use crate::host::{pin_to, TscClock};
use crate::layout::{self, mailbox, port};
use crate::runner::{run_until_done, unexpected, Next};
use crate::stats::VcpuStats;
use crate::vm::{Vm, VmConfig};
use kvm_ioctls::VcpuExit;
use serde::Serialize;
use std::time::Duration;

/// Timer count: 20 us at KVM's 1 GHz APIC bus (one count per ns with divide-by-1).
pub const COUNT_NS: u32 = 20_000;
/// Halt-poll window of the `polled` loop (KVM's default maximum here).
pub const POLL_NS: u64 = 200_000;
/// Iterations dropped at the start (cold caches; KVM's poll window growing from 0).
const SKIP: u32 = 32;

/// One loop's result.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TimerLoop {
    /// Arming-to-handler time minus the count, per iteration.
    pub lat_ns: Summary,
    /// KVM's halt counters over the loop (polled and slept loops).
    pub halts: VcpuStats,
    /// Exits to the VMM during the loop.
    pub user_exits: u64,
    /// Median time between two consecutive exits to the VMM, host TSC at each exit (the
    /// running loop's `out` iteration; 0 for the halt loops).
    pub exit_period_ns: u64,
}

/// Result of [`measure`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TimerWake {
    /// Timer count (ns).
    pub count_ns: u32,
    /// `sti; hlt` with halt polling at [`POLL_NS`].
    pub polled: TimerLoop,
    /// `sti; hlt` with halt polling off.
    pub slept: TimerLoop,
    /// The timer taken while the vCPU loops on `out` exits to the VMM.
    pub running: TimerLoop,
    /// One `out` iteration of the running loop: the median time between consecutive exits
    /// to the VMM (host TSC read at each exit).
    pub running_period_ns: u64,
    /// Share of the polled loop's halts that KVM's poll caught (%).
    pub polled_share_pct: f64,
    /// `polled.p50 - (running.p50 - running_period_ns / 2)`, may be negative.
    pub polled_extra_ns: i64,
    /// `slept.p50 - (running.p50 - running_period_ns / 2)`, may be negative.
    pub slept_extra_ns: i64,
}

/// Run the three loops, `iterations` samples each.
///
/// # Errors
/// [`Error::Unavailable`] without KVM; [`Error::Guest`] if a loop faults, times out or its
/// handler did not run once per iteration.
pub fn measure(iterations: u32, clock: TscClock) -> Result<TimerWake> {
    measure_count(COUNT_NS, iterations, clock)
}

/// [`measure`] with a timer of `count` ns.
///
/// # Errors
/// As [`measure`].
pub fn measure_count(count: u32, iterations: u32, clock: TscClock) -> Result<TimerWake> {
    let polled = run(TimerIdle::Halt, Some(POLL_NS), count, iterations, clock)?;
    let slept = run(TimerIdle::Halt, Some(0), count, iterations, clock)?;
    let running = run(TimerIdle::OutLoop, None, count, iterations, clock)?;
    let running_period_ns = running.exit_period_ns;
    let at_entry = signed(running.lat_ns.p50) - signed(running_period_ns / 2);
    #[allow(clippy::cast_precision_loss, reason = "halt counts are far below 2^52")]
    let polled_share_pct =
        100.0 * polled.halts.halt_successful_poll as f64 / polled.halts.halt_exits.max(1) as f64;
    Ok(TimerWake {
        count_ns: count,
        polled_extra_ns: signed(polled.lat_ns.p50) - at_entry,
        slept_extra_ns: signed(slept.lat_ns.p50) - at_entry,
        polled,
        slept,
        running,
        running_period_ns,
        polled_share_pct,
    })
}

fn signed(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

fn run(
    idle: TimerIdle,
    halt_poll_ns: Option<u64>,
    count: u32,
    iterations: u32,
    clock: TscClock,
) -> Result<TimerLoop> {
    let n = iterations + SKIP;
    let prog = program(idle, n, count)?;
    let mut vm = Vm::new(
        VmConfig {
            irqchip: true,
            vcpus: 1,
            halt_poll_ns,
        },
        &prog,
    )?;
    let mut vcpu = vm.vcpus.remove(0);
    let before = vcpu
        .stats
        .as_ref()
        .map(crate::stats::StatsFd::read)
        .transpose()?;
    // An `out` iteration takes a few us here; bound the exits generously (a timer every 20 us).
    let max_exits = u64::from(n) * (u64::from(count) / 200 + 20) + 100;
    let mut out_exits = 0u64;
    let mut exit_tsc: Vec<u64> = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_to(0)?;
            run_until_done(
                &mut vcpu.fd,
                max_exits,
                Duration::from_secs(20),
                |exit| match exit {
                    VcpuExit::IoOut(port::PIO_USER, _) if idle == TimerIdle::OutLoop => {
                        out_exits += 1;
                        if exit_tsc.len() < 1 << 20 {
                            exit_tsc.push(crate::host::rdtsc());
                        }
                        Ok(Next::Continue)
                    }
                    VcpuExit::Hlt => Ok(Next::Continue),
                    other => Err(unexpected(&other)),
                },
            )
        })
        .join()
        .map_err(|_| Error::Guest("vCPU thread panicked".into()))?
    })?;
    let after = vcpu
        .stats
        .as_ref()
        .map(crate::stats::StatsFd::read)
        .transpose()?;
    let taken = vm.ram.cell(mailbox::IRQ_COUNT)?;
    if taken != u64::from(n) {
        return Err(Error::Guest(format!(
            "timer {idle:?}: the handler ran {taken} times in {n} iterations"
        )));
    }
    let halts = match (before, after) {
        (Some(b), Some(a)) => a.since(&b),
        _ => VcpuStats::default(),
    };
    let mut ns = Vec::with_capacity(iterations as usize);
    for i in u64::from(SKIP)..u64::from(n) {
        let ticks = vm.ram.load(layout::ARRAY + i * 8)?;
        ns.push(clock.ns(ticks).saturating_sub(u64::from(count)));
    }
    // Only the measured iterations' exits count towards the running loop's period.
    let user_exits = out_exits * u64::from(iterations) / u64::from(n);
    let mut gaps: Vec<u64> = exit_tsc
        .windows(2)
        .map(|w| clock.ns(w[1].saturating_sub(w[0])))
        .collect();
    Ok(TimerLoop {
        lat_ns: Summary::of(&mut ns),
        halts,
        user_exits,
        exit_period_ns: Summary::of(&mut gaps).p50,
    })
}
