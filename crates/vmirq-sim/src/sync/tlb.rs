//! TLB shootdowns: the initiator's local flush, then the remote part by [`TlbMode`]:
//! native IPIs and a spin for every ack; KVM's PV flush (skip targets the host marked,
//! defer their flush to VM entry); Shoot4U (one hypercall, the host IPIs pCPUs and
//! invalidates, no waiting for preempted vCPUs). Latency = remote part, from the end of
//! the local flush until the initiator sees the last ack (or the hypercall returns).

use super::{tags, vectors, Guest, Phase, TlbMode};
use crate::host::{Cat, Core, IrqSrc, Result, Run, Tag, VcpuId, Work};
use crate::Nanos;

/// Outstanding shootdowns, one per initiator at most (the initiator spins).
#[derive(Debug, Clone)]
pub(crate) struct Shootdowns {
    active: Vec<bool>,
    pending: Vec<u32>,
    start: Vec<Nanos>,
    targets: Vec<Vec<VcpuId>>,
    cursor: Vec<usize>,
}

impl Shootdowns {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            active: vec![false; n],
            pending: vec![0; n],
            start: vec![0; n],
            targets: vec![Vec::new(); n],
            cursor: vec![0; n],
        }
    }

    /// Whether the shootdown of `v` has all its acks.
    pub(crate) fn done(&self, v: VcpuId) -> bool {
        self.active[v] && self.pending[v] == 0
    }
}

impl Guest {
    /// Start a shootdown on `v`: `kernel_ns` of kernel work (e.g. unmapping), the local
    /// flush, then the remote flush; with `mmap_sem`, once `v` holds the VM's semaphore.
    ///
    /// # Errors
    /// Engine errors.
    pub fn start_shootdown(&mut self, core: &mut Core, v: VcpuId, kernel_ns: Nanos) -> Result<()> {
        if let Some(m) = self.mmap_lock {
            self.unmap_ns[v] = kernel_ns;
            return self.acquire(core, v, m, 0);
        }
        self.begin_shootdown(core, v, kernel_ns);
        Ok(())
    }

    pub(super) fn begin_shootdown(&mut self, core: &mut Core, v: VcpuId, kernel_ns: Nanos) {
        self.st[v].phase = Phase::Kernel;
        core.vcpus[v]
            .work
            .push_back(Work::app(kernel_ns, tags::KERNEL));
    }

    pub(super) fn local_flush(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        self.st[v].phase = Phase::Tlb;
        let ns = self.cfg.costs.local_flush_ns;
        core.vcpus[v]
            .work
            .push_back(Work::app(ns, tags::LOCAL_FLUSH));
        Ok(())
    }

    /// The remote part begins.
    pub(super) fn flush_others(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let now = core.now();
        core.metrics.count("tlb_shootdowns");
        if self.sd.active[v] {
            core.metrics.count("tlb_model_errors"); // one shootdown per initiator
        }
        self.sd.active[v] = true;
        self.sd.start[v] = now;
        self.sd.cursor[v] = 0;
        // `mm_cpumask(mm)` without the initiator: vCPUs that left it in lazy TLB mode are
        // not targets (Linux 3.x `flush_tlb_mm_range` / `flush_tlb_page`).
        let all: Vec<VcpuId> = self
            .members
            .iter()
            .copied()
            .filter(|&u| u != v && self.in_mm(u))
            .collect();
        match self.cfg.tlb {
            TlbMode::Native => {
                self.sd.targets[v] = all;
                self.send_flush_ipis(core, v)
            }
            TlbMode::PvFlush | TlbMode::Kvmtlb => {
                // Decide now; the IPIs leave after the checks (the race window).
                let mut ipi = Vec::new();
                for u in all.iter().copied() {
                    let vc = &core.vcpus[u];
                    let skip = match self.cfg.tlb {
                        TlbMode::PvFlush => vc.run == Run::Queued && vc.is_preempted(),
                        _ => vc.run != Run::OnCpu,
                    };
                    if skip {
                        core.vcpus[u].flush_on_entry = Some(self.cfg.costs.invvpid_ns);
                        core.metrics.count("tlb_flush_deferred");
                    } else {
                        ipi.push(u);
                    }
                }
                self.sd.targets[v] = ipi;
                let n = all.len() as u64;
                let ns = n * self.cfg.costs.pv_check_ns;
                core.vcpus[v].work.push_back(Work::app(ns, tags::PV_CHECK));
                Ok(())
            }
            TlbMode::Shoot4u => {
                self.sd.targets[v] = all;
                core.vcpus[v].work.push_back(Work {
                    ns: core.costs.exit_roundtrip_ns,
                    cat: Cat::Exit,
                    tag: Tag::App(tags::S4U_STEP),
                });
                Ok(())
            }
        }
    }

    /// IPI the chosen targets (one ICR write exit each: x2APIC physical mode) and spin.
    pub(super) fn send_flush_ipis(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let targets = std::mem::take(&mut self.sd.targets[v]);
        self.sd.pending[v] = u32::try_from(targets.len()).unwrap_or(u32::MAX);
        for &u in &targets {
            if core.vcpus[u].run == Run::Queued {
                core.metrics.count("tlb_targets_queued"); // runnable, not on the pCPU
            }
            let src = IrqSrc::Vector {
                from: v,
                vector: vectors::TLB,
            };
            core.send_ipi(v, u, src)?;
            core.metrics.count("tlb_ipis");
            if self.cfg.tlb_boost && core.boost(u)? {
                core.metrics.count("tlb_boosts");
            }
        }
        if self.sd.pending[v] == 0 {
            self.tlb_complete(core, v)?;
        } else {
            self.spin(core, v, tags::SPIN_TLB);
        }
        Ok(())
    }

    /// A target entered the flush IPI handler of `from`'s shootdown; with interrupts off
    /// (waiting for or holding the allocator lock) it is held until the lock is released.
    pub(super) fn flush_ipi(&mut self, core: &mut Core, u: VcpuId, from: VcpuId) {
        if self.irqs_off(u) {
            core.metrics.count("tlb_flush_held_irqs_off");
            self.held_flushes[u].push(from);
            return;
        }
        self.run_flush_handler(core, u, from);
    }

    /// `u` runs the flush handler of `from`'s shootdown next (its ack at the end).
    fn run_flush_handler(&self, core: &mut Core, u: VcpuId, from: VcpuId) {
        let tag = tags::FLUSH_HANDLER + u32::try_from(from).unwrap_or(0);
        let ns = self.cfg.costs.flush_handler_ns;
        core.vcpus[u].work.push_front(Work::app(ns, tag));
    }

    /// A target finished its handler: ack. A target in lazy TLB mode (its thread blocked
    /// or finished) left the mm in the handler (`flush_tlb_func` -> `leave_mm`).
    pub(super) fn flush_ack(&mut self, core: &mut Core, u: VcpuId, from: VcpuId) -> Result<()> {
        if self.cfg.lazy_tlb && self.idle[u] && !self.left_mm[u] {
            self.left_mm[u] = true;
            core.metrics.count("tlb_lazy_leave_mm");
        }
        if from >= self.sd.active.len() || !self.sd.active[from] || self.sd.pending[from] == 0 {
            core.metrics.count("tlb_model_errors"); // an ack nobody waits for
            return Ok(());
        }
        self.sd.pending[from] -= 1;
        if self.sd.pending[from] == 0 {
            core.end_spin(from, tags::SPIN_TLB, core.costs.poll_notice_ns)?;
        }
        Ok(())
    }

    /// The initiator's spin item ended: done, or the PLE window expired.
    pub(super) fn tlb_spin_done(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        if self.sd.done(v) {
            self.tlb_complete(core, v)?;
        } else if self.cfg.ple {
            self.ple_exit(core, v);
        } else {
            self.spin(core, v, tags::SPIN_TLB);
        }
        Ok(())
    }

    /// The shootdown of `v` is done; with `free_irqs_off` it goes on to free the pages
    /// under the allocator lock (ready when that critical section ends), else it is ready.
    pub(super) fn tlb_complete(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let lat = core.now() - self.sd.start[v];
        core.metrics.sample("tlb_shootdown_ns", lat);
        core.metrics.count("tlb_shootdowns_done");
        self.sd.active[v] = false;
        self.st[v].phase = Phase::User;
        if let Some(m) = self.mmap_lock {
            // `up_write(&mm->mmap_sem)` (before the pages are freed: a simplification when
            // `free_irqs_off` is on as well).
            self.release_lock(core, v, m)?;
        }
        if let Some(l) = self.alloc_lock {
            let cs = core.rng.exp_ns(self.free_cs_ns).max(1);
            return self.acquire(core, v, l, cs);
        }
        self.ready.push(v);
        Ok(())
    }

    /// `v` released the allocator lock: the flush IPIs it held run now, in arrival order.
    pub(super) fn run_held_flushes(&mut self, core: &mut Core, v: VcpuId) {
        let held = std::mem::take(&mut self.held_flushes[v]);
        for &from in held.iter().rev() {
            self.run_flush_handler(core, v, from);
        }
    }

    /// One step of the Shoot4U hypercall: a synchronous physical IPI to the pCPU the
    /// next target last ran on (`smp_call_function_single(..., wait=1)`), whose handler
    /// invalidates that vCPU's translations; or all at once with `s4u_batched`.
    pub(super) fn s4u_step(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let n = self.sd.targets[v].len();
        let i = self.sd.cursor[v];
        if i >= n {
            self.sd.pending[v] = 0;
            return self.tlb_complete(core, v);
        }
        let coalesce = self.gap.enabled();
        let batch = if self.cfg.s4u_batched || coalesce {
            n - i
        } else {
            1
        };
        let c = self.cfg.costs;
        let remote = core.costs.exit_roundtrip_ns + core.costs.host_irq_ns + c.invvpid_ns;
        let own = core.vcpus[v].pcpu;
        let now = core.now();
        let mut sent_by = now;
        for k in i..i + batch {
            let p = core.vcpus[self.sd.targets[v][k]].pcpu;
            if p == own {
                continue; // the caller's own pCPU: a local flush
            }
            if coalesce {
                sent_by = sent_by.max(self.gap_flush(core, p, remote)?);
                continue;
            }
            if core.host_interrupt(p, remote)? {
                core.metrics.count("s4u_guest_interrupted");
            }
            core.metrics.count("s4u_host_ipis");
        }
        self.sd.cursor[v] = i + batch;
        let sends = batch as u64 * core.costs.native_msr_ns;
        let wait = c.host_ipi_flight_ns + core.costs.host_irq_ns + c.invvpid_ns;
        core.vcpus[v].work.push_back(Work {
            ns: (sent_by - now) + sends + wait + core.costs.poll_notice_ns,
            cat: Cat::Exit,
            tag: Tag::App(tags::S4U_STEP),
        });
        Ok(())
    }
}
