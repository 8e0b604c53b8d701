//! fio-like storage workload on one vCPU: keep a target number of I/Os outstanding
//! (steady, or bursty like TPC-C: the target jumps between levels at random times). Each
//! I/O costs guest CPU to submit (plus the kick exit) and to complete; each interrupt costs
//! injection, the guest's IDT entry, the ISR and its register-access exits. With a CPU-bound
//! guest, IOPS is set by how much of that CPU moderation saves.

use crate::host::{Cat, Core, Hook, IrqSrc, Latency, Req, Result, Tag, Work};
use crate::Nanos;
use serde::{Deserialize, Serialize};
use vmirq_policy::moderation::RequestKind;

/// Storage workload parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// Outstanding I/Os the application keeps (steady pattern).
    pub oio: u32,
    /// Bursty pattern: outstanding-I/O levels to jump between (empty = steady).
    #[serde(default)]
    pub burst_oio: Vec<u32>,
    /// Bursty pattern: mean time at one level, in microseconds.
    #[serde(default = "default_phase")]
    pub burst_phase_us: u64,
    /// Guest CPU per submission (application + stack + driver), ns.
    pub submit_ns: Nanos,
    /// Guest CPU per completion (driver + stack + application), ns.
    pub complete_ns: Nanos,
    /// Guest ISR fixed cost per interrupt beyond the IDT entry, ns.
    pub isr_ns: Nanos,
    /// Register-access exits per interrupt in the ISR (status read, clear, EOI).
    pub isr_exits: u8,
    /// The ISR runs with interrupts masked (an x86 interrupt gate clears IF until
    /// `iretq`): a device interrupt that arrives during it stays pending, merges with any
    /// later one, and is taken when the ISR returns. Off (the default, as every published
    /// check was run): a device interrupt interrupts the ISR and nests. On in the
    /// `this-host` device prediction (v6 on), whose driver's handler is an interrupt gate
    /// with no `sti` (`crates/vmirq-kvm/src/guest/device.rs`).
    #[serde(default)]
    pub isr_masks_irqs: bool,
    /// The device polls the submission ring (its thread spins on the guest's submitted
    /// count, as `vmirq kvm device`'s engine does), so it sees a request when the guest
    /// publishes it, before the doorbell's exit, which the vCPU still pays. Off (the
    /// default, every published check): the device learns of a request from the kick, at
    /// the end of its exit. On in the `this-host` device prediction (v6 on).
    #[serde(default)]
    pub device_polls_ring: bool,
    /// Bytes per request.
    #[serde(default = "default_bytes")]
    pub bytes: u32,
    /// Requests the device serves at once.
    pub parallelism: u32,
    /// Device service time.
    pub latency: Latency,
}

fn default_phase() -> u64 {
    20_000
}
fn default_bytes() -> u32 {
    4096
}

const SUBMIT: u32 = 10;
const COMPLETE: u32 = 11;
const PHASE: u32 = 12;
/// Zero-length marker after the ISR (`isr_masks_irqs`): the handler's `iretq`.
const ISR_RETURN: u32 = 13;
/// Zero-length marker at the handler's `iretq` instruction, before the return to the
/// interrupted code (only with `Costs::irq_chain_ns`): an interrupt held by then is taken
/// at the `iretq`.
const ISR_IRET: u32 = 14;

/// Running storage workload.
#[derive(Debug, Clone)]
pub struct Storage {
    cfg: StorageConfig,
    target: u32,
    outstanding: u32,
}

impl Storage {
    /// Build.
    #[must_use]
    pub fn new(cfg: StorageConfig) -> Self {
        let target = cfg.burst_oio.first().copied().unwrap_or(cfg.oio);
        Self {
            cfg,
            target,
            outstanding: 0,
        }
    }

    /// Register-access exit cost (MMIO/PIO emulated in the hypervisor). Assumption: like
    /// an MSR write, an exit round trip plus ~400 cycles of emulation.
    fn reg_exit(core: &Core) -> Work {
        Work {
            ns: core.costs.exit_roundtrip_ns + core.costs.wrmsr_exit_ns,
            cat: Cat::Exit,
            tag: crate::host::Tag::Plain,
        }
    }

    /// The return from the handler to the interrupted code (`Costs::irq_return_ns`, drawn
    /// from its spread).
    fn irq_return(core: &mut Core) -> Work {
        let c = core.costs;
        Work {
            ns: core.spread(c.irq_return_ns, c.irq_return_lo_ns, c.irq_return_hi_ns),
            cat: Cat::Exit,
            tag: Tag::Plain,
        }
    }

    /// The handler's `iretq` (with `Costs::irq_chain_ns`): a held interrupt is taken right
    /// here, else the handler returns to the interrupted code.
    fn iret(core: &mut Core) -> Result<()> {
        if core.vcpus[0].masked_irq.is_some() {
            // The handler is left here: its end marker (next in the queue) goes.
            if core.vcpus[0].work.front() == Some(&Work::app(0, ISR_RETURN)) {
                core.vcpus[0].work.pop_front();
            }
            core.chain_held_irq(0)?;
        } else {
            let ret = Self::irq_return(core);
            core.vcpus[0].work.push_front(ret);
        }
        Ok(())
    }

    fn top_up(&mut self, core: &mut Core) {
        while self.outstanding < self.target {
            self.outstanding += 1;
            core.vcpus[0]
                .work
                .push_back(Work::app(self.cfg.submit_ns, SUBMIT));
        }
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        core.vcpus[0].isr_masks = self.cfg.isr_masks_irqs;
        if !self.cfg.burst_oio.is_empty() {
            core.q.schedule_in(
                core.rng.exp_ns(self.cfg.burst_phase_us * 1_000),
                crate::host::Ev::Workload(PHASE, 0),
            )?;
        }
        self.top_up(core);
        core.dispatch(0)
    }

    pub(super) fn timer(&mut self, core: &mut Core, tag: u32) -> Result<()> {
        if tag == PHASE {
            let n = self.cfg.burst_oio.len() as u64;
            let i = usize::try_from(core.rng.below(n)).unwrap_or(0);
            self.target = self.cfg.burst_oio[i];
            let now = core.now();
            core.metrics
                .point("target_oio", now, i64::from(self.target));
            core.q.schedule_in(
                core.rng.exp_ns(self.cfg.burst_phase_us * 1_000),
                crate::host::Ev::Workload(PHASE, 0),
            )?;
            self.top_up(core);
            core.dispatch(0)?;
        }
        Ok(())
    }

    pub(super) fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        let now = core.now();
        match hook {
            Hook::App(0, SUBMIT) => {
                let req = Req {
                    submitted: now.saturating_sub(self.cfg.submit_ns),
                    bytes: self.cfg.bytes,
                    kind: RequestKind::Read,
                };
                let mut kick = Work {
                    tag: Tag::IoSubmit(0, req),
                    ..Self::reg_exit(core)
                };
                if core.costs.doorbell_exit_ns > 0 {
                    // measured (this-host profiles), per event from its spread (v7 on)
                    let c = core.costs;
                    kick.ns = core.spread(
                        c.doorbell_exit_ns,
                        c.doorbell_exit_lo_ns,
                        c.doorbell_exit_hi_ns,
                    );
                }
                if self.cfg.device_polls_ring {
                    // Published before the doorbell store: the polling device has it now.
                    kick.tag = Tag::Plain;
                    core.io_submit(0, req)?;
                }
                core.vcpus[0].work.push_front(kick);
                core.metrics.count("exits_io_kick");
            }
            Hook::App(0, ISR_RETURN) => core.handler_returned(0)?,
            Hook::App(0, ISR_IRET) => Self::iret(core)?,
            Hook::App(0, COMPLETE) => {
                core.metrics.count("ios_completed");
                self.outstanding = self.outstanding.saturating_sub(1);
                self.top_up(core);
            }
            Hook::Irq(0, irq) if matches!(irq.src, IrqSrc::Device { .. }) => {
                core.metrics.count("guest_interrupts");
                let reqs: Vec<Req> = core.devs[0].ring.drain(..).collect();
                core.metrics
                    .sample("completions_per_irq", reqs.len() as u64);
                for r in &reqs {
                    core.metrics.sample("io_latency_ns", now - r.submitted);
                }
                // ISR first (front), then one completion work item per request.
                let v = &mut core.vcpus[0];
                for _ in &reqs {
                    v.work.push_front(Work::app(self.cfg.complete_ns, COMPLETE));
                }
                if self.cfg.isr_masks_irqs {
                    v.in_handler = true;
                    v.work.push_front(Work::app(0, ISR_RETURN));
                }
                if self.cfg.isr_masks_irqs && core.costs.irq_chain_ns > 0 {
                    // The return is decided at the `iretq` (ISR_IRET): chained to a held
                    // interrupt, or back to the interrupted code.
                    core.vcpus[0].work.push_front(Work::app(0, ISR_IRET));
                } else if core.costs.irq_return_ns > 0 {
                    // The handler's `iretq` back to the interrupted code, beyond the one
                    // instruction `isr_ns` counts for it (interrupts stay masked until it
                    // is done).
                    let ret = Self::irq_return(core);
                    core.vcpus[0].work.push_front(ret);
                }
                let v = &mut core.vcpus[0];
                v.work.push_front(Work {
                    ns: self.cfg.isr_ns,
                    cat: Cat::Guest,
                    tag: Tag::Plain,
                });
                for _ in 0..self.cfg.isr_exits {
                    let e = Self::reg_exit(core);
                    core.vcpus[0].work.push_front(e);
                }
                core.metrics.add("exits_isr", u64::from(self.cfg.isr_exits));
            }
            _ => {}
        }
        Ok(())
    }
}
