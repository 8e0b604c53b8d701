//! vCPU execution: the work queue, interrupt delivery, and the idle path (tickless timer
//! writes, guest haltpoll, HLT, host halt polling, sleeping and waking).

use super::{Cat, Core, Ev, Irq, IrqSrc, Result, Tag, VcpuId, Work};
use crate::engine::{EventId, Timer};
use crate::Nanos;
use std::collections::VecDeque;
use vmirq_policy::wait::{Wait, WaitDecision, Waiter, WakeOutcome};

/// Guest kernel behaviour of a vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestConfig {
    /// APIC timer writes when entering idle (tickless kernel stopping the tick).
    pub idle_entry_writes: u8,
    /// APIC timer writes when leaving idle (restarting the tick).
    pub idle_exit_writes: u8,
    /// Guest haltpoll (cpuidle-haltpoll): poll in the guest before HLT. Enabling it turns
    /// host halt polling off for this vCPU (MSR_KVM_POLL_CONTROL), as in Linux.
    pub haltpoll: Option<Wait>,
    /// Posted interrupts (APICv): an interrupt for a vCPU in guest mode needs no exit.
    pub posted_interrupts: bool,
}

/// Host-side state of the vCPU thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// On its pCPU, in guest mode or in the hypervisor on its behalf.
    OnCpu,
    /// In the hypervisor's halt-polling loop.
    HostPoll,
    /// Blocked (slept after HLT).
    Blocked,
    /// Runnable, waiting for or being switched onto its pCPU.
    Queued,
}

/// Guest-side idle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Running guest work.
    Busy,
    /// In the guest idle loop, polling (haltpoll).
    GuestPoll,
    /// Executed HLT.
    Halted,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Current {
    pub(super) work: Work,
    pub(super) started: Nanos,
    pub(super) id: EventId,
}

/// One vCPU and its host thread.
#[derive(Debug, Clone)]
pub struct Vcpu {
    /// The pCPU its thread is pinned to.
    pub pcpu: usize,
    /// Host-side state.
    pub run: Run,
    /// Guest-side idle state.
    pub idle: Idle,
    /// The guest is inside its idle loop (between idle entry and idle exit).
    pub in_idle: bool,
    /// Device interrupts on this vCPU wake no guest task (an ICMP echo answered in the
    /// receive softirq): taken in idle, they leave the guest in its idle loop, so neither
    /// the tick restart nor the next tick stop writes a timer register (Linux 2.6.3x/3.x
    /// `tick_nohz_irq_exit` with an unchanged next event). Set by a workload.
    pub device_irq_stays_idle: bool,
    /// Guest kernel behaviour.
    pub guest: GuestConfig,
    /// Host halt-polling policy.
    pub host_wait: Wait,
    /// Queued work, front first.
    pub work: VecDeque<Work>,
    pub(super) cur: Option<Current>,
    pub(super) poll: Timer,
    pub(super) host_wait_open: bool,
    pub(super) guest_wait_open: bool,
    pub(super) kicked: bool,
    pub(super) preempted: bool,
    /// The VM this vCPU belongs to (0 unless a workload runs several VMs).
    pub vm: usize,
    /// Paravirtual remote TLB flush: the host flushes before the next VM entry, at this
    /// cost (set by the guest through the shared `preempted` byte; see `crate::sync`).
    pub flush_on_entry: Option<Nanos>,
    /// Time this vCPU executed work items on its pCPU (guest code and exits).
    pub run_ns: Nanos,
    /// Of `run_ns`, the time per [`Tag::App`] tag.
    pub app_ns: std::collections::BTreeMap<u32, Nanos>,
    /// A world switch happened since the workload's guest code last ran: its working set
    /// has to be refilled (indirect exit cost, `crate::era`).
    pub cold: bool,
    /// The host scheduler wants this thread off its pCPU (`need_resched`) but it is in the
    /// middle of an exit: with a non-preemptible host kernel it leaves at the next
    /// preemption point, KVM's `need_resched()` check before re-entering the guest.
    pub resched: bool,
    /// Added to `run_ns` to give the thread's CFS vruntime (sleeper placement raises it).
    pub vruntime_offset: Nanos,
    /// The guest runs a device interrupt handler with interrupts masked (x86 interrupt
    /// gate: IF = 0 until `iretq`); set and cleared by a workload that models it
    /// (`workload.isr_masks_irqs`). A device interrupt arriving meanwhile waits in
    /// `masked_irq`.
    pub in_handler: bool,
    /// The device interrupt that arrived while `in_handler`: the LAPIC's IRR bit, one per
    /// vector, so later ones merge into it; delivered when the handler returns.
    pub masked_irq: Option<Irq>,
    /// Device interrupts are masked from the start of their delivery to the handler's
    /// return (set by a workload with `isr_masks_irqs`): one that arrives while a delivery
    /// of the same source is executing or its handler runs waits in `masked_irq`. False
    /// (every published check): such an interrupt nests.
    pub isr_masks: bool,
}

impl Vcpu {
    /// A vCPU pinned to `pcpu`.
    #[must_use]
    pub fn new(pcpu: usize, guest: GuestConfig, host_wait: Wait) -> Self {
        Self {
            pcpu,
            run: Run::OnCpu,
            idle: Idle::Busy,
            in_idle: false,
            device_irq_stays_idle: false,
            guest,
            host_wait,
            work: VecDeque::new(),
            cur: None,
            poll: Timer::default(),
            host_wait_open: false,
            guest_wait_open: false,
            kicked: false,
            preempted: false,
            vm: 0,
            flush_on_entry: None,
            run_ns: 0,
            app_ns: std::collections::BTreeMap::new(),
            cold: false,
            resched: false,
            vruntime_offset: 0,
            in_handler: false,
            masked_irq: None,
            isr_masks: false,
        }
    }

    /// Whether the host scheduled the thread out involuntarily and it has not run since
    /// (KVM's `vcpu->preempted`, published to the guest as `KVM_VCPU_PREEMPTED`).
    #[must_use]
    pub fn is_preempted(&self) -> bool {
        self.preempted
    }

    /// Whether the vCPU is executing a work item.
    #[must_use]
    pub fn busy(&self) -> bool {
        self.cur.is_some()
    }
}

/// Something the workload must be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// A [`Tag::App`] work item finished.
    App(VcpuId, u32),
    /// The guest entered the handler of an interrupt.
    Irq(VcpuId, Irq),
    /// The vCPU thread got its pCPU back (after a preemption or a sleep).
    Resumed(VcpuId),
}

impl Core {
    /// Start the next work item, or go idle. No-op unless the vCPU is on its CPU and free.
    pub fn dispatch(&mut self, v: VcpuId) -> Result<()> {
        let vc = &self.vcpus[v];
        if vc.run != Run::OnCpu || vc.cur.is_some() || vc.idle != Idle::Busy {
            return Ok(());
        }
        if self.vcpus[v].resched
            && self.vcpus[v]
                .work
                .front()
                .is_none_or(|w| !w.cat.in_host_kernel())
        {
            return self.preemption_point(v);
        }
        if let Some(w) = self.vcpus[v].work.pop_front() {
            let w = self.refill_first(v, w);
            return self.start(v, w);
        }
        if self.vcpus[v].in_idle {
            return self.idle_enter(v);
        }
        self.vcpus[v].in_idle = true;
        let n = self.vcpus[v].guest.idle_entry_writes;
        let ns = self.timer_write_ns();
        let cat = if self.bare() { Cat::Guest } else { Cat::Exit };
        for _ in 0..n {
            self.vcpus[v].work.push_back(Work {
                ns,
                cat,
                tag: Tag::Plain,
            });
        }
        self.metrics.add("apic_timer_writes", u64::from(n));
        self.vcpus[v].work.push_back(Work {
            ns: 0,
            cat: Cat::Guest,
            tag: Tag::IdleEntered,
        });
        self.dispatch(v)
    }

    /// Indirect exit cost: the workload's guest code that runs first after a world switch
    /// refills the caches and TLB it lost to the hypervisor (once, however many exits came
    /// in between). Returns the refill item to run first (the work goes back in front), or
    /// the work itself. Interrupt entries and handlers are not workload code.
    fn refill_first(&mut self, v: VcpuId, w: Work) -> Work {
        let app = w.cat == Cat::Guest && matches!(w.tag, Tag::App(_));
        if !app || !self.vcpus[v].cold || self.exit_refill_ns == 0 {
            return w;
        }
        self.vcpus[v].cold = false;
        self.vcpus[v].work.push_front(w);
        self.metrics.count("exit_refills");
        self.metrics.add("exit_refill_ns", self.exit_refill_ns);
        Work {
            ns: self.exit_refill_ns,
            cat: Cat::Guest,
            tag: Tag::Plain,
        }
    }

    fn start(&mut self, v: VcpuId, work: Work) -> Result<()> {
        let now = self.now();
        let p = self.vcpus[v].pcpu;
        self.pcpus[p].time.set(now, work.cat);
        let id = self.q.schedule_in(work.ns, Ev::WorkDone(v))?;
        self.vcpus[v].cur = Some(Current {
            work,
            started: now,
            id,
        });
        Ok(())
    }

    /// The current work item finished: apply its effect. Returns a hook for the workload.
    pub fn work_done(&mut self, v: VcpuId) -> Result<Option<Hook>> {
        let Some(cur) = self.vcpus[v].cur.take() else {
            return Ok(None);
        };
        let spent = self.now().saturating_sub(cur.started);
        self.account(v, cur.work, spent);
        if cur.work.cat == Cat::Exit && !self.bare() {
            self.vcpus[v].cold = true;
        }
        match cur.work.tag {
            Tag::Plain => Ok(None),
            Tag::App(t) => Ok(Some(Hook::App(v, t))),
            Tag::IcrWrite { to, irq } => {
                self.deliver(to, irq, Some(v))?;
                Ok(None)
            }
            Tag::Kick(t) => {
                self.wake_thread(t)?;
                Ok(None)
            }
            Tag::IrqEntry(irq) => {
                let stays =
                    self.vcpus[v].device_irq_stays_idle && matches!(irq.src, IrqSrc::Device { .. });
                if !stays {
                    self.leave_idle(v);
                }
                self.eoi(v);
                Ok(Some(Hook::Irq(v, irq)))
            }
            Tag::IdleEntered => {
                self.idle_enter(v)?;
                Ok(None)
            }
            Tag::IoSubmit(d, req) => {
                self.io_submit(d, req)?;
                Ok(None)
            }
        }
    }

    /// The handler acknowledges the interrupt (Linux acks edge-triggered MSIs and IPIs at
    /// handler entry): without posted interrupts or PV EOI the x2APIC EOI MSR write exits
    /// (`crate::era`), before anything else the vCPU does.
    fn eoi(&mut self, v: VcpuId) {
        if !self.eoi_exit || self.bare() || self.vcpus[v].guest.posted_interrupts {
            return;
        }
        self.metrics.count("exits_eoi");
        self.vcpus[v].work.push_front(Work {
            ns: self.costs.exit_roundtrip_ns + self.costs.wrmsr_exit_ns,
            cat: Cat::Exit,
            tag: Tag::Plain,
        });
    }

    /// The guest leaves its idle loop: restart the tick (timer writes) before other work.
    fn leave_idle(&mut self, v: VcpuId) {
        if !self.vcpus[v].in_idle {
            return;
        }
        self.vcpus[v].in_idle = false;
        let n = self.vcpus[v].guest.idle_exit_writes;
        let ns = self.timer_write_ns();
        let cat = if self.bare() { Cat::Guest } else { Cat::Exit };
        for _ in 0..n {
            self.vcpus[v].work.push_front(Work {
                ns,
                cat,
                tag: Tag::Plain,
            });
        }
        self.metrics.add("apic_timer_writes", u64::from(n));
    }

    /// Idle entry done: guest-poll or HLT (unless work arrived meanwhile).
    fn idle_enter(&mut self, v: VcpuId) -> Result<()> {
        if !self.vcpus[v].work.is_empty() {
            self.leave_idle(v);
            return self.dispatch(v);
        }
        let now = self.now();
        if let Some(mut gw) = self.vcpus[v].guest.haltpoll {
            let d = gw.begin(now);
            self.vcpus[v].guest.haltpoll = Some(gw);
            self.vcpus[v].guest_wait_open = true;
            if let WaitDecision::Poll { until } = d {
                self.vcpus[v].idle = Idle::GuestPoll;
                let p = self.vcpus[v].pcpu;
                self.pcpus[p].time.set(now, Cat::Poll);
                self.metrics.count("guest_polls");
                let mut t = self.vcpus[v].poll;
                t.arm(&mut self.q, until.max(now), Ev::PollEnd(v))?;
                self.vcpus[v].poll = t;
                return Ok(());
            }
        }
        self.halt(v)
    }

    /// The guest executes HLT.
    fn halt(&mut self, v: VcpuId) -> Result<()> {
        let now = self.now();
        self.vcpus[v].idle = Idle::Halted;
        self.metrics.count("halts");
        if self.bare() {
            let p = self.vcpus[v].pcpu;
            self.pcpu_idle(p);
            self.vcpus[v].run = Run::Blocked;
            return Ok(());
        }
        self.metrics.count("exits_hlt");
        let host_polls = self.vcpus[v].guest.haltpoll.is_none();
        let d = if host_polls {
            self.vcpus[v].host_wait_open = true;
            self.vcpus[v].host_wait.begin(now)
        } else {
            WaitDecision::Sleep
        };
        match d {
            WaitDecision::Poll { until } if !self.pcpus[self.vcpus[v].pcpu].runq.is_empty() => {
                let _ = until; // another task is runnable: KVM does not poll
                self.block(v)
            }
            WaitDecision::Poll { until } => {
                self.vcpus[v].run = Run::HostPoll;
                let p = self.vcpus[v].pcpu;
                self.pcpus[p].time.set(now, Cat::Poll);
                self.metrics.count("host_polls");
                let mut t = self.vcpus[v].poll;
                t.arm(&mut self.q, until.max(now), Ev::PollEnd(v))?;
                self.vcpus[v].poll = t;
                Ok(())
            }
            WaitDecision::Sleep => self.block(v),
        }
    }

    /// A poll window ended with nothing to do.
    pub fn poll_end(&mut self, v: VcpuId) -> Result<()> {
        self.vcpus[v].poll.fired();
        if self.vcpus[v].idle == Idle::GuestPoll {
            self.metrics.count("guest_poll_misses");
            return self.halt(v);
        }
        if self.vcpus[v].run == Run::HostPoll {
            self.metrics.count("host_poll_misses");
            return self.block(v);
        }
        Ok(())
    }

    /// Close the open wait policies after a wakeup.
    fn close_waits(&mut self, v: VcpuId, slept: bool) {
        let now = self.now();
        let outcome = if slept {
            WakeOutcome::SLEPT
        } else {
            WakeOutcome::POLLED
        };
        let vc = &mut self.vcpus[v];
        if vc.host_wait_open {
            vc.host_wait_open = false;
            vc.host_wait.end(now, outcome);
        }
        if vc.guest_wait_open {
            vc.guest_wait_open = false;
            if let Some(gw) = vc.guest.haltpoll.as_mut() {
                gw.end(now, outcome);
            }
        }
    }

    /// Deliver an interrupt to `v`; `sender` is the vCPU that sent it (it pays the kick).
    pub fn deliver(&mut self, v: VcpuId, irq: Irq, sender: Option<VcpuId>) -> Result<()> {
        // A device queue's MSI-X vector that is still pending (requested, its IDT entry not
        // begun) merges with the new message: the local APIC keeps one IRR bit per vector
        // (and posted interrupts one PIR bit), so the guest takes it once (Intel SDM vol. 3A,
        // "Interrupt Acceptance for Fixed Interrupts"). IPIs are not merged here: the model's
        // IPI handlers act per message.
        if matches!(irq.src, IrqSrc::Device { .. })
            && self.vcpus[v]
                .work
                .iter()
                .any(|w| matches!(w.tag, Tag::IrqEntry(p) if p.src == irq.src))
        {
            self.metrics.count("irqs_merged");
            return Ok(());
        }
        let delivering = self.vcpus[v]
            .cur
            .as_ref()
            .is_some_and(|c| matches!(c.work.tag, Tag::IrqEntry(p) if p.src == irq.src));
        if matches!(irq.src, IrqSrc::Device { .. })
            && self.vcpus[v].isr_masks
            && (self.vcpus[v].in_handler || delivering)
        {
            // The vector left the IRR for the ISR when its delivery began and the handler
            // runs with IF = 0: the new one stays pending in the IRR (a third merges with
            // it) and is taken after `iretq` (`Core::handler_returned`).
            if self.vcpus[v].masked_irq.is_some() {
                self.metrics.count("irqs_merged");
            } else {
                self.metrics.count("irqs_held_in_handler");
                self.vcpus[v].masked_irq = Some(irq);
            }
            return Ok(());
        }
        self.metrics.count("irqs_delivered");
        let entry_ns = if self.bare() {
            self.costs.native_irq_entry_ns
        } else {
            let c = self.costs;
            self.spread(
                c.guest_irq_entry_ns,
                c.guest_irq_entry_lo_ns,
                c.guest_irq_entry_hi_ns,
            )
        };
        let entry = Work {
            ns: entry_ns,
            cat: Cat::Guest,
            tag: Tag::IrqEntry(irq),
        };
        let vm_entry = Work {
            ns: self.costs.vm_entry_ns,
            cat: Cat::Exit,
            tag: Tag::Plain,
        };
        match (self.vcpus[v].run, self.vcpus[v].idle) {
            (Run::OnCpu, idle) => {
                if idle == Idle::GuestPoll {
                    self.vcpus[v].poll.cancel(&mut self.q);
                    self.vcpus[v].idle = Idle::Busy;
                    self.close_waits(v, false);
                }
                self.preempt_work(v);
                self.vcpus[v].work.push_front(entry);
                if !self.bare() && !self.vcpus[v].guest.posted_interrupts {
                    self.metrics.count("exits_irq");
                    let c = self.costs;
                    let inject = Work {
                        ns: if c.running_irq_exit_ns > 0 {
                            self.spread(
                                c.running_irq_exit_ns,
                                c.running_irq_exit_lo_ns,
                                c.running_irq_exit_hi_ns,
                            )
                        } else {
                            self.costs.exit_roundtrip_ns
                        },
                        cat: Cat::Exit,
                        tag: Tag::Plain,
                    };
                    self.vcpus[v].work.push_front(inject);
                }
                self.dispatch(v)
            }
            (Run::HostPoll, _) => {
                self.vcpus[v].poll.cancel(&mut self.q);
                self.metrics.count("host_poll_hits");
                self.close_waits(v, false);
                self.vcpus[v].run = Run::OnCpu;
                self.vcpus[v].idle = Idle::Busy;
                self.vcpus[v].work.push_front(entry);
                // The polling thread never left its CPU: no vCPU reload (`crate::era`).
                self.vcpus[v].work.push_front(Work {
                    ns: vm_entry.ns.saturating_sub(self.vcpu_reload_ns),
                    ..vm_entry
                });
                self.flush_before_entry(v);
                if self.costs.halt_poll_notice_ns > 0 {
                    // The poll loop sees the pending interrupt at its next check.
                    self.vcpus[v].work.push_front(Work {
                        ns: self.costs.halt_poll_notice_ns,
                        cat: Cat::Exit,
                        tag: Tag::Plain,
                    });
                }
                self.dispatch(v)
            }
            (Run::Blocked, _) => {
                if self.bare() {
                    // The native wakeup cost covers delivery up to the handler.
                    self.vcpus[v].work.push_front(Work { ns: 0, ..entry });
                    if !self.vcpus[v].kicked {
                        self.vcpus[v].kicked = true;
                        let exit = self.pcpu_wake(self.vcpus[v].pcpu);
                        self.q
                            .schedule_in(self.costs.native_ipi_wakeup_ns + exit, Ev::Running(v))?;
                    }
                    return Ok(());
                }
                self.vcpus[v].work.push_front(entry);
                self.vcpus[v].work.push_front(vm_entry);
                self.kick(v, sender)
            }
            (Run::Queued, _) => {
                // vm_entry is already queued at the front: the handler follows it.
                let at = usize::from(
                    !self.vcpus[v].work.is_empty() && self.vcpus[v].work[0] == vm_entry,
                );
                self.vcpus[v].work.insert(at, entry);
                Ok(())
            }
        }
    }

    /// Whether `v` runs guest code outside its interrupt path: on its pCPU, no interrupt being
    /// injected or delivered, not in a masked handler, none held for after it. A kick then
    /// has to interrupt it (KVM's IPI); the model does not split the guest's own exits (a
    /// doorbell) into time in and out of guest mode, and counts them as guest code.
    #[must_use]
    pub fn runs_guest_code(&self, v: VcpuId) -> bool {
        let c = &self.vcpus[v];
        let entry = |w: &Work| matches!(w.tag, Tag::IrqEntry(_));
        c.run == Run::OnCpu
            && !c.in_handler
            && c.masked_irq.is_none()
            && !c.cur.as_ref().is_some_and(|x| entry(&x.work))
            && !c.work.iter().any(entry)
    }

    /// Wake the sleeping thread of `v`: the sender pays the kick, or the host does.
    fn kick(&mut self, v: VcpuId, sender: Option<VcpuId>) -> Result<()> {
        if self.vcpus[v].kicked {
            return Ok(());
        }
        self.vcpus[v].kicked = true;
        self.metrics.count("kicks");
        let k = Work {
            ns: self.costs.kick_ns,
            cat: Cat::Exit,
            tag: Tag::Kick(v),
        };
        match sender {
            Some(s) => {
                self.vcpus[s].work.push_front(k);
                Ok(())
            }
            None => {
                self.q.schedule_in(self.costs.kick_ns, Ev::Wake(v))?;
                Ok(())
            }
        }
    }

    /// The guest's device interrupt handler returned (`iretq`, IF = 1 again): the device
    /// interrupt that arrived meanwhile, if any, is delivered now (as to a running vCPU).
    ///
    /// # Errors
    /// Engine errors.
    pub fn handler_returned(&mut self, v: VcpuId) -> Result<()> {
        self.vcpus[v].in_handler = false;
        match self.vcpus[v].masked_irq.take() {
            Some(irq) => self.deliver(v, irq, None),
            None => Ok(()),
        }
    }

    /// The masked handler of `v` executes `iretq` (`Costs::irq_chain_ns` set): a held
    /// device interrupt is taken right there, without returning to the interrupted code, at
    /// `irq_chain_ns` up to the next handler's first instruction. Returns whether one was
    /// held (else nothing changes and the caller returns as usual); the caller drops what
    /// it queued for the end of the handler it leaves.
    ///
    /// # Errors
    /// As [`Core::dispatch`].
    pub fn chain_held_irq(&mut self, v: VcpuId) -> Result<bool> {
        let Some(irq) = self.vcpus[v].masked_irq.take() else {
            return Ok(false);
        };
        self.vcpus[v].in_handler = false;
        self.metrics.count("irqs_delivered");
        self.metrics.count("irqs_chained_at_iret");
        self.preempt_work(v);
        self.vcpus[v].work.push_front(Work {
            ns: self.costs.irq_chain_ns,
            cat: Cat::Exit,
            tag: Tag::IrqEntry(irq),
        });
        self.dispatch(v)?;
        Ok(true)
    }

    /// Put the unfinished part of the current work item back at the queue front.
    pub(super) fn preempt_work(&mut self, v: VcpuId) {
        let now = self.now();
        if let Some(cur) = self.vcpus[v].cur.take() {
            self.q.cancel(cur.id);
            let done = now.saturating_sub(cur.started);
            self.account(v, cur.work, done);
            let rest = Work {
                ns: cur.work.ns.saturating_sub(done),
                ..cur.work
            };
            self.vcpus[v].work.push_front(rest);
        }
    }

    /// A guest reschedule: elided (polling flag) if `to` polls in the guest, else an IPI.
    /// `from` pays the ICR write exit (`Costs::ipi_send_other` to another vCPU).
    pub fn send_ipi(&mut self, from: VcpuId, to: VcpuId, src: IrqSrc) -> Result<()> {
        let irq = Irq {
            src,
            sent: self.now(),
        };
        let resched = matches!(src, IrqSrc::Resched { .. });
        if resched && self.vcpus[to].idle == Idle::GuestPoll && self.vcpus[to].run == Run::OnCpu {
            self.metrics.count("ipis_elided");
            self.q
                .schedule_in(self.costs.poll_notice_ns, Ev::Notice(to, irq))?;
            return Ok(());
        }
        self.metrics.count("ipis_sent");
        // The sender may be in the middle of a long item (a polling loop): it sends now.
        self.preempt_work(from);
        let (ns, cat) = if self.bare() {
            (self.costs.native_msr_ns, Cat::Guest)
        } else {
            self.metrics.count("exits_icr");
            let ns = if from == to {
                self.costs.wrmsr_exit_ns
            } else {
                self.costs.ipi_send_other()
            };
            (ns, Cat::Exit)
        };
        self.vcpus[from].work.push_front(Work {
            ns,
            cat,
            tag: Tag::IcrWrite { to, irq },
        });
        if !self.bare() {
            // Re-entry after the exit, after whatever the delivery adds (e.g. a kick).
            let back = Work {
                ns: self.costs.exit_roundtrip_ns,
                cat: Cat::Exit,
                tag: Tag::Plain,
            };
            self.vcpus[from].work.insert(1, back);
        }
        self.dispatch(from)
    }

    /// A polling-flag wakeup became visible to the guest-polling vCPU.
    pub fn notice(&mut self, v: VcpuId, irq: Irq) -> Result<Option<Hook>> {
        if self.vcpus[v].idle != Idle::GuestPoll || self.vcpus[v].run != Run::OnCpu {
            // The poll ended meanwhile (HLT): fall back to a real interrupt.
            self.deliver(v, irq, None)?;
            return Ok(None);
        }
        self.vcpus[v].poll.cancel(&mut self.q);
        self.vcpus[v].idle = Idle::Busy;
        self.close_waits(v, false);
        self.leave_idle(v);
        let p = self.vcpus[v].pcpu;
        let now = self.now();
        self.pcpus[p].time.set(now, Cat::Guest);
        Ok(Some(Hook::Irq(v, irq)))
    }

    /// A PV TLB flush requested while the vCPU was out of guest mode happens before it
    /// enters the guest again (`record_steal_time()` / kvmtlb's `xchg` at entry).
    fn flush_before_entry(&mut self, v: VcpuId) {
        if let Some(ns) = self.vcpus[v].flush_on_entry.take() {
            self.vcpus[v].work.push_front(Work {
                ns,
                cat: Cat::Exit,
                tag: Tag::Plain,
            });
            self.metrics.count("tlb_flush_on_entry");
        }
    }

    /// The vCPU thread got its pCPU; the workload hears about it ([`Hook::Resumed`]).
    pub fn running(&mut self, v: VcpuId) -> Result<Option<Hook>> {
        let vc = &mut self.vcpus[v];
        vc.run = Run::OnCpu;
        vc.kicked = false;
        self.flush_before_entry(v);
        let vc = &mut self.vcpus[v];
        if vc.preempted {
            vc.preempted = false;
        } else if vc.idle == Idle::Halted {
            vc.idle = Idle::Busy;
            self.close_waits(v, true);
            self.metrics.count("halt_wakeups_slept");
        }
        self.dispatch(v)?;
        Ok(Some(Hook::Resumed(v)))
    }
}
