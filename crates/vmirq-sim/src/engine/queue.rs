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
    gen: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    time: Nanos,
    seq: u64,
    slot: u32,
    gen: u32,
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest (time, seq) on top.
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug)]
struct Slot<E> {
    gen: u32,
    event: Option<E>,
}

/// Pending events ordered by time, then by scheduling order.
#[derive(Debug)]
pub struct EventQueue<E> {
    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Key>,
    slab: Vec<Slot<E>>,
    free: Vec<u32>,
    live: usize,
    limit: usize,
    stats: EngineStats,
}

impl<E> EventQueue<E> {
    /// An empty queue at time 0 that refuses to hold more than `limit` live events.
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self {
            now: 0,
            seq: 0,
            heap: BinaryHeap::with_capacity(limit.min(1 << 16)),
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
                    gen: 0,
                    event: None,
                });
                s
            }
        };
        let entry = &mut self.slab[slot as usize];
        entry.event = Some(event);
        let gen = entry.gen;
        self.heap.push(Key {
            time: at,
            seq: self.seq,
            slot,
            gen,
        });
        self.seq += 1;
        self.live += 1;
        self.stats.pending_max = self.stats.pending_max.max(self.live);
        Ok(EventId { slot, gen })
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
        if entry.gen != id.gen || entry.event.is_none() {
            return false;
        }
        entry.event = None;
        entry.gen = entry.gen.wrapping_add(1);
        self.free.push(id.slot);
        self.live -= 1;
        self.stats.cancelled += 1;
        self.maybe_compact();
        true
    }

    /// Deliver the next event due at or before `end`, advancing time to it. Returns `None`
    /// (and leaves the event pending) when the next event is later than `end` or none is left.
    pub fn pop_until(&mut self, end: Nanos) -> Option<(Nanos, EventId, E)> {
        while let Some(&key) = self.heap.peek() {
            if key.time > end {
                return None;
            }
            self.heap.pop();
            let entry = &mut self.slab[key.slot as usize];
            if entry.gen != key.gen {
                continue; // cancelled: the slot moved on
            }
            let Some(event) = entry.event.take() else {
                continue;
            };
            entry.gen = entry.gen.wrapping_add(1);
            self.free.push(key.slot);
            self.live -= 1;
            self.now = key.time;
            self.stats.delivered += 1;
            return Some((
                key.time,
                EventId {
                    slot: key.slot,
                    gen: key.gen,
                },
                event,
            ));
        }
        None
    }

    /// Drop stale heap keys when they outnumber live events (keeps memory bounded under
    /// constant re-arming).
    fn maybe_compact(&mut self) {
        if self.heap.len() <= 2 * self.live + 1024 {
            return;
        }
        let slab = &self.slab;
        self.heap.retain(|k| {
            let e = &slab[k.slot as usize];
            e.gen == k.gen && e.event.is_some()
        });
    }
}
