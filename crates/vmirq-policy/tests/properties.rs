//! Property tests of the invariants each policy promises (proptest, virtual clock).

use proptest::prelude::*;
use vmirq_policy::moderation::{
    CompletionMeta, Decision, Dim, DimConfig, DimLoopConfig, DimLoopQueue, DimMode, DimVariant,
    Event, Knob, Moderator, RequestKind, Vic, VicConfig,
};
use vmirq_policy::spec::{ModerationSpec, WaitSpec};
use vmirq_policy::wait::{
    ContentionConfig, ContentionGate, CpuSample, KvmHaltPoll, KvmHaltPollConfig, WaitDecision,
    Waiter, WakeOutcome,
};

const DONE: Event = Event::Complete(CompletionMeta {
    kind: RequestKind::Read,
    bytes: 4096,
    flags: 0,
});

/// One step of a random workload: advance time, then submit or complete, or fire the timer.
#[derive(Debug, Clone, Copy)]
enum Step {
    Submit(u32),
    Complete(u32, u8),
    Timer,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        (0u32..20_000).prop_map(Step::Submit),
        (0u32..20_000, any::<u8>()).prop_map(|(dt, f)| Step::Complete(dt, f)),
        Just(Step::Timer),
    ];
    proptest::collection::vec(step, 1..600)
}

const SPECS: &[&str] = &[
    "none",
    "count",
    "count:usecs=5,frames=3",
    "vic",
    "vic:cif_low=0,max_delay_us=30",
    "ipi-gap",
    "dim",
    "dim:mode=cqe,latency=on",
    "dim:variant=rdma",
    "dim-loop",
    "dim-loop:period_ms=1,mode=cqe",
    "dim-lat",
    "dim-lat:mode=cqe,ack_pct=0,gap_us=100",
    "spdk",
    "spdk:delay_base_us=500,iops_threshold=100",
    "budget",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A caller that obeys the decisions (fires each timer at its deadline) never holds a
    /// completion beyond the policy's bound, and everything is covered in the end.
    #[test]
    fn obeyed_policies_cover_every_completion_within_bound(steps in steps()) {
        for s in SPECS {
            let mut p = s.parse::<ModerationSpec>().map(|m| m.build()).unwrap_or_else(|e| panic!("{e}"));
            let bound = p.max_hold_ns();
            let (mut now, mut cif, mut timer) = (0u64, 0u32, None::<u64>);
            let mut held: Vec<u64> = Vec::new();
            let apply = |d: Decision, now: u64, held: &mut Vec<u64>, timer: &mut Option<u64>| {
                match d {
                    Decision::Notify => {
                        for t in held.drain(..) {
                            assert!(now - t <= bound, "{s}: held {} > bound {bound}", now - t);
                        }
                        *timer = None;
                    }
                    Decision::Hold { deadline } => {
                        assert!(!held.is_empty(), "{s}: hold with nothing held");
                        assert!(deadline >= now, "{s}: deadline in the past");
                        *timer = Some(deadline);
                    }
                    Decision::Idle => {
                        assert!(held.is_empty(), "{s}: idle while holding");
                        *timer = None;
                    }
                }
            };
            for step in &steps {
                let (dt, event) = match *step {
                    Step::Submit(dt) => (dt, Event::Submit),
                    Step::Complete(dt, flags) if cif > 0 => {
                        (dt, Event::Complete(CompletionMeta { kind: RequestKind::Write, bytes: 512, flags }))
                    }
                    Step::Complete(dt, _) => (dt, Event::Submit),
                    Step::Timer => (0, Event::Timer),
                };
                let target = now + u64::from(dt);
                // The obedient caller: fire the timer when it is due before moving on.
                while let Some(deadline) = timer.filter(|d| *d <= target) {
                    now = deadline.max(now);
                    let d = p.on_event(now, Event::Timer);
                    apply(d, now, &mut held, &mut timer);
                }
                now = target;
                match event {
                    Event::Submit => cif += 1,
                    Event::Complete(_) => {
                        cif -= 1;
                        held.push(now);
                    }
                    Event::Timer => {}
                }
                let d = p.on_event(now, event);
                apply(d, now, &mut held, &mut timer);
                prop_assert_eq!(p.in_flight(), cif);
            }
            let mut rounds = 0;
            while let Some(deadline) = timer {
                now = deadline.max(now);
                let d = p.on_event(now, Event::Timer);
                apply(d, now, &mut held, &mut timer);
                rounds += 1;
                prop_assert!(rounds < 1000, "{} never drains", s);
            }
            prop_assert!(held.is_empty(), "{} left completions held", s);
        }
    }

    /// `none` notifies exactly once per completion.
    #[test]
    fn none_notifies_exactly_once_per_completion(n in 1u32..500) {
        let mut p = "none".parse::<ModerationSpec>().map(|m| m.build()).unwrap_or_else(|e| panic!("{e}"));
        let mut notes = 0;
        for i in 0..n {
            p.on_event(u64::from(i), Event::Submit);
            notes += u32::from(p.on_event(u64::from(i), DONE) == Decision::Notify);
        }
        prop_assert_eq!(notes, n);
    }

    /// vIC delivers its ratio: over k whole cycles at fixed CIF, exactly deliver × k
    /// completions notify (within one completion per cycle for partial cycles).
    #[test]
    fn vic_fraction_matches_ratio(deliver in 1u8..6, extra in 0u8..10, cif in 8u32..200, completions in 50u32..2000) {
        let of = deliver + extra;
        let table = [vmirq_policy::moderation::VicRatio { cif_min: 5, deliver, of }];
        let cfg = VicConfig::default().with_table(&table).unwrap_or_default();
        let mut v = Vic::new(cfg);
        let mut t = 0;
        for _ in 0..cif {
            v.on_event(t, Event::Submit);
        }
        // Open the rate gate: one epoch at 1 completion per µs.
        for _ in 0..11_000 {
            t += 1_000;
            v.on_event(t, DONE);
            v.on_event(t, Event::Submit);
        }
        while v.held() != 0 {
            t += 1_000;
            v.on_event(t, DONE);
            v.on_event(t, Event::Submit);
        }
        let mut notes = 0u32;
        for _ in 0..completions {
            t += 1_000;
            notes += u32::from(v.on_event(t, DONE) == Decision::Notify);
            v.on_event(t, Event::Submit);
        }
        let of = u32::from(of);
        let deliver = u32::from(deliver);
        let cycles = completions / of;
        let expected_min = cycles * deliver;
        let expected_max = expected_min + deliver;
        prop_assert!(notes >= expected_min && notes <= expected_max, "{} of {} at {}/{}", notes, completions, deliver, of);
    }

    /// DIM's profile index stays in its table whatever the traffic.
    #[test]
    fn dim_index_stays_in_range(gaps in proptest::collection::vec(1u64..200_000, 100..3000), cqe: bool, rdma: bool) {
        let cfg = DimConfig {
            mode: if cqe { DimMode::Cqe } else { DimMode::Eqe },
            variant: if rdma { DimVariant::Rdma } else { DimVariant::Net },
            ..DimConfig::default()
        };
        let mut d = Dim::new(cfg);
        let max_index = if rdma { 8 } else { 4 };
        let mut t = 0;
        for _ in 0..64 {
            d.on_event(t, Event::Submit);
        }
        for gap in gaps {
            t += gap;
            d.on_event(t, DONE);
            d.on_event(t, Event::Timer);
            d.on_event(t, Event::Submit);
            prop_assert!(d.index() <= max_index);
            let in_range = matches!(d.knob(), Knob::Profile { index, .. } if index <= max_index);
            prop_assert!(in_range);
        }
    }

    /// `dim-loop` wakes exactly once per period boundary passed (its host cost is 1/period
    /// whatever the traffic), replayed or not, and its profile stays in the table.
    #[test]
    fn dim_loop_wakes_once_per_period(
        gaps in proptest::collection::vec(1u64..40_000_000, 1..400),
        period_ms in 1u32..30,
    ) {
        let mut q = DimLoopQueue::new(DimLoopConfig { period_ms, ..DimLoopConfig::default() });
        let (mut t, mut timer) = (0u64, None::<u64>);
        for gap in gaps {
            let next = t + gap;
            while let Some(dl) = timer.filter(|dl| *dl <= next) {
                timer = match q.on_event(dl.max(t), Event::Timer) {
                    Decision::Hold { deadline } => Some(deadline),
                    _ => None,
                };
            }
            t = next;
            q.on_event(t, Event::Submit);
            if let Decision::Hold { deadline } = q.on_event(t, DONE) {
                timer = Some(deadline);
            }
            let period_ns = u64::from(period_ms) * 1_000_000;
            prop_assert_eq!(q.control_loop().wakeups(), t / period_ns);
            prop_assert!(q.control_loop().next_wakeup() > t);
            let in_range = matches!(q.knob(), Knob::Profile { index, .. } if index <= 4);
            prop_assert!(in_range);
        }
    }

    /// KVM's window stays in [0, max] whatever the halts.
    #[test]
    fn kvm_window_stays_in_range(halts in proptest::collection::vec((1u64..2_000_000, any::<bool>()), 1..500), max in 0u64..500_000) {
        let mut k = KvmHaltPoll::new(KvmHaltPollConfig { max_ns: max, ..KvmHaltPollConfig::default() });
        let mut t = 0;
        for (len, valid) in halts {
            let w = k.begin(t).window_ns(t);
            prop_assert!(w <= max);
            t += len;
            k.end(t, WakeOutcome { slept: len > w, valid, wake_cost_ns: 0 });
            prop_assert!(k.window_ns() <= max);
        }
    }

    /// Every wait policy's window stays within its maximum.
    #[test]
    fn wait_windows_stay_within_max(idles in proptest::collection::vec(1u64..5_000_000, 1..400)) {
        for s in ["never", "fixed", "kvm", "guest-haltpoll", "histogram", "histogram:max_ns=30000"] {
            let mut w = s.parse::<WaitSpec>().map(|w| w.build()).unwrap_or_else(|e| panic!("{e}"));
            let mut t = 0;
            for idle in &idles {
                let window = w.begin(t).window_ns(t);
                prop_assert!(window <= w.max_window_ns(), "{}", s);
                t += idle;
                w.end(t, WakeOutcome { slept: *idle > window, valid: true, wake_cost_ns: idle / 10 });
            }
        }
    }

    /// The contention gate: a closed spell never outlasts `hold_max_ns` past the sample that
    /// closed it, a waiter that never waits is never stopped, and a sleep is never turned
    /// into a poll.
    #[test]
    fn contention_gate_is_bounded_and_never_invents_polls(
        samples in proptest::collection::vec((1u64..3_000_000, 0u64..3_000_000, 0u64..3_000_000), 1..400),
        wait_pct in 1u32..=100,
    ) {
        let cfg = ContentionConfig { wait_pct, ..ContentionConfig::default() };
        let mut gate = ContentionGate::new(cfg);
        let mut never_waits = ContentionGate::new(cfg);
        let mut t = 0u64;
        for (dt, ran_ns, waited_ns) in samples {
            t += dt;
            gate.on_sample(t, CpuSample { ran_ns, waited_ns, siblings_ns: 0 });
            never_waits.on_sample(t, CpuSample { ran_ns, waited_ns: 0, siblings_ns: waited_ns });
            prop_assert!(gate.is_open(t + cfg.hold_max_ns));
            prop_assert!(never_waits.is_open(t));
            prop_assert_eq!(gate.admit(t, WaitDecision::Sleep), WaitDecision::Sleep);
            let poll = WaitDecision::Poll { until: t + 1 };
            prop_assert_eq!(gate.admit(t, poll) == poll, gate.is_open(t));
        }
        prop_assert!(gate.stats().contended <= gate.stats().verdicts);
    }
}
