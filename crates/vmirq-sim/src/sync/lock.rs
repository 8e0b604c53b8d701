//! Kernel spinlocks: FIFO ticket lock; preemptable ticket lock (PMT: a waiter with N
//! tickets ahead spins in order for N × `2 << shift` iterations, then competes out of
//! order); paravirtual ticket lock (halt after `SPIN_THRESHOLD` spins, the unlocker kicks
//! the next waiter with a hypercall). Mutual exclusion and ticket order are checked as
//! the model runs (`lock_model_errors`, `ticket_fifo_violations`).

use super::{tags, vectors, Guest, LockMode, Phase};
use crate::host::{Cat, Core, Irq, IrqSrc, Result, Run, Tag, VcpuId, Work};
use crate::Nanos;
use std::collections::VecDeque;

/// One kernel lock.
#[derive(Debug, Clone, Default)]
pub struct Lock {
    holder: Option<VcpuId>,
    /// Waiters in ticket order: `(vCPU, ticket)`.
    queue: VecDeque<(VcpuId, u64)>,
    next_ticket: u64,
    last_granted: Option<u64>,
}

impl Lock {
    /// The holder.
    #[must_use]
    pub fn holder(&self) -> Option<VcpuId> {
        self.holder
    }

    /// Waiters in ticket order.
    #[must_use]
    pub fn waiters(&self) -> usize {
        self.queue.len()
    }
}

impl Guest {
    /// `v` acquires lock `l`, then holds it for `cs_ns` (critical section).
    ///
    /// # Errors
    /// Engine errors.
    pub fn acquire(&mut self, core: &mut Core, v: VcpuId, l: usize, cs_ns: Nanos) -> Result<()> {
        let now = core.now();
        let lock = &mut self.locks[l];
        let ticket = lock.next_ticket;
        lock.next_ticket += 1;
        core.metrics.count("lock_acquires");
        let s = &mut self.st[v];
        s.since = now;
        s.cs_ns = cs_ns;
        s.granted = false;
        s.spun_ns = 0;
        s.timed_out = false;
        if lock.holder.is_none() && lock.queue.is_empty() {
            self.grant(core, v, l, ticket);
            self.st[v].phase = Phase::Critical(l);
            self.enter_critical(core, v);
            return Ok(());
        }
        lock.queue.push_back((v, ticket));
        core.metrics.count("lock_contended");
        let pos = lock.queue.len() as u64;
        self.st[v].phase = Phase::LockWait(l);
        self.st[v].timeout_ns = (self.lock_mode(l) == LockMode::Pmt).then(|| {
            let iters = pos * (2u64 << self.cfg.pmt_shift);
            iters * self.cfg.costs.pause_iter_ns
        });
        self.spin(core, v, tags::SPIN_LOCK);
        Ok(())
    }

    fn grant(&mut self, core: &mut Core, v: VcpuId, l: usize, ticket: u64) {
        if self.locks[l].holder.is_some() {
            core.metrics.count("lock_model_errors"); // mutual exclusion broken
        }
        let fifo = self.lock_mode(l) != LockMode::Pmt;
        let lock = &mut self.locks[l];
        if fifo && lock.last_granted.is_some_and(|t| t >= ticket) {
            core.metrics.count("ticket_fifo_violations");
        }
        lock.last_granted = Some(ticket);
        lock.holder = Some(v);
        self.st[v].granted = true;
    }

    pub(super) fn enter_critical(&mut self, core: &mut Core, v: VcpuId) {
        let s = &mut self.st[v];
        if let Phase::LockWait(l) | Phase::PvHalted(l) = s.phase {
            s.phase = Phase::Critical(l);
        }
        let wait = core.now() - s.since;
        core.metrics.sample("lock_wait_ns", wait);
        if matches!(s.phase, Phase::Critical(l) if Some(l) == self.mmap_lock) {
            // `mmap_sem` taken: the shootdown it guards begins (released when it is done).
            let ns = self.unmap_ns[v];
            self.begin_shootdown(core, v, ns);
            return;
        }
        core.vcpus[v]
            .work
            .push_back(Work::app(s.cs_ns, tags::CRITICAL));
    }

    /// End of the critical section (the lock of the holder's `Critical` phase): release
    /// and pick the next holder.
    pub(super) fn release(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let Phase::Critical(l) = self.st[v].phase else {
            core.metrics.count("lock_model_errors"); // release outside a critical section
            return Ok(());
        };
        self.release_lock(core, v, l)?;
        self.ready.push(v);
        Ok(())
    }

    /// `v` releases lock `l` (it must hold it) and the next holder is picked.
    pub(super) fn release_lock(&mut self, core: &mut Core, v: VcpuId, l: usize) -> Result<()> {
        if self.locks[l].holder != Some(v) {
            core.metrics.count("lock_model_errors"); // release of a lock not held
            return Ok(());
        }
        self.locks[l].holder = None;
        self.st[v].phase = Phase::User;
        self.st[v].granted = false;
        if Some(l) == self.alloc_lock {
            self.run_held_flushes(core, v);
        }
        let notice = core.costs.poll_notice_ns;
        match self.lock_mode(l) {
            LockMode::Ticket | LockMode::Pv => {
                let Some((w, t)) = self.locks[l].queue.pop_front() else {
                    return Ok(());
                };
                self.grant(core, w, l, t);
                if self.st[w].phase == Phase::PvHalted(l) {
                    // kvm_kick_cpu: a hypercall on the unlocker, then the wakeup.
                    self.st[v].kick = Some(w);
                    core.vcpus[v].work.push_front(Work {
                        ns: core.costs.exit_roundtrip_ns,
                        cat: Cat::Exit,
                        tag: Tag::App(tags::KICK),
                    });
                    core.metrics.count("pv_kicks");
                } else {
                    core.end_spin(w, tags::SPIN_LOCK, notice)?;
                }
            }
            LockMode::Pmt => {
                let q = &self.locks[l].queue;
                let running = |u: VcpuId| core.vcpus[u].run == Run::OnCpu;
                let head = q.front().map(|&(u, _)| u).filter(|&u| running(u));
                let pick = head.or_else(|| {
                    q.iter()
                        .map(|&(u, _)| u)
                        .find(|&u| self.st[u].timed_out && running(u))
                });
                if let Some(w) = pick {
                    self.take(core, w, l)?;
                }
            }
        }
        Ok(())
    }

    /// PMT: `v` (waiting for `l`) takes the lock if it is free and `v` may: it is the
    /// head of the queue, or it timed out.
    pub(super) fn try_take(&mut self, core: &mut Core, v: VcpuId, l: usize) -> Result<bool> {
        if self.lock_mode(l) != LockMode::Pmt || self.locks[l].holder.is_some() {
            return Ok(false);
        }
        let is_head = self.locks[l].queue.front().is_some_and(|&(u, _)| u == v);
        if !is_head && !self.st[v].timed_out {
            return Ok(false);
        }
        self.take(core, v, l)?;
        Ok(true)
    }

    fn take(&mut self, core: &mut Core, v: VcpuId, l: usize) -> Result<()> {
        let q = &mut self.locks[l].queue;
        let Some(i) = q.iter().position(|&(u, _)| u == v) else {
            return Ok(());
        };
        if i > 0 {
            core.metrics.count("pmt_out_of_order");
        }
        let (_, t) = q.remove(i).unwrap_or((v, 0));
        self.grant(core, v, l, t);
        core.end_spin(v, tags::SPIN_LOCK, core.costs.poll_notice_ns)?;
        Ok(())
    }

    /// A waiter's spin item ended: granted, PMT timeout, PV threshold, or PLE window.
    pub(super) fn lock_spin_done(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        let Phase::LockWait(l) = self.st[v].phase else {
            return Ok(());
        };
        if self.st[v].granted {
            self.enter_critical(core, v);
            return Ok(());
        }
        let s = &mut self.st[v];
        s.spun_ns += s.chunk_ns;
        if let (Some(t), false) = (s.timeout_ns, s.timed_out) {
            if s.spun_ns >= t {
                s.timed_out = true;
                core.metrics.count("pmt_timeouts");
                if self.try_take(core, v, l)? {
                    self.enter_critical(core, v);
                    return Ok(());
                }
                self.spin(core, v, tags::SPIN_LOCK);
                return Ok(());
            }
        }
        if self.lock_mode(l) == LockMode::Pv && self.st[v].spun_ns >= self.pv_threshold_ns() {
            // pv_wait: halt until kicked (nothing queued: the vCPU executes HLT).
            self.st[v].phase = Phase::PvHalted(l);
            core.metrics.count("pv_halts");
            return Ok(());
        }
        if self.cfg.ple {
            self.ple_exit(core, v);
        } else {
            self.spin(core, v, tags::SPIN_LOCK);
        }
        Ok(())
    }

    /// The unlock hypercall finished: wake the halted waiter.
    pub(super) fn kick_done(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        if let Some(w) = self.st[v].kick.take() {
            let irq = Irq {
                src: IrqSrc::Vector {
                    from: v,
                    vector: vectors::KICK,
                },
                sent: core.now(),
            };
            core.deliver(w, irq, Some(v))?;
        }
        Ok(())
    }

    /// A PV waiter was kicked (or woke for another reason and finds the lock granted).
    pub(super) fn kicked(&mut self, core: &mut Core, v: VcpuId) -> Result<()> {
        if let Phase::PvHalted(_) = self.st[v].phase {
            if self.st[v].granted {
                self.enter_critical(core, v);
            }
        }
        Ok(())
    }
}
