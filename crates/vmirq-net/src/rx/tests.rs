//! `publish_used` through a translated used ring and entry by entry: the same bytes.

use super::*;

const SIZE: u16 = 4;

fn queue(used: u32) -> Queue {
    let mut q = Queue::new(SIZE).expect("queue");
    q.set_used_ring_address(Some(used), Some(0));
    q.set_ready(true);
    q
}

/// The used ring's bytes after publishing 6 entries (wrapping the ring) at `used`.
fn published(mem: &GuestMemoryMmap, used: u32) -> Vec<u8> {
    let mut q = queue(used);
    publish_used(&mut q, mem, &[3, 1, 2], &[64, 0, 1500]).expect("publish");
    publish_used(&mut q, mem, &[0, 3, 1], &[7, 8, 9]).expect("publish");
    assert_eq!(q.next_used(), 6);
    let mut out = vec![0u8; 4 + 8 * usize::from(SIZE)];
    mem.read_slice(&mut out, GuestAddress(u64::from(used)))
        .expect("read");
    out
}

#[test]
fn a_translated_used_ring_gets_the_same_bytes_as_one_written_entry_by_entry() {
    let one = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x2000)]).expect("memory");
    let split =
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x1000), (GuestAddress(0x1000), 0x1000)])
            .expect("memory");
    let across = 0x1000 - 12; // header and one entry in the first region
    assert!(split
        .get_slice(GuestAddress(u64::from(across)), 36)
        .is_err());
    let want = published(&one, across);
    assert_eq!(published(&split, across), want);
    assert_eq!(u16::from_le_bytes([want[2], want[3]]), 6);
    // Entries 4 and 5 wrapped onto slots 0 and 1.
    assert_eq!(&want[4..12], &[3, 0, 0, 0, 8, 0, 0, 0]);
    assert_eq!(&want[12..20], &[1, 0, 0, 0, 9, 0, 0, 0]);
    assert_eq!(&want[20..28], &[2, 0, 0, 0, 0xdc, 5, 0, 0]);
    // A ring partly outside memory is an error, not a panic.
    let mut q = queue(0x2000 - 8);
    assert!(publish_used(&mut q, &one, &[0], &[1]).is_err());
}

/// A driver reset within the connection: the rings start over at a used index of the
/// frontend's choosing. Without `restart` the window still starts where the old ring was
/// and misses the driver's request for the first entries; with it the next decision
/// notifies.
#[test]
fn a_restarted_window_notifies_where_the_old_window_would_miss_the_used_event() {
    const AVAIL: u32 = 0x800;
    let mem: GuestMemoryMmap =
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x2000)]).expect("memory");
    let used_event = GuestAddress(u64::from(AVAIL) + 4 + 2 * u64::from(SIZE));
    let run = |restart: bool| {
        let mut q = queue(0x1000);
        q.set_avail_ring_address(Some(AVAIL), Some(0));
        q.set_event_idx(true);
        let mut w = UsedWindow::default();
        publish_used(&mut q, &mem, &[0, 1, 2, 3], &[1; 4]).expect("publish");
        q.set_next_used(5);
        mem.write_obj(4u16, used_event).expect("used_event");
        assert!(w.needs_notification(&q, &mem).expect("decide"));
        // The driver resets: the ring starts over at used index 0, and the driver asks to
        // be told after the first entry.
        if restart {
            w.restart();
        }
        q.set_next_used(0);
        mem.write_obj(0u16, used_event).expect("used_event");
        publish_used(&mut q, &mem, &[0, 1, 2, 3], &[1; 4]).expect("publish");
        publish_used(&mut q, &mem, &[0, 1, 2], &[1; 3]).expect("publish");
        assert_eq!(q.next_used(), 7);
        w.needs_notification(&q, &mem).expect("decide")
    };
    assert!(!run(false), "the stale window covers entries 5 and 6 only");
    assert!(run(true));
}

#[test]
fn restart_before_any_decision_changes_nothing() {
    let mem: GuestMemoryMmap =
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x2000)]).expect("memory");
    let mut q = queue(0x1000);
    q.set_avail_ring_address(Some(0x800), Some(0));
    let mut w = UsedWindow::default();
    w.restart();
    // Nothing published: no notification.
    assert!(!w.needs_notification(&q, &mem).expect("decide"));
}
