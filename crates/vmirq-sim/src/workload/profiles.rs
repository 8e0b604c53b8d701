//! PARSEC-like program profiles: model *inputs*, not results.
//!
//! The reference files give no per-program rates (wakeup.md §2 and seeds.md §4 give only
//! outcomes: slowdowns, latency CDF, "up to 64% of CPU time in shootdowns"). Each number
//! below is therefore an **assumption**, chosen once from the programs' qualitative
//! characterisation (PARSEC 2.0 documentation and Bienia et al., PACT 2008: parallel
//! model, sharing, memory allocation behaviour) and not tuned to any published slowdown:
//! pipeline programs that allocate and free buffers (dedup, ferret, vips, x264) unmap
//! often (shootdowns) and take kernel locks often (allocator, futex, page tables);
//! data-parallel programs with little allocation (blackscholes, raytrace, swaptions) rarely
//! do; streamcluster, bodytrack, freqmine and canneal synchronize with barriers.

use crate::Nanos;
use serde::{Deserialize, Serialize};

/// A PARSEC program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Program {
    /// Option pricing, data-parallel, coarse grained.
    Blackscholes,
    /// Body tracking, thread pool with frame barriers.
    Bodytrack,
    /// Simulated annealing, fine-grained lock-free swaps, barriers per temperature step.
    Canneal,
    /// Deduplication pipeline, heavy allocation.
    Dedup,
    /// Similarity search pipeline.
    Ferret,
    /// Frequent itemset mining (OpenMP).
    Freqmine,
    /// Ray tracing, data-parallel.
    Raytrace,
    /// Online clustering, barrier-heavy.
    Streamcluster,
    /// Swaption pricing, data-parallel.
    Swaptions,
    /// Image processing, allocation-heavy.
    Vips,
    /// Video encoding pipeline.
    X264,
}

impl Program {
    /// All programs, in the published order.
    pub const ALL: [Program; 11] = [
        Program::Blackscholes,
        Program::Bodytrack,
        Program::Canneal,
        Program::Dedup,
        Program::Ferret,
        Program::Freqmine,
        Program::Raytrace,
        Program::Streamcluster,
        Program::Swaptions,
        Program::Vips,
        Program::X264,
    ];

    /// The program's profile (assumptions, see the module doc).
    #[must_use]
    pub fn profile(self) -> Profile {
        let p = |tlb_gap_us, lock_gap_us, cs_ns, barrier_us| Profile {
            tlb_gap_us,
            lock_gap_us,
            cs_ns,
            unmap_ns: 2_000,
            barrier_us,
        };
        match self {
            Program::Blackscholes => p(50_000, 20_000, 500, 0),
            Program::Bodytrack => p(5_000, 500, 1_000, 5_000),
            Program::Canneal => p(10_000, 2_000, 500, 20_000),
            Program::Dedup => p(500, 200, 1_000, 0),
            Program::Ferret => p(2_000, 300, 1_000, 0),
            Program::Freqmine => p(10_000, 2_000, 500, 10_000),
            Program::Raytrace => p(20_000, 5_000, 500, 0),
            Program::Streamcluster => p(20_000, 1_000, 500, 500),
            Program::Swaptions => p(10_000, 5_000, 500, 0),
            Program::Vips => p(1_000, 500, 1_000, 0),
            Program::X264 => p(1_500, 500, 1_000, 0),
        }
    }
}

/// What one thread of a program does, per unit of user compute (all assumptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Mean user compute between two TLB shootdowns (munmap/mprotect), µs (exponential).
    pub tlb_gap_us: u64,
    /// Mean user compute between two contended-kernel-lock acquisitions, µs.
    pub lock_gap_us: u64,
    /// Mean critical section, ns (exponential).
    pub cs_ns: Nanos,
    /// Kernel work before each shootdown (unmapping), ns.
    pub unmap_ns: Nanos,
    /// User compute between barriers (blocking, futex-based), µs; 0 = none.
    pub barrier_us: u64,
}
