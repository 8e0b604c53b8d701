//! Batched moderation events (`Moderation::on_submits`, `Moderation::on_completions`): a
//! run of N events fed at once gives the same decisions, and leaves the policy in the same
//! state, as the N events fed one by one, for every policy.

use vmirq_policy::moderation::{
    CompletionMeta, Decision, Decisions, Event, Moderation, Moderator, RequestKind,
};
use vmirq_policy::spec::ModerationSpec;

const SPECS: &[&str] = &[
    "none",
    "count",
    "count:usecs=20,frames=4",
    "count:usecs=0,frames=8",
    "vic",
    "ipi-gap",
    "dim",
    "dim-lat",
    "dim-loop",
    "spdk",
    "budget",
];

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u32) -> u32 {
        u32::try_from(self.next() % u64::from(n)).unwrap_or(0)
    }
}

fn meta(r: &mut Rng) -> CompletionMeta {
    let bytes = [64, 66, 128, 1514, 9014][r.below(5) as usize];
    let m = CompletionMeta::new(RequestKind::Read, bytes);
    if r.below(4) == 0 {
        m.with(CompletionMeta::ACK_ONLY)
    } else {
        m
    }
}

fn one_by_one(p: &mut Moderation, now: u64, events: &[Event]) -> Decisions {
    let mut out = Decisions::default();
    for &e in events {
        out.add(p.on_event(now, e));
    }
    out
}

#[test]
fn a_batch_of_n_events_decides_as_n_single_events_for_every_policy() {
    for spec in SPECS {
        let spec: ModerationSpec = spec.parse().expect(spec);
        for seed in 1..=20u64 {
            let mut single = spec.build();
            single.start_at(0);
            let mut batched = single;
            let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut now = 0u64;
            for step in 0..400 {
                now += u64::from(r.below(40_000));
                let n = r.below(40);
                let (want, got) = match r.below(3) {
                    0 => {
                        let events: Vec<Event> = (0..n).map(|_| Event::Submit).collect();
                        (
                            one_by_one(&mut single, now, &events),
                            batched.on_submits(now, n),
                        )
                    }
                    1 => {
                        let metas: Vec<CompletionMeta> = (0..n).map(|_| meta(&mut r)).collect();
                        let events: Vec<Event> =
                            metas.iter().map(|m| Event::Complete(*m)).collect();
                        (
                            one_by_one(&mut single, now, &events),
                            batched.on_completions(now, &metas),
                        )
                    }
                    _ => {
                        let d = single.on_event(now, Event::Timer);
                        assert_eq!(batched.on_event(now, Event::Timer), d);
                        continue;
                    }
                };
                assert_eq!(got, want, "{spec} seed {seed} step {step} n {n}");
                assert_eq!(batched, single, "{spec} seed {seed} step {step}: state");
            }
        }
    }
}

#[test]
fn an_empty_batch_changes_nothing() {
    let mut p = "count".parse::<ModerationSpec>().expect("count").build();
    let before = p;
    assert_eq!(p.on_submits(5, 0), Decisions::default());
    assert_eq!(p.on_completions(5, &[]), Decisions::default());
    assert_eq!(p, before);
    assert_eq!(Decisions::default().last, Decision::Idle);
}

#[test]
fn none_notifies_every_completion_of_a_batch_and_holds_nothing() {
    let mut p = "none".parse::<ModerationSpec>().expect("none").build();
    assert_eq!(p.on_submits(1, 32).notify, 0);
    assert_eq!(p.in_flight(), 32);
    let d = p.on_completions(2, &[CompletionMeta::new(RequestKind::Write, 64); 32]);
    assert_eq!((d.notify, d.hold, d.last), (32, 0, Decision::Notify));
    assert_eq!((p.in_flight(), p.held()), (0, 0));
}
