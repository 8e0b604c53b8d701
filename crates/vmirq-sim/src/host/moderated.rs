//! What every moderated device queue (storage, NIC) does with its completion policy: carry out
//! a decision (inject the interrupt, arm or cancel the hold timer) and record the policy's knob
//! as a time series when it changes. One copy for all device kinds.

use super::{Core, Ev, Irq, IrqSrc, Result, VcpuId};
use crate::engine::Timer;
use vmirq_policy::moderation::{Decision, Knob};

/// A knob as a time-series point: its name and value (vIC ratio in permille, 1000 while
/// inactive; DIM timer; gap; budget batch cap). `None` for policies without a knob.
fn knob_point(knob: Knob) -> Option<(&'static str, i64)> {
    Some(match knob {
        Knob::Ratio {
            deliver,
            of,
            active,
        } => {
            let r = if active {
                i64::from(deliver) * 1000 / i64::from(of.max(1))
            } else {
                1000
            };
            ("vic_ratio_permille", r)
        }
        Knob::Profile { usecs, .. } => ("dim_usecs", i64::from(usecs)),
        Knob::Gap { ns } => ("gap_ns", i64::try_from(ns).unwrap_or(i64::MAX)),
        Knob::Budget { batch_cap, .. } => ("budget_batch_cap", i64::from(batch_cap)),
        Knob::Fixed => return None,
    })
}

/// Where a queue's notification goes and how it is counted.
pub(super) struct QueueTarget {
    /// The vCPU that takes the interrupt.
    pub vcpu: VcpuId,
    /// Queue index (the interrupt's source).
    pub queue: usize,
    /// The event the hold timer fires.
    pub timer_event: Ev,
    /// Metric counted for each interrupt sent.
    pub sent_metric: &'static str,
    /// `Some(metric)` when the guest suppresses notifications right now: count it instead.
    pub suppressed_metric: Option<&'static str>,
}

impl Core {
    /// Carry out `dec` for a queue whose hold timer is `timer`; returns the timer to store back.
    pub(super) fn apply_moderation(
        &mut self,
        mut timer: Timer,
        dec: Decision,
        t: QueueTarget,
    ) -> Result<Timer> {
        let now = self.now();
        match dec {
            Decision::Notify => {
                timer.cancel(&mut self.q);
                if let Some(metric) = t.suppressed_metric {
                    self.metrics.count(metric);
                } else {
                    self.metrics.count(t.sent_metric);
                    let queue = u16::try_from(t.queue).unwrap_or(u16::MAX);
                    self.deliver(
                        t.vcpu,
                        Irq {
                            src: IrqSrc::Device { queue },
                            sent: now,
                        },
                        None,
                    )?;
                }
            }
            Decision::Hold { deadline } => {
                timer.arm(&mut self.q, deadline.max(now), t.timer_event)?
            }
            Decision::Idle => timer.cancel(&mut self.q),
        }
        Ok(timer)
    }

    /// Record `knob` as a time-series point if it differs from `last`.
    pub(super) fn record_knob_point(&mut self, knob: Knob, last: &mut Option<i64>) {
        let Some((name, v)) = knob_point(knob) else {
            return;
        };
        if *last != Some(v) {
            *last = Some(v);
            let now = self.now();
            self.metrics.point(name, now, v);
        }
    }
}
