//! The policy-decision time series for the bursty workload. The backend does not export its
//! policy state, so the client's own submit/complete timestamps are replayed through
//! vmirq-policy in-process (timers fire at their deadlines) and the knob
//! ([`Moderator::knob`]) is sampled after each event. The plots label it as a replay: it shows
//! what the policy decides for this arrival pattern, not a trace read out of the backend.

use crate::client::TraceEvent;
use serde::{Deserialize, Serialize};
use vmirq_policy::moderation::{CompletionMeta, Decision, Event, Knob, Moderator, RequestKind};
use vmirq_policy::spec::ModerationSpec;

/// Most points kept per series (the plot does not need more).
pub const POINTS_MAX: usize = 1500;

/// One sample of the knob.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KnobPoint {
    /// Microseconds since the start of the measured window.
    pub t_us: f64,
    /// Commands in flight at that moment (from the trace).
    pub in_flight: u32,
    /// The knob as one number (see [`knob_value`]).
    pub value: f64,
}

/// The knob of one policy over the bursty trace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KnobSeries {
    /// Policy spec, canonical form.
    pub policy: String,
    /// What `value` means.
    pub unit: String,
    /// Which target's run the trace came from.
    pub trace_from: String,
    /// Notifications the policy asked for over the trace.
    pub notifications: u64,
    /// Completions in the trace.
    pub completions: u64,
    /// Samples, evenly thinned to at most [`POINTS_MAX`].
    pub points: Vec<KnobPoint>,
}

/// The knob as one plottable number and its unit.
#[must_use]
pub fn knob_value(k: Knob) -> (f64, &'static str) {
    match k {
        Knob::Fixed => (0.0, "fixed"),
        Knob::Ratio {
            deliver,
            of,
            active,
        } => {
            let r = if active && of > 0 {
                f64::from(deliver) / f64::from(of)
            } else {
                1.0
            };
            (r, "vIC delivery ratio (1 = every completion)")
        }
        Knob::Profile { index, .. } => (f64::from(index), "DIM profile index"),
        Knob::Gap { ns } => (crate::stats::as_f64(ns) / 1000.0, "notification gap (us)"),
        Knob::Budget { batch_cap, .. } => (f64::from(batch_cap), "budget batch cap"),
    }
}

/// Replay `trace` (from target `trace_from`) through a fresh instance of `spec`.
#[must_use]
pub fn replay(trace: &[TraceEvent], spec: &ModerationSpec, trace_from: &str) -> KnobSeries {
    let mut policy = spec.build();
    let mut timer: Option<u64> = None;
    let mut in_flight = 0u32;
    let mut notifications = 0u64;
    let mut completions = 0u64;
    let mut points = Vec::with_capacity(trace.len().min(POINTS_MAX * 2));
    let stride = trace.len().div_ceil(POINTS_MAX).max(1);
    let mut unit = "fixed";
    let apply = |d: Decision, timer: &mut Option<u64>, n: &mut u64| match d {
        Decision::Notify => {
            *n += 1;
            *timer = None;
        }
        Decision::Hold { deadline } => *timer = Some(deadline),
        Decision::Idle => *timer = None,
    };
    for (i, ev) in trace.iter().enumerate() {
        // Deliver a due timer first (bounded: a timer answers Notify, Idle or a later Hold).
        for _ in 0..4 {
            match timer {
                Some(deadline) if deadline <= ev.t_ns => {
                    let d = policy.on_event(deadline, Event::Timer);
                    timer = None;
                    apply(d, &mut timer, &mut notifications);
                }
                _ => break,
            }
        }
        let event = if ev.complete {
            in_flight = in_flight.saturating_sub(1);
            completions += 1;
            Event::Complete(CompletionMeta::new(
                RequestKind::Read,
                crate::workload::BLOCK_4K,
            ))
        } else {
            in_flight += 1;
            Event::Submit
        };
        let d = policy.on_event(ev.t_ns, event);
        apply(d, &mut timer, &mut notifications);
        if i % stride == 0 {
            let (value, u) = knob_value(policy.knob());
            unit = u;
            points.push(KnobPoint {
                t_us: crate::stats::as_f64(ev.t_ns) / 1000.0,
                in_flight,
                value,
            });
        }
    }
    KnobSeries {
        policy: spec.to_string(),
        unit: unit.to_owned(),
        trace_from: trace_from.to_owned(),
        notifications,
        completions,
        points,
    }
}

/// The policies whose knob is plotted.
#[must_use]
pub fn plotted_policies() -> Vec<ModerationSpec> {
    ["vic", "dim", "budget:us=20"]
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic trace: `bursts` rounds of `depth` submits, then `depth` completions 2 us
    /// apart, then a 200 us quiet gap.
    fn trace(bursts: u64, depth: u64) -> Vec<TraceEvent> {
        let mut v = Vec::new();
        let mut t = 0;
        for _ in 0..bursts {
            for _ in 0..depth {
                v.push(TraceEvent {
                    t_ns: t,
                    complete: false,
                });
            }
            for _ in 0..depth {
                t += 2_000;
                v.push(TraceEvent {
                    t_ns: t,
                    complete: true,
                });
            }
            t += 200_000;
        }
        v
    }

    #[test]
    fn none_notifies_every_completion() {
        let none: ModerationSpec = "none".parse().expect("none");
        let s = replay(&trace(10, 8), &none, "test");
        assert_eq!(s.completions, 80);
        assert_eq!(s.notifications, 80);
        assert!(s.points.iter().all(|p| p.in_flight <= 8));
    }

    #[test]
    fn points_are_thinned_and_ordered() {
        let none: ModerationSpec = "none".parse().expect("none");
        let s = replay(&trace(2000, 4), &none, "test");
        assert!(s.points.len() <= POINTS_MAX + 1, "{}", s.points.len());
        assert!(s.points.windows(2).all(|w| w[0].t_us <= w[1].t_us));
    }

    #[test]
    fn a_coalescing_policy_notifies_less_than_once_per_completion() {
        let count: ModerationSpec = "count:usecs=50,frames=32".parse().expect("count");
        let s = replay(&trace(50, 32), &count, "test");
        assert_eq!(s.completions, 1600);
        assert!(
            s.notifications >= 50,
            "every burst is delivered: {}",
            s.notifications
        );
        assert!(s.notifications < 1600, "{}", s.notifications);
    }

    #[test]
    fn knob_values_have_units() {
        let (v, u) = knob_value(Knob::Ratio {
            deliver: 1,
            of: 4,
            active: true,
        });
        assert_eq!(v, 0.25);
        assert!(u.contains("vIC"));
        assert_eq!(
            knob_value(Knob::Ratio {
                deliver: 1,
                of: 4,
                active: false
            })
            .0,
            1.0
        );
        assert_eq!(plotted_policies().len(), 3);
    }
}
