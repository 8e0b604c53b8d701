//! The host model: pCPUs, vCPU threads, the host scheduler, exits and entries, IPIs, HLT
//! with host and guest halt polling, tickless APIC timer writes and virtual interrupt
//! injection. [`Core`] holds the state; [`crate::sim::run`] runs it with a workload.
//!
//! A vCPU executes a queue of [`Work`] items (guest code, exits, entries, kicks), one at a
//! time, on the pCPU its thread runs on. Interrupts preempt the current item: the unfinished
//! part goes back to the front of the queue. Guest synchronization (`crate::sync`: TLB
//! shootdowns, spinlocks, PLE) uses spin items that end early, directed yield and host
//! interrupts from `spin.rs`, and the [`Hook::Resumed`] callback.

mod cpu;
pub mod device;
pub mod metrics;
mod moderated;
pub mod nic;
mod spin;
mod vcpu;

pub use device::{Latency, Req, StorageDev};
pub use metrics::{Cat, CpuTime, Metrics};
pub use nic::{NicDev, Pkt};
pub use vcpu::{GuestConfig, Hook, Idle, Run, Vcpu};

use crate::costs::Costs;
use crate::engine::{EngineError, EventQueue, Timer};
use crate::rng::Rng;
use crate::Nanos;
use std::collections::VecDeque;

/// Index of a vCPU in [`Core::vcpus`].
pub type VcpuId = usize;
/// Index of a pCPU in [`Core::pcpus`].
pub type PcpuId = usize;

/// Where an interrupt comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqSrc {
    /// A fixed-vector IPI from another vCPU.
    Ipi {
        /// Sender.
        from: VcpuId,
    },
    /// A guest scheduler reschedule IPI (task wakeup); elided if the target polls in the guest.
    Resched {
        /// Sender.
        from: VcpuId,
    },
    /// A guest IPI with a workload-defined vector (TLB shootdown, PV unlock kick).
    Vector {
        /// Sender.
        from: VcpuId,
        /// Workload-defined vector.
        vector: u8,
    },
    /// A virtual device interrupt.
    Device {
        /// Device queue number.
        queue: u16,
    },
}

/// One interrupt on its way to a vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Irq {
    /// Source.
    pub src: IrqSrc,
    /// When the sender started sending it.
    pub sent: Nanos,
}

/// What happens when a work item finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// Nothing.
    Plain,
    /// Tell the workload (its own tag).
    App(u32),
    /// A guest ICR write: deliver `irq` to `to`.
    IcrWrite {
        /// Target vCPU.
        to: VcpuId,
        /// The interrupt.
        irq: Irq,
    },
    /// The sender finished kicking `to`'s sleeping thread: make it runnable.
    Kick(VcpuId),
    /// The guest reached the first instruction of the handler for `irq`.
    IrqEntry(Irq),
    /// The guest finished its idle-entry path (timer writes): poll or HLT now.
    IdleEntered,
    /// The guest's kick exit for a storage request finished: the device has it.
    IoSubmit(usize, Req),
}

/// One piece of work a vCPU executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Duration on the pCPU.
    pub ns: Nanos,
    /// What the pCPU time counts as.
    pub cat: Cat,
    /// What happens when it completes.
    pub tag: Tag,
}

impl Work {
    /// Guest code of `ns` with workload tag `tag`.
    #[must_use]
    pub fn app(ns: Nanos, tag: u32) -> Self {
        Self {
            ns,
            cat: Cat::Guest,
            tag: Tag::App(tag),
        }
    }
}

/// Events of the host model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// The vCPU's current work item finished.
    WorkDone(VcpuId),
    /// A poll window (host or guest) of the vCPU ended without a wakeup.
    PollEnd(VcpuId),
    /// The vCPU thread got its pCPU (after a scheduler wakeup or context switch).
    Running(VcpuId),
    /// Timeslice end on a pCPU.
    Timeslice(PcpuId),
    /// A waker's write to the polling flag of a guest-polling vCPU became visible.
    Notice(VcpuId, Irq),
    /// A host-side waker (device) finished kicking the vCPU thread.
    Wake(VcpuId),
    /// A workload timer with its own tag and data.
    Workload(u32, u64),
    /// Storage device `0` finished a request.
    IoDone(usize, Req),
    /// The moderation timer of storage device `0` fired.
    ModTimer(usize),
    /// The moderation timer of NIC queue `0` fired.
    NicTimer(usize),
}

/// A physical CPU.
#[derive(Debug, Clone, Default)]
pub struct Pcpu {
    /// Thread on the CPU (also set while it is being switched in).
    pub current: Option<VcpuId>,
    /// Runnable threads waiting for the CPU.
    pub runq: VecDeque<VcpuId>,
    /// Time accounting.
    pub time: CpuTime,
    /// Timeslice timer.
    pub slice: Timer,
    /// Idle-state governor (host C-states, `crate::profiles`).
    pub gov: crate::profiles::Governor,
    /// When the current thread got the CPU (CFS `exec_start` of its pick).
    pub picked: Nanos,
    /// CFS `min_vruntime` of this pCPU's run queue (monotonic).
    pub min_vruntime: Nanos,
    /// Tasks on this pCPU blocked waiting for block I/O (`nr_iowait_cpu`).
    pub iowait: u32,
}

/// Whether the machine is virtualized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Platform {
    /// vCPUs are host threads of a KVM-like hypervisor.
    #[default]
    Kvm,
    /// Bare metal: each "vCPU" is a physical CPU; no exits, no host scheduler.
    Bare,
}

/// Host model state.
#[derive(Debug)]
pub struct Core {
    /// Pending events.
    pub q: EventQueue<Ev>,
    /// Primitive costs.
    pub costs: Costs,
    /// Virtualized or bare metal.
    pub platform: Platform,
    /// Physical CPUs.
    pub pcpus: Vec<Pcpu>,
    /// Virtual CPUs.
    pub vcpus: Vec<Vcpu>,
    /// Storage devices.
    pub devs: Vec<StorageDev>,
    /// NIC receive queues.
    pub nics: Vec<NicDev>,
    /// Results.
    pub metrics: Metrics,
    /// Workload randomness.
    pub rng: Rng,
    /// Draws of the measured cost spreads (`Costs::doorbell_exit_lo_ns` and the like), a
    /// stream of its own so that a profile without spreads draws nothing and one with
    /// them shifts no workload or device draw.
    pub spread_rng: Rng,
    /// The first timeslice of each pCPU ends at a random phase (set before
    /// [`Core::start_scheduler`]); otherwise all pCPUs switch in lockstep, which amounts
    /// to accidental gang scheduling of the VMs.
    pub stagger_slices: bool,
    /// Host idle states and governor bound of the profile (none: idle costs nothing extra).
    /// A profile's table, or the two states a `this-host` costs file measured
    /// (`Costs::host_idle_deep_exit_ns`).
    pub idle_states: std::borrow::Cow<'static, [crate::profiles::CState]>,
    /// The governor's prediction cap (the host's next timer event).
    pub next_timer_ns: Nanos,
    /// Indirect exit cost (`crate::era`): guest time to refill the workload's working set
    /// when its code runs again after a world switch. 0: none.
    pub exit_refill_ns: Nanos,
    /// Guest EOI writes exit (`crate::era`; never with posted interrupts).
    pub eoi_exit: bool,
    /// Part of `vm_entry_ns` a vCPU resumed from host halt polling does not pay (`crate::era`:
    /// the reload of a scheduled-out vCPU). 0: every resume pays `vm_entry_ns`.
    pub vcpu_reload_ns: Nanos,
    /// Assigned-device MSIs are injected from a host IRQ thread (`crate::era`): one more
    /// host context switch before the injection.
    pub assigned_irq_thread: bool,
    /// Assigned-device MSIs are taken on another host CPU than the vCPU's, which idles
    /// between them under its own governor (`crate::era`).
    pub assigned_irq_remote: bool,
    /// A fully preemptible host kernel (`CONFIG_PREEMPT`): a vCPU thread is preempted even
    /// inside an exit. False (the default): `CONFIG_PREEMPT_VOLUNTARY`, preemption waits for
    /// the end of the exit.
    pub host_preempt_full: bool,
    /// CFS-like wakeup placement and preemption (`host_sched = "cfs"`, the default); false:
    /// every wakeup preempts the running thread at once (the model before 2026-11-25).
    pub host_sched_cfs: bool,
    /// The governor's multiplier counts I/O waiters (menu's `10 * nr_iowait_cpu`); false:
    /// multiplier 1 (the model before the sixth session of issue 16).
    pub governor_iowait: bool,
    /// The governor's fallback prediction is the next timer times menu's correction factor
    /// (`crate::era`); false: the bare next timer (before the eighth session of issue 16).
    pub governor_correction: bool,
    /// The ping workload's echo is answered in the guest's receive softirq and wakes no
    /// task ([`Vcpu::device_irq_stays_idle`]); false: every interrupt taken in idle leaves
    /// the idle loop (before the ninth session of issue 16).
    pub idle_softirq_echo: bool,
}

/// Result alias of the host model.
pub type Result<T> = core::result::Result<T, EngineError>;

impl Core {
    /// A host with `n_pcpus` pCPUs and the given vCPUs (each pinned to its `pcpu`).
    #[must_use]
    pub fn new(
        costs: Costs,
        platform: Platform,
        n_pcpus: usize,
        vcpus: Vec<Vcpu>,
        seed: u64,
    ) -> Self {
        Self {
            q: EventQueue::new(1 << 20),
            costs,
            platform,
            pcpus: vec![Pcpu::default(); n_pcpus],
            vcpus,
            devs: Vec::new(),
            nics: Vec::new(),
            metrics: Metrics::default(),
            rng: Rng::new(seed, 1),
            spread_rng: Rng::new(seed, 11),
            stagger_slices: false,
            idle_states: crate::profiles::measured_states(&costs).into(),
            next_timer_ns: 4_000_000,
            exit_refill_ns: 0,
            eoi_exit: false,
            vcpu_reload_ns: 0,
            assigned_irq_thread: false,
            assigned_irq_remote: false,
            host_preempt_full: false,
            host_sched_cfs: false,
            governor_iowait: false,
            governor_correction: false,
            idle_softirq_echo: false,
        }
    }

    /// One charge of a cost whose primitive's spread the profile gives (`lo`/`hi`, see
    /// [`crate::costs::spread_draw`]); with no spread (both 0) the p50, and nothing drawn.
    pub fn spread(&mut self, p50: Nanos, lo: Nanos, hi: Nanos) -> Nanos {
        if lo == 0 && hi == 0 {
            return p50;
        }
        self.metrics.count("cost_spread_draws");
        crate::costs::spread_draw(p50, lo, hi, self.spread_rng.below(1000))
    }

    /// pCPU `p` has nothing to run: it idles, in the state the governor picks.
    pub(crate) fn pcpu_idle(&mut self, p: PcpuId) {
        let now = self.now();
        self.pcpus[p].time.set(now, Cat::Idle);
        if self.idle_states.is_empty() {
            return;
        }
        let mult = if self.governor_iowait {
            1 + 10 * u64::from(self.pcpus[p].iowait)
        } else {
            1
        };
        let i = self.pcpus[p].gov.select(
            &self.idle_states,
            self.next_timer_ns,
            mult,
            self.governor_correction,
        );
        self.pcpus[p].gov.idle = Some((now, i));
        // Entries per state index of the profile's table (0 = shallowest).
        self.metrics.count(match i {
            0 => "host_idle_state0",
            1 => "host_idle_state1",
            2 => "host_idle_state2",
            3 => "host_idle_state3",
            _ => "host_idle_state4",
        });
    }

    /// pCPU `p` wakes from idle: returns the extra exit latency of its idle state.
    pub(crate) fn pcpu_wake(&mut self, p: PcpuId) -> Nanos {
        let Some((since, i)) = self.pcpus[p].gov.idle.take() else {
            return 0;
        };
        let now = self.now();
        self.pcpus[p].gov.record(now.saturating_sub(since));
        let extra = crate::profiles::extra_exit_ns(&self.idle_states, i);
        self.metrics.add("host_idle_exit_ns", extra);
        extra
    }

    /// Current simulated time.
    #[must_use]
    pub fn now(&self) -> Nanos {
        self.q.now()
    }

    /// Whether the model runs bare metal.
    #[must_use]
    pub fn bare(&self) -> bool {
        self.platform == Platform::Bare
    }

    /// Cost of one APIC timer (TSC deadline) write by the guest.
    #[must_use]
    pub fn timer_write_ns(&self) -> Nanos {
        if self.bare() {
            self.costs.native_msr_ns
        } else {
            self.costs.exit_roundtrip_ns + self.costs.wrmsr_exit_ns
        }
    }

    /// Check the structural invariants; returns a description of the first violation.
    #[must_use]
    pub fn invariant_violation(&self) -> Option<String> {
        let now = self.now();
        for (v, vc) in self.vcpus.iter().enumerate() {
            let on: Vec<usize> = (0..self.pcpus.len())
                .filter(|&p| self.pcpus[p].current == Some(v))
                .collect();
            if on.len() > 1 {
                return Some(format!("vCPU {v} is current on pCPUs {on:?}"));
            }
            if vc.run == Run::OnCpu && vc.flush_on_entry.is_some() {
                return Some(format!("vCPU {v} runs with a PV TLB flush still pending"));
            }
            if matches!(vc.run, Run::OnCpu | Run::HostPoll) && !self.bare() && on != [vc.pcpu] {
                return Some(format!(
                    "vCPU {v} runs but is not current on pCPU {}",
                    vc.pcpu
                ));
            }
        }
        for (p, pc) in self.pcpus.iter().enumerate() {
            let sum: u64 = pc.time.totals(now).iter().sum();
            if sum != now - pc.time.origin() {
                return Some(format!("pCPU {p} accounts {sum} ns of {now} ns"));
            }
        }
        None
    }
}
