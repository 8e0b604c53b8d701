//! The fixed-capacity, lock-free table of guest memory mappings the SIGBUS handler may
//! repair: written by the control path (register, unregister), read by the signal handler
//! with atomic loads only (no allocation, no lock).
//!
//! A slot goes `FREE -> BUSY` (claimed by a writer with a compare-exchange), gets its fields,
//! then `BUSY -> LIVE` with a release store; unregistering goes `LIVE -> BUSY -> FREE`. A
//! reader uses a slot only when it loads `LIVE` (acquire) before and the same generation
//! after reading the fields, so it never acts on a half-written slot.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Guest memory mappings registered at once in the whole process (every connection's
/// regions; vhost-user allows 509 memory slots per device, frontends use a few).
pub const CAPACITY: usize = 512;

const FREE: u64 = 0;
const BUSY: u64 = 1;
const LIVE: u64 = 2;

/// One registered mapping.
struct Slot {
    /// `FREE`, `BUSY` or `LIVE` in the low 2 bits, a generation above them (bumped at every
    /// registration, so a reader can tell the slot was reused while it read).
    state: AtomicU64,
    /// Host address of the mapping.
    start: AtomicUsize,
    /// Length of the mapping in bytes.
    len: AtomicUsize,
    /// Guest physical address of the region (for the log line).
    guest_addr: AtomicU64,
    /// The frontend took (part of) the memory away: an access raised SIGBUS.
    revoked: AtomicBool,
}

impl Slot {
    const fn new() -> Self {
        Self {
            state: AtomicU64::new(FREE),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            guest_addr: AtomicU64::new(0),
            revoked: AtomicBool::new(false),
        }
    }
}

/// The slots of [`Table`]: a `static` holds them, so `new` is `const`.
pub struct Table {
    slots: [Slot; CAPACITY],
    /// Live slots whose `revoked` flag is set (the data path's fast check).
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

/// A slot handed out by [`Table::insert`] (its index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotId(usize);

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
        for (i, s) in self.slots.iter().enumerate() {
            let cur = s.state.load(Ordering::Relaxed);
            if cur & 3 != FREE {
                continue;
            }
            let generation = (cur >> 2).wrapping_add(1);
            let busy = (generation << 2) | BUSY;
            if s.state
                .compare_exchange(cur, busy, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            s.start.store(m.start, Ordering::Relaxed);
            s.len.store(m.len, Ordering::Relaxed);
            s.guest_addr.store(m.guest_addr, Ordering::Relaxed);
            s.revoked.store(false, Ordering::Relaxed);
            s.state.store((generation << 2) | LIVE, Ordering::Release);
            return Some(SlotId(i));
        }
        None
    }

    /// Unregister `id` (from [`Table::insert`]); the handler no longer acts on its range once
    /// this returns.
    pub fn remove(&self, id: SlotId) {
        let Some(s) = self.slots.get(id.0) else {
            return;
        };
        let cur = s.state.load(Ordering::Relaxed);
        if cur & 3 != LIVE {
            return;
        }
        s.state.store((cur & !3) | BUSY, Ordering::SeqCst);
        if s.revoked.swap(false, Ordering::SeqCst) {
            self.revoked_live.fetch_sub(1, Ordering::SeqCst);
        }
        s.state.store(cur & !3, Ordering::Release);
    }

    /// The live mapping that contains host address `addr`, with its slot. Async-signal-safe:
    /// atomic loads only.
    pub fn find(&self, addr: usize) -> Option<(SlotId, Mapping)> {
        for (i, s) in self.slots.iter().enumerate() {
            let before = s.state.load(Ordering::Acquire);
            if before & 3 != LIVE {
                continue;
            }
            let m = Mapping {
                start: s.start.load(Ordering::Relaxed),
                len: s.len.load(Ordering::Relaxed),
                guest_addr: s.guest_addr.load(Ordering::Relaxed),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            if s.state.load(Ordering::Relaxed) != before {
                continue; // unregistered or reused while read
            }
            if addr >= m.start && addr - m.start < m.len {
                return Some((SlotId(i), m));
            }
        }
        None
    }

    /// Record that `id`'s memory was revoked (the handler, after repairing a page).
    /// Async-signal-safe: atomic operations only.
    pub fn mark_revoked(&self, id: SlotId) {
        let Some(s) = self.slots.get(id.0) else {
            return;
        };
        if !s.revoked.swap(true, Ordering::SeqCst) {
            self.revoked_live.fetch_add(1, Ordering::SeqCst);
            self.revocations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether `id` is revoked.
    #[must_use]
    pub fn is_revoked(&self, id: SlotId) -> bool {
        self.slots
            .get(id.0)
            .is_some_and(|s| s.revoked.load(Ordering::SeqCst))
    }

    /// Whether any live mapping is revoked (one atomic load: the data path's fast check).
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
        t.mark_revoked(a);
        t.mark_revoked(a);
        assert!(t.is_revoked(a));
        assert!(t.any_revoked());
        assert_eq!(t.revocations(), 1);
        t.remove(a);
        assert!(!t.any_revoked());
        // The slot is reused with a clean flag.
        let again = t.insert(m(0x20000, 0x1000)).expect("slot");
        assert_eq!(again, a);
        assert!(!t.is_revoked(again));
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
        assert_eq!(t.insert(m(0x7000_0000, 0x1000)), Some(ids[17]));
        assert_eq!(t.find(17 * 0x1000), None);
        assert_eq!(t.find(0x7000_0000).map(|x| x.0), Some(ids[17]));
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
