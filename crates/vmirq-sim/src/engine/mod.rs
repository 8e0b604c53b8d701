//! The event engine: a single-threaded discrete-event scheduler with integer-nanosecond time.
//!
//! Pending events live in a slab; a binary heap orders 16-byte keys `(time, sequence << 22
//! | slot)`. Ties in time are broken by the insertion sequence, so the order of events never
//! depends on anything but the order they were scheduled in. Cancelling an event (for
//! example a timer that is re-armed) empties its slab slot; the slot stores the sequence
//! number of its event, which acts as its generation: a heap key whose sequence no longer
//! matches is stale and is dropped when it surfaces (lazy cancellation). A delivered top key
//! stays in place until the next schedule replaces it (one sift instead of pop + push). The heap
//! is compacted when stale keys outnumber live ones, so memory stays bounded.

mod queue;

pub use queue::{EventId, EventQueue};

use crate::Nanos;

/// Errors of the engine.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EngineError {
    /// An event was scheduled before the current time.
    #[error("event scheduled at {at} ns, before the current time {now} ns")]
    InPast {
        /// Requested time.
        at: Nanos,
        /// Current time.
        now: Nanos,
    },
    /// More events are pending than the configured bound allows.
    #[error("more than {limit} events pending")]
    TooManyPending {
        /// The bound.
        limit: usize,
    },
    /// The run processed its maximum number of events before reaching its end time.
    #[error("event budget of {limit} events exhausted at {now} ns")]
    EventBudget {
        /// The bound.
        limit: u64,
        /// Simulated time when the budget ran out.
        now: Nanos,
    },
}

/// Result alias for engine operations.
pub type Result<T> = core::result::Result<T, EngineError>;

/// Counters of one engine run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// Events delivered to the model.
    pub delivered: u64,
    /// Events cancelled before they were due.
    pub cancelled: u64,
    /// Largest number of live pending events seen.
    pub pending_max: usize,
}

/// A re-armable timer: holds at most one pending event and cancels it when re-armed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timer {
    pending: Option<EventId>,
}

impl Timer {
    /// Arm the timer for `at`, replacing (cancelling) any earlier arming.
    ///
    /// # Errors
    /// As [`EventQueue::schedule_at`].
    pub fn arm<E>(&mut self, q: &mut EventQueue<E>, at: Nanos, event: E) -> Result<()> {
        self.cancel(q);
        self.pending = Some(q.schedule_at(at, event)?);
        Ok(())
    }

    /// Cancel the pending arming, if any.
    pub fn cancel<E>(&mut self, q: &mut EventQueue<E>) {
        if let Some(id) = self.pending.take() {
            q.cancel(id);
        }
    }

    /// The timer's event was delivered: forget it without cancelling.
    pub fn fired(&mut self) {
        self.pending = None;
    }

    /// Whether the timer is armed and `id` is its event.
    #[must_use]
    pub fn is(&self, id: EventId) -> bool {
        self.pending == Some(id)
    }

    /// Whether the timer is armed.
    #[must_use]
    pub fn armed(&self) -> bool {
        self.pending.is_some()
    }
}
