//! `vmirq kvm wake`: how long it takes to wake a halted vCPU, with KVM's own halt polling.
//!
//! vCPU 0 halts (`sti; hlt`) with an in-kernel irqchip. A sender wakes it every
//! `interval_ns`, either (a) from a host thread writing an irqfd whose GSI has an MSI route
//! (the device-completion path) or (b) from vCPU 1 writing its x2APIC ICR (an IPI, the
//! TCP_RR path). The latency is from the sender's TSC read to the TSC the handler reads as its
//! first instruction (guest TSC = host TSC; checked per cell). Each cell also carries the
//! deltas of KVM's per-vCPU statistics over the measured phase.

mod cell;
pub(crate) mod collect;
mod report;
pub(crate) mod target;

pub use cell::run_cell;
pub use report::{html, run_sweep, table, WakeReport};

use crate::dist::Summary;
use crate::gaps::Gaps;
use crate::guest::wake::Idle;
use crate::stats::VcpuStats;
use serde::{Deserialize, Serialize};

/// Which sender wakes the halted vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    /// A host thread writes an irqfd routed as an MSI.
    Irqfd,
    /// vCPU 1 sends an IPI through the x2APIC ICR.
    Ipi,
}

/// Where the sender runs relative to the halted vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Same host CPU (the sender needs the CPU the halted vCPU would poll on).
    Same,
    /// Another host CPU.
    Other,
}

impl Placement {
    /// Host CPU of the sender; the halted vCPU is always on CPU 0.
    #[must_use]
    pub fn sender_cpu(self) -> usize {
        match self {
            Self::Same => 0,
            Self::Other => 1,
        }
    }
}

/// One cell of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CellConfig {
    /// Sender.
    pub path: Path,
    /// `KVM_CAP_HALT_POLL` for the VM.
    pub halt_poll_ns: u64,
    /// Sender placement.
    pub placement: Placement,
    /// Time from one wake being handled to the next send, drawn per send.
    pub gaps: Gaps,
    /// Measured wakes.
    pub samples: u32,
    /// Unmeasured wakes first (let KVM's adaptive window settle).
    pub warmup: u32,
    /// How vCPU 0 waits: halted (the point of the sweep) or running (interrupt injection).
    pub idle: Idle,
}

/// What the guest TSC looked like against the host's (offset 0 expected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TscCheck {
    /// Lower bound of guest TSC minus host TSC, in ticks.
    pub offset_min_ticks: i64,
    /// Upper bound of guest TSC minus host TSC, in ticks.
    pub offset_max_ticks: i64,
    /// 0 lies within the bounds.
    pub zero_offset: bool,
}

/// Result of one cell. Field names are the JSON contract of `vmirq kvm wake --json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    /// Sender.
    pub path: Path,
    /// `KVM_CAP_HALT_POLL` for the VM.
    pub halt_poll_ns: u64,
    /// Sender placement.
    pub placement: Placement,
    /// Configured interval.
    pub interval_ns: u64,
    /// Measured send-to-send period (interval plus wake latency plus handler).
    pub period_ns: u64,
    /// Latencies measured (wakes with a negative latency are counted in `negative`).
    pub samples: u64,
    /// Mean time from one wake's handler to the next send (the idle gap offered).
    pub handler_to_send_ns: u64,
    /// Wakes whose handler TSC preceded the send TSC (should be 0 with TSC offset 0).
    pub negative: u32,
    /// Sender TSC to handler's first instruction.
    pub lat_ns: Summary,
    /// HLT exits of vCPU 0 (KVM `halt_exits`, or the wake count if the kernel lacks it).
    pub halts: u64,
    /// Halts ended by a successful poll (`halt_successful_poll`).
    pub polls_successful: u64,
    /// Halts where polling started (`halt_attempted_poll`).
    pub polls_attempted: u64,
    /// Halts that slept and were woken (`halt_wakeup`).
    pub wakeups: u64,
    /// Nanoseconds KVM spent polling (`halt_poll_success_ns + halt_poll_fail_ns`).
    pub poll_ns: u64,
    /// All of KVM's counters over the measured phase.
    pub kvm_stats: VcpuStats,
    /// CPU time of vCPU 0's thread over the whole cell (includes KVM's polling).
    pub vcpu_cpu_ns: u64,
    /// Wall time of the cell's measured phase.
    pub wall_ns: u64,
    /// Guest versus host TSC.
    pub tsc: TscCheck,
}

/// The sweep: every combination of the lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// Senders.
    pub paths: Vec<Path>,
    /// Halt-poll windows.
    pub halt_poll_ns: Vec<u64>,
    /// Wake intervals.
    pub intervals_ns: Vec<u64>,
    /// Placements.
    pub placements: Vec<Placement>,
    /// Measured wakes per cell.
    pub samples: u32,
    /// Warm-up wakes per cell.
    pub warmup: u32,
}

impl Sweep {
    /// The default sweep (a few seconds): both paths, poll 0/10/50/200 µs, 30 and 100 µs
    /// intervals, both placements.
    #[must_use]
    pub fn default_sweep() -> Self {
        Self {
            paths: vec![Path::Irqfd, Path::Ipi],
            halt_poll_ns: vec![0, 10_000, 50_000, 200_000],
            intervals_ns: vec![30_000, 100_000],
            placements: vec![Placement::Other, Placement::Same],
            samples: 400,
            warmup: 50,
        }
    }

    /// A few-second sweep for smoke tests: irqfd, poll 0 and 200 µs, other core.
    #[must_use]
    pub fn quick() -> Self {
        Self {
            paths: vec![Path::Irqfd, Path::Ipi],
            halt_poll_ns: vec![0, 200_000],
            intervals_ns: vec![100_000],
            placements: vec![Placement::Other],
            samples: 100,
            warmup: 20,
        }
    }

    /// Every cell, in a stable order.
    #[must_use]
    pub fn cells(&self) -> Vec<CellConfig> {
        let mut out = Vec::new();
        for &path in &self.paths {
            for &placement in &self.placements {
                for &interval_ns in &self.intervals_ns {
                    for &halt_poll_ns in &self.halt_poll_ns {
                        out.push(CellConfig {
                            path,
                            halt_poll_ns,
                            placement,
                            gaps: Gaps::constant_ns(interval_ns),
                            samples: self.samples,
                            warmup: self.warmup,
                            idle: Idle::Halt,
                        });
                    }
                }
            }
        }
        out
    }
}
