//! Replay invariants over the policies: every completion is covered, no hold exceeds the
//! policy's bound, and `none` notifies exactly once per completion.

use proptest::prelude::*;
use vmirq_policy::spec::ModerationSpec;
use vmirq_replay::synthetic::default_trace;
use vmirq_replay::trace::{Op, TraceEvent};
use vmirq_replay::{replay, ReplayOptions};

const POLICIES: &[&str] = &[
    "none",
    "count",
    "count:usecs=10,frames=4",
    "vic",
    "ipi-gap",
    "dim",
    "dim:mode=cqe",
    "dim:variant=rdma",
    "dim:latency=on",
    "spdk",
    "budget",
    "budget:us=5",
];

fn spec(s: &str) -> ModerationSpec {
    s.parse().unwrap_or(ModerationSpec::None)
}

#[test]
fn none_notifies_once_per_completion_with_zero_delay() {
    let trace = default_trace(7);
    let r = replay(&spec("none"), &trace, ReplayOptions::default()).map_err(|e| e.to_string());
    let r = r.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.notifications, r.completions);
    assert_eq!(r.added_delay_ns.max, 0);
}

#[test]
fn moderating_policies_save_notifications_on_the_default_trace() {
    let trace = default_trace(7);
    for p in ["count", "vic", "dim", "budget"] {
        let r =
            replay(&spec(p), &trace, ReplayOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            r.notifications_per_completion < 0.6,
            "{p}: {}",
            r.notifications_per_completion
        );
        assert!(r.notifications > 0);
    }
}

#[test]
fn vic_knob_series_shows_adaptation() {
    let trace = default_trace(7);
    let r = replay(&spec("vic"), &trace, ReplayOptions { knob_series: true })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.knob_series.len() as u64, r.notifications);
    let active = r
        .knob_series
        .iter()
        .filter(|(_, k)| {
            matches!(
                k,
                vmirq_policy::moderation::Knob::Ratio { active: true, .. }
            )
        })
        .count();
    assert!(active > 0 && active < r.knob_series.len());
}

/// A random valid closed-loop-ish trace on up to 3 queues.
fn arb_trace() -> impl Strategy<Value = Vec<TraceEvent>> {
    proptest::collection::vec((0u64..50_000, any::<bool>(), 0u16..3), 1..400).prop_map(|steps| {
        let mut t = 0;
        let mut inflight = [0u32; 3];
        let mut out = Vec::new();
        for (dt, submit, q) in steps {
            t += dt;
            let qi = usize::from(q);
            let op = if submit || inflight[qi] == 0 {
                Op::Submit
            } else {
                Op::Complete
            };
            if op == Op::Submit {
                inflight[qi] += 1;
            } else {
                inflight[qi] -= 1;
            }
            out.push(TraceEvent {
                time_ns: t,
                op,
                queue: q,
            });
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Every completion is eventually covered by a notification, and no completion is held
    /// beyond the policy's bound (the replayer checks both and errors otherwise).
    #[test]
    fn every_policy_covers_every_completion_within_its_bound(trace in arb_trace()) {
        for p in POLICIES {
            let r = replay(&spec(p), &trace, ReplayOptions::default());
            prop_assert!(r.is_ok(), "{}: {:?}", p, r.err());
            let r = r.unwrap_or_else(|_| unreachable!());
            let completions = trace.iter().filter(|e| e.op == Op::Complete).count() as u64;
            prop_assert_eq!(r.completions, completions);
            prop_assert!(r.notifications <= completions);
            if completions > 0 {
                prop_assert!(r.notifications >= 1);
            }
            if *p == "none" {
                prop_assert_eq!(r.notifications, completions);
            }
        }
    }
}
