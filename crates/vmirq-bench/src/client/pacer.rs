//! How many requests the client wants outstanding right now, per workload shape, and which
//! offset the next request uses. Pure functions of the time passed in and a seeded generator.

use crate::rng::Rng;
use crate::workload::{Shape, Workload};

/// Decides the wanted queue depth over time.
#[derive(Debug, Clone)]
pub struct Pacer {
    shape: Shape,
    rng: Rng,
    /// Bursty: end of the current phase; trickle: when the next request may start.
    next_ns: u64,
    high: bool,
}

impl Pacer {
    /// A pacer for `shape` starting at time 0.
    #[must_use]
    pub fn new(shape: Shape, seed: u64) -> Self {
        Self {
            shape,
            rng: Rng::new(seed ^ 0x5EED_B025_7000),
            next_ns: 0,
            high: false,
        }
    }

    /// Outstanding requests wanted at `now_ns` (the caller submits until it has that many).
    pub fn wanted(&mut self, now_ns: u64) -> u32 {
        match self.shape {
            Shape::Steady { qd } => qd,
            Shape::Bursty {
                low,
                high,
                phase_min_us,
            } => {
                if now_ns >= self.next_ns {
                    self.high = !self.high;
                    let min_ns = u64::from(phase_min_us) * 1_000;
                    self.next_ns = now_ns + min_ns + self.rng.below(min_ns.max(1));
                }
                if self.high {
                    high
                } else {
                    low
                }
            }
            Shape::Trickle { .. } => u32::from(now_ns >= self.next_ns),
        }
    }

    /// Tell the pacer a request was submitted at `now_ns`.
    pub fn submitted(&mut self, now_ns: u64) {
        if let Shape::Trickle { interval_us } = self.shape {
            let interval_ns = u64::from(interval_us) * 1_000;
            // Keep the schedule, but never try to catch up more than one interval.
            self.next_ns = (self.next_ns + interval_ns).max(now_ns);
        }
    }

    /// For an open-loop shape with nothing outstanding: when the next request is due.
    #[must_use]
    pub fn next_due_ns(&self) -> Option<u64> {
        matches!(self.shape, Shape::Trickle { .. }).then_some(self.next_ns)
    }
}

/// Picks request offsets inside the device, aligned to the block size.
#[derive(Debug, Clone)]
pub struct Offsets {
    block: u64,
    blocks: u64,
    next_seq: u64,
    sequential: bool,
}

impl Offsets {
    /// Offsets for `workload` on a device of `capacity` bytes, using at most `span_max` bytes.
    #[must_use]
    pub fn new(workload: &Workload, capacity: u64, span_max: u64) -> Self {
        let block = u64::from(workload.block_size.max(512));
        let blocks = (capacity.min(span_max) / block).max(1);
        Self {
            block,
            blocks,
            next_seq: 0,
            sequential: workload.is_sequential(),
        }
    }

    /// The byte offset of the next request.
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        let index = if self.sequential {
            let i = self.next_seq;
            self.next_seq = (self.next_seq + 1) % self.blocks;
            i
        } else {
            rng.below(self.blocks)
        };
        index * self.block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trickle_allows_one_request_per_interval() {
        let mut p = Pacer::new(Shape::Trickle { interval_us: 1000 }, 1);
        assert_eq!(p.wanted(0), 1);
        p.submitted(0);
        assert_eq!(p.wanted(500_000), 0);
        assert_eq!(p.next_due_ns(), Some(1_000_000));
        assert_eq!(p.wanted(1_000_000), 1);
        // Far behind schedule: the next one is due now, not a burst of catch-up requests.
        p.submitted(9_000_000);
        assert_eq!(p.next_due_ns(), Some(9_000_000));
    }

    #[test]
    fn bursty_alternates_between_low_and_high() {
        let shape = Shape::Bursty {
            low: 1,
            high: 64,
            phase_min_us: 100,
        };
        let mut p = Pacer::new(shape, 3);
        let mut seen = std::collections::BTreeSet::new();
        let mut switches = 0;
        let mut last = 0;
        for t in (0..10_000_000u64).step_by(10_000) {
            let w = p.wanted(t);
            seen.insert(w);
            if w != last {
                switches += 1;
                last = w;
            }
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 64]);
        // 10 ms of phases lasting 100..200 us: between 50 and 100 switches.
        assert!((45..=101).contains(&switches), "{switches} switches");
    }

    #[test]
    fn offsets_stay_aligned_inside_the_span() {
        let w = Workload::randread(1);
        let mut o = Offsets::new(&w, 1 << 20, 1 << 30);
        let mut rng = Rng::new(5);
        for _ in 0..1000 {
            let off = o.next(&mut rng);
            assert_eq!(off % 4096, 0);
            assert!(off + 4096 <= 1 << 20);
        }
        let mut s = Offsets::new(&Workload::seqread(1), 256 * 1024, 1 << 30);
        let seq: Vec<u64> = (0..3).map(|_| s.next(&mut rng)).collect();
        assert_eq!(seq, vec![0, 131_072, 0]);
    }
}
