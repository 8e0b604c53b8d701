//! Decision cost per completion for each moderation policy, and per wait for each wait
//! policy. One iteration = one `Complete` decision plus the `Submit` that refills the queue
//! (a closed loop at queue depth 32, one completion per µs of virtual time), or one
//! `begin` + `end` pair for wait policies.
#![allow(missing_docs)] // criterion_group! generates an undocumented function.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use vmirq_policy::moderation::{CompletionMeta, Event, Moderator, RequestKind};
use vmirq_policy::spec::{ModerationSpec, WaitSpec};
use vmirq_policy::wait::{Waiter, WakeOutcome};

const MODERATION: &[&str] = &[
    "none",
    "count",
    "vic",
    "ipi-gap",
    "dim",
    "dim:latency=on",
    "spdk",
    "budget",
];
const WAIT: &[&str] = &["never", "fixed", "kvm", "guest-haltpoll", "histogram"];

fn moderation(c: &mut Criterion) {
    let mut group = c.benchmark_group("moderation_decision");
    let done = Event::Complete(CompletionMeta::new(RequestKind::Read, 4096));
    for spec in MODERATION {
        let Ok(parsed) = spec.parse::<ModerationSpec>() else {
            continue;
        };
        let mut policy = parsed.build();
        let mut now = 0u64;
        for _ in 0..32 {
            policy.on_event(now, Event::Submit);
        }
        group.bench_function(*spec, |b| {
            b.iter(|| {
                now += 1_000;
                let d = policy.on_event(black_box(now), black_box(done));
                policy.on_event(now, Event::Submit);
                d
            });
        });
    }
    group.finish();
}

fn wait(c: &mut Criterion) {
    let mut group = c.benchmark_group("wait_decision");
    for spec in WAIT {
        let Ok(parsed) = spec.parse::<WaitSpec>() else {
            continue;
        };
        let mut policy = parsed.build();
        let mut now = 0u64;
        let mut i = 0u64;
        group.bench_function(*spec, |b| {
            b.iter(|| {
                i += 1;
                let d = policy.begin(black_box(now));
                // Alternate short and long idle periods so adaptive policies keep moving.
                now += if i % 4 == 0 { 500_000 } else { 20_000 };
                policy.end(
                    now,
                    if d.window_ns(0) > 0 {
                        WakeOutcome::POLLED
                    } else {
                        WakeOutcome::SLEPT
                    },
                );
                d
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = moderation, wait
}
criterion_main!(benches);
