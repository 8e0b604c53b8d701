//! rdma_dim (Linux `lib/dim/rdma_dim.c`): DIM for completion queues.
//!
//! One event per CQ poll round; every [`DIM_NEVENTS`] events the completion rate and the
//! completions per event are compared with the previous window (10 % significance). Better:
//! step on; worse: turn and step; same: if completions per event are low for the current
//! profile (`cpe_ratio <= 50 × index`), drop back to the first profile. It never parks and has
//! no tired counter; it starts at profile 0 going right.

use super::stats::{calc_stats, significant, DimSample, DimStats, Verdict, DIM_NEVENTS};

/// rdma_dim's comparison: completion rate, then completions per event.
#[must_use]
pub fn compare(curr: &DimStats, prev: &DimStats) -> Verdict {
    if prev.cpms == 0 {
        return Verdict::Same;
    }
    if significant(curr.cpms, prev.cpms) {
        return if curr.cpms > prev.cpms {
            Verdict::Better
        } else {
            Verdict::Worse
        };
    }
    if significant(curr.cpe_ratio, prev.cpe_ratio) {
        return if curr.cpe_ratio > prev.cpe_ratio {
            Verdict::Better
        } else {
            Verdict::Worse
        };
    }
    Verdict::Same
}

/// rdma_dim over a table of `profiles` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaDim {
    profiles: u8,
    going_right: bool,
    index: u8,
    measuring: bool,
    start: DimSample,
    prev: DimStats,
}

impl RdmaDim {
    /// A fresh state machine over `profiles` entries.
    #[must_use]
    pub fn new(profiles: u8) -> Self {
        Self {
            profiles: profiles.max(1),
            going_right: true,
            index: 0,
            measuring: false,
            start: DimSample::default(),
            prev: DimStats::default(),
        }
    }

    /// The current profile index.
    #[must_use]
    pub fn index(&self) -> u8 {
        self.index
    }

    /// Feed the counters after an event; returns the new index when it changed.
    pub fn on_sample(&mut self, sample: DimSample) -> Option<u8> {
        if self.measuring {
            if sample.events.wrapping_sub(self.start.events) < DIM_NEVENTS {
                return None;
            }
            let curr = calc_stats(&self.start, &sample)?;
            if self.decide(&curr) {
                self.measuring = false;
                return Some(self.index);
            }
        }
        self.start = sample;
        self.measuring = true;
        None
    }

    /// Step in the current direction; at an edge, turn instead.
    fn step(&mut self) {
        if self.going_right && self.index + 1 < self.profiles {
            self.index += 1;
        } else if !self.going_right && self.index > 0 {
            self.index -= 1;
        } else {
            self.going_right = !self.going_right;
        }
    }

    fn decide(&mut self, curr: &DimStats) -> bool {
        let old = self.index;
        match compare(curr, &self.prev) {
            Verdict::Same => {
                if curr.cpe_ratio <= 50 * u32::from(old) {
                    self.index = 0;
                }
            }
            Verdict::Worse => {
                self.going_right = !self.going_right;
                self.step();
            }
            Verdict::Better => self.step(),
        }
        self.prev = *curr;
        self.index != old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(cpms: u32, cpe_ratio: u32) -> DimStats {
        DimStats {
            cpms,
            cpe_ratio,
            ..DimStats::default()
        }
    }

    #[test]
    fn climbs_turns_and_resets() {
        let mut d = RdmaDim::new(9);
        assert!(!d.decide(&st(100, 100))); // prev zero: SAME, cpe 100 > 0: stays at 0
        assert!(d.decide(&st(200, 100))); // better: right
        assert_eq!(d.index(), 1);
        assert!(d.decide(&st(300, 100)));
        assert_eq!(d.index(), 2);
        assert!(d.decide(&st(200, 100))); // worse: turn left and step
        assert_eq!(d.index(), 1);
        assert!(!d.decide(&st(205, 100))); // same, cpe 100 > 50: keep
        assert!(d.decide(&st(300, 100))); // better, going left: step left
        assert_eq!(d.index(), 0);
        for _ in 0..30 {
            d.decide(&st(300 + d.index() as u32 * 100, 100));
            assert!(d.index() < 9);
        }
    }
}
