//! The host scheduler: per-pCPU run queues, blocking, wakeups (with their cost), timeslices
//! and preemption. Host halt polling stops as soon as another thread is runnable on the
//! pCPU (KVM's `single_task_running()` check).

use super::{Cat, Core, Ev, PcpuId, Result, Run, VcpuId};

impl Core {
    /// The vCPU thread blocks: give the pCPU to the next runnable thread, or idle.
    pub(super) fn block(&mut self, v: VcpuId) -> Result<()> {
        self.vcpus[v].resched = false; // schedule() is the preemption point
        self.vcpus[v].run = Run::Blocked;
        self.metrics.count("thread_blocks");
        let p = self.vcpus[v].pcpu;
        if self.pcpus[p].current == Some(v) {
            self.pcpus[p].current = None;
        }
        self.switch_next(p)
    }

    /// Give pCPU `p` (which has no current thread) to the next runnable thread.
    pub(super) fn switch_next(&mut self, p: PcpuId) -> Result<()> {
        let now = self.now();
        let mut slice = self.pcpus[p].slice;
        slice.cancel(&mut self.q);
        self.pcpus[p].slice = slice;
        match self.pcpus[p].runq.pop_front() {
            Some(next) => {
                self.pcpus[p].current = Some(next);
                self.pcpus[p].picked = now;
                self.pcpus[p].time.set(now, Cat::Sched);
                self.metrics.count("context_switches");
                self.q
                    .schedule_in(self.costs.context_switch_ns, Ev::Running(next))?;
                self.arm_slice(p)
            }
            None => {
                self.pcpu_idle(p);
                Ok(())
            }
        }
    }

    fn arm_slice(&mut self, p: PcpuId) -> Result<()> {
        if self.pcpus[p].runq.is_empty() {
            return Ok(());
        }
        let at = self.now() + self.costs.timeslice_ns;
        let mut slice = self.pcpus[p].slice;
        slice.arm(&mut self.q, at, Ev::Timeslice(p))?;
        self.pcpus[p].slice = slice;
        Ok(())
    }

    /// Make a blocked thread runnable on its pCPU.
    pub(super) fn wake_thread(&mut self, v: VcpuId) -> Result<()> {
        if self.vcpus[v].run != Run::Blocked {
            return Ok(());
        }
        self.vcpus[v].run = Run::Queued;
        self.metrics.count("thread_wakeups");
        let p = self.vcpus[v].pcpu;
        let now = self.now();
        match self.pcpus[p].current {
            None => {
                let exit = self.pcpu_wake(p);
                self.pcpus[p].current = Some(v);
                self.pcpus[p].picked = now;
                self.pcpus[p].time.set(now, Cat::Sched);
                self.q
                    .schedule_in(self.costs.sched_wakeup_ns + exit, Ev::Running(v))?;
                Ok(())
            }
            Some(c) => {
                self.pcpus[p].runq.push_back(v);
                if self.vcpus[c].run == Run::HostPoll {
                    // Polling stops at once when another task wants the CPU.
                    let mut t = self.vcpus[c].poll;
                    t.cancel(&mut self.q);
                    self.vcpus[c].poll = t;
                    self.metrics.count("host_poll_yields");
                    self.block(c)
                } else if self.vcpus[c].run == Run::OnCpu {
                    if self.host_sched_cfs && !self.cfs_wakeup_preempts(p, c, v)? {
                        return Ok(());
                    }
                    if self.defer_preemption(c) {
                        return Ok(());
                    }
                    // Wakeup preemption: a thread that slept has little CPU time on its
                    // account (CFS vruntime), so it preempts the running one at once.
                    self.preempt_thread(c);
                    self.pcpus[p].runq.push_back(c);
                    self.pcpus[p].current = None;
                    self.metrics.count("wakeup_preemptions");
                    self.switch_next(p)
                } else {
                    self.arm_slice(p)
                }
            }
        }
    }

    /// Timeslice end: preempt the current thread if another one waits.
    pub fn timeslice(&mut self, p: PcpuId) -> Result<()> {
        self.pcpus[p].slice.fired();
        let Some(c) = self.pcpus[p].current else {
            return Ok(());
        };
        if self.pcpus[p].runq.is_empty() || self.vcpus[c].run != Run::OnCpu {
            return self.arm_slice(p);
        }
        if self.defer_preemption(c) {
            return Ok(());
        }
        self.preempt_thread(c);
        self.pcpus[p].runq.push_back(c);
        self.pcpus[p].current = None;
        self.metrics.count("preemptions");
        self.switch_next(p)
    }

    /// The thread's CFS vruntime: its CPU time (all threads have the default weight) plus
    /// what sleeper placement added.
    fn vruntime(&self, v: VcpuId) -> crate::Nanos {
        let vc = &self.vcpus[v];
        let running = vc
            .cur
            .as_ref()
            .map_or(0, |c| self.now().saturating_sub(c.started));
        vc.run_ns + running + vc.vruntime_offset
    }

    /// CFS at the wakeup of `v` (already queued on pCPU `p`, whose current thread `c` runs
    /// guest code or an exit): place `v` at most `sleeper_credit_ns` behind the pCPU's
    /// min_vruntime (`place_entity`, GENTLE_FAIR_SLEEPERS) and preempt `c` only if `v` is
    /// more than `wakeup_granularity_ns` behind it (`wakeup_preempt_entity`, equal weights).
    /// Otherwise `c` keeps the pCPU until its slice (`timeslice_ns` from its pick) is over,
    /// checked at the scheduler tick (`check_preempt_tick`). Returns whether to preempt.
    fn cfs_wakeup_preempts(&mut self, p: PcpuId, c: VcpuId, v: VcpuId) -> Result<bool> {
        let cur_vr = self.vruntime(c);
        let leftmost = self.pcpus[p]
            .runq
            .iter()
            .filter(|&&u| u != v)
            .map(|&u| self.vruntime(u))
            .min()
            .unwrap_or(cur_vr);
        let min_vr = self.pcpus[p].min_vruntime.max(cur_vr.min(leftmost));
        self.pcpus[p].min_vruntime = min_vr;
        let own = self.vruntime(v);
        let floor = min_vr.saturating_sub(self.costs.sleeper_credit_ns);
        if own < floor {
            self.vcpus[v].vruntime_offset += floor - own;
        }
        let placed = own.max(floor);
        if cur_vr > placed + self.costs.wakeup_granularity_ns {
            return Ok(true);
        }
        self.metrics.count("wakeups_not_preempting");
        if !self.pcpus[p].slice.armed() {
            let now = self.now();
            let tick = self.costs.tick_ns.max(1);
            let end = (self.pcpus[p].picked + self.costs.timeslice_ns).max(now + 1);
            let at = end.div_ceil(tick) * tick;
            let mut slice = self.pcpus[p].slice;
            slice.arm(&mut self.q, at, Ev::Timeslice(p))?;
            self.pcpus[p].slice = slice;
        }
        Ok(false)
    }

    /// With a non-preemptible host kernel (`host_preempt = "voluntary"`, the distribution
    /// default), a vCPU thread inside an exit or a host interrupt handler (host kernel code:
    /// exit handling, a hypercall such as Shoot4U's, which waits for its synchronous IPIs
    /// without a preemption point) is not preempted at once: `need_resched` is set and it leaves at KVM's check before
    /// the next VM entry ([`Core::preemption_point`]). Returns whether it was deferred.
    fn defer_preemption(&mut self, c: VcpuId) -> bool {
        if self.host_preempt_full || self.bare() {
            return false;
        }
        let in_exit = self.vcpus[c]
            .cur
            .as_ref()
            .is_some_and(|cur| cur.work.cat.in_host_kernel());
        if in_exit && !self.vcpus[c].resched {
            self.vcpus[c].resched = true;
            self.metrics.count("preemptions_deferred");
        }
        in_exit
    }

    /// `v` reached the end of its exit with `need_resched` set: it schedules out now if
    /// another thread still waits for its pCPU.
    pub(super) fn preemption_point(&mut self, v: VcpuId) -> Result<()> {
        self.vcpus[v].resched = false;
        let p = self.vcpus[v].pcpu;
        if self.pcpus[p].runq.is_empty() {
            return self.dispatch(v);
        }
        self.preempt_thread(v);
        self.pcpus[p].runq.push_back(v);
        self.pcpus[p].current = None;
        self.metrics.count("preemptions");
        self.switch_next(p)
    }

    pub(super) fn preempt_thread(&mut self, v: VcpuId) {
        self.preempt_work(v);
        if self.vcpus[v].idle == super::Idle::GuestPoll {
            // A guest-polling vCPU keeps polling when it runs again.
            let mut t = self.vcpus[v].poll;
            t.cancel(&mut self.q);
            self.vcpus[v].poll = t;
            self.vcpus[v].idle = super::Idle::Busy;
        }
        self.vcpus[v].run = Run::Queued;
        self.vcpus[v].preempted = true;
    }
}

impl Core {
    /// A host-side kick (from a device or backend) reached the vCPU thread: wake it.
    ///
    /// # Errors
    /// Engine errors.
    pub fn wake_thread_pub(&mut self, v: VcpuId) -> Result<()> {
        self.wake_thread(v)
    }
}

impl Core {
    /// Initial placement: the first thread pinned to each pCPU runs, the others wait in
    /// its run queue (runnable) and the timeslice timers are armed at the first event.
    pub(crate) fn place_threads(&mut self) {
        for v in 0..self.vcpus.len() {
            let p = self.vcpus[v].pcpu;
            if self.pcpus[p].current.is_none() {
                self.pcpus[p].current = Some(v);
            } else {
                self.vcpus[v].run = Run::Queued;
                self.vcpus[v].preempted = true;
                self.pcpus[p].runq.push_back(v);
            }
        }
    }

    /// Arm the timeslice timers of pCPUs that start with waiting threads.
    ///
    /// # Errors
    /// Engine errors.
    pub fn start_scheduler(&mut self) -> Result<()> {
        for p in 0..self.pcpus.len() {
            if self.stagger_slices && !self.pcpus[p].runq.is_empty() {
                // Unsynchronized pCPUs: the first timeslice ends at a random phase.
                let at = self.now() + 1 + self.rng.below(self.costs.timeslice_ns.max(1));
                let mut slice = self.pcpus[p].slice;
                slice.arm(&mut self.q, at, Ev::Timeslice(p))?;
                self.pcpus[p].slice = slice;
            } else {
                self.arm_slice(p)?;
            }
        }
        Ok(())
    }
}
