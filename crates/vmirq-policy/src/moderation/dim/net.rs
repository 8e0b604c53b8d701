//! The net_dim tuning state machine (Linux `lib/dim/net_dim.c`, `dim.c`), reimplemented.
//!
//! Every [`DIM_NEVENTS`] events the rates of the last window are compared with the previous
//! window's, in priority order bandwidth, packet rate, interrupt rate (fewer is better),
//! with a 10 % significance rule. The profile index then walks right (more moderation) or
//! left while things improve, turns when they do not, parks "on top" once the optimum is
//! bracketed (until traffic changes by more than 10 %), and parks "tired" for ten decisions
//! after ten steps without settling.

use super::stats::{
    calc_stats_with, significant, DimSample, DimStats, EventCount, Verdict, DIM_NEVENTS,
};

/// Where the measurement is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    Start,
    InProgress,
}

/// net_dim's tuning states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TuneState {
    /// Parked at a bracketed optimum; leaves when traffic changes significantly.
    ParkingOnTop,
    /// Parked after too many steps; leaves after `tired` decisions.
    ParkingTired,
    /// Moving towards more moderation (higher index).
    GoingRight,
    /// Moving towards less moderation.
    GoingLeft,
}

enum Step {
    Stepped,
    TooTired,
    OnEdge,
}

/// net_dim over a table of `profiles` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetDim {
    profiles: u8,
    measure: Measure,
    tune: TuneState,
    index: u8,
    steps_left: u8,
    steps_right: u8,
    tired: u8,
    start: DimSample,
    prev: DimStats,
    events: EventCount,
}

/// net_dim's comparison: bandwidth, then packet rate, then interrupt rate.
#[must_use]
pub fn compare(curr: &DimStats, prev: &DimStats) -> Verdict {
    let better_if = |higher: bool| {
        if higher {
            Verdict::Better
        } else {
            Verdict::Worse
        }
    };
    if prev.bpms == 0 {
        return if curr.bpms > 0 {
            Verdict::Better
        } else {
            Verdict::Same
        };
    }
    if significant(curr.bpms, prev.bpms) {
        return better_if(curr.bpms > prev.bpms);
    }
    if prev.ppms == 0 {
        return if curr.ppms > 0 {
            Verdict::Better
        } else {
            Verdict::Same
        };
    }
    if significant(curr.ppms, prev.ppms) {
        return better_if(curr.ppms > prev.ppms);
    }
    if prev.epms == 0 {
        return Verdict::Same;
    }
    if significant(curr.epms, prev.epms) {
        return better_if(curr.epms < prev.epms);
    }
    Verdict::Same
}

impl NetDim {
    /// A fresh state machine over `profiles` entries starting at `index`.
    #[must_use]
    pub fn new(profiles: u8, index: u8) -> Self {
        Self {
            profiles: profiles.max(1),
            measure: Measure::Start,
            tune: TuneState::ParkingOnTop,
            index: index.min(profiles.saturating_sub(1)),
            steps_left: 0,
            steps_right: 0,
            tired: 0,
            start: DimSample::default(),
            prev: DimStats::default(),
            events: EventCount::Assumed,
        }
    }

    /// The same state machine computing event rates from the counters (for a periodic loop
    /// that samples every few milliseconds instead of on every event).
    #[must_use]
    pub fn measuring_events(mut self) -> Self {
        self.events = EventCount::Measured;
        self
    }

    /// The current profile index.
    #[must_use]
    pub fn index(&self) -> u8 {
        self.index
    }

    /// The current tuning state.
    #[must_use]
    pub fn tune_state(&self) -> TuneState {
        self.tune
    }

    /// Feed the counters after an event; returns the new index when it changed.
    pub fn on_sample(&mut self, sample: DimSample) -> Option<u8> {
        if self.measure == Measure::InProgress {
            if sample.events.wrapping_sub(self.start.events) < DIM_NEVENTS {
                return None;
            }
            let curr = calc_stats_with(&self.start, &sample, self.events)?;
            if self.decide(&curr) {
                // The caller applies the profile at once; the next sample starts a window.
                self.measure = Measure::Start;
                return Some(self.index);
            }
        }
        self.start = sample;
        self.measure = Measure::InProgress;
        None
    }

    fn step(&mut self) -> Step {
        if self.tired == self.profiles * 2 {
            return Step::TooTired;
        }
        match self.tune {
            TuneState::ParkingOnTop | TuneState::ParkingTired => {}
            TuneState::GoingRight => {
                if self.index + 1 == self.profiles {
                    return Step::OnEdge;
                }
                self.index += 1;
                self.steps_right += 1;
            }
            TuneState::GoingLeft => {
                if self.index == 0 {
                    return Step::OnEdge;
                }
                self.index -= 1;
                self.steps_left += 1;
            }
        }
        self.tired += 1;
        Step::Stepped
    }

    fn exit_parking(&mut self) {
        self.tune = if self.index != 0 {
            TuneState::GoingLeft
        } else {
            TuneState::GoingRight
        };
        self.step();
    }

    fn turn(&mut self) {
        match self.tune {
            TuneState::GoingRight => {
                self.tune = TuneState::GoingLeft;
                self.steps_left = 0;
            }
            TuneState::GoingLeft => {
                self.tune = TuneState::GoingRight;
                self.steps_right = 0;
            }
            TuneState::ParkingOnTop | TuneState::ParkingTired => {}
        }
    }

    fn on_top(&self) -> bool {
        match self.tune {
            TuneState::ParkingOnTop | TuneState::ParkingTired => true,
            TuneState::GoingRight => self.steps_left > 1 && self.steps_right == 1,
            TuneState::GoingLeft => self.steps_right > 1 && self.steps_left == 1,
        }
    }

    fn park(&mut self, tune: TuneState) {
        self.steps_left = 0;
        self.steps_right = 0;
        if tune == TuneState::ParkingOnTop {
            self.tired = 0;
        }
        self.tune = tune;
    }

    /// One decision; returns whether the index changed.
    fn decide(&mut self, curr: &DimStats) -> bool {
        let (was, old_index) = (self.tune, self.index);
        match self.tune {
            TuneState::ParkingOnTop => {
                if compare(curr, &self.prev) != Verdict::Same {
                    self.exit_parking();
                }
            }
            TuneState::ParkingTired => {
                self.tired = self.tired.saturating_sub(1);
                if self.tired == 0 {
                    self.exit_parking();
                }
            }
            TuneState::GoingRight | TuneState::GoingLeft => {
                if compare(curr, &self.prev) != Verdict::Better {
                    self.turn();
                }
                if self.on_top() {
                    self.park(TuneState::ParkingOnTop);
                } else {
                    match self.step() {
                        Step::OnEdge => self.park(TuneState::ParkingOnTop),
                        Step::TooTired => self.park(TuneState::ParkingTired),
                        Step::Stepped => {}
                    }
                }
            }
        }
        if was != TuneState::ParkingOnTop || self.tune != TuneState::ParkingOnTop {
            self.prev = *curr;
        }
        self.index != old_index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(bpms: u32, ppms: u32, epms: u32) -> DimStats {
        DimStats {
            bpms,
            ppms,
            epms,
            ..DimStats::default()
        }
    }

    #[test]
    fn compare_priority_bandwidth_then_packets_then_interrupts() {
        assert_eq!(
            compare(&stats(120, 1, 1), &stats(100, 100, 100)),
            Verdict::Better
        );
        assert_eq!(
            compare(&stats(80, 900, 1), &stats(100, 100, 100)),
            Verdict::Worse
        );
        assert_eq!(
            compare(&stats(105, 120, 900), &stats(100, 100, 100)),
            Verdict::Better
        );
        assert_eq!(
            compare(&stats(105, 105, 50), &stats(100, 100, 100)),
            Verdict::Better
        );
        assert_eq!(
            compare(&stats(105, 105, 150), &stats(100, 100, 100)),
            Verdict::Worse
        );
        assert_eq!(
            compare(&stats(105, 105, 105), &stats(100, 100, 100)),
            Verdict::Same
        );
        assert_eq!(compare(&stats(0, 0, 0), &stats(0, 0, 0)), Verdict::Same);
        assert_eq!(compare(&stats(1, 0, 0), &stats(0, 0, 0)), Verdict::Better);
    }

    #[test]
    fn climbs_while_better_then_parks_on_top() {
        let mut d = NetDim::new(5, 0);
        // First decision: prev is zero, bytes flowed: BETTER, exit parking, go right.
        assert!(d.decide(&stats(100, 100, 100)));
        assert_eq!((d.index(), d.tune_state()), (1, TuneState::GoingRight));
        assert!(d.decide(&stats(200, 100, 100)));
        assert_eq!(d.index(), 2);
        // Worse: turn left and step back one.
        assert!(d.decide(&stats(150, 100, 100)));
        assert_eq!((d.index(), d.tune_state()), (1, TuneState::GoingLeft));
        // The step back helped: steps_right = 2 and steps_left = 1 bracket the optimum: park.
        assert!(!d.decide(&stats(170, 100, 100)));
        assert_eq!((d.index(), d.tune_state()), (1, TuneState::ParkingOnTop));
        // Parked: unchanged traffic keeps it parked.
        assert!(!d.decide(&stats(175, 100, 100)));
        assert_eq!(d.tune_state(), TuneState::ParkingOnTop);
        // Traffic changes by more than 10 % against the stats when parking began: leave.
        assert!(d.decide(&stats(300, 100, 100)));
        assert_ne!(d.tune_state(), TuneState::ParkingOnTop);
    }

    #[test]
    fn index_stays_in_range_at_edges() {
        let mut d = NetDim::new(5, 0);
        let (mut bw, mut highest) = (100, 0);
        for _ in 0..50 {
            bw += bw / 5; // always significantly better: keeps moving, parks at edges
            d.decide(&stats(bw, 100, 100));
            assert!(d.index() < 5);
            highest = highest.max(d.index());
        }
        assert_eq!(highest, 4);
    }

    #[test]
    fn gets_tired_after_ten_steps_and_parks_for_ten_decisions() {
        let mut d = NetDim::new(5, 2);
        d.exit_parking();
        let before = d.tired;
        assert!(before >= 1);
        d.tired = 10;
        d.tune = TuneState::GoingRight;
        d.decide(&stats(1_000, 100, 100));
        assert_eq!(d.tune_state(), TuneState::ParkingTired);
        for _ in 0..9 {
            d.decide(&stats(1_000, 100, 100));
            assert_eq!(d.tune_state(), TuneState::ParkingTired);
        }
        d.decide(&stats(1_000, 100, 100));
        assert_ne!(d.tune_state(), TuneState::ParkingTired);
    }

    #[test]
    fn samples_decide_every_64_events() {
        let mut d = NetDim::new(5, 1);
        let mut s = DimSample::default();
        assert_eq!(d.on_sample(s), None);
        for i in 1..64u16 {
            s = DimSample {
                time: u64::from(i) * 10_000,
                pkts: u32::from(i) * 10,
                bytes: u32::from(i) * 40_960,
                events: i,
                comps: u32::from(i) * 10,
            };
            assert_eq!(d.on_sample(s), None);
        }
        s = DimSample {
            time: 640_000,
            pkts: 640,
            bytes: 2_621_440,
            events: 64,
            comps: 640,
        };
        // First decision with traffic exits parking and moves left from index 1 to 0.
        assert_eq!(d.on_sample(s), Some(0));
    }
}
