//! The fixed-capacity, lock-free table of guest memory mappings the SIGBUS handler may
//! repair: written by the control path (register, unregister), read by the signal handler
//! with atomic operations only (no allocation, no lock).
//!
//! Each slot has one state word: `FREE`, `BUSY` or `LIVE`, a `REVOKED` bit and a generation
//! (bumped at every registration). A slot goes `FREE -> BUSY` (claimed by a writer with a
//! compare-exchange), gets its fields, then `BUSY -> LIVE` with a release store;
//! unregistering goes `LIVE -> BUSY -> FREE`. A reader uses a slot only when it loads `LIVE`
//! (acquire) before and the same word (but for `REVOKED`) after reading the fields, so it
//! never acts on a half-written slot. Marking a slot revoked is a compare-exchange on the
//! word it was found with, so a slot unregistered (and maybe reused) meanwhile is never
//! marked.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Guest memory mappings registered at once in the whole process (every connection's
/// regions; vhost-user allows 509 memory slots per device, frontends use a few).
pub const CAPACITY: usize = 512;

const FREE: u64 = 0;
const BUSY: u64 = 1;
const LIVE: u64 = 2;
/// Low bits of the state word: `FREE`, `BUSY` or `LIVE`.
const KIND: u64 = 3;
/// The frontend took (part of) the memory away: an access raised SIGBUS.
const REVOKED: u64 = 4;
/// The generation starts at this bit.
const GEN_SHIFT: u32 = 3;

/// One registered mapping.
struct Slot {
    /// Kind, `REVOKED` and generation (see the module documentation).
    state: AtomicU64,
    /// Host address of the mapping.
    start: AtomicUsize,
    /// Length of the mapping in bytes.
    len: AtomicUsize,
    /// Guest physical address of the region (for the log line).
    guest_addr: AtomicU64,
}

impl Slot {
    const fn new() -> Self {
        Self {
            state: AtomicU64::new(FREE),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            guest_addr: AtomicU64::new(0),
        }
    }
}

/// The slots, and the counts the data path reads: a `static` holds them, so `new` is `const`.
pub struct Table {
    slots: [Slot; CAPACITY],
    /// Live slots marked `REVOKED` (the data path's fast check).
    revoked_live: AtomicUsize,
    /// Revocations recorded since the process started.
    revocations: AtomicU64,
}

/// A registered mapping as the table knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Host address.
    pub start: usize,
    /// Bytes.
    pub len: usize,
    /// Guest physical address of the region.
    pub guest_addr: u64,
}

/// One registration of a slot, as [`Table::insert`] hands it out or [`Table::find`] finds
/// it: the slot's index and its live state word without `REVOKED` (so it names this
/// registration, not whatever reuses the slot later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotId {
    index: usize,
    live: u64,
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    /// An empty table.
    #[must_use]
    pub const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)]
        const EMPTY: Slot = Slot::new();
        Self {
            slots: [EMPTY; CAPACITY],
            revoked_live: AtomicUsize::new(0),
            revocations: AtomicU64::new(0),
        }
    }

    /// Register `m`; `None` when every slot is taken.
    pub fn insert(&self, m: Mapping) -> Option<SlotId> {
        for (index, s) in self.slots.iter().enumerate() {
            let cur = s.state.load(Ordering::Relaxed);
            if cur & KIND != FREE {
                continue;
            }
            let generation = (cur >> GEN_SHIFT).wrapping_add(1) << GEN_SHIFT;
            if s.state
                .compare_exchange(cur, generation | BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            s.start.store(m.start, Ordering::Relaxed);
            s.len.store(m.len, Ordering::Relaxed);
            s.guest_addr.store(m.guest_addr, Ordering::Relaxed);
            let live = generation | LIVE;
            s.state.store(live, Ordering::Release);
            return Some(SlotId { index, live });
        }
        None
    }

    /// Unregister `id` (from [`Table::insert`]); the handler no longer acts on its range once
    /// this returns. Removing a registration twice does nothing.
    pub fn remove(&self, id: SlotId) {
        let Some(s) = self.slots.get(id.index) else {
            return;
        };
        let generation = id.live & !KIND;
        let mut cur = s.state.load(Ordering::Relaxed);
        loop {
            if cur & !REVOKED != id.live {
                return; // not this registration any more
            }
            // The handler may set REVOKED at any moment: compare-exchange.
            match s.state.compare_exchange_weak(
                cur,
                generation | BUSY,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        if cur & REVOKED != 0 {
            self.revoked_live.fetch_sub(1, Ordering::SeqCst);
        }
        s.state.store(generation | FREE, Ordering::Release);
    }

    /// The live mapping that contains host address `addr`, with its registration.
    /// Async-signal-safe: atomic loads only.
    pub fn find(&self, addr: usize) -> Option<(SlotId, Mapping)> {
        for (index, s) in self.slots.iter().enumerate() {
            let before = s.state.load(Ordering::Acquire);
            if before & KIND != LIVE {
                continue;
            }
            let m = Mapping {
                start: s.start.load(Ordering::Relaxed),
                len: s.len.load(Ordering::Relaxed),
                guest_addr: s.guest_addr.load(Ordering::Relaxed),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            let live = before & !REVOKED;
            if s.state.load(Ordering::Relaxed) & !REVOKED != live {
                continue; // unregistered or reused while read
            }
            if addr >= m.start && addr - m.start < m.len {
                return Some((SlotId { index, live }, m));
            }
        }
        None
    }

    /// Record that `id`'s memory was revoked (the handler, after repairing the mapping); a
    /// registration removed since it was found is left alone. Async-signal-safe: atomic
    /// operations only.
    pub fn mark_revoked(&self, id: SlotId) {
        let Some(s) = self.slots.get(id.index) else {
            return;
        };
        if s.state
            .compare_exchange(
                id.live,
                id.live | REVOKED,
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.revoked_live.fetch_add(1, Ordering::SeqCst);
            self.revocations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether registration `id` is revoked.
    #[must_use]
    pub fn is_revoked(&self, id: SlotId) -> bool {
        self.slots
            .get(id.index)
            .is_some_and(|s| s.state.load(Ordering::SeqCst) == id.live | REVOKED)
    }

    /// Whether any live mapping is revoked (one atomic load: the data path's fast check). A
    /// removal can decrement the count just before the handler's matching increment lands;
    /// that only sends a caller down the exact check for a moment.
    #[must_use]
    pub fn any_revoked(&self) -> bool {
        self.revoked_live.load(Ordering::SeqCst) != 0
    }

    /// Revocations recorded since the process started.
    #[must_use]
    pub fn revocations(&self) -> u64 {
        self.revocations.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: usize, len: usize) -> Mapping {
        Mapping {
            start,
            len,
            guest_addr: 0x1000,
        }
    }

    #[test]
    fn find_matches_only_live_ranges_and_half_open_ends() {
        let t = Table::new();
        let a = t.insert(m(0x10000, 0x4000)).expect("slot");
        let b = t.insert(m(0x40000, 0x1000)).expect("slot");
        assert_ne!(a, b);
        assert_eq!(t.find(0x10000).map(|x| x.0), Some(a));
        assert_eq!(t.find(0x13fff).map(|x| x.0), Some(a));
        assert_eq!(t.find(0x14000), None);
        assert_eq!(t.find(0xffff), None);
        assert_eq!(t.find(0x40800), Some((b, m(0x40000, 0x1000))));
        t.remove(a);
        assert_eq!(t.find(0x10000), None);
        assert_eq!(t.find(0x40000).map(|x| x.0), Some(b));
        t.remove(a); // twice: nothing happens
        assert_eq!(t.find(0x40000).map(|x| x.0), Some(b));
    }

    #[test]
    fn revocation_is_counted_once_and_cleared_with_the_slot() {
        let t = Table::new();
        let a = t.insert(m(0x10000, 0x4000)).expect("slot");
        assert!(!t.any_revoked());
        // Found again while revoked (a second thread faulting on the same mapping), and
        // marked through the id it was found with.
        let (found, _) = t.find(0x12000).expect("still found while revoked");
        assert_eq!(found, a);
        t.mark_revoked(found);
        t.mark_revoked(a);
        assert!(t.is_revoked(a));
        assert_eq!(t.find(0x12000).map(|x| x.0), Some(a));
        assert!(t.any_revoked());
        assert_eq!(t.revocations(), 1);
        t.remove(a);
        assert!(!t.any_revoked());
        // The slot is reused with a clean flag and a new generation: the old id names
        // nothing any more (marking or removing it leaves the new registration alone).
        let again = t.insert(m(0x20000, 0x1000)).expect("slot");
        assert_eq!(again.index, a.index);
        assert_ne!(again, a);
        assert!(!t.is_revoked(again));
        t.mark_revoked(a);
        assert!(!t.is_revoked(again));
        assert!(!t.any_revoked());
        t.remove(a);
        assert_eq!(t.find(0x20000).map(|x| x.0), Some(again));
        assert_eq!(t.revocations(), 1);
    }

    #[test]
    fn a_full_table_refuses_and_frees_slots_for_reuse() {
        let t = Table::new();
        let ids: Vec<_> = (0..CAPACITY)
            .map(|i| t.insert(m(i * 0x1000, 0x1000)).expect("slot"))
            .collect();
        assert_eq!(t.insert(m(usize::MAX - 0x1000, 0x1000)), None);
        t.remove(ids[17]);
        let reused = t.insert(m(0x7000_0000, 0x1000)).expect("freed slot");
        assert_eq!(reused.index, ids[17].index);
        assert_eq!(t.find(17 * 0x1000), None);
        assert_eq!(t.find(0x7000_0000).map(|x| x.0), Some(reused));
    }

    #[test]
    fn concurrent_inserts_and_removes_never_show_a_torn_mapping() {
        let t = std::sync::Arc::new(Table::new());
        let writers: Vec<_> = (0..2usize)
            .map(|w| {
                let t = std::sync::Arc::clone(&t);
                std::thread::spawn(move || {
                    for i in 0..20_000usize {
                        // Every mapping a writer registers has len == start / 16.
                        let start = (w + 1) << 40 | (i % 64) << 20;
                        if let Some(id) = t.insert(m(start, start / 16)) {
                            t.remove(id);
                        }
                    }
                })
            })
            .collect();
        let mut seen = 0u64;
        while writers.iter().any(|h| !h.is_finished()) {
            for w in 0..2usize {
                for i in 0..64usize {
                    let start = (w + 1) << 40 | i << 20;
                    if let Some((_, got)) = t.find(start) {
                        assert_eq!(got.len, got.start / 16, "torn slot {got:?}");
                        seen += 1;
                    }
                }
            }
        }
        for h in writers {
            h.join().expect("writer");
        }
        eprintln!("table race test: {seen} live lookups");
    }
}
