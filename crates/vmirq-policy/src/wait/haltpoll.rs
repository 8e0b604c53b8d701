//! `guest-haltpoll`: the Linux cpuidle haltpoll governor (`drivers/cpuidle/governors/
//! haltpoll.c`, `Documentation/virt/guest-halt-polling.rst`), reimplemented.
//!
//! The guest polls before executing HLT. Its poll limit starts at 0 and adapts only from the
//! residency of HLT (the time after the poll, when the poll failed):
//! - grow when `limit < block_ns <= guest_halt_poll_ns`: `max(limit × grow, grow_start)`,
//!   capped at `guest_halt_poll_ns`;
//! - shrink when `block_ns > guest_halt_poll_ns` and shrinking is allowed: `limit / shrink`
//!   (0 when `shrink = 0`). Unlike the host, there is no floor at `grow_start`.
//!
//! A successful poll changes nothing. Defaults: max 200 µs, grow 2, grow_start 50 µs,
//! shrink 2, allow_shrink on.

use super::{WaitDecision, Waiter, WakeOutcome};
use crate::Nanos;

/// Parameters of [`GuestHaltpoll`] (`/sys/module/haltpoll/parameters/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestHaltpollConfig {
    /// `guest_halt_poll_ns`.
    pub max_ns: Nanos,
    /// `guest_halt_poll_grow`.
    pub grow: u32,
    /// `guest_halt_poll_grow_start`.
    pub grow_start_ns: Nanos,
    /// `guest_halt_poll_shrink`.
    pub shrink: u32,
    /// `guest_halt_poll_allow_shrink`.
    pub allow_shrink: bool,
}

impl Default for GuestHaltpollConfig {
    fn default() -> Self {
        Self {
            max_ns: 200_000,
            grow: 2,
            grow_start_ns: 50_000,
            shrink: 2,
            allow_shrink: true,
        }
    }
}

/// The guest haltpoll governor for one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestHaltpoll {
    cfg: GuestHaltpollConfig,
    limit: Nanos,
    /// When the HLT part of the current wait began (the end of the poll).
    hlt_start: Nanos,
}

impl GuestHaltpoll {
    /// A CPU's governor state, limit 0.
    #[must_use]
    pub fn new(cfg: GuestHaltpollConfig) -> Self {
        Self {
            cfg,
            limit: 0,
            hlt_start: 0,
        }
    }
}

impl Waiter for GuestHaltpoll {
    fn begin(&mut self, now: Nanos) -> WaitDecision {
        self.hlt_start = now.saturating_add(self.limit);
        if self.limit == 0 {
            WaitDecision::Sleep
        } else {
            WaitDecision::Poll {
                until: self.hlt_start,
            }
        }
    }

    fn end(&mut self, now: Nanos, outcome: WakeOutcome) {
        if !outcome.slept {
            return;
        }
        let block_ns = now.saturating_sub(self.hlt_start);
        let max = self.cfg.max_ns;
        if self.limit < block_ns && block_ns <= max {
            let grown = self
                .limit
                .saturating_mul(u64::from(self.cfg.grow))
                .max(self.cfg.grow_start_ns);
            self.limit = grown.min(max);
        } else if block_ns > max && self.cfg.allow_shrink {
            self.limit = if self.cfg.shrink == 0 {
                0
            } else {
                self.limit / u64::from(self.cfg.shrink)
            };
        }
    }

    fn window_ns(&self) -> Nanos {
        self.limit
    }

    fn max_window_ns(&self) -> Nanos {
        self.cfg.max_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_from_grow_start_and_shrinks_without_floor() {
        let mut g = GuestHaltpoll::new(GuestHaltpollConfig::default());
        assert_eq!(g.begin(0), WaitDecision::Sleep);
        g.end(100_000, WakeOutcome::SLEPT); // block 100 µs <= 200: grow to 50 µs
        assert_eq!(g.window_ns(), 50_000);
        assert_eq!(g.begin(0), WaitDecision::Poll { until: 50_000 });
        g.end(150_000, WakeOutcome::SLEPT); // HLT residency 100 µs > 50: grow to 100
        assert_eq!(g.window_ns(), 100_000);
        g.begin(0);
        g.end(50_000, WakeOutcome::POLLED); // poll success: unchanged
        assert_eq!(g.window_ns(), 100_000);
        g.begin(0);
        g.end(100_000 + 150_000, WakeOutcome::SLEPT); // residency 150 µs: grow to 200 (cap)
        assert_eq!(g.window_ns(), 200_000);
        for expect in [100_000, 50_000, 25_000, 12_500] {
            g.begin(0);
            g.end(10_000_000, WakeOutcome::SLEPT); // long: shrink, no floor
            assert_eq!(g.window_ns(), expect);
        }
    }

    #[test]
    fn allow_shrink_off_keeps_the_window() {
        let mut g = GuestHaltpoll::new(GuestHaltpollConfig {
            allow_shrink: false,
            ..GuestHaltpollConfig::default()
        });
        g.begin(0);
        g.end(60_000, WakeOutcome::SLEPT);
        g.begin(0);
        g.end(10_000_000, WakeOutcome::SLEPT);
        assert_eq!(g.window_ns(), 50_000);
    }
}
