//! Named costs of the guest synchronization models, in nanoseconds, each with its source.
//! As in [`crate::costs`], only primitives are listed: the latency of a shootdown or the
//! wait for a lock emerges from the path the model takes (exits, host scheduling, IPIs).
//! None of these is fitted to a published result; all but the Linux constants are
//! assumptions, labelled as such.

use crate::costs::snb_cycles;
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// Costs of guest kernel synchronization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncCosts {
    /// Guest TLB flush IPI handler body on a target (`flush_tlb_func` behind the
    /// call-function IPI: a few INVLPGs or a CR3 reload, then the ack write).
    /// Assumption: 1,000 cycles at 2.6 GHz.
    pub flush_handler_ns: Nanos,
    /// The initiator's own local flush before it flushes the others. Assumption: 500
    /// cycles.
    pub local_flush_ns: Nanos,
    /// The PV flush check per target: read the target's `preempted` byte in its steal-time
    /// page and `cmpxchg` in `KVM_VCPU_FLUSH_TLB` (one remote cache line). Assumption:
    /// 100 ns, like the polling-flag notice in [`crate::costs::Costs::poll_notice_ns`].
    pub pv_check_ns: Nanos,
    /// Host-side invalidation of one vCPU's tagged translations on a pCPU (INVVPID
    /// single-context, or `kvm_x86_ops->tlb_flush`, Shoot4U mode 0), also charged for a
    /// deferred PV flush at VM entry. Assumption: 500 cycles.
    pub invvpid_ns: Nanos,
    /// Physical IPI flight from one pCPU's ICR write to the remote handler's first
    /// instruction (excluding the exit it causes there). Assumption: 1,200 cycles, the
    /// bare-metal IPI median of seeds.md §2.
    pub host_ipi_flight_ns: Nanos,
    /// `kvm_vcpu_on_spin` after a PAUSE exit: scan of the VM's vCPUs and `yield_to`
    /// (the exit round trip itself is charged separately). Assumption: 1,000 cycles.
    pub on_spin_ns: Nanos,
    /// One iteration of a PAUSE spin loop (PAUSE plus the lock-word load), the unit of
    /// the PMT timeout and the PV spin threshold. Assumption: 40 cycles (pre-Skylake PAUSE).
    pub pause_iter_ns: Nanos,
    /// Spin iterations before a paravirtual spinlock waiter halts. Linux
    /// `SPIN_THRESHOLD` = 1 << 15 (arch/x86/include/asm/spinlock.h, PV ticketlocks).
    pub pv_spin_threshold_iters: u64,
}

impl Default for SyncCosts {
    fn default() -> Self {
        Self {
            flush_handler_ns: snb_cycles(1_000),
            local_flush_ns: snb_cycles(500),
            pv_check_ns: 100,
            invvpid_ns: snb_cycles(500),
            host_ipi_flight_ns: snb_cycles(1_200),
            on_spin_ns: snb_cycles(1_000),
            pause_iter_ns: snb_cycles(40),
            pv_spin_threshold_iters: 1 << 15,
        }
    }
}
