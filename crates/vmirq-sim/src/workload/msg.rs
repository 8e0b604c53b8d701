//! Message-passing workloads: the IPI wakeup microbenchmark and TCP_RR-style ping-pong.

use crate::host::{Core, Hook, IrqSrc, Result, Work};
use crate::Nanos;

const SEND: u32 = 1;

/// vCPU 1 busy-waits ~interval, then IPIs vCPU 0, which is halted. Records `wakeup_ns`:
/// from the sender's last instruction before the ICR write to vCPU 0's handler.
#[derive(Debug, Clone)]
pub struct IpiMicro {
    interval_ns: Nanos,
}

impl IpiMicro {
    /// IPIs every `interval_ns` (uniform ±10%).
    #[must_use]
    pub fn new(interval_ns: Nanos) -> Self {
        Self { interval_ns }
    }

    fn gap(&self, core: &mut Core) -> Nanos {
        let j = self.interval_ns / 5;
        self.interval_ns - self.interval_ns / 10 + core.rng.below(j.max(1))
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        let g = self.gap(core);
        core.vcpus[1].work.push_back(Work::app(g, SEND));
        core.dispatch(0)?;
        core.dispatch(1)
    }

    pub(super) fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        match hook {
            Hook::App(1, SEND) => {
                core.send_ipi(1, 0, IrqSrc::Ipi { from: 1 })?;
                let g = self.gap(core);
                core.vcpus[1].work.push_back(Work::app(g, SEND));
            }
            Hook::Irq(0, irq) => {
                let lat = core.now() - irq.sent;
                core.metrics.sample("wakeup_ns", lat);
            }
            _ => {}
        }
        Ok(())
    }
}

/// TCP_RR ping-pong: client vCPU 0, server vCPU 1, `work_ns` per message per side.
/// Records `rtt_ns` (one transaction, measured at the client between sends).
#[derive(Debug, Clone)]
pub struct TcpRr {
    work_ns: Nanos,
    server_extra_ns: Nanos,
    last_send: Option<Nanos>,
}

const REPLY: u32 = 2;

impl TcpRr {
    /// Ping-pong with `work_ns` of guest work per message, plus `server_extra_ns` per
    /// request on the server (a memcached-like server).
    #[must_use]
    pub fn new(work_ns: Nanos, server_extra_ns: Nanos) -> Self {
        Self {
            work_ns,
            server_extra_ns,
            last_send: None,
        }
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        core.vcpus[0].work.push_back(Work::app(self.work_ns, SEND));
        core.dispatch(0)?;
        core.dispatch(1)
    }

    pub(super) fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        match hook {
            Hook::App(0, SEND) => {
                let now = core.now();
                if let Some(t) = self.last_send.replace(now) {
                    core.metrics.sample("rtt_ns", now - t);
                }
                core.metrics.count("transactions");
                core.send_ipi(0, 1, IrqSrc::Resched { from: 0 })?;
            }
            Hook::App(1, REPLY) => core.send_ipi(1, 0, IrqSrc::Resched { from: 1 })?,
            Hook::Irq(1, _) => core.vcpus[1]
                .work
                .push_back(Work::app(self.work_ns + self.server_extra_ns, REPLY)),
            Hook::Irq(0, _) => core.vcpus[0].work.push_back(Work::app(self.work_ns, SEND)),
            _ => {}
        }
        Ok(())
    }
}
