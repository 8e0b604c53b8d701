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
