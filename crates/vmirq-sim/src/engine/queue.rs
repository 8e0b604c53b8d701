//! [`EventQueue`]: the slab of pending events and the heap that orders them.

use super::{EngineError, EngineStats, Result};
use crate::Nanos;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Handle of a scheduled event, used to cancel it. Stale handles (of events already
/// delivered or cancelled) are harmless: cancelling them does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId {
    slot: u32,
    seq: u64,
}

/// Bits of the heap key's second word that hold the slab slot; the rest hold the sequence.
const SLOT_BITS: u32 = 22;
/// Most slots (live events) a queue can have.
pub const MAX_PENDING: usize = 1 << SLOT_BITS;

/// A heap key of 16 bytes: time, then `seq << SLOT_BITS | slot`. Ordering by the pair orders
/// by time and then by scheduling order (sequence numbers are unique). The sequence also
/// identifies the event: a key whose sequence differs from its slot's is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    time: Nanos,
    tie: u64,
}

impl Key {
    fn slot(self) -> u32 {
        // Masked to SLOT_BITS bits, fits u32.
        #[allow(clippy::cast_possible_truncation, reason = "masked to 22 bits")]
        let s = (self.tie & ((1 << SLOT_BITS) - 1)) as u32;
        s
    }

    fn seq(self) -> u64 {
        self.tie >> SLOT_BITS
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest (time, seq) on top.
        (other.time, other.tie).cmp(&(self.time, self.tie))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug)]
struct Slot<E> {
    /// Sequence number of the event in the slot (the slot's generation).
    seq: u64,
    event: Option<E>,
}

/// Pending events ordered by time, then by scheduling order.
#[derive(Debug)]
pub struct EventQueue<E> {
    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Key>,
    /// The heap's top key was delivered but is still in the heap: the next schedule
    /// replaces it in place (one sift instead of a pop and a push, the "hold" operation).
    top_consumed: bool,
    slab: Vec<Slot<E>>,
    free: Vec<u32>,
    live: usize,
    limit: usize,
    stats: EngineStats,
}

impl<E> EventQueue<E> {
    /// An empty queue at time 0 that refuses to hold more than `limit` live events
    /// (at most `MAX_PENDING`).
    #[must_use]
    pub fn new(limit: usize) -> Self {
        let limit = limit.min(MAX_PENDING);
        Self {
            now: 0,
            seq: 0,
            heap: BinaryHeap::with_capacity(limit.min(1 << 16)),
            top_consumed: false,
            slab: Vec::new(),
            free: Vec::new(),
            live: 0,
            limit,
            stats: EngineStats::default(),
        }
    }

    /// Current simulated time: the time of the last delivered event.
    #[must_use]
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Live (not cancelled, not delivered) events.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.live
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Schedule `event` at absolute time `at` (not before now).
    ///
    /// # Errors
    /// [`EngineError::InPast`] if `at < now`; [`EngineError::TooManyPending`] at the bound.
    pub fn schedule_at(&mut self, at: Nanos, event: E) -> Result<EventId> {
        if at < self.now {
            return Err(EngineError::InPast { at, now: self.now });
        }
        if self.live >= self.limit {
            return Err(EngineError::TooManyPending { limit: self.limit });
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let s = u32::try_from(self.slab.len())
                    .map_err(|_| EngineError::TooManyPending { limit: self.limit })?;
                self.slab.push(Slot {
                    seq: u64::MAX,
                    event: None,
                });
                s
            }
        };
        let seq = self.seq;
        self.seq += 1;
        let entry = &mut self.slab[slot as usize];
        entry.event = Some(event);
        entry.seq = seq;
        let key = Key {
            time: at,
            tie: seq << SLOT_BITS | u64::from(slot),
        };
        if self.top_consumed {
            self.top_consumed = false;
            if let Some(mut top) = self.heap.peek_mut() {
                // Replacing the root only ever needs a sift down, done when `top` drops.
                *top = key;
            }
        } else {
            self.heap.push(key);
        }
        self.live += 1;
        self.stats.pending_max = self.stats.pending_max.max(self.live);
        Ok(EventId { slot, seq })
    }

    /// Schedule `event` `delay` nanoseconds from now.
    ///
    /// # Errors
    /// As [`EventQueue::schedule_at`].
    pub fn schedule_in(&mut self, delay: Nanos, event: E) -> Result<EventId> {
        self.schedule_at(self.now.saturating_add(delay), event)
    }

    /// Cancel a pending event; returns whether it was still pending.
    pub fn cancel(&mut self, id: EventId) -> bool {
        let Some(entry) = self.slab.get_mut(id.slot as usize) else {
            return false;
        };
        if entry.seq != id.seq || entry.event.is_none() {
            return false;
        }
        entry.event = None;
        entry.seq = u64::MAX;
        self.free.push(id.slot);
        self.live -= 1;
        self.stats.cancelled += 1;
        self.maybe_compact();
        true
    }

    /// Deliver the next event due at or before `end`, advancing time to it. Returns `None`
    /// (and leaves the event pending) when the next event is later than `end` or none is left.
    pub fn pop_until(&mut self, end: Nanos) -> Option<(Nanos, EventId, E)> {
        self.drop_consumed_top();
        while let Some(&key) = self.heap.peek() {
            if key.time > end {
                return None;
            }
            let (slot, seq) = (key.slot(), key.seq());
            let entry = &mut self.slab[slot as usize];
            if entry.seq != seq {
                self.heap.pop(); // cancelled: the slot is empty or holds a newer event
                continue;
            }
            let Some(event) = entry.event.take() else {
                self.heap.pop();
                continue;
            };
            entry.seq = u64::MAX;
            self.free.push(slot);
            self.live -= 1;
            self.now = key.time;
            self.stats.delivered += 1;
            self.top_consumed = true;
            return Some((key.time, EventId { slot, seq }, event));
        }
        None
    }

    /// Remove the delivered top key if no schedule has replaced it.
    fn drop_consumed_top(&mut self) {
        if self.top_consumed {
            self.top_consumed = false;
            self.heap.pop();
        }
    }

    /// Drop stale heap keys when they outnumber live events (keeps memory bounded under
    /// constant re-arming).
    fn maybe_compact(&mut self) {
        if self.heap.len() <= 2 * self.live + 1024 {
            return;
        }
        self.drop_consumed_top();
        let slab = &self.slab;
        self.heap.retain(|k| {
            let e = &slab[k.slot() as usize];
            e.seq == k.seq() && e.event.is_some()
        });
    }
}
