//! What the kick-poll contention gate sees on a CPU: a thread pinned to CPU `CPU` spins for
//! `SECONDS` like a polling worker, samples its own schedstat every millisecond exactly as the
//! queue worker does (`vmirq_blk::cpustat`), and feeds the default `ContentionGate`. Prints
//! one JSON line: the share of its runnable time it waited, the gate's verdicts and how many
//! were contended. Start a neighbour on the same CPU (e.g. `taskset -c 1 nice -n 19 sh -c
//! 'while :; do :; done'`) to see what it does to the gate.
//!
//! `cargo run --release -p vmirq-blk --example gate_probe -- CPU SECONDS`
#![allow(missing_docs)]
#![allow(clippy::cast_precision_loss)] // float reporting of counts

use std::time::{Duration, Instant};
use vmirq_blk::clock::now_ns;
use vmirq_blk::cpustat::{CpuSampler, CpuSource, ThreadSchedstat};
use vmirq_policy::wait::{ContentionConfig, ContentionGate};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: gate_probe CPU SECONDS");
        std::process::exit(2);
    }
    let cpu: usize = args[1].parse().expect("CPU");
    let secs: f64 = args[2].parse().expect("SECONDS");
    if let Err(e) = vmirq_os::pin_current_thread(cpu) {
        panic!("cannot pin to CPU {cpu}: {e}");
    }
    let mut totals = ThreadSchedstat::new();
    let first = totals.read().expect("/proc/thread-self/schedstat");
    let mut sampler = CpuSampler::new(Box::new(ThreadSchedstat::new()));
    let mut gate = ContentionGate::new(ContentionConfig::default());
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut closed_samples = 0u64;
    let mut samples = 0u64;
    while Instant::now() < end {
        let now = now_ns();
        if let Some(s) = sampler.sample(now) {
            samples += 1;
            if !gate.on_sample(now, s) {
                closed_samples += 1;
            }
        }
        std::hint::spin_loop();
    }
    let last = totals.read().expect("schedstat");
    let ran = last.ran_ns - first.ran_ns;
    let waited = last.waited_ns - first.waited_ns;
    let st = gate.stats();
    println!(
        "{{\"cpu\":{cpu},\"waited_pct\":{:.2},\"verdicts\":{},\"contended\":{},\"closed_pct\":{:.1}}}",
        100.0 * waited as f64 / (ran + waited).max(1) as f64,
        st.verdicts,
        st.contended,
        100.0 * closed_samples as f64 / samples.max(1) as f64
    );
}
