//! Replaying a trace through one moderation policy per queue.
//!
//! Events are fed in order; before each event, every armed policy timer that is due fires (in
//! deadline order), exactly as a device with one timer per queue would see it. After the last
//! event the remaining timers fire, so every completion ends up covered by a notification.
//! Each completion's *added delay* is the time from its completion to the notification that
//! covers it.

use serde::Serialize;
use thiserror::Error;
use vmirq_policy::moderation::{
    CompletionMeta, Decision, Event, Knob, Moderation, Moderator, RequestKind,
};
use vmirq_policy::spec::ModerationSpec;

use crate::stats::DelaySummary;
use crate::trace::{Op, TraceEvent};

/// Most timer firings after the last event before the replay gives up on a policy that keeps
/// holding (a policy bug: every hold is bounded).
const DRAIN_LIMIT: usize = 1_000_000;

/// A policy misbehaved during replay.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplayError {
    /// The policy kept holding completions after the trace ended.
    #[error("policy `{policy}` still holds completions after {DRAIN_LIMIT} timer firings")]
    NeverDrained {
        /// The policy spec.
        policy: String,
    },
    /// A completion was held longer than the policy's own bound.
    #[error("policy `{policy}` held a completion {held_ns} ns, beyond its bound of {bound_ns} ns")]
    BoundExceeded {
        /// The policy spec.
        policy: String,
        /// How long it was held.
        held_ns: u64,
        /// The policy's `max_hold_ns`.
        bound_ns: u64,
    },
}

/// What to record besides the totals.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// Record the policy knob (vIC ratio, DIM profile, ...) at every notification of queue 0.
    pub knob_series: bool,
}

/// The outcome of replaying a trace through a policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// The policy, in canonical spec form.
    pub policy: String,
    /// Completions in the trace.
    pub completions: u64,
    /// Notifications the policy sent.
    pub notifications: u64,
    /// Notifications divided by completions.
    pub notifications_per_completion: f64,
    /// Added delay per completion, in nanoseconds.
    pub added_delay_ns: DelaySummary,
    /// Timer firings.
    pub timer_fires: u64,
    /// `(time_ns, knob)` at each notification of queue 0, when requested.
    #[serde(skip)]
    pub knob_series: Vec<(u64, Knob)>,
}

struct QueueState {
    policy: Moderation,
    timer: Option<u64>,
    held_since: Vec<u64>,
}

struct Replayer {
    name: String,
    bound_ns: u64,
    queues: Vec<QueueState>,
    delays: Vec<u64>,
    notifications: u64,
    timer_fires: u64,
    knobs: Option<Vec<(u64, Knob)>>,
}

impl Replayer {
    fn apply(&mut self, q: usize, now: u64, decision: Decision) -> Result<(), ReplayError> {
        let state = &mut self.queues[q];
        match decision {
            Decision::Notify => {
                self.notifications += 1;
                for since in state.held_since.drain(..) {
                    let held = now - since;
                    if held > self.bound_ns {
                        return Err(ReplayError::BoundExceeded {
                            policy: self.name.clone(),
                            held_ns: held,
                            bound_ns: self.bound_ns,
                        });
                    }
                    self.delays.push(held);
                }
                state.timer = None;
                if let (0, Some(k)) = (q, self.knobs.as_mut()) {
                    k.push((now, state.policy.knob()));
                }
            }
            Decision::Hold { deadline } => state.timer = Some(deadline.max(now)),
            Decision::Idle => state.timer = None,
        }
        Ok(())
    }

    /// The queue whose timer is due first, if any is due by `limit`.
    fn next_timer(&self, limit: u64) -> Option<(usize, u64)> {
        self.queues
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.timer.map(|t| (i, t)))
            .filter(|(_, t)| *t <= limit)
            .min_by_key(|(i, t)| (*t, *i))
    }

    fn fire_due(&mut self, limit: u64) -> Result<usize, ReplayError> {
        let mut fired = 0;
        while let Some((q, at)) = self.next_timer(limit) {
            self.timer_fires += 1;
            let d = self.queues[q].policy.on_event(at, Event::Timer);
            self.apply(q, at, d)?;
            fired += 1;
            if fired > DRAIN_LIMIT {
                return Err(ReplayError::NeverDrained {
                    policy: self.name.clone(),
                });
            }
        }
        Ok(fired)
    }
}

/// Replay `events` through `spec` (one fresh policy per queue).
pub fn replay(
    spec: &ModerationSpec,
    events: &[TraceEvent],
    opts: ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let queues = events
        .iter()
        .map(|e| usize::from(e.queue) + 1)
        .max()
        .unwrap_or(1);
    let proto = spec.build();
    let mut r = Replayer {
        name: spec.to_string(),
        bound_ns: proto.max_hold_ns(),
        queues: (0..queues)
            .map(|_| QueueState {
                policy: spec.build(),
                timer: None,
                held_since: Vec::new(),
            })
            .collect(),
        delays: Vec::with_capacity(events.len() / 2),
        notifications: 0,
        timer_fires: 0,
        knobs: opts.knob_series.then(Vec::new),
    };
    let meta = CompletionMeta::new(RequestKind::Read, 4096);
    for ev in events {
        r.fire_due(ev.time_ns)?;
        let q = usize::from(ev.queue);
        let event = match ev.op {
            Op::Submit => Event::Submit,
            Op::Complete => {
                r.queues[q].held_since.push(ev.time_ns);
                Event::Complete(meta)
            }
        };
        let d = r.queues[q].policy.on_event(ev.time_ns, event);
        r.apply(q, ev.time_ns, d)?;
    }
    r.fire_due(u64::MAX)?;
    if r.queues.iter().any(|s| !s.held_since.is_empty()) {
        return Err(ReplayError::NeverDrained { policy: r.name });
    }
    let completions = events.iter().filter(|e| e.op == Op::Complete).count() as u64;
    let per = if completions == 0 {
        0.0
    } else {
        r.notifications as f64 / completions as f64
    };
    Ok(ReplayReport {
        policy: r.name,
        completions,
        notifications: r.notifications,
        notifications_per_completion: per,
        added_delay_ns: DelaySummary::of(&mut r.delays),
        timer_fires: r.timer_fires,
        knob_series: r.knobs.unwrap_or_default(),
    })
}
