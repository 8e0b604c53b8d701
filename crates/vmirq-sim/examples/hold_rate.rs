//! Hold-model event rate without criterion: `cargo run --release -p vmirq-sim --example
//! hold_rate [EVENTS] [PENDING]`. Prints events per wall-clock second; run it under
//! `/usr/bin/time` to also get events per CPU second on a busy machine.

use std::time::Instant;
use vmirq_sim::hold::run_hold;

fn main() {
    let mut args = std::env::args().skip(1);
    let events: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000_000);
    let pending: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000);
    if std::env::var_os("BASELINE").is_some() {
        let t = Instant::now();
        let d = baseline(events, pending);
        let secs = t.elapsed().as_secs_f64();
        #[allow(clippy::cast_precision_loss, reason = "report")]
        let rate = d as f64 / secs / 1e6;
        println!("baseline BinaryHeap loop: {d} events, {secs:.3} s wall, {rate:.2} M events/s");
        return;
    }
    if std::env::var_os("RNG_ONLY").is_some() {
        let t = Instant::now();
        let x = rng_only(events);
        println!("rng only: {:.3} s ({x})", t.elapsed().as_secs_f64());
        return;
    }
    let t = Instant::now();
    match run_hold(42, pending, events, 1_000) {
        Ok(r) => {
            let secs = t.elapsed().as_secs_f64();
            #[allow(clippy::cast_precision_loss, reason = "report")]
            let rate = r.events as f64 / secs;
            println!(
                "{} events, {pending} pending, {secs:.3} s wall, {:.2} M events/s (digest {:#x})",
                r.events,
                rate / 1e6,
                r.digest
            );
        }
        Err(e) => eprintln!("hold model failed: {e}"),
    }
}

/// The draws alone (to separate RNG cost from engine cost).
fn rng_only(n: u64) -> u64 {
    let mut r = vmirq_sim::rng::Rng::new(1, 0);
    (0..n).map(|_| r.exp_ns(1000)).fold(0, u64::wrapping_add)
}

/// Calibration: the plain `BinaryHeap<Reverse<(time, seq, id)>>` hold loop of wakeup.md
/// §4.4 (no slab, no cancellation), with the same draws, on the same machine, same moment.
fn baseline(n: u64, pending: u32) -> u64 {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut r = vmirq_sim::rng::Rng::new(42, 0);
    let mut h = BinaryHeap::new();
    let mut seq = 0u64;
    for id in 0..pending {
        h.push(Reverse((r.exp_ns(1000), seq, id)));
        seq += 1;
    }
    let mut done = 0;
    while done < n {
        let Some(Reverse((t, _, id))) = h.pop() else {
            break;
        };
        h.push(Reverse((t + r.exp_ns(1000), seq, id)));
        seq += 1;
        done += 1;
    }
    done
}
