//! Beyond the papers: coalescing Shoot4U's physical IPIs per target pCPU with vmirq-policy's
//! `ipi-gap` moderation policy (the policy decides, this module executes: send now, or
//! arm a timer and let the flush ride on the IPI sent when it fires).

use super::Guest;
use crate::engine::Timer;
use crate::host::{Core, Ev, Result};
use crate::Nanos;
use vmirq_policy::moderation::{
    CompletionMeta, Decision, Event, IpiGap, IpiGapConfig, Moderator, RequestKind,
};

/// Workload timer tag of a held host IPI (data = pCPU).
pub const GAP_TIMER: u32 = 70;

/// One `ipi-gap` policy and its timer per pCPU.
#[derive(Debug, Clone)]
pub(crate) struct HostIpiGap {
    gap_us: u32,
    policy: Vec<IpiGap>,
    timer: Vec<Timer>,
}

impl HostIpiGap {
    pub(crate) fn new(gap_us: u32) -> Self {
        Self {
            gap_us,
            policy: Vec::new(),
            timer: Vec::new(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.gap_us > 0
    }
}

impl Guest {
    /// A flush for pCPU `p`: returns when the IPI that carries it is sent (now, or the
    /// policy's deadline).
    pub(super) fn gap_flush(
        &mut self,
        core: &mut Core,
        p: usize,
        remote_ns: Nanos,
    ) -> Result<Nanos> {
        let now = core.now();
        let g = &mut self.gap;
        if g.policy.len() < core.pcpus.len() {
            let cfg = IpiGapConfig { gap_us: g.gap_us };
            g.policy.resize(core.pcpus.len(), IpiGap::new(cfg));
            g.timer.resize(core.pcpus.len(), Timer::default());
        }
        let meta = CompletionMeta::new(RequestKind::Other, 0).with(CompletionMeta::CROSS_CPU);
        match g.policy[p].on_event(now, Event::Complete(meta)) {
            Decision::Notify => {
                g.timer[p].cancel(&mut core.q);
                core.host_interrupt(p, remote_ns)?;
                core.metrics.count("s4u_host_ipis");
                Ok(now)
            }
            Decision::Hold { deadline } => {
                let at = deadline.max(now);
                if !g.timer[p].armed() {
                    g.timer[p].arm(&mut core.q, at, Ev::Workload(GAP_TIMER, p as u64))?;
                }
                core.metrics.count("s4u_ipis_coalesced");
                Ok(at)
            }
            Decision::Idle => Ok(now),
        }
    }

    /// The held IPI of pCPU `p` is due.
    ///
    /// # Errors
    /// Engine errors.
    pub fn gap_timer(&mut self, core: &mut Core, p: usize) -> Result<()> {
        let now = core.now();
        let g = &mut self.gap;
        if p >= g.policy.len() {
            return Ok(());
        }
        g.timer[p].fired();
        match g.policy[p].on_event(now, Event::Timer) {
            Decision::Notify => {
                let remote = core.costs.exit_roundtrip_ns
                    + core.costs.host_irq_ns
                    + self.cfg.costs.invvpid_ns;
                core.host_interrupt(p, remote)?;
                core.metrics.count("s4u_host_ipis");
            }
            Decision::Hold { deadline } => {
                g.timer[p].arm(
                    &mut core.q,
                    deadline.max(now),
                    Ev::Workload(GAP_TIMER, p as u64),
                )?;
            }
            Decision::Idle => {}
        }
        Ok(())
    }
}
