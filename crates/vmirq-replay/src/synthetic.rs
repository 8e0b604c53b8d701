//! The built-in default trace: a deterministic synthetic queue with bursty, QD-1 and
//! trickle phases, so `vmirq replay` shows something useful with no arguments.
//!
//! The client keeps a target number of requests outstanding (closed loop: it resubmits as soon
//! as a request completes). The device serves up to 16 requests in parallel, each taking
//! 20 µs plus a uniform 0-40 µs jitter. Phases of 20 ms each: outstanding I/O swinging between
//! 1 and 64 every 2 ms (the TPC-C-like pattern vIC adapted to), a steady QD 32, QD 1, and a
//! trickle of one request every 2 ms.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::trace::{Op, TraceEvent};

const PHASE_NS: u64 = 20_000_000;
const CHANNELS: usize = 16;

/// A small deterministic PRNG (SplitMix64): same seed, same trace everywhere.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Target outstanding I/O at time `t`, or `None` in the trickle phase.
fn target(t: u64) -> Option<u32> {
    match t / PHASE_NS {
        0 => Some(if (t / 2_000_000) % 2 == 0 { 64 } else { 1 }),
        1 => Some(32),
        2 => Some(1),
        _ => None,
    }
}

/// The default trace (about 80 ms of virtual time on one queue).
#[must_use]
pub fn default_trace(seed: u64) -> Vec<TraceEvent> {
    let mut rng = SplitMix(seed);
    let end = 4 * PHASE_NS;
    let mut events = Vec::new();
    // Completion times of requests in service, and when each channel is next free.
    let mut completions: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut channel_free = [0u64; CHANNELS];
    let mut now = 0u64;
    let mut next_trickle = 3 * PHASE_NS;
    loop {
        // Submit up to the target.
        let want = match target(now) {
            Some(n) => n as usize,
            None if now >= next_trickle && completions.is_empty() => {
                next_trickle += 2_000_000;
                1
            }
            None => 0,
        };
        while completions.len() < want && now < end {
            events.push(TraceEvent {
                time_ns: now,
                op: Op::Submit,
                queue: 0,
            });
            let ch = channel_free
                .iter()
                .enumerate()
                .min_by_key(|(_, t)| **t)
                .map_or(0, |(i, _)| i);
            let start = channel_free[ch].max(now);
            let done = start + 20_000 + rng.next() % 40_000;
            channel_free[ch] = done;
            completions.push(Reverse(done));
        }
        let Some(Reverse(done)) = completions.pop() else {
            if now >= end {
                break;
            }
            now = if target(now).is_none() {
                next_trickle.max(now)
            } else {
                now + 1_000
            };
            continue;
        };
        now = done;
        events.push(TraceEvent {
            time_ns: now,
            op: Op::Complete,
            queue: 0,
        });
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{format_trace, parse_trace};

    #[test]
    fn is_deterministic_valid_and_has_all_phases() {
        let a = default_trace(1);
        assert_eq!(a, default_trace(1));
        assert_ne!(a, default_trace(2));
        let parsed = parse_trace(&format_trace(&a)).unwrap_or_default();
        assert_eq!(parsed.len(), a.len());
        let in_phase = |p: u64| {
            a.iter()
                .filter(|e| e.time_ns / PHASE_NS == p && e.op == Op::Complete)
                .count()
        };
        assert!(
            in_phase(0) > 1_000 && in_phase(1) > 1_000,
            "{} {}",
            in_phase(0),
            in_phase(1)
        );
        assert!((300..=1_000).contains(&in_phase(2)), "{}", in_phase(2));
        assert!((5..=11).contains(&in_phase(3)), "{}", in_phase(3));
    }
}
