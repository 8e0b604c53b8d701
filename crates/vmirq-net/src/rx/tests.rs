//! `publish_used` through a translated used ring and entry by entry: the same bytes; `stage`
//! on every receive chain shape (the one-descriptor short path and its fall-backs).

use super::*;
use vmirq_vhost::mock_guest::{Desc, Layout, MockGuest, F_INDIRECT, F_NEXT, F_WRITE, REGION0_LEN};

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

/// A receive queue of 256 entries on `mem` (which holds region 0 as `MockGuest::new` lays
/// it out).
fn rx_guest(mem: Option<GuestMemoryMmap>) -> MockGuest {
    match mem {
        Some(m) => MockGuest::on_memory(std::sync::Arc::new(m), 256, false, Layout::default()),
        None => MockGuest::new(256, false),
    }
}

fn test_frame(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from(i % 251).unwrap_or(0) + 1)
        .collect()
}

/// Stage `frame` (bytes of this process) into `g`'s queue and publish; returns the outcome
/// and the used entries.
fn stage_into(g: &mut MockGuest, frame: &[u8], mrg: bool) -> (RxOutcome, Vec<(u32, u32)>) {
    let mem = g.mem.clone();
    let mut s = RxScratch::default();
    let mut used = UsedBatch::default();
    let rings = rx_rings(&g.ring.queue, &mem);
    let out = stage(
        &mut g.ring.queue,
        &mem,
        &rings,
        FrameSrc::Bytes(frame),
        mrg,
        &mut s,
        &mut used,
    );
    used.publish(&mut g.ring.queue, &mem).expect("publish");
    (out, g.take_used())
}

fn net_hdr_and(frame: &[u8], buffers: u16) -> Vec<u8> {
    let mut want = rx_hdr(buffers).to_vec();
    want.extend_from_slice(frame);
    want
}

#[test]
fn a_short_frame_into_one_writable_descriptor_is_written_once_whole() {
    for mrg in [false, true] {
        let mut g = rx_guest(None);
        let f = test_frame(64);
        let d = Desc {
            addr: g.alloc(2048),
            len: 2048,
            write: true,
        };
        let head = g.push_chain(&[d]);
        let (out, used) = stage_into(&mut g, &f, mrg);
        assert_eq!(out, RxOutcome::Delivered(1));
        assert_eq!(used, vec![(u32::from(head), 76)]);
        assert_eq!(&g.read(&d)[..76], &net_hdr_and(&f, 1)[..]);
        assert!(g.read(&d)[76..].iter().all(|&b| b == 0));
        assert_eq!(g.ring.queue.next_avail(), 1);
    }
}

#[test]
fn a_chained_head_takes_the_general_path() {
    let mut g = rx_guest(None);
    let f = test_frame(64);
    let hdr_len = u32::try_from(HDR_LEN).expect("fits");
    let hdr = Desc {
        addr: g.alloc(hdr_len),
        len: hdr_len,
        write: true,
    };
    let data = Desc {
        addr: g.alloc(2048),
        len: 2048,
        write: true,
    };
    let head = g.push_chain(&[hdr, data]);
    let (out, used) = stage_into(&mut g, &f, false);
    assert_eq!(out, RxOutcome::Delivered(1));
    assert_eq!(used, vec![(u32::from(head), 76)]);
    assert_eq!(g.read(&hdr), rx_hdr(1).to_vec());
    assert_eq!(&g.read(&data)[..64], &f[..]);
}

#[test]
fn a_readable_or_outside_memory_chain_is_a_bad_chain_returned_with_length_0() {
    let mut g = rx_guest(None);
    let f = test_frame(64);
    let buf = g.alloc(2048);
    // Device-readable.
    g.write_desc(0, buf, 2048, 0, 0);
    g.publish(0);
    assert_eq!(
        stage_into(&mut g, &f, true),
        (RxOutcome::BadChain, vec![(0, 0)])
    );
    // A buffer outside guest memory (in the hole after region 0).
    g.write_desc(1, REGION0_LEN - 16, 2048, F_WRITE, 0);
    g.publish(1);
    assert_eq!(
        stage_into(&mut g, &f, true),
        (RxOutcome::BadChain, vec![(1, 0)])
    );
}

/// A chain that breaks a ring rule cannot be returned (a head outside the table names no
/// descriptor): the queue is broken and no used entry is written.
#[test]
fn a_ring_rule_break_breaks_the_queue_and_writes_no_used_entry() {
    let f = test_frame(64);
    // INDIRECT (not negotiated on a receive queue here), a head outside the table, a loop.
    for case in 0..3 {
        let mut g = rx_guest(None);
        let buf = g.alloc(2048);
        match case {
            0 => {
                g.write_desc(0, buf, 32, F_INDIRECT, 0);
                g.publish(0);
            }
            1 => g.publish(256),
            _ => {
                g.write_desc(0, buf, 1024, F_WRITE | F_NEXT, 1);
                g.write_desc(1, buf + 1024, 1024, F_WRITE | F_NEXT, 0);
                g.publish(0);
            }
        }
        let canary = g.canary();
        assert_eq!(
            stage_into(&mut g, &f, true),
            (RxOutcome::Broken, vec![]),
            "case {case}"
        );
        g.assert_canary(&canary, &[]);
    }
}

#[test]
fn a_buffer_across_two_regions_gets_the_frame_piece_by_piece() {
    // Region 0 as MockGuest lays it out, cut in two adjacent regions at 4 MiB.
    let half = usize::try_from(REGION0_LEN / 2).expect("64-bit");
    let mem = GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), half),
        (GuestAddress(REGION0_LEN / 2), half),
    ])
    .expect("memory");
    let mut g = rx_guest(Some(mem));
    let f = test_frame(64);
    let d = Desc {
        addr: REGION0_LEN / 2 - 40,
        len: 2048,
        write: true,
    };
    assert!(g.mem.get_slice(GuestAddress(d.addr), HDR_LEN + 64).is_err());
    let head = g.push_chain(&[d]);
    let (out, used) = stage_into(&mut g, &f, false);
    assert_eq!(out, RxOutcome::Delivered(1));
    assert_eq!(used, vec![(u32::from(head), 76)]);
    assert_eq!(&g.read(&d)[..76], &net_hdr_and(&f, 1)[..]);
}

#[test]
fn a_buffer_too_short_is_too_big_or_merged_and_an_empty_ring_has_no_room() {
    let f = test_frame(64);
    let mut g = rx_guest(None);
    assert_eq!(stage_into(&mut g, &f, false), (RxOutcome::NoRoom, vec![]));
    assert_eq!(g.ring.queue.next_avail(), 0);
    let small = Desc {
        addr: g.alloc(40),
        len: 40,
        write: true,
    };
    g.push_chain(&[small]);
    // Without MRG_RXBUF: never fits, nothing taken.
    assert_eq!(stage_into(&mut g, &f, false), (RxOutcome::TooBig, vec![]));
    assert_eq!(g.ring.queue.next_avail(), 0);
    // With it: waits for a second buffer, then merges into two.
    assert_eq!(stage_into(&mut g, &f, true), (RxOutcome::NoRoom, vec![]));
    assert_eq!(g.ring.queue.next_avail(), 0);
    let more = Desc {
        addr: g.alloc(2048),
        len: 2048,
        write: true,
    };
    g.push_chain(&[more]);
    let (out, used) = stage_into(&mut g, &f, true);
    assert_eq!(out, RxOutcome::Delivered(2));
    assert_eq!(used, vec![(0, 40), (1, 36)]);
    let want = net_hdr_and(&f, 2);
    assert_eq!(g.read(&small), want[..40].to_vec());
    assert_eq!(&g.read(&more)[..36], &want[40..]);
}

#[test]
fn a_long_frame_into_one_buffer_and_one_held_in_part_are_written_whole() {
    let mut g = rx_guest(None);
    let f = test_frame(1514);
    let total = u32::try_from(HDR_LEN + f.len()).expect("fits");
    let d = Desc {
        addr: g.alloc(2048),
        len: 2048,
        write: true,
    };
    let head = g.push_chain(&[d]);
    let (out, used) = stage_into(&mut g, &f, false);
    assert_eq!(out, RxOutcome::Delivered(1));
    assert_eq!(used, vec![(u32::from(head), total)]);
    assert_eq!(&g.read(&d)[..HDR_LEN + f.len()], &net_hdr_and(&f, 1)[..]);
    // The same frame from another guest's transmit chain, only its first 128 bytes held
    // here: the general path copies the rest from there.
    let src = g.alloc(2048);
    let mut chain = vec![0u8; HDR_LEN];
    chain.extend_from_slice(&f);
    g.mem_write(src, &chain);
    let d2 = Desc {
        addr: g.alloc(2048),
        len: 2048,
        write: true,
    };
    let head2 = g.push_chain(&[d2]);
    let mem = g.mem.clone();
    let from = RegionCache::new(&mem);
    let tx = [Descriptor::new(src, total, 0, 0)];
    let frame = FrameSrc::Guest {
        mem: &from,
        descs: &tx,
        head: &f[..128],
        skip: HDR_LEN + 128,
        len: f.len(),
    };
    let mut s = RxScratch::default();
    let mut batch = UsedBatch::default();
    let rings = rx_rings(&g.ring.queue, &mem);
    let out = stage(
        &mut g.ring.queue,
        &mem,
        &rings,
        frame,
        true,
        &mut s,
        &mut batch,
    );
    assert_eq!(out, RxOutcome::Delivered(1));
    batch.publish(&mut g.ring.queue, &mem).expect("publish");
    assert_eq!(g.take_used(), vec![(u32::from(head2), total)]);
    assert_eq!(&g.read(&d2)[..HDR_LEN + f.len()], &net_hdr_and(&f, 1)[..]);
}
