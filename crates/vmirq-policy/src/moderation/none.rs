//! `none`: every completion notifies at once. The baseline every other policy is measured
//! against, and what a device without moderation does.

use super::{Decision, Event, Moderator, Pending};
use crate::Nanos;

/// Notify on every completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoModeration {
    pending: Pending,
}

impl NoModeration {
    /// Its bookkeeping, for runs of events fed at once (`batch`).
    pub(super) fn pending_mut(&mut self) -> &mut Pending {
        &mut self.pending
    }
}

impl Moderator for NoModeration {
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision {
        match event {
            Event::Submit => {
                self.pending.submit();
                Decision::Idle
            }
            Event::Complete(_) => {
                self.pending.complete(now);
                self.pending.flush()
            }
            Event::Timer => Decision::Idle,
        }
    }
    fn pending(&self) -> &Pending {
        &self.pending
    }
    fn max_hold_ns(&self) -> Nanos {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moderation::CompletionMeta;

    #[test]
    fn every_completion_notifies() {
        let mut p = NoModeration::default();
        for i in 0..10 {
            assert_eq!(p.on_event(i, Event::Submit), Decision::Idle);
        }
        for i in 0..10 {
            assert_eq!(
                p.on_event(100 + i, Event::Complete(CompletionMeta::default())),
                Decision::Notify
            );
            assert_eq!(p.held(), 0);
        }
        assert_eq!(p.in_flight(), 0);
        assert_eq!(p.on_event(200, Event::Timer), Decision::Idle);
    }
}
