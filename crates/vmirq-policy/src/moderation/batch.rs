//! Runs of events fed at once: a device that moves frames in bursts tells the policy about a
//! whole burst's submissions or completions in one call ([`Moderation::on_submits`],
//! [`Moderation::on_completions`]) instead of one call per frame.
//!
//! The answer is exactly what feeding the events one by one at the same `now` would have
//! given: how many events were answered `Notify` and `Hold`, and the last decision; the
//! policy ends in the same state. Policies whose per-event rule has a closed form for a run
//! (`none` for both, `count` for submissions) compute it in O(1); every other policy (and
//! `count`'s completions, whose timer may restart) is fed the events one by one, so a
//! policy that looks at each completion (dim-lat's classifier, DIM's byte counts) still
//! sees each one.

use super::{CompletionMeta, Decision, Event, Moderation, Moderator};
use crate::Nanos;

/// What a run of events decided (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decisions {
    /// Events answered [`Decision::Notify`].
    pub notify: u32,
    /// Events answered [`Decision::Hold`].
    pub hold: u32,
    /// The last event's decision; [`Decision::Idle`] for an empty run.
    pub last: Decision,
}

impl Default for Decisions {
    fn default() -> Self {
        Self {
            notify: 0,
            hold: 0,
            last: Decision::Idle,
        }
    }
}

impl Decisions {
    /// Count one more decision.
    pub fn add(&mut self, d: Decision) {
        match d {
            Decision::Notify => self.notify = self.notify.saturating_add(1),
            Decision::Hold { .. } => self.hold = self.hold.saturating_add(1),
            Decision::Idle => {}
        }
        self.last = d;
    }

    /// `n` events all answered `d`.
    #[must_use]
    fn all(n: u32, d: Decision) -> Self {
        let mut out = Self::default();
        if n == 0 {
            return out;
        }
        match d {
            Decision::Notify => out.notify = n,
            Decision::Hold { .. } => out.hold = n,
            Decision::Idle => {}
        }
        out.last = d;
        out
    }
}

impl Moderation {
    /// `n` requests submitted at `now`, as `n` [`Event::Submit`]s one by one.
    pub fn on_submits(&mut self, now: Nanos, n: u32) -> Decisions {
        if n == 0 {
            return Decisions::default();
        }
        match self {
            // Each submit counts one in flight and answers `Idle`.
            Self::None(p) => {
                p.pending_mut().submit_n(n);
                Decisions::all(n, Decision::Idle)
            }
            // Each submit counts one in flight and answers the same decision (the hold of
            // what is held, which the commands in flight do not change).
            Self::Count(p) => {
                let d = p.on_event(now, Event::Submit);
                p.pending_mut().submit_n(n - 1);
                Decisions::all(n, d)
            }
            _ => self.one_by_one(now, (0..n).map(|_| Event::Submit)),
        }
    }

    /// Requests completed at `now` (and visible in the used ring), one per `metas` entry,
    /// as that many [`Event::Complete`]s one by one.
    pub fn on_completions(&mut self, now: Nanos, metas: &[CompletionMeta]) -> Decisions {
        if metas.is_empty() {
            return Decisions::default();
        }
        match self {
            // Every completion notifies whatever its metadata; nothing stays held.
            Self::None(p) => {
                let n = u32::try_from(metas.len()).unwrap_or(u32::MAX);
                let pending = p.pending_mut();
                pending.complete_n(now, n);
                Decisions::all(n, pending.flush())
            }
            _ => self.one_by_one(now, metas.iter().map(|m| Event::Complete(*m))),
        }
    }

    fn one_by_one(&mut self, now: Nanos, events: impl Iterator<Item = Event>) -> Decisions {
        let mut out = Decisions::default();
        for e in events {
            out.add(self.on_event(now, e));
        }
        out
    }
}
