//! The translated available ring against virtio-queue's iterator on the same rings.

use super::*;
use vm_memory::Bytes;

const SIZE: u16 = 8;

/// A ready queue of `SIZE` entries whose avail ring is at `avail`.
fn queue(avail: u32) -> Queue {
    let mut q = Queue::new(SIZE).expect("queue");
    q.set_desc_table_address(Some(0x100), Some(0));
    q.set_avail_ring_address(Some(avail), Some(0));
    q.set_used_ring_address(Some(0x3000), Some(0));
    q.set_ready(true);
    q
}

fn put_avail(mem: &GuestMemoryMmap, avail: u32, idx: u16, heads: &[u16]) {
    for (i, h) in heads.iter().enumerate() {
        mem.write_obj(h.to_le(), GuestAddress(u64::from(avail) + 4 + 2 * i as u64))
            .expect("write");
    }
    mem.write_obj(idx.to_le(), GuestAddress(u64::from(avail) + 2))
        .expect("write");
}

/// Pop until empty or an error, both ways; demand the same answers.
fn drain_both(mem: &GuestMemoryMmap, avail: u32) -> Result<Vec<u16>, AvailError> {
    let mut a = queue(avail);
    let mut b = queue(avail);
    let view = AvailView::new(&a, mem);
    let mut fast = Vec::new();
    let fast = loop {
        match view.pop(&mut a, mem) {
            Ok(Some(h)) => fast.push(h),
            Ok(None) => break Ok(fast),
            Err(e) => break Err(e),
        }
    };
    let mut slow = Vec::new();
    let slow = loop {
        match slow_pop(&mut b, mem) {
            Ok(Some(h)) => slow.push(h),
            Ok(None) => break Ok(slow),
            Err(e) => break Err(e),
        }
    };
    assert_eq!(fast, slow);
    assert_eq!(a.next_avail(), b.next_avail());
    fast
}

#[test]
fn heads_come_in_ring_order_and_an_index_jump_breaks_the_ring() {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("memory");
    assert!(AvailView::new(&queue(0x2000), &mem).is_mapped());
    assert_eq!(drain_both(&mem, 0x2000), Ok(vec![]));
    put_avail(&mem, 0x2000, 3, &[5, 1, 7]);
    assert_eq!(drain_both(&mem, 0x2000), Ok(vec![5, 1, 7]));
    put_avail(&mem, 0x2000, SIZE, &[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(drain_both(&mem, 0x2000), Ok((0..SIZE).collect()));
    put_avail(&mem, 0x2000, SIZE + 1, &[]);
    assert_eq!(drain_both(&mem, 0x2000), Err(AvailError::IndexJump));
    // Wrapped index: 0xffff - 0 = a jump of 65535.
    put_avail(&mem, 0x2000, 0xffff, &[]);
    assert_eq!(drain_both(&mem, 0x2000), Err(AvailError::IndexJump));
}

#[test]
fn a_ring_across_regions_takes_the_iterator_and_a_stopped_queue_gives_nothing() {
    let mem =
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x1000), (GuestAddress(0x1000), 0x1000)])
            .expect("memory");
    let avail = 0x1000 - 8; // header and two entries in the first region
    assert!(!AvailView::new(&queue(avail), &mem).is_mapped());
    put_avail(&mem, avail, 4, &[3, 2, 1, 0]);
    assert_eq!(drain_both(&mem, avail), Ok(vec![3, 2, 1, 0]));
    let mut q = queue(0x2000 - 2); // the index lies outside memory
    let view = AvailView::new(&q, &mem);
    assert_eq!(view.pop(&mut q, &mem), Err(AvailError::OutsideMemory));
    let mut q = queue(0x100);
    let view = AvailView::new(&q, &mem);
    q.set_ready(false);
    assert_eq!(view.pop(&mut q, &mem), Err(AvailError::NotReady));
}

#[test]
fn the_index_is_read_again_when_what_was_seen_is_drained_and_a_put_back_is_seen_again() {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("memory");
    let mut q = queue(0x2000);
    let view = AvailView::new(&q, &mem);
    put_avail(&mem, 0x2000, 2, &[4, 6]);
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(4)));
    // The driver adds one more while the view still has one seen entry.
    put_avail(&mem, 0x2000, 3, &[4, 6, 1]);
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(6)));
    // Put back (no room): the same entries come again.
    q.set_next_avail(0);
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(4)));
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(6)));
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(1)));
    assert_eq!(view.pop(&mut q, &mem), Ok(None));
    // A jump is seen at the next read of the index.
    put_avail(&mem, 0x2000, 3 + SIZE + 1, &[]);
    assert_eq!(view.pop(&mut q, &mem), Err(AvailError::IndexJump));
    assert_eq!(q.next_avail(), 3);
}

/// Both ways from ring position `start` with the driver's index at `idx` (entries already
/// written); the same heads, the same `next_avail`.
fn drain_from(mem: &GuestMemoryMmap, avail: u32, size: u16, start: u16) -> Vec<u16> {
    let mk = || {
        let mut q = Queue::new(size).expect("queue");
        q.set_desc_table_address(Some(0x100), Some(0));
        q.set_avail_ring_address(Some(avail), Some(0));
        q.set_used_ring_address(Some(0x3000), Some(0));
        q.set_ready(true);
        q.set_next_avail(start);
        q
    };
    let (mut a, mut b) = (mk(), mk());
    let view = AvailView::new(&a, mem);
    assert!(view.is_mapped());
    let mut fast = Vec::new();
    while let Some(h) = view.pop(&mut a, mem).expect("pop") {
        fast.push(h);
    }
    let mut slow = Vec::new();
    while let Some(h) = slow_pop(&mut b, mem).expect("pop") {
        slow.push(h);
    }
    assert_eq!(fast, slow);
    assert_eq!(a.next_avail(), b.next_avail());
    fast
}

#[test]
fn entries_copied_out_in_bulk_wrap_around_the_ring_end() {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("memory");
    // Slots 6, 7, then 0, 1, 2 (positions 6..11).
    let mut slots = [0u16; 8];
    for (pos, head) in (6u16..11).zip([10, 11, 12, 13, 14]) {
        slots[usize::from(pos % SIZE)] = head;
    }
    put_avail(&mem, 0x2000, 11, &slots);
    assert_eq!(drain_from(&mem, 0x2000, SIZE, 6), vec![10, 11, 12, 13, 14]);
    // The index itself wrapped past 2^16.
    put_avail(&mem, 0x2000, 3, &slots);
    let got = drain_from(&mem, 0x2000, SIZE, 0xFFFE);
    assert_eq!(got, vec![slots[6], slots[7], slots[0], slots[1], slots[2]]);
}

#[test]
fn more_entries_than_one_copy_holds_come_in_order_and_put_backs_come_again() {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("memory");
    const BIG: u16 = 128;
    let n = u16::try_from(AHEAD).expect("fits") * 2 + 5;
    let heads: Vec<u16> = (0..BIG).map(|i| (i * 7) % BIG).collect();
    put_avail(&mem, 0x2000, n + 100, &heads);
    let got = drain_from(&mem, 0x2000, BIG, 100);
    let want: Vec<u16> = (100..100 + n)
        .map(|p| heads[usize::from(p % BIG)])
        .collect();
    assert_eq!(got, want);
    // Put back within the copy and across it: the same heads again.
    let mut q = Queue::new(BIG).expect("queue");
    q.set_avail_ring_address(Some(0x2000), Some(0));
    q.set_ready(true);
    q.set_next_avail(100);
    let view = AvailView::new(&q, &mem);
    let first: Vec<u16> = (0..AHEAD + 3)
        .map(|_| view.pop(&mut q, &mem).expect("pop").expect("head"))
        .collect();
    q.set_next_avail(100 + 2);
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(first[2])));
    q.set_next_avail(100 + u16::try_from(AHEAD).expect("fits") - 1);
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(first[AHEAD - 1])));
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(first[AHEAD])));
}

#[test]
fn copied_ahead_names_the_heads_pop_hands_out_next_and_nothing_beyond_the_copy() {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("memory");
    put_avail(&mem, 0x2000, 5, &[4, 2, 6, 0, 3]);
    let mut q = queue(0x2000);
    let view = AvailView::new(&q, &mem);
    assert_eq!(
        view.copied_ahead(&q, 0),
        None,
        "nothing copied before the first pop"
    );
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(4)));
    let ahead: Vec<Option<u16>> = (0..5).map(|k| view.copied_ahead(&q, k)).collect();
    assert_eq!(ahead, [Some(2), Some(6), Some(0), Some(3), None]);
    assert_eq!(view.pop(&mut q, &mem), Ok(Some(2)));
    assert_eq!(view.copied_ahead(&q, 2), Some(3));
    assert_eq!(view.copied_ahead(&q, 3), None);
    // Put back before the copy's start: nothing claimed.
    q.set_next_avail(0xFFFF);
    assert_eq!(view.copied_ahead(&q, 0), None);
}
