//! Guest kernel synchronization on the host model: TLB shootdowns (native IPIs, KVM's
//! paravirtual remote flush in its `kvmtlb` and steal-time forms, Shoot4U) and spinlocks
//! (ticket, preemptable ticket = PMT, paravirtual), with Pause-Loop Exiting and directed
//! yield. Sources: wakeup.md §2 and seeds.md §4.
//!
//! Spinning is guest work: a spin-wait item that ends early (via
//! [`Core::end_spin`]) when its condition becomes true, and otherwise at the next point
//! where the spinner decides something (PLE window, PMT timeout, PV spin threshold).
//! Nothing is scripted: lock holder and waiter preemption and preempted shootdown targets
//! happen only when the host scheduler has taken a vCPU off its pCPU.
//!
//! [`Guest`] holds the state of one VM's kernel; the PARSEC workload drives it and
//! collects the threads whose operation finished from [`Guest::ready`].

pub mod costs;
mod gap;
mod lock;
pub mod ple;
mod tlb;

pub use costs::SyncCosts;
pub use gap::GAP_TIMER;
pub use lock::Lock;
pub use ple::PleParams;

use crate::costs::snb_cycles;
use crate::host::{Cat, Core, Hook, IrqSrc, Result, Run, Tag, VcpuId, Work};
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// How the guest flushes remote TLBs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlbMode {
    /// IPIs to every target; spin until all handlers ran.
    #[default]
    Native,
    /// Today's KVM PV flush: skip targets whose steal-time `preempted` byte is set and set
    /// `KVM_VCPU_FLUSH_TLB` instead (halted vCPUs are not marked and still get IPIs).
    PvFlush,
    /// The 2012 `kvmtlb` series: skip every target not in guest mode (preempted, halted,
    /// or in an exit) and set `SHOULD_FLUSH`.
    Kvmtlb,
    /// Shoot4U: one hypercall; the host IPIs the targets' pCPUs and invalidates itself.
    Shoot4u,
}

/// The kernel's spinlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockMode {
    /// FIFO ticket spinlock.
    #[default]
    Ticket,
    /// Preemptable ticket spinlock (Ouyang & Lange, VEE 2013).
    Pmt,
    /// Paravirtual ticket spinlock: halt after `SPIN_THRESHOLD` spins, kicked on unlock.
    Pv,
}

/// Synchronization mechanisms of a run (scenario `[model.workload.sync]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    /// Remote TLB flush.
    pub tlb: TlbMode,
    /// Spinlock.
    pub lock: LockMode,
    /// Pause-Loop Exiting with directed yield.
    pub ple: bool,
    /// PLE window parameters (cycles).
    pub ple_params: PleParams,
    /// PMT timeout shift: waiter N times out after `2N << shift` spin iterations (v3.0
    /// default 8; the ticket increment is 2).
    pub pmt_shift: u32,
    /// Beyond the papers: Shoot4U sends its physical IPIs to all target pCPUs at once and
    /// waits once (like `smp_call_function_many`) instead of one synchronous
    /// `smp_call_function_single` per target.
    pub s4u_batched: bool,
    /// Beyond the papers: after a native/PV shootdown IPIs a preempted target, the host
    /// directs a yield to it (a co-scheduling hint from the shootdown target set).
    pub tlb_boost: bool,
    /// Beyond the papers: Shoot4U's physical IPIs go through vmirq-policy's `ipi-gap`
    /// policy, one per target pCPU (ESX-style coalescing, vIC's idea applied to the
    /// hypervisor's IPIs): a flush for a pCPU that got one less than `gap_us` ago waits and
    /// rides on the next IPI there. 0 = off. Implies one round (like `s4u_batched`).
    pub s4u_ipi_gap_us: u32,
    /// Lazy TLB mode of a Linux 3.x guest: a vCPU whose thread is blocked or finished (the
    /// idle task runs in the mm lazily) and that runs a flush IPI handler leaves the mm's
    /// CPU mask (`flush_tlb_func` -> `leave_mm`), so later shootdowns skip it until its
    /// thread runs again. `false`: every shootdown targets every other vCPU of the VM.
    pub lazy_tlb: bool,
    /// Linux 3.x `munmap` frees the unmapped pages after the flush (`tlb_finish_mmu`), under
    /// the allocator's locks taken with interrupts off (`zone->lru_lock` with
    /// `spin_lock_irqsave` in `release_pages`, `zone->lock` inside `local_irq_save` in
    /// `free_hot_cold_page`): after each shootdown the initiator takes the VM's allocator
    /// lock for one critical section, and a vCPU that waits for or holds it takes no TLB
    /// flush IPI until it releases it (the handler runs then). `false`: no such lock. An
    /// analysis knob: no bundled scenario sets it (crate README, fifteenth session).
    pub free_irqs_off: bool,
    /// Linux 3.x `munmap`/`mprotect` hold the mm's `mmap_sem` for writing across the whole
    /// shootdown (`vm_munmap` -> `down_write` ... `flush_tlb_others` waits for every ack ...
    /// `up_write`): a thread's shootdown starts only once it holds the VM's semaphore, and
    /// a writer that finds it taken spins while the owner is on a CPU (3.16's
    /// `rwsem_optimistic_spin`; the owner spins for its acks, so in the guest's view it
    /// always is), in arrival order, with interrupts on. The run's spinlock kind does not
    /// apply to it. `false`: shootdowns of different threads overlap freely. An analysis
    /// knob: no bundled scenario sets it (crate README, fifteenth session).
    pub mmap_sem: bool,
    /// Costs.
    pub costs: SyncCosts,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            tlb: TlbMode::Native,
            lock: LockMode::Ticket,
            ple: false,
            ple_params: PleParams::default(),
            pmt_shift: 8,
            s4u_batched: false,
            tlb_boost: false,
            s4u_ipi_gap_us: 0,
            lazy_tlb: true,
            free_irqs_off: false,
            mmap_sem: false,
            costs: SyncCosts::default(),
        }
    }
}

/// What a thread of the synchronizing VM is doing in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// User code or waiting in user space (not in a kernel synchronization primitive).
    User,
    /// Kernel work before a shootdown (e.g. unmapping).
    Kernel,
    /// Flushing remote TLBs (sending, spinning for acks, or in the Shoot4U hypercall).
    Tlb,
    /// Waiting for lock `0`.
    LockWait(usize),
    /// Halted waiting for lock `0` (PV spinlock).
    PvHalted(usize),
    /// Holding lock `0`.
    Critical(usize),
}

/// Per-vCPU synchronization state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VState {
    pub(crate) phase: Phase,
    /// Current PLE window in cycles.
    ple_window: u64,
    /// CPU time spun in the current lock wait.
    spun_ns: Nanos,
    /// Length of the spin item last pushed.
    chunk_ns: Nanos,
    /// PMT: spin time before this waiter competes out of order.
    timeout_ns: Option<Nanos>,
    timed_out: bool,
    granted: bool,
    /// When the current operation started (latency samples).
    since: Nanos,
    /// Kick target after the PV unlock hypercall.
    kick: Option<VcpuId>,
    /// Length of the pending critical section.
    cs_ns: Nanos,
}

/// Workload tags of the synchronization model (the workload uses tags below 100).
pub mod tags {
    /// Kernel work before a shootdown.
    pub const KERNEL: u32 = 100;
    /// The initiator's local flush.
    pub const LOCAL_FLUSH: u32 = 101;
    /// Spinning for shootdown acks.
    pub const SPIN_TLB: u32 = 102;
    /// Spinning for a lock.
    pub const SPIN_LOCK: u32 = 103;
    /// A critical section.
    pub const CRITICAL: u32 = 104;
    /// A PAUSE exit and `kvm_vcpu_on_spin` while waiting for shootdown acks.
    pub const PLE_EXIT: u32 = 105;
    /// A PAUSE exit and `kvm_vcpu_on_spin` while waiting for a lock.
    pub const PLE_EXIT_LOCK: u32 = 110;
    /// One step of the Shoot4U hypercall.
    pub const S4U_STEP: u32 = 106;
    /// The PV unlock kick hypercall.
    pub const KICK: u32 = 107;
    /// The PV flush checks of the targets' `preempted` bytes.
    pub const PV_CHECK: u32 = 108;
    /// A TLB flush IPI handler for the shootdown of initiator `tag - FLUSH_HANDLER`.
    pub const FLUSH_HANDLER: u32 = 10_000;
}

/// IPI vectors of the model.
pub mod vectors {
    /// TLB shootdown (call-function) IPI.
    pub const TLB: u8 = 1;
    /// PV spinlock unlock kick.
    pub const KICK: u8 = 2;
}

const SPIN_FOREVER_NS: Nanos = 1_000_000_000;

/// The kernel state of one VM whose threads synchronize.
#[derive(Debug, Clone)]
pub struct Guest {
    /// Configuration.
    pub cfg: SyncConfig,
    /// The VM's vCPUs.
    pub members: Vec<VcpuId>,
    pub(crate) st: Vec<VState>,
    pub(crate) locks: Vec<Lock>,
    pub(crate) sd: tlb::Shootdowns,
    pub(crate) gap: gap::HostIpiGap,
    last_boosted: usize,
    /// Per vCPU: its thread is blocked or finished (the idle task runs, lazy TLB mode).
    idle: Vec<bool>,
    /// Per vCPU: left the mm's CPU mask (`leave_mm`) while idle; not a shootdown target.
    left_mm: Vec<bool>,
    /// Threads whose operation (shootdown, lock acquire + critical section) finished.
    pub ready: Vec<VcpuId>,
    /// The program's kernel locks: indices below this (the allocator lock and `mmap_sem`
    /// come after them).
    program_locks: usize,
    /// The allocator lock's index (`free_irqs_off`): after the program's locks.
    alloc_lock: Option<usize>,
    /// Mean critical section under the allocator lock (the program's `cs_ns`).
    free_cs_ns: Nanos,
    /// Per vCPU: initiators whose flush IPI it took with interrupts off (held until it
    /// releases the allocator lock).
    held_flushes: Vec<Vec<VcpuId>>,
    /// The `mmap_sem` lock's index (`mmap_sem`): after the program's and allocator locks.
    mmap_lock: Option<usize>,
    /// Per vCPU: the unmapping work of the shootdown that waits for `mmap_sem`.
    unmap_ns: Vec<Nanos>,
}

impl Guest {
    /// A VM made of `members` (vCPU ids, all below `n_vcpus`) with `locks` kernel locks.
    #[must_use]
    pub fn new(cfg: SyncConfig, members: Vec<VcpuId>, n_vcpus: usize, locks: usize) -> Self {
        let st = VState {
            phase: Phase::User,
            ple_window: cfg.ple_params.window,
            spun_ns: 0,
            chunk_ns: 0,
            timeout_ns: None,
            timed_out: false,
            granted: false,
            since: 0,
            kick: None,
            cs_ns: 0,
        };
        let program_locks = locks.max(1);
        let alloc_lock = cfg.free_irqs_off.then_some(program_locks);
        let extra = usize::from(alloc_lock.is_some());
        let mmap_lock = cfg.mmap_sem.then_some(program_locks + extra);
        Self {
            cfg,
            members,
            st: vec![st; n_vcpus],
            locks: vec![Lock::default(); program_locks + extra + usize::from(mmap_lock.is_some())],
            sd: tlb::Shootdowns::new(n_vcpus),
            gap: gap::HostIpiGap::new(cfg.s4u_ipi_gap_us),
            last_boosted: 0,
            idle: vec![false; n_vcpus],
            left_mm: vec![false; n_vcpus],
            ready: Vec::new(),
            program_locks,
            alloc_lock,
            free_cs_ns: 1_000,
            held_flushes: vec![Vec::new(); n_vcpus],
            mmap_lock,
            unmap_ns: vec![0; n_vcpus],
        }
    }

    /// The lock kind of lock `l`: the run's spinlock kind, except for `mmap_sem`, whose
    /// spinning writers queue in order (ticket semantics: no PMT timeout, no PV halt).
    fn lock_mode(&self, l: usize) -> LockMode {
        if Some(l) == self.mmap_lock {
            LockMode::Ticket
        } else {
            self.cfg.lock
        }
    }

    /// Mean critical section under the allocator lock (`free_irqs_off`).
    pub fn set_free_cs_ns(&mut self, ns: Nanos) {
        self.free_cs_ns = ns.max(1);
    }

    /// Whether `v` runs with interrupts off: it waits for, or holds, the allocator lock.
    fn irqs_off(&self, v: VcpuId) -> bool {
        let Some(a) = self.alloc_lock else {
            return false;
        };
        matches!(self.st[v].phase, Phase::LockWait(l) | Phase::Critical(l) | Phase::PvHalted(l) if l == a)
    }

    /// The thread of `v` blocked or finished (`true`: the vCPU's guest runs the idle task
    /// in the mm lazily) or runs again (`false`: `switch_mm` puts it back in the mm's
    /// CPU mask).
    pub fn set_thread_idle(&mut self, v: VcpuId, idle: bool) {
        self.idle[v] = idle;
        if !idle {
            self.left_mm[v] = false;
        }
    }

    /// Whether `v` is in the mm's CPU mask (a shootdown target).
    #[must_use]
    pub fn in_mm(&self, v: VcpuId) -> bool {
        !self.left_mm[v]
    }

    /// The phase of `v`.
    #[must_use]
    pub fn phase(&self, v: VcpuId) -> Phase {
        self.st[v].phase
    }

    /// Number of the program's kernel locks (not counting the allocator lock of
    /// `free_irqs_off` or the `mmap_sem` of `mmap_sem`).
    #[must_use]
    pub fn n_locks(&self) -> usize {
        self.program_locks
    }

    /// React to a host-model hook that concerns synchronization. Returns whether it did.
    ///
    /// # Errors
    /// Engine errors.
    pub fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<bool> {
        match hook {
            Hook::App(v, tags::KERNEL) => self.local_flush(core, v)?,
            Hook::App(v, tags::LOCAL_FLUSH) => self.flush_others(core, v)?,
            Hook::App(v, tags::PV_CHECK) => self.send_flush_ipis(core, v)?,
            Hook::App(v, tags::S4U_STEP) => self.s4u_step(core, v)?,
            Hook::App(v, tags::SPIN_TLB) => self.tlb_spin_done(core, v)?,
            Hook::App(v, t) if t >= tags::FLUSH_HANDLER => {
                self.flush_ack(core, v, (t - tags::FLUSH_HANDLER) as usize)?;
            }
            Hook::App(v, tags::SPIN_LOCK) => self.lock_spin_done(core, v)?,
            Hook::App(v, tags::CRITICAL) => self.release(core, v)?,
            Hook::App(v, tags::KICK) => self.kick_done(core, v)?,
            Hook::App(v, tags::PLE_EXIT | tags::PLE_EXIT_LOCK) => self.ple_exit_done(core, v)?,
            Hook::Irq(v, irq) => match irq.src {
                IrqSrc::Vector {
                    from,
                    vector: vectors::TLB,
                } => self.flush_ipi(core, v, from),
                IrqSrc::Vector {
                    vector: vectors::KICK,
                    ..
                } => self.kicked(core, v)?,
                _ => return Ok(false),
            },
            Hook::Resumed(v) => self.resumed(core, v)?,
            Hook::App(..) => return Ok(false),
        }
        Ok(true)
    }

    /// Cycles to ns at the model's 2.6 GHz.
    fn cycles_ns(c: u64) -> Nanos {
        snb_cycles(c).max(1)
    }

    /// Push a spin item for `v` (the condition is not met yet). Its length is the time to
    /// the spinner's next decision: PLE window, PMT timeout, PV threshold.
    fn spin(&mut self, core: &mut Core, v: VcpuId, tag: u32) {
        let s = &self.st[v];
        let mut ns = SPIN_FOREVER_NS;
        if self.cfg.ple {
            ns = ns.min(Self::cycles_ns(s.ple_window));
        }
        if tag == tags::SPIN_LOCK {
            if let (Some(t), false) = (s.timeout_ns, s.timed_out) {
                ns = ns.min(t.saturating_sub(s.spun_ns).max(1));
            }
            if matches!(s.phase, Phase::LockWait(l) if self.lock_mode(l) == LockMode::Pv) {
                ns = ns.min(self.pv_threshold_ns().saturating_sub(s.spun_ns).max(1));
            }
        }
        self.st[v].chunk_ns = ns;
        core.vcpus[v].work.push_back(Work::app(ns, tag));
    }

    fn pv_threshold_ns(&self) -> Nanos {
        self.cfg.costs.pv_spin_threshold_iters * self.cfg.costs.pause_iter_ns
    }

    /// The spin item ended at the PLE window: PAUSE exit, then directed yield.
    fn ple_exit(&mut self, core: &mut Core, v: VcpuId) {
        core.metrics.count("ple_exits");
        let s = &mut self.st[v];
        s.ple_window = self.cfg.ple_params.grow(s.ple_window);
        let tag = if matches!(s.phase, Phase::LockWait(_)) {
            tags::PLE_EXIT_LOCK
        } else {
            tags::PLE_EXIT
        };
        core.vcpus[v].work.push_back(Work {
            ns: core.costs.exit_roundtrip_ns + self.cfg.costs.on_spin_ns,
            cat: Cat::Exit,
            tag: Tag::App(tag),
        });
    }

    /// `kvm_vcpu_on_spin`: round-robin from the last boosted vCPU over the VM's vCPUs
    /// that are runnable and were preempted in the kernel; up to 3 failed `yield_to`s.
    fn ple_exit_done(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let n = self.members.len();
        let mut failures = 0;
        for k in 1..=n {
            let i = (self.last_boosted + k) % n;
            let u = self.members[i];
            let vc = &core.vcpus[u];
            if u == v || vc.run != Run::Queued || !vc.is_preempted() || !self.in_kernel(core, u) {
                continue;
            }
            if core.yield_to(v, u)? {
                self.last_boosted = i;
                break;
            }
            failures += 1;
            if failures >= 3 {
                break;
            }
        }
        match self.st[v].phase {
            Phase::Tlb => {
                if self.sd.done(v) {
                    self.tlb_complete(core, v)?;
                } else {
                    self.spin(core, v, tags::SPIN_TLB);
                }
            }
            Phase::LockWait(_) => {
                if self.st[v].granted {
                    self.enter_critical(core, v);
                } else {
                    self.spin(core, v, tags::SPIN_LOCK);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// What `kvm_vcpu_on_spin` (with `yield_to_kernel_mode`) accepts: the vCPU was
    /// preempted in kernel mode, or has an interrupt pending. User mode = the thread is in
    /// user code and what it resumes is a user item (tags below 100).
    fn in_kernel(&self, core: &Core, u: VcpuId) -> bool {
        let w = &core.vcpus[u].work;
        if self.st[u].phase != Phase::User || w.iter().any(|x| matches!(x.tag, Tag::IrqEntry(_))) {
            return true;
        }
        match w.front() {
            None => false,
            Some(x) => !matches!(x.tag, Tag::App(t) if t < 100),
        }
    }

    /// The vCPU got its pCPU back: PLE window shrink (`vmx_vcpu_load` after being
    /// scheduled out); a PMT waiter may take a free lock.
    fn resumed(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        if v >= self.st.len() || !self.members.contains(&v) {
            return Ok(());
        }
        if self.cfg.ple {
            let s = &mut self.st[v];
            s.ple_window = self.cfg.ple_params.shrink(s.ple_window);
        }
        match self.st[v].phase {
            // Evidence that the pathologies emerge from host scheduling.
            Phase::Critical(_) => core.metrics.count("lock_holder_preemptions"),
            Phase::LockWait(_) if self.st[v].granted => {
                core.metrics.count("lock_waiter_preemptions");
            }
            Phase::LockWait(l) => {
                self.try_take(core, v, l)?;
            }
            _ => {}
        }
        Ok(())
    }
}
