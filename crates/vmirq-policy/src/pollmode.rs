//! Poll/notify mode switch: when a queue worker should stop taking guest notifications and
//! busy-poll the ring instead, and when to go back (the idea behind IBM's sidecore polling,
//! ELVIS and vhost-net busy polling, made adaptive and bounded).
//!
//! In *notify* mode the worker sleeps until the guest kicks. Each unit of work found is
//! reported with [`PollEvent::Work`]; once work arrives often enough (EWMA gap below
//! `enter_gap_ns`) the switch answers [`PollMode::Poll`]: disable guest notifications and spin.
//! In *poll* mode every empty poll round is reported with [`PollEvent::Empty`]; the switch goes
//! back to notify mode when no work has come for `stop_idle_ns`, or when the CPU spent on empty
//! polls in the current 1 ms accounting period exceeds `cpu_budget_pct` percent of it. After
//! leaving for the budget reason it stays in notify mode for at least `cooldown` works.
//!
//! The worker must re-check the ring after re-enabling notifications (the usual virtio race).

use crate::{Nanos, NS_PER_MS};

const PERIOD_NS: Nanos = NS_PER_MS;

/// The mode the worker should be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollMode {
    /// Guest notifications enabled; sleep until kicked.
    Notify,
    /// Guest notifications disabled; busy-poll the ring.
    Poll,
}

/// What the worker saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollEvent {
    /// Work was found (after a kick, or by a poll).
    Work,
    /// A poll round found nothing (poll mode only).
    Empty,
}

/// Parameters of [`PollSwitch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollSwitchConfig {
    /// Enter polling when the average gap between works drops below this.
    pub enter_gap_ns: Nanos,
    /// Leave polling after this long without work.
    pub stop_idle_ns: Nanos,
    /// Most of each 1 ms period that empty polling may take, in percent.
    pub cpu_budget_pct: u32,
    /// Works to wait in notify mode after a budget exit before polling again.
    pub cooldown: u32,
}

impl Default for PollSwitchConfig {
    fn default() -> Self {
        Self {
            enter_gap_ns: 20_000,
            stop_idle_ns: 100_000,
            cpu_budget_pct: 50,
            cooldown: 64,
        }
    }
}

/// The poll/notify mode switch for one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollSwitch {
    cfg: PollSwitchConfig,
    mode: PollMode,
    gap_ewma_ns: Nanos,
    last_work: Option<Nanos>,
    last_event: Nanos,
    period_start: Nanos,
    empty_ns: Nanos,
    cooldown_left: u32,
}

impl PollSwitch {
    /// A switch in notify mode.
    #[must_use]
    pub fn new(cfg: PollSwitchConfig) -> Self {
        Self {
            cfg,
            mode: PollMode::Notify,
            gap_ewma_ns: Nanos::MAX / 2,
            last_work: None,
            last_event: 0,
            period_start: 0,
            empty_ns: 0,
            cooldown_left: 0,
        }
    }

    /// The current mode.
    #[must_use]
    pub fn mode(&self) -> PollMode {
        self.mode
    }

    /// Feed one observation at `now`; returns the mode to be in from now on.
    pub fn on_event(&mut self, now: Nanos, event: PollEvent) -> PollMode {
        if now.saturating_sub(self.period_start) >= PERIOD_NS {
            self.period_start = now;
            self.empty_ns = 0;
        }
        match event {
            PollEvent::Work => self.on_work(now),
            PollEvent::Empty => self.on_empty(now),
        }
        self.last_event = now;
        self.mode
    }

    fn on_work(&mut self, now: Nanos) {
        if let Some(last) = self.last_work {
            let gap = now.saturating_sub(last);
            self.gap_ewma_ns = if self.gap_ewma_ns >= Nanos::MAX / 2 {
                gap
            } else if gap >= self.gap_ewma_ns {
                self.gap_ewma_ns + ((gap - self.gap_ewma_ns) >> 2)
            } else {
                self.gap_ewma_ns - ((self.gap_ewma_ns - gap) >> 2)
            };
        }
        self.last_work = Some(now);
        if self.mode == PollMode::Notify {
            self.cooldown_left = self.cooldown_left.saturating_sub(1);
            if self.cooldown_left == 0 && self.gap_ewma_ns < self.cfg.enter_gap_ns {
                self.mode = PollMode::Poll;
            }
        }
    }

    fn on_empty(&mut self, now: Nanos) {
        if self.mode != PollMode::Poll {
            return;
        }
        self.empty_ns = self
            .empty_ns
            .saturating_add(now.saturating_sub(self.last_event));
        let idle = now.saturating_sub(self.last_work.unwrap_or(now));
        if idle >= self.cfg.stop_idle_ns {
            self.mode = PollMode::Notify;
        } else if self.empty_ns.saturating_mul(100) > u64::from(self.cfg.cpu_budget_pct) * PERIOD_NS
        {
            self.mode = PollMode::Notify;
            self.cooldown_left = self.cfg.cooldown;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enters_polling_under_frequent_work_and_leaves_when_idle() {
        let mut s = PollSwitch::new(PollSwitchConfig::default());
        let mut t = 0;
        for _ in 0..3 {
            t += 5_000;
            s.on_event(t, PollEvent::Work);
        }
        assert_eq!(s.mode(), PollMode::Poll);
        // Empty polls for 100 µs: leave.
        for _ in 0..100 {
            t += 1_000;
            s.on_event(t, PollEvent::Empty);
        }
        assert_eq!(s.mode(), PollMode::Notify);
    }

    #[test]
    fn stays_in_notify_mode_for_sparse_work() {
        let mut s = PollSwitch::new(PollSwitchConfig::default());
        for i in 1..100 {
            assert_eq!(s.on_event(i * 100_000, PollEvent::Work), PollMode::Notify);
        }
    }

    #[test]
    fn cpu_budget_forces_notify_mode_and_cools_down() {
        let cfg = PollSwitchConfig {
            stop_idle_ns: 10 * NS_PER_MS,
            cpu_budget_pct: 20,
            ..PollSwitchConfig::default()
        };
        let mut s = PollSwitch::new(cfg);
        let mut t = 0;
        for _ in 0..3 {
            t += 5_000;
            s.on_event(t, PollEvent::Work);
        }
        assert_eq!(s.mode(), PollMode::Poll);
        // One work every 15 µs, 14 µs of empty polling in between: ~93 % empty > 20 %.
        let mut left = false;
        for _ in 0..100 {
            for _ in 0..14 {
                t += 1_000;
                if s.on_event(t, PollEvent::Empty) == PollMode::Notify {
                    left = true;
                }
            }
            t += 1_000;
            s.on_event(t, PollEvent::Work);
            if left {
                break;
            }
        }
        assert!(left);
        assert_eq!(s.mode(), PollMode::Notify);
        // Cool-down: frequent work does not re-enter polling at once.
        for _ in 0..10 {
            t += 5_000;
            assert_eq!(s.on_event(t, PollEvent::Work), PollMode::Notify);
        }
    }
}
