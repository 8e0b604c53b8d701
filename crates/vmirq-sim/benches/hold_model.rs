//! Criterion hold-model benchmark of the event engine (events per second).
//! Target from the issue: at least 10 million events per second with 1,000 pending events.
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use vmirq_sim::hold::run_hold;

fn hold(c: &mut Criterion) {
    let mut g = c.benchmark_group("hold_model");
    const EVENTS: u64 = 1_000_000;
    for pending in [1_000u32, 100_000] {
        g.throughput(Throughput::Elements(EVENTS));
        g.bench_function(format!("pending_{pending}"), |b| {
            b.iter(|| black_box(run_hold(black_box(42), pending, EVENTS, 1_000)))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = hold
}
criterion_main!(benches);
