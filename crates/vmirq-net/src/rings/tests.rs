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
