//! Chains that break a ring rule (virtio 1.2 §2.7.5, §2.7.5.3) or have no writable status
//! byte. None is ever completed (a Linux guest reads a stale status byte 0 as OK, so a
//! completion without a written status is silent data corruption). The queue stops: it reads
//! no further chain, completes nothing, writes nothing, counts one break and records the head
//! and the rule; when the frontend stops the ring (GET_VRING_BASE) or resets the device it
//! serves again, starting with the chain after the broken one.

use crate::harness::{assert_still_serves, hdr_and_status, matrix, SECTOR};
use vmirq_blk::chain::{self, Violation};
use vmirq_blk::manual_io::manual_io;
use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{
    DeviceOpts, MockGuest, TestDevice, F_INDIRECT, F_NEXT, F_WRITE, REGION0_LEN,
};
use vmirq_blk::virtio::{req, status};

/// Queue size of these cases (the default).
const SIZE: u16 = 64;

/// A hostile chain: writes its descriptors and returns its head (not yet published).
type Build = fn(&mut MockGuest) -> u16;

/// How the frontend gets the queue back.
#[derive(Clone, Copy)]
enum Recovery {
    /// GET_VRING_BASE (the ring stops; the frontend restarts it).
    StopRing,
    /// RESET_DEVICE.
    Reset,
}

/// A valid write before the hostile chain completes; the hostile chain and a valid read
/// published after it are not completed; nothing is written; the queue is broken by `want`
/// at the chain's head. After `recovery`, the read after it completes with the written data.
fn expect_broken_with(o: DeviceOpts, build: Build, want: Violation, recovery: Recovery) {
    let mut d = TestDevice::new(o);
    let before = d.guest.submit(req::OUT, 1, &[SECTOR], false);
    d.guest.fill(&before.data[0], 0x77);
    d.kick();
    d.timer();
    assert_eq!(d.guest.take_used(), vec![(u32::from(before.head), 1)]);
    assert_eq!(d.guest.status(&before), status::OK);

    let head = build(&mut d.guest);
    d.guest.publish(head);
    let after = d.guest.submit(req::IN, 1, &[SECTOR], true);
    let canary = d.guest.canary();
    d.kick();
    d.timer();
    d.io_ready();
    assert_eq!(
        d.guest.take_used(),
        vec![],
        "a broken chain (or one after it) was completed"
    );
    assert!(d.engine.is_broken(), "the queue did not break");
    assert_eq!(
        d.engine.broken_by(),
        Some((head, want)),
        "head and rule recorded"
    );
    assert_eq!(d.counters.snapshot().queue.broken, 1);
    d.guest.assert_canary(&canary, &[]);
    // A broken queue ignores kicks and timers.
    d.kick();
    d.timer();
    assert_eq!(d.guest.take_used(), vec![]);
    d.guest.assert_canary(&canary, &[]);

    match recovery {
        Recovery::StopRing => d.stop(),
        Recovery::Reset => d.engine.reset(),
    }
    assert!(!d.engine.is_broken(), "the queue did not recover");
    d.kick();
    d.timer();
    assert_eq!(
        d.guest.take_used(),
        vec![(u32::from(after.head), SECTOR + 1)],
        "the chain after the broken one was not served after recovery"
    );
    assert_eq!(d.guest.status(&after), status::OK);
    assert!(d.guest.read(&after.data[0]).iter().all(|&b| b == 0x77));
    assert_still_serves(&mut d);
    assert_eq!(d.counters.snapshot().queue.broken, 1);
}

fn expect_broken(o: DeviceOpts, build: Build, want: Violation) {
    expect_broken_with(o, build, want, Recovery::StopRing);
}

/// Data buffer and status for hand-built IN chains.
fn data_and_status(g: &mut MockGuest) -> (u64, u64, u64) {
    let (h, st) = hdr_and_status(g, req::IN, 0);
    (h, g.alloc(SECTOR), st)
}

/// Write an indirect table at a fresh buffer: `(addr, len, flags, next)` entries.
fn table(g: &mut MockGuest, entries: &[(u64, u32, u16, u16)]) -> u64 {
    let n = u32::try_from(entries.len()).expect("table size");
    let t = g.alloc(n * 16);
    for (i, &(addr, len, flags, next)) in entries.iter().enumerate() {
        g.write_indirect(t, u16::try_from(i).expect("index"), addr, len, flags, next);
    }
    t
}

/// A sound 3-entry table: header, one data sector, status.
fn good_table(g: &mut MockGuest) -> u64 {
    let (h, data, st) = data_and_status(g);
    table(
        g,
        &[
            (h, 16, F_NEXT, 1),
            (data, SECTOR, F_WRITE | F_NEXT, 2),
            (st, 1, F_WRITE, 0),
        ],
    )
}

fn data_descriptor_whose_next_is_itself(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, _) = data_and_status(g);
            g.write_desc(40, h, 16, F_NEXT, 41);
            g.write_desc(41, data, SECTOR, F_WRITE | F_NEXT, 41);
            40
        },
        Violation::Loop { entries: 64 },
    );
}

fn header_data_status_back_to_header(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, st) = data_and_status(g);
            g.write_desc(50, h, 16, F_NEXT, 51);
            g.write_desc(51, data, SECTOR, F_WRITE | F_NEXT, 52);
            g.write_desc(52, st, 1, F_WRITE | F_NEXT, 50);
            50
        },
        Violation::Loop { entries: 64 },
    );
}

fn next_index_past_the_table(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, _, _) = data_and_status(g);
            g.write_desc(50, h, 16, F_NEXT, SIZE);
            50
        },
        Violation::NextOutOfRange {
            next: SIZE,
            size: SIZE,
        },
    );
}

fn head_index_past_the_table(o: DeviceOpts) {
    expect_broken(
        o,
        |_| SIZE + 7,
        Violation::HeadOutOfRange {
            head: SIZE + 7,
            size: SIZE,
        },
    );
}

/// An otherwise sound indirect table of 2048 entries, as in the original report (there on a
/// 256-entry queue, here on 64): twice the chain limit ([`chain::CHAIN_MAX`]; tables longer
/// than the queue but within the limit are what Linux sends, see there).
fn indirect_table_longer_than_the_queue(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let n = u16::try_from(2 * chain::CHAIN_MAX).expect("fits");
            let (h, data, st) = data_and_status(g);
            let mut entries = vec![(h, 16, F_NEXT, 1)];
            for i in 1..n - 1 {
                entries.push((data, 16, F_WRITE | F_NEXT, i + 1));
            }
            entries.push((st, 1, F_WRITE, 0));
            let t = table(g, &entries);
            g.write_desc(40, t, u32::from(n) * 16, F_INDIRECT, 0);
            40
        },
        Violation::IndirectTooLong {
            entries: 2 * chain::CHAIN_MAX,
            limit: chain::CHAIN_MAX,
        },
    );
}

fn indirect_table_outside_guest_memory(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            g.write_desc(40, 1 << 40, 48, F_INDIRECT, 0);
            40
        },
        Violation::IndirectOutsideMemory {
            addr: 1 << 40,
            len: 48,
        },
    );
}

fn indirect_table_across_the_memory_hole(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            g.write_desc(40, REGION0_LEN - 16, 48, F_INDIRECT, 0);
            40
        },
        Violation::IndirectOutsideMemory {
            addr: REGION0_LEN - 16,
            len: 48,
        },
    );
}

fn nested_indirect_table(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let inner = good_table(g);
            let outer = table(g, &[(inner, 48, F_INDIRECT, 0)]);
            g.write_desc(40, outer, 16, F_INDIRECT, 0);
            40
        },
        Violation::NestedIndirect,
    );
}

/// An INDIRECT descriptor when VIRTIO_F_RING_INDIRECT_DESC was not negotiated (virtio 1.2
/// §2.7.5.3.1: the driver MUST NOT set it then). QEMU and Linux vhost follow such a table
/// anyway; here it breaks the queue like any other ring rule. The same sound table is served
/// once the feature is negotiated.
fn indirect_descriptor_without_the_feature(o: DeviceOpts) {
    let build: Build = |g| {
        let t = good_table(g);
        g.write_desc(40, t, 48, F_INDIRECT, 0);
        40
    };
    let mut d = TestDevice::new(o);
    let head = build(&mut d.guest);
    d.guest.publish(head);
    d.kick();
    d.timer();
    assert_eq!(d.guest.take_used(), vec![(u32::from(head), SECTOR + 1)]);
    assert!(!d.engine.is_broken());
    expect_broken(
        DeviceOpts {
            indirect_desc: false,
            ..o
        },
        build,
        Violation::IndirectNotNegotiated,
    );
}

fn indirect_length_not_a_multiple_of_16(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let t = good_table(g);
            g.write_desc(40, t, 40, F_INDIRECT, 0);
            40
        },
        Violation::IndirectLenUnaligned { len: 40 },
    );
}

fn indirect_length_zero(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let t = good_table(g);
            g.write_desc(40, t, 0, F_INDIRECT, 0);
            40
        },
        Violation::IndirectEmpty,
    );
}

/// INDIRECT and NEXT together (virtio 1.2 §2.7.5.3.1: the driver MUST NOT). QEMU ignores
/// the NEXT flag of an indirect head; here the queue breaks.
fn indirect_and_next_in_one_descriptor(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let t = good_table(g);
            let st = g.alloc_status();
            g.write_desc(40, t, 48, F_INDIRECT | F_NEXT, 41);
            g.write_desc(41, st, 1, F_WRITE, 0);
            40
        },
        Violation::IndirectWithNext,
    );
}

fn next_inside_the_indirect_table_out_of_its_range(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, st) = data_and_status(g);
            let t = table(
                g,
                &[
                    (h, 16, F_NEXT, 1),
                    (data, SECTOR, F_WRITE | F_NEXT, 3),
                    (st, 1, F_WRITE, 0),
                ],
            );
            g.write_desc(40, t, 48, F_INDIRECT, 0);
            40
        },
        Violation::IndirectNextOutOfRange {
            next: 3,
            entries: 3,
        },
    );
}

fn loop_inside_the_indirect_table(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, st) = data_and_status(g);
            let t = table(
                g,
                &[
                    (h, 16, F_NEXT, 1),
                    (data, SECTOR, F_WRITE | F_NEXT, 2),
                    (st, 1, F_WRITE | F_NEXT, 0),
                ],
            );
            g.write_desc(40, t, 48, F_INDIRECT, 0);
            40
        },
        Violation::Loop { entries: 3 },
    );
}

/// Two direct descriptors then a table of CHAIN_MAX - 1 entries: one descriptor more than
/// the chain limit.
fn direct_and_indirect_longer_than_the_queue(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, st) = data_and_status(g);
            let n = u16::try_from(chain::CHAIN_MAX - 1).expect("fits");
            let mut entries = Vec::new();
            for i in 0..n - 1 {
                entries.push((data, 16, F_WRITE | F_NEXT, i + 1));
            }
            entries.push((st, 1, F_WRITE, 0));
            let t = table(g, &entries);
            g.write_desc(40, h, 16, F_NEXT, 41);
            g.write_desc(41, data, 16, F_WRITE | F_NEXT, 42);
            g.write_desc(42, t, u32::from(n) * 16, F_INDIRECT, 0);
            40
        },
        Violation::TooLong {
            limit: chain::CHAIN_MAX,
        },
    );
}

fn status_byte_outside_guest_memory(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, _) = data_and_status(g);
            g.write_desc(40, h, 16, F_NEXT, 41);
            g.write_desc(41, data, SECTOR, F_WRITE | F_NEXT, 42);
            g.write_desc(42, 1 << 40, 1, F_WRITE, 0);
            40
        },
        Violation::StatusOutsideMemory { addr: 1 << 40 },
    );
}

/// A 4-byte status descriptor whose last byte is the first byte of the memory hole.
fn status_byte_in_the_memory_hole(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, _) = data_and_status(g);
            g.write_desc(40, h, 16, F_NEXT, 41);
            g.write_desc(41, data, SECTOR, F_WRITE | F_NEXT, 42);
            g.write_desc(42, REGION0_LEN - 3, 4, F_WRITE, 0);
            40
        },
        Violation::StatusOutsideMemory { addr: REGION0_LEN },
    );
}

fn status_byte_in_a_device_readable_descriptor(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, st) = data_and_status(g);
            g.write_desc(40, h, 16, F_NEXT, 41);
            g.write_desc(41, data, SECTOR, F_WRITE | F_NEXT, 42);
            g.write_desc(42, st, 1, 0, 0);
            40
        },
        Violation::StatusNotWritable,
    );
}

fn status_byte_in_a_zero_length_descriptor(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, data, st) = data_and_status(g);
            g.write_desc(40, h, 16, F_NEXT, 41);
            g.write_desc(41, data, SECTOR, F_WRITE | F_NEXT, 42);
            g.write_desc(42, st, 0, F_WRITE, 0);
            40
        },
        Violation::StatusEmpty,
    );
}

/// FLUSH whose only descriptor after the header has length 0.
fn flush_whose_status_descriptor_is_empty(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, st) = hdr_and_status(g, req::FLUSH, 0);
            g.write_desc(40, h, 16, F_NEXT, 41);
            g.write_desc(41, st, 0, F_WRITE, 0);
            40
        },
        Violation::StatusEmpty,
    );
}

/// FLUSH made of its header alone: no status descriptor at all.
fn flush_with_only_a_header(o: DeviceOpts) {
    expect_broken(
        o,
        |g| {
            let (h, _) = hdr_and_status(g, req::FLUSH, 0);
            g.write_desc(40, h, 16, 0, 0);
            40
        },
        Violation::StatusNotWritable,
    );
}

/// RESET_DEVICE recovers a broken queue too.
fn a_device_reset_recovers_a_broken_queue(o: DeviceOpts) {
    expect_broken_with(
        o,
        |g| {
            let t = good_table(g);
            g.write_desc(40, t, 0, F_INDIRECT, 0);
            40
        },
        Violation::IndirectEmpty,
        Recovery::Reset,
    );
}

/// An available index more than the queue size ahead: no chain is read, the queue breaks
/// (no chain to name), and once the driver fixes the index and the ring is restarted the
/// request published before serves.
fn avail_index_jumping_past_the_queue_size(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let s = d.guest.submit(req::IN, 0, &[SECTOR], true);
    d.guest.set_avail_idx(1000);
    let canary = d.guest.canary();
    d.kick();
    d.timer();
    assert!(
        d.engine.is_broken(),
        "an impossible avail index must stop the queue"
    );
    assert_eq!(d.engine.broken_by(), None);
    assert_eq!(
        d.guest.take_used(),
        vec![],
        "entries completed from a bogus ring"
    );
    assert_eq!(d.counters.snapshot().queue.broken, 1);
    d.guest.assert_canary(&canary, &[]);
    d.guest.set_avail_idx(1);
    d.stop();
    d.kick();
    d.timer();
    assert_eq!(d.guest.take_used(), vec![(u32::from(s.head), SECTOR + 1)]);
    assert_eq!(d.guest.status(&s), status::OK);
    assert_still_serves(&mut d);
}

/// Storage in flight when the queue breaks is still reaped as it finishes (no tag, memory or
/// readable fd leaks) but not completed: no used entry, no status byte.
fn storage_in_flight_is_reaped_not_completed(o: DeviceOpts) {
    let (io, handle) = manual_io(8, o.disk_bytes);
    let mut d = TestDevice::with_io(o, Box::new(io));
    let valid = d.guest.submit(req::IN, 0, &[SECTOR], true);
    d.kick();
    assert_eq!(d.engine.in_flight(), 1);
    let (h, _) = hdr_and_status(&mut d.guest, req::IN, 0);
    d.guest.write_desc(40, h, 16, F_NEXT, 40);
    d.guest.publish(40);
    d.kick();
    assert_eq!(
        d.engine.broken_by(),
        Some((40, Violation::Loop { entries: 64 }))
    );
    assert_eq!(
        d.engine.in_flight(),
        1,
        "storage in flight was dropped unreaped"
    );
    assert_eq!(handle.finish(1), 1);
    d.io_ready();
    assert_eq!(
        d.engine.in_flight(),
        0,
        "storage of a broken queue was not reaped"
    );
    assert_eq!(
        d.guest.take_used(),
        vec![],
        "a broken queue completed a request"
    );
    assert_eq!(
        d.guest.status(&valid),
        0xFF,
        "status written on a broken queue"
    );
    d.stop();
    assert!(!d.engine.is_broken());
    let s = d.guest.submit(req::OUT, 0, &[SECTOR], false);
    d.kick();
    assert_eq!(handle.finish(1), 1);
    d.io_ready();
    d.timer();
    assert_eq!(d.guest.take_used(), vec![(u32::from(s.head), 1)]);
    assert_eq!(d.guest.status(&s), status::OK);
}

matrix!(
    data_descriptor_whose_next_is_itself,
    header_data_status_back_to_header,
    next_index_past_the_table,
    head_index_past_the_table,
    indirect_table_longer_than_the_queue,
    indirect_table_outside_guest_memory,
    indirect_table_across_the_memory_hole,
    nested_indirect_table,
    indirect_descriptor_without_the_feature,
    indirect_length_not_a_multiple_of_16,
    indirect_length_zero,
    indirect_and_next_in_one_descriptor,
    next_inside_the_indirect_table_out_of_its_range,
    loop_inside_the_indirect_table,
    direct_and_indirect_longer_than_the_queue,
    status_byte_outside_guest_memory,
    status_byte_in_the_memory_hole,
    status_byte_in_a_device_readable_descriptor,
    status_byte_in_a_zero_length_descriptor,
    flush_whose_status_descriptor_is_empty,
    flush_with_only_a_header,
    a_device_reset_recovers_a_broken_queue,
    avail_index_jumping_past_the_queue_size,
    storage_in_flight_is_reaped_not_completed,
);
