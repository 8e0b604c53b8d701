//! The sample collector shared by both wake paths: paces sends by the wake gaps, waits
//! (bounded) for the guest handler to acknowledge each interrupt, and turns the timestamps
//! into latencies, with KVM's stats read around the measured phase.

use crate::error::{Error, Result};
use crate::gaps::{GapDraws, Gaps};
use crate::host::{rdtsc, spin_until_tsc, TscClock};
use crate::layout::mailbox;
use crate::memory::GuestRam;
use crate::stats::{HaltCounters, VcpuStats};
use std::time::{Duration, Instant};

/// Longest wait for one interrupt to reach the guest handler. It only detects a stuck guest
/// (a wake takes microseconds), so it is generous: 500 ms failed the real-KVM tests on a
/// 2-core machine running other builds, where a vCPU thread can wait that long for a CPU.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// How a waiting host thread passes time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Spin on the TSC (the thread has its own CPU).
    Spin,
    /// Sleep or yield (the thread shares the CPU with the vCPU it is waking).
    Yield,
}

pub(crate) struct Collector<'a> {
    pub(crate) ram: &'a GuestRam,
    pub(crate) clock: TscClock,
    pub(crate) stats: Option<&'a dyn HaltCounters>,
    pub(crate) pace: Pace,
    draws: GapDraws,
    pub(crate) warmup: u32,
    pub(crate) total: u32,
    pub(crate) lats_ns: Vec<u64>,
    pub(crate) negative: u32,
    acked: u64,
    last_ack_tsc: u64,
    first_send_tsc: u64,
    last_send_tsc: u64,
    last_irq_tsc: u64,
    gap_ticks: u64,
    gaps: u64,
    pub(crate) stats_begin: VcpuStats,
    pub(crate) stats_end: VcpuStats,
}

impl<'a> Collector<'a> {
    pub(crate) fn new(
        ram: &'a GuestRam,
        clock: TscClock,
        stats: Option<&'a dyn HaltCounters>,
        pace: Pace,
        gaps: Gaps,
        (warmup, samples): (u32, u32),
    ) -> Self {
        Self {
            ram,
            clock,
            stats,
            pace,
            draws: gaps.draws(),
            warmup,
            total: warmup + samples,
            lats_ns: Vec::with_capacity(samples as usize),
            negative: 0,
            acked: 0,
            last_ack_tsc: rdtsc(),
            first_send_tsc: 0,
            last_send_tsc: 0,
            last_irq_tsc: 0,
            gap_ticks: 0,
            gaps: 0,
            stats_begin: VcpuStats::default(),
            stats_end: VcpuStats::default(),
        }
    }

    /// Wait out the next gap (one draw per send, warm-up included) since the last
    /// acknowledgement; read stats before the first measured send.
    pub(crate) fn before_send(&mut self, k: u32) -> Result<()> {
        if k == self.warmup {
            self.stats_begin = self.read_stats()?;
        }
        let gap_ns = self.draws.next_ns();
        match self.pace {
            Pace::Spin => spin_until_tsc(self.last_ack_tsc + self.clock.ticks(gap_ns)),
            Pace::Yield => std::thread::sleep(Duration::from_nanos(gap_ns)),
        }
        Ok(())
    }

    /// Wait until the handler has run once more; return the TSC it read first thing.
    pub(crate) fn wait_ack(&mut self) -> Result<u64> {
        let want = self.acked + 1;
        let start = Instant::now();
        loop {
            if self.ram.cell(mailbox::IRQ_COUNT)? >= want {
                break;
            }
            if start.elapsed() > ACK_TIMEOUT {
                return Err(Error::Timeout("the guest interrupt handler"));
            }
            match self.pace {
                Pace::Spin => std::hint::spin_loop(),
                Pace::Yield => std::thread::yield_now(),
            }
        }
        self.acked = want;
        self.last_ack_tsc = rdtsc();
        self.ram.cell(mailbox::IRQ_TSC)
    }

    /// Record send `k` (sent at `send_tsc`, handled at `irq_tsc`).
    pub(crate) fn record(&mut self, k: u32, send_tsc: u64, irq_tsc: u64) -> Result<()> {
        let prev_irq_tsc = std::mem::replace(&mut self.last_irq_tsc, irq_tsc);
        if k < self.warmup {
            return Ok(());
        }
        if prev_irq_tsc != 0 && send_tsc > prev_irq_tsc {
            self.gap_ticks += send_tsc - prev_irq_tsc;
            self.gaps += 1;
        }
        if k == self.warmup {
            self.first_send_tsc = send_tsc;
        }
        self.last_send_tsc = send_tsc;
        let delta = self.clock.delta_ns(send_tsc, irq_tsc);
        match u64::try_from(delta) {
            Ok(ns) => self.lats_ns.push(ns),
            Err(_) => self.negative += 1,
        }
        if k + 1 == self.total {
            self.stats_end = self.read_stats()?;
        }
        Ok(())
    }

    /// Mean time between measured sends.
    pub(crate) fn period_ns(&self) -> u64 {
        let n = u64::from(self.total - self.warmup).saturating_sub(1).max(1);
        self.clock
            .ns(self.last_send_tsc.saturating_sub(self.first_send_tsc))
            / n
    }

    /// Mean time from one wake's handler (its first instruction) to the next send: the idle
    /// gap the workload offers. The halt (and any poll) starts some time into it, after the
    /// rest of the handler and the HLT itself.
    pub(crate) fn handler_to_send_ns(&self) -> u64 {
        self.clock.ns(self.gap_ticks) / self.gaps.max(1)
    }

    fn read_stats(&self) -> Result<VcpuStats> {
        self.stats
            .map_or(Ok(VcpuStats::default()), |s| s.snapshot())
    }
}
