//! Host-model support for guest synchronization (`crate::sync`): spin-wait items that end
//! early when their condition is met, per-vCPU guest time by workload tag, directed yield
//! (`yield_to`, as KVM's `kvm_vcpu_on_spin` uses it) and host interrupts that steal a
//! slice of a pCPU from whatever vCPU runs there (Shoot4U's physical IPIs).

use super::{Cat, Core, Ev, Result, Run, Tag, VcpuId, Work};
use crate::Nanos;

impl Core {
    /// Charge `spent` ns of `work` to the vCPU's time accounting.
    pub(super) fn account(&mut self, v: VcpuId, work: Work, spent: Nanos) {
        if spent == 0 {
            return;
        }
        let vc = &mut self.vcpus[v];
        vc.run_ns += spent;
        if let Tag::App(t) = work.tag {
            *vc.app_ns.entry(t).or_insert(0) += spent;
        }
    }

    /// The condition a spin-wait item (guest work tagged `App(tag)`) waits for became true:
    /// the item ends `notice_ns` from now if it is executing, or `notice_ns` after it
    /// resumes if it is queued (preempted vCPU, or an interrupt handler runs first).
    /// Returns whether such an item was found.
    ///
    /// # Errors
    /// Engine errors.
    pub fn end_spin(&mut self, v: VcpuId, tag: u32, notice_ns: Nanos) -> Result<bool> {
        let now = self.now();
        if let Some(cur) = self.vcpus[v].cur.as_mut() {
            if cur.work.tag == Tag::App(tag) {
                if cur.started + cur.work.ns <= now + notice_ns {
                    return Ok(true);
                }
                let id = cur.id;
                cur.work.ns = now.saturating_sub(cur.started) + notice_ns;
                self.q.cancel(id);
                let nid = self.q.schedule_in(notice_ns, Ev::WorkDone(v))?;
                if let Some(c) = self.vcpus[v].cur.as_mut() {
                    c.id = nid;
                }
                return Ok(true);
            }
        }
        for w in &mut self.vcpus[v].work {
            if w.tag == Tag::App(tag) {
                w.ns = w.ns.min(notice_ns);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Directed yield from `from` to `to` (CFS `yield_to`): `to` goes to the front of its
    /// pCPU's run queue and preempts the thread running there; `from` yields its own pCPU
    /// if another thread waits for it. Returns false if `to` is not waiting in a run queue.
    ///
    /// # Errors
    /// Engine errors.
    pub fn yield_to(&mut self, from: VcpuId, to: VcpuId) -> Result<bool> {
        if from == to || !self.boost(to)? {
            return Ok(false);
        }
        let p = self.vcpus[to].pcpu;
        let fp = self.vcpus[from].pcpu;
        if fp != p
            && self.vcpus[from].run == Run::OnCpu
            && !self.pcpus[fp].runq.is_empty()
            && self.pcpus[fp].current == Some(from)
        {
            self.preempt_current(fp, from)?;
        }
        Ok(true)
    }

    /// Put the runnable thread `to` at the front of its pCPU's run queue and preempt the
    /// thread running there. Returns false if `to` is not waiting in a run queue.
    ///
    /// # Errors
    /// Engine errors.
    pub fn boost(&mut self, to: VcpuId) -> Result<bool> {
        if self.vcpus[to].run != Run::Queued {
            return Ok(false);
        }
        let p = self.vcpus[to].pcpu;
        let Some(pos) = self.pcpus[p].runq.iter().position(|&x| x == to) else {
            return Ok(false); // already being switched in
        };
        self.pcpus[p].runq.remove(pos);
        self.pcpus[p].runq.push_front(to);
        self.metrics.count("directed_yields");
        if let Some(c) = self.pcpus[p].current {
            match self.vcpus[c].run {
                Run::OnCpu => self.preempt_current(p, c)?,
                Run::HostPoll => {
                    let mut t = self.vcpus[c].poll;
                    t.cancel(&mut self.q);
                    self.vcpus[c].poll = t;
                    self.block(c)?;
                }
                _ => {}
            }
        }
        Ok(true)
    }

    /// Preempt the running thread `c` of pCPU `p` and switch to the next runnable one.
    fn preempt_current(&mut self, p: usize, c: VcpuId) -> Result<()> {
        self.preempt_thread(c);
        self.pcpus[p].runq.push_back(c);
        self.pcpus[p].current = None;
        self.metrics.count("yield_preemptions");
        self.switch_next(p)?;
        // After a yield, CFS reconsiders after the minimum granularity, not a full slice.
        if !self.pcpus[p].runq.is_empty() {
            let at = self.now() + self.costs.min_granularity_ns.min(self.costs.timeslice_ns);
            let mut slice = self.pcpus[p].slice;
            slice.arm(&mut self.q, at, Ev::Timeslice(p))?;
            self.pcpus[p].slice = slice;
        }
        Ok(())
    }

    /// A host interrupt on pCPU `p` (a physical IPI) takes `ns` from the vCPU running in
    /// guest mode there (external-interrupt exit, handler, re-entry: the caller includes
    /// them in `ns`). Returns whether a running vCPU was interrupted; an idle pCPU or a
    /// vCPU in the host scheduler absorbs the interrupt without modelled cost.
    ///
    /// # Errors
    /// Engine errors.
    pub fn host_interrupt(&mut self, p: usize, ns: Nanos) -> Result<bool> {
        let Some(c) = self.pcpus[p].current else {
            return Ok(false);
        };
        let vc = &self.vcpus[c];
        if vc.run != Run::OnCpu || vc.idle != super::Idle::Busy {
            return Ok(false);
        }
        self.preempt_work(c);
        self.vcpus[c].work.push_front(Work {
            ns,
            cat: Cat::Host,
            tag: Tag::Plain,
        });
        self.metrics.count("host_ipis_received");
        self.dispatch(c)?;
        Ok(true)
    }
}
