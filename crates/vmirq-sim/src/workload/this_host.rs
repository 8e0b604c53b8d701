//! Workloads that mirror `vmirq kvm` on this host, for the `this-host` prediction of
//! issue 16 (`scenarios/this_host_wake.toml`).
//!
//! `irqfd-micro` is `vmirq kvm wake --path irqfd`: a host thread (not a vCPU) signals vCPU
//! 0's irqfd, waits until the guest handler has run, then waits `interval_us` and signals
//! again, so every halt lasts about the interval. The host thread pays nothing on a pCPU:
//! the wakeup it starts costs the kick and what follows, as for any host-side interrupt.
//! The IPI path is the existing `ipi-micro` workload.

use crate::host::{Core, Ev, Hook, Irq, IrqSrc, Result};
use crate::Nanos;

const SEND: u32 = 40;

/// Host thread signalling vCPU 0's irqfd `interval_ns` after each handled wake. Records
/// `wakeup_ns`: from the signal to vCPU 0's handler, as `vmirq kvm wake` measures it.
#[derive(Debug, Clone)]
pub struct IrqfdMicro {
    interval_ns: Nanos,
}

impl IrqfdMicro {
    /// Signal `interval_ns` after each handled wake.
    #[must_use]
    pub fn new(interval_ns: Nanos) -> Self {
        Self { interval_ns }
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        core.q
            .schedule_in(self.interval_ns, Ev::Workload(SEND, 0))?;
        core.dispatch(0)
    }

    pub(super) fn timer(&mut self, core: &mut Core, tag: u32) -> Result<()> {
        if tag == SEND {
            let irq = Irq {
                src: IrqSrc::Device { queue: 0 },
                sent: core.now(),
            };
            core.metrics.count("irqfd_signals");
            core.deliver(0, irq, None)?;
        }
        Ok(())
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
