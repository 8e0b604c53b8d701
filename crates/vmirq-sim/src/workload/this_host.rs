//! Workloads that mirror `vmirq kvm` on this host, for the `this-host` prediction of
//! issue 16 (`scenarios/this_host_wake.toml`).
//!
//! `irqfd-micro` is `vmirq kvm wake --path irqfd`: a host thread (not a vCPU) signals vCPU
//! 0's irqfd, waits until the guest handler has run, then waits `interval_us` and signals
//! again, so every halt lasts about the interval. The host thread pays nothing on a pCPU:
//! its `write()` makes the interrupt pending after `irqfd_inject_ns` (0 in the era profiles),
//! and the wakeup it starts costs the kick and what follows, as for any host-side interrupt.
//! The IPI path is the existing `ipi-micro` workload.

use crate::host::{Core, Ev, Hook, Irq, IrqSrc, Result};
use crate::Nanos;

const SEND: u32 = 40;
/// The write's interrupt reaches the vCPU's LAPIC (`irqfd_inject_ns` after SEND).
const INJECT: u32 = 41;

/// Host thread signalling vCPU 0's irqfd `interval_ns` after each handled wake. Records
/// `wakeup_ns`: from the signal to vCPU 0's handler, as `vmirq kvm wake` measures it.
#[derive(Debug, Clone)]
pub struct IrqfdMicro {
    interval_ns: Nanos,
    /// Start of the write in flight (`sent` of its interrupt).
    sent: Nanos,
}

impl IrqfdMicro {
    /// Signal `interval_ns` after each handled wake.
    #[must_use]
    pub fn new(interval_ns: Nanos) -> Self {
        Self {
            interval_ns,
            sent: 0,
        }
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        core.q
            .schedule_in(self.interval_ns, Ev::Workload(SEND, 0))?;
        core.dispatch(0)
    }

    pub(super) fn timer(&mut self, core: &mut Core, tag: u32) -> Result<()> {
        match tag {
            SEND => {
                self.sent = core.now();
                core.metrics.count("irqfd_signals");
                if core.costs.irqfd_inject_ns == 0 {
                    return self.inject(core); // as before the cost existed: same events
                }
                core.q
                    .schedule_in(core.costs.irqfd_inject_ns, Ev::Workload(INJECT, 0))?;
            }
            INJECT => self.inject(core)?,
            _ => {}
        }
        Ok(())
    }

    fn inject(&mut self, core: &mut Core) -> Result<()> {
        let irq = Irq {
            src: IrqSrc::Device { queue: 0 },
            sent: self.sent,
        };
        core.deliver(0, irq, None)
    }

    pub(super) fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        if let Hook::Irq(0, irq) = hook {
            let lat = core.now() - irq.sent;
            core.metrics.sample("wakeup_ns", lat);
            core.q
                .schedule_in(self.interval_ns, Ev::Workload(SEND, 0))?;
        }
        Ok(())
    }
}
