//! The transmit used-ring writer: entries and index through one store per chunk, the index
//! and slots wrapping, `add_used`'s head rule, the EVENT_IDX decision over the published
//! window (also after the frontend sets a new ring base), and a used ring that spans two
//! regions (written entry by entry).

use super::{TxReturn, TxUsed, CHUNK};
use crate::counters::PortCounters;
use crate::fabric::{GuestMem, Vring};
use crate::queues::{Policies, TxCtl};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vhost_user_backend::VringT;
use virtio_queue::QueueT;
use vm_memory::{
    Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap,
};
use vmirq_vhost::counters::QueueCounters;
use vmirq_vhost::LiveRing;

const SIZE: u16 = 4;
const DESC: u64 = 0x0;
const AVAIL: u64 = 0x100;

/// A running transmit vring of `SIZE` entries with its used ring at `used`.
fn vring(gm: &GuestMem, used: u64, event_idx: bool) -> Vring {
    let v = Vring::new(gm.clone(), SIZE).expect("vring");
    v.set_queue_size(SIZE);
    v.set_queue_info(DESC, AVAIL, used).expect("queue info");
    v.set_queue_event_idx(event_idx);
    v.set_queue_ready(true);
    v.set_enabled(true);
    v
}

fn mem(ranges: &[(u64, usize)]) -> GuestMem {
    let r: Vec<_> = ranges.iter().map(|&(a, l)| (GuestAddress(a), l)).collect();
    GuestMemoryAtomic::new(GuestMemoryMmap::from_ranges(&r).expect("memory"))
}

struct Tx {
    gm: GuestMem,
    v: Vring,
    ctl: TxCtl,
    q: Arc<QueueCounters>,
    c: PortCounters,
    used: TxUsed,
    at: u64,
}

impl Tx {
    fn new(gm: GuestMem, used: u64, event_idx: bool) -> Self {
        let q = Arc::new(QueueCounters::default());
        Self {
            v: vring(&gm, used, event_idx),
            ctl: TxCtl::new(&Policies::default(), q.clone()).expect("tx ctl"),
            gm,
            q,
            c: PortCounters::default(),
            used: TxUsed::default(),
            at: used,
        }
    }

    /// Return `heads` in one batch; whether the queue broke.
    fn give_back(&mut self, heads: &[u16]) -> bool {
        let mem = self.gm.memory();
        let mut state = self.v.get_mut();
        let mut ring = LiveRing {
            state: &mut state,
            mem: &self.gm,
        };
        let mut back = TxReturn::new(&mut self.used);
        for &h in heads {
            if !back.chain(&mut self.ctl, &mut ring, &mem, h, 60, &self.c) {
                break;
            }
        }
        back.finish(&mut self.ctl, &mut ring, &mem, &self.c)
    }

    fn used_idx(&self) -> u16 {
        self.gm
            .memory()
            .read_obj::<u16>(GuestAddress(self.at + 2))
            .expect("idx")
    }

    /// (id, len) of used slot `slot`.
    fn entry(&self, slot: u64) -> (u32, u32) {
        let m = self.gm.memory();
        let at = GuestAddress(self.at + 4 + 8 * slot);
        let id = m.read_obj::<u32>(at).expect("id");
        let len = m.read_obj::<u32>(GuestAddress(at.0 + 4)).expect("len");
        (id, len)
    }

    fn set_used_event(&self, e: u16) {
        let at = GuestAddress(AVAIL + 4 + 2 * u64::from(SIZE));
        self.gm.memory().write_obj(e, at).expect("used_event");
    }

    /// Signals sent (call eventfd writes).
    fn signals(&self) -> u64 {
        self.q.notifications.load(Ordering::Relaxed)
    }

    /// Notification decisions made (signals sent and refused).
    fn decisions(&self) -> u64 {
        self.signals() + self.q.suppressed.load(Ordering::Relaxed)
    }
}

#[test]
fn entries_wrap_the_ring_and_the_index_with_one_index_store() {
    let mut tx = Tx::new(mem(&[(0, 0x1000)]), 0x200, false);
    tx.v.set_queue_next_used(u16::MAX - 1);
    assert!(!tx.give_back(&[3, 1, 0, 2, 1, 3]));
    // 65534 + 6 wraps to 4; slots 2, 3, 0, 1, 2, 3: the last four overwrite.
    assert_eq!(tx.used_idx(), 4);
    assert_eq!(tx.v.get_ref().get_queue().next_used(), 4);
    assert_eq!(tx.entry(0), (0, 0));
    assert_eq!(tx.entry(1), (2, 0));
    assert_eq!(tx.entry(2), (1, 0));
    assert_eq!(tx.entry(3), (3, 0));
    assert_eq!(tx.c.queue_broken.load(Ordering::Relaxed), 0);
}

#[test]
fn a_long_batch_is_published_chunk_by_chunk() {
    let mut tx = Tx::new(mem(&[(0, 0x1000)]), 0x200, false);
    let heads: Vec<u16> = (0..CHUNK + 3).map(|i| [0, 1, 2, 3][i % 4]).collect();
    assert!(!tx.give_back(&heads));
    assert_eq!(usize::from(tx.used_idx()), CHUNK + 3);
    // One notification decision per chunk (not one per chain); without EVENT_IDX (and
    // NO_INTERRUPT clear) each signals.
    assert_eq!(tx.decisions(), 2);
    assert_eq!(tx.signals(), 2);
}

#[test]
fn a_head_outside_the_table_breaks_the_queue_and_publishes_nothing_after_it() {
    let mut tx = Tx::new(mem(&[(0, 0x1000)]), 0x200, false);
    assert!(tx.give_back(&[1, SIZE, 2]));
    assert_eq!(tx.used_idx(), 0, "nothing of the broken batch is visible");
    assert_eq!(tx.c.queue_broken.load(Ordering::Relaxed), 1);
}

#[test]
fn a_used_ring_outside_memory_breaks_the_queue() {
    let mut tx = Tx::new(mem(&[(0, 0x1000)]), 0x1000 - 8, false);
    assert!(tx.give_back(&[0]));
    assert_eq!(tx.c.queue_broken.load(Ordering::Relaxed), 1);
}

/// virtio 1.2 §2.7.10: with EVENT_IDX the device signals when the entries published since
/// the last decision pass `used_event`.
#[test]
fn verify_spec_2_7_10_event_idx_signals_only_when_used_event_is_passed() {
    let mut tx = Tx::new(mem(&[(0, 0x1000)]), 0x200, true);
    tx.set_used_event(4);
    assert!(!tx.give_back(&[0, 1, 2])); // entries 0..3: used_event 4 not reached
    assert_eq!(tx.signals(), 0);
    assert!(!tx.give_back(&[3, 0])); // entries 3, 4: entry 4 passes used_event 4
    assert_eq!(tx.signals(), 1);
    assert!(!tx.give_back(&[1])); // entry 5: used_event still 4, already signalled
    assert_eq!(tx.signals(), 1);
    // The frontend sets the ring base back to 4 (SET_VRING_BASE after a stop) and asks
    // for a signal at entry 4: the window starts at the new base. Kept from before, it
    // would cover only entry 6 of 4, 5, 6 and miss the request.
    tx.v.set_queue_next_used(4);
    tx.set_used_event(4);
    assert!(!tx.give_back(&[2, 3, 0]));
    assert_eq!(tx.used_idx(), 7);
    assert_eq!(tx.signals(), 2);
}

#[test]
fn a_used_ring_in_two_regions_is_written_entry_by_entry() {
    // Header and the first entry in the first region, the rest in the second.
    let at = 0x1000 - 12;
    let mut tx = Tx::new(mem(&[(0, 0x1000), (0x1000, 0x1000)]), at, false);
    let whole = 4 + 8 * usize::from(SIZE);
    assert!(tx.gm.memory().get_slice(GuestAddress(at), whole).is_err());
    assert!(!tx.give_back(&[2, 3, 1, 0, 2]));
    assert_eq!(tx.used_idx(), 5);
    assert_eq!(tx.entry(0), (2, 0)); // entry 4 wrapped onto slot 0
    assert_eq!(tx.entry(1), (3, 0));
    assert_eq!(tx.entry(3), (0, 0));
    assert_eq!(tx.signals(), 1);
}
