//! `count`: count + timer coalescing with the semantics of virtio-net `VIRTIO_NET_F_NOTF_COAL`
//! (virtio 1.3, "Notifications Coalescing").
//!
//! - `max_usecs`: the longest a completion may wait for its notification, counted from the
//!   first completion held since the last notification;
//! - `max_frames`: notify as soon as this many completions are held;
//! - whichever comes first; if **either** is 0, every completion notifies.
//!
//! The same two numbers are NVMe interrupt aggregation (Set Features 08h: THR is 0's based, so
//! `frames = THR + 1`; TIME is in 100 µs units, so `usecs = TIME * 100`) and ethtool's
//! `rx-usecs` / `rx-frames` (ethtool also allows `usecs = 0, frames > 0`, which would hold
//! forever without traffic: vmirq follows virtio and treats it as "no coalescing").
//!
//! [`TimerStart::LastCompletion`] restarts the timer on every completion (DIM's CQE mode,
//! cinterrupts' Δ): the hold of the oldest completion is then bounded by `frames * usecs`.

use super::{Decision, Event, Moderator, Pending};
use crate::{Nanos, NS_PER_US};

/// When the coalescing timer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimerStart {
    /// From the first completion held since the last notification (virtio NOTF_COAL, NVMe,
    /// ethtool, DIM EQE mode).
    #[default]
    FirstCompletion,
    /// Restarted by every completion (DIM CQE mode).
    LastCompletion,
}

/// Parameters of [`Count`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountConfig {
    /// Longest delay in microseconds (virtio `max_usecs`, ethtool `rx-usecs`).
    pub usecs: u32,
    /// Completions per notification (virtio `max_packets`, ethtool `rx-frames`).
    pub frames: u32,
    /// When the timer starts.
    pub timer: TimerStart,
}

impl Default for CountConfig {
    fn default() -> Self {
        Self {
            usecs: 50,
            frames: 32,
            timer: TimerStart::FirstCompletion,
        }
    }
}

/// Count + timer coalescing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    cfg: CountConfig,
    usecs_ns: Nanos,
    pending: Pending,
    /// When the timer started (first or last held completion, per `cfg.timer`).
    timer_start: Nanos,
}

impl Count {
    /// A policy with these parameters.
    #[must_use]
    pub fn new(cfg: CountConfig) -> Self {
        Self {
            cfg,
            usecs_ns: u64::from(cfg.usecs) * NS_PER_US,
            pending: Pending::default(),
            timer_start: 0,
        }
    }

    /// The parameters in force.
    #[must_use]
    pub fn config(&self) -> CountConfig {
        self.cfg
    }

    /// Change the parameters (what a DIM profile change or a NOTF_COAL VQ_SET does). As the
    /// virtio spec requires, the new values apply at once: if the completions already held
    /// meet the new condition, the answer is `Notify`.
    pub fn reconfigure(&mut self, now: Nanos, cfg: CountConfig) -> Decision {
        self.cfg = cfg;
        self.usecs_ns = u64::from(cfg.usecs) * NS_PER_US;
        self.check(now)
    }

    /// A notification went out for another reason (a bypass): everything held is covered.
    pub fn covered(&mut self) {
        let _ = self.pending.flush();
    }

    fn disabled(&self) -> bool {
        self.cfg.usecs == 0 || self.cfg.frames == 0
    }

    fn deadline(&self) -> Nanos {
        self.timer_start.saturating_add(self.usecs_ns)
    }

    fn check(&mut self, now: Nanos) -> Decision {
        if self.pending.held == 0 {
            return Decision::Idle;
        }
        if self.disabled() || self.pending.held >= self.cfg.frames || now >= self.deadline() {
            return self.pending.flush();
        }
        self.pending.hold_until(self.deadline())
    }
}

impl Count {
    /// Its bookkeeping, for runs of events fed at once (`batch`).
    pub(super) fn pending_mut(&mut self) -> &mut Pending {
        &mut self.pending
    }
}

impl Moderator for Count {
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision {
        match event {
            Event::Submit => {
                self.pending.submit();
                self.pending.hold_until(self.deadline())
            }
            Event::Complete(_) => {
                // A caller whose timer is late must not have the hold extended by a restart.
                let expired = self.pending.held > 0 && now >= self.deadline();
                if self.pending.held == 0
                    || (self.cfg.timer == TimerStart::LastCompletion && !expired)
                {
                    self.timer_start = now;
                }
                self.pending.complete(now);
                self.check(now)
            }
            Event::Timer => self.check(now),
        }
    }
    fn pending(&self) -> &Pending {
        &self.pending
    }
    fn max_hold_ns(&self) -> Nanos {
        if self.disabled() {
            return 0;
        }
        match self.cfg.timer {
            TimerStart::FirstCompletion => self.usecs_ns,
            TimerStart::LastCompletion => self.usecs_ns.saturating_mul(u64::from(self.cfg.frames)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moderation::CompletionMeta;

    const C: Event = Event::Complete(CompletionMeta {
        kind: crate::moderation::RequestKind::Read,
        bytes: 4096,
        flags: 0,
    });

    fn count(usecs: u32, frames: u32) -> Count {
        Count::new(CountConfig {
            usecs,
            frames,
            timer: TimerStart::FirstCompletion,
        })
    }

    /// virtio-net 5.1.6.5.6.2 (Notifications Coalescing): notify when max_packets are held.
    #[test]
    fn verify_virtio_net_notf_coal_max_packets() {
        let mut p = count(100, 3);
        assert_eq!(p.on_event(0, C), Decision::Hold { deadline: 100_000 });
        assert_eq!(p.on_event(10, C), Decision::Hold { deadline: 100_000 });
        assert_eq!(p.on_event(20, C), Decision::Notify);
        assert_eq!(p.held(), 0);
        // Counting restarts at the next completion.
        assert_eq!(p.on_event(50_000, C), Decision::Hold { deadline: 150_000 });
    }

    /// virtio-net Notifications Coalescing: max_usecs counts from the first held packet.
    #[test]
    fn verify_virtio_net_notf_coal_max_usecs_from_first() {
        let mut p = count(100, 32);
        assert_eq!(p.on_event(1_000, C), Decision::Hold { deadline: 101_000 });
        assert_eq!(p.on_event(90_000, C), Decision::Hold { deadline: 101_000 });
        assert_eq!(
            p.on_event(100_999, Event::Timer),
            Decision::Hold { deadline: 101_000 }
        );
        assert_eq!(p.on_event(101_000, Event::Timer), Decision::Notify);
        assert_eq!(p.on_event(101_001, Event::Timer), Decision::Idle);
    }

    /// virtio-net Notifications Coalescing: if either parameter is 0, notify every packet.
    #[test]
    fn verify_virtio_net_notf_coal_zero_disables() {
        for (u, f) in [(0, 32), (50, 0), (0, 0)] {
            let mut p = count(u, f);
            assert_eq!(p.on_event(5, C), Decision::Notify, "usecs={u} frames={f}");
            assert_eq!(p.max_hold_ns(), 0);
        }
    }

    /// virtio-net Notifications Coalescing: a parameter change is applied immediately
    /// (10 held, new max_packets 8 -> notify now).
    #[test]
    fn verify_virtio_net_notf_coal_change_reevaluates() {
        let mut p = count(1_000, 64);
        for t in 0..10 {
            assert!(matches!(p.on_event(t, C), Decision::Hold { .. }));
        }
        let d = p.reconfigure(
            20,
            CountConfig {
                frames: 8,
                ..p.config()
            },
        );
        assert_eq!(d, Decision::Notify);
    }

    #[test]
    fn cqe_mode_restarts_timer_and_is_bounded_by_frames() {
        let mut p = Count::new(CountConfig {
            usecs: 10,
            frames: 4,
            timer: TimerStart::LastCompletion,
        });
        assert_eq!(p.on_event(0, C), Decision::Hold { deadline: 10_000 });
        assert_eq!(p.on_event(9_000, C), Decision::Hold { deadline: 19_000 });
        assert_eq!(p.on_event(18_000, C), Decision::Hold { deadline: 28_000 });
        assert_eq!(p.on_event(27_000, C), Decision::Notify);
        assert_eq!(p.max_hold_ns(), 40_000);
    }

    #[test]
    fn cqe_mode_late_timer_does_not_extend_the_hold() {
        let mut p = Count::new(CountConfig {
            usecs: 10,
            frames: 4,
            timer: TimerStart::LastCompletion,
        });
        assert_eq!(p.on_event(0, C), Decision::Hold { deadline: 10_000 });
        // The caller missed the timer; the next completion arrives after the deadline.
        assert_eq!(p.on_event(15_000, C), Decision::Notify);
    }
}
