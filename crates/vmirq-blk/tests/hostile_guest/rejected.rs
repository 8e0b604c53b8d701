//! Sound chains with a writable status byte whose request is bad: each gets IOERR or UNSUPP
//! in its status byte, nothing else of guest memory changes, and the queue keeps serving.
//! And sound chains that must work (indirect tables, split GET_ID buffers).

use crate::harness::{
    assert_still_serves, expect_status, hdr_and_status, matrix, run_one, writable, SECTOR,
};
use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{
    DeviceOpts, MockGuest, TestDevice, F_INDIRECT, F_NEXT, F_WRITE, REGION0_LEN, REGION1_START,
    TEST_SERIAL,
};
use vmirq_blk::virtio::{req, status};

/// Submit `kind` with data buffers `lens` (`write`: device-writable) and expect `want`, with
/// nothing written when the answer is an error.
fn expect(d: &mut TestDevice, kind: u32, sector: u64, lens: &[u32], write: bool, want: u8) {
    let s = d.guest.submit(kind, sector, lens, write);
    for b in &s.data {
        d.guest.fill(b, 0x3C);
    }
    let canary = d.guest.canary();
    let allowed = if want == status::OK {
        writable(&s)
    } else {
        Vec::new()
    };
    expect_status(d, s.head, s.status.0, want, &canary, &allowed);
}

fn write_then_read_returns_the_same_bytes_and_touches_nothing_else(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let s = d.guest.submit(req::OUT, 3, &[SECTOR, 2 * SECTOR], false);
    d.guest.fill(&s.data[0], 0x11);
    d.guest.fill(&s.data[1], 0x22);
    let canary = d.guest.canary();
    assert_eq!(
        expect_status(&mut d, s.head, s.status.0, status::OK, &canary, &[]),
        1
    );
    // Read sectors 2..7: 2 untouched, 3 = 0x11, 4..5 = 0x22, 6 untouched.
    let r = d.guest.submit(req::IN, 2, &[5 * SECTOR], true);
    let canary = d.guest.canary();
    let len = expect_status(
        &mut d,
        r.head,
        r.status.0,
        status::OK,
        &canary,
        &writable(&r),
    );
    assert_eq!(len, 5 * SECTOR + 1);
    let back = d.guest.read(&r.data[0]);
    assert!(back[..512].iter().all(|&b| b == 0));
    assert!(back[512..1024].iter().all(|&b| b == 0x11));
    assert!(back[1024..2048].iter().all(|&b| b == 0x22));
    assert!(back[2048..].iter().all(|&b| b == 0));
}

fn get_id_returns_the_serial_and_flush_succeeds(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let (s, (_, len)) = run_one(&mut d, req::GET_ID, 0, &[20], true);
    assert_eq!(d.guest.status(&s), status::OK);
    assert_eq!(len, 21);
    assert_eq!(d.guest.read(&s.data[0]), TEST_SERIAL.to_vec());
    // Split over two buffers, and a larger buffer (only 20 bytes are written).
    let (s, (_, len)) = run_one(&mut d, req::GET_ID, 0, &[8, 12], true);
    assert_eq!((d.guest.status(&s), len), (status::OK, 21));
    let mut id = d.guest.read(&s.data[0]);
    id.extend(d.guest.read(&s.data[1]));
    assert_eq!(id, TEST_SERIAL.to_vec());
    let s = d.guest.submit(req::GET_ID, 0, &[32], true);
    d.guest.fill(&s.data[0], 0x3C);
    let canary = d.guest.canary();
    let id_end = s.data[0].addr + 20;
    let len = expect_status(
        &mut d,
        s.head,
        s.status.0,
        status::OK,
        &canary,
        &[(s.data[0].addr, id_end)],
    );
    assert_eq!(len, 21);
    let (f, (_, flen)) = run_one(&mut d, req::FLUSH, 0, &[], false);
    assert_eq!((d.guest.status(&f), flen), (status::OK, 1));
}

/// GET_ID needs room for the whole 20-byte id: a shorter buffer gets IOERR and nothing is
/// written (QEMU writes a truncated id and reports OK).
fn get_id_shorter_than_20_bytes_gets_ioerr_and_nothing_written(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    for lens in [&[19u32][..], &[8, 11], &[1], &[]] {
        expect(&mut d, req::GET_ID, 0, lens, true, status::IOERR);
    }
    assert_still_serves(&mut d);
}

fn unknown_request_type_gets_unsupp(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    expect(&mut d, 99, 0, &[SECTOR], false, status::UNSUPP);
    assert_still_serves(&mut d);
}

fn request_past_the_end_of_the_disk_gets_ioerr(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let last = (1 << 20) / 512; // first sector past the end
    expect(&mut d, req::IN, last, &[SECTOR], true, status::IOERR);
    expect(
        &mut d,
        req::OUT,
        last - 1,
        &[2 * SECTOR],
        false,
        status::IOERR,
    );
    expect(&mut d, req::OUT, u64::MAX, &[SECTOR], false, status::IOERR);
    assert_still_serves(&mut d);
}

fn data_length_not_a_whole_sector_gets_ioerr(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    expect(&mut d, req::OUT, 0, &[100], false, status::IOERR);
    expect(&mut d, req::IN, 0, &[SECTOR + 1], true, status::IOERR);
    assert_still_serves(&mut d);
}

fn wrong_buffer_directions_get_ioerr(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    // IN into a device-readable buffer: the device must not write it.
    expect(&mut d, req::IN, 0, &[SECTOR], false, status::IOERR);
    // OUT from a device-writable buffer; GET_ID into a readable one.
    expect(&mut d, req::OUT, 0, &[SECTOR], true, status::IOERR);
    expect(&mut d, req::GET_ID, 0, &[20], false, status::IOERR);
    // Mixed directions.
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let a = d.guest.alloc(SECTOR);
    let b = d.guest.alloc(SECTOR);
    d.guest.push_raw(
        40,
        &[
            (h, 16, 0),
            (a, SECTOR, F_WRITE),
            (b, SECTOR, 0),
            (st, 1, F_WRITE),
        ],
    );
    let canary = d.guest.canary();
    expect_status(&mut d, 40, st, status::IOERR, &canary, &[]);
    assert_still_serves(&mut d);
}

fn write_to_read_only_disk_gets_ioerr_and_changes_nothing(o: DeviceOpts) {
    let mut d = TestDevice::new(DeviceOpts {
        read_only: true,
        ..o
    });
    let s = d.guest.submit(req::OUT, 0, &[SECTOR], false);
    d.guest.fill(&s.data[0], 0x44);
    let canary = d.guest.canary();
    expect_status(&mut d, s.head, s.status.0, status::IOERR, &canary, &[]);
    for kind in [req::DISCARD, req::WRITE_ZEROES] {
        let (s, _) = run_one(&mut d, kind, 0, &[16], false);
        assert_ne!(
            d.guest.status(&s),
            status::OK,
            "type {kind} on a read-only disk"
        );
    }
    let (r, _) = run_one(&mut d, req::IN, 0, &[SECTOR], true);
    assert_eq!(d.guest.status(&r), status::OK);
    assert!(
        d.guest.read(&r.data[0]).iter().all(|&b| b == 0),
        "read-only disk was written"
    );
}

fn data_buffer_outside_guest_memory_gets_ioerr(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    d.guest.push_raw(
        40,
        &[(h, 16, 0), (1 << 40, SECTOR, F_WRITE), (st, 1, F_WRITE)],
    );
    let canary = d.guest.canary();
    assert_eq!(
        expect_status(&mut d, 40, st, status::IOERR, &canary, &[]),
        1
    );
    assert_still_serves(&mut d);
}

fn data_buffer_across_a_memory_hole_gets_ioerr_and_second_region_works(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let straddle = REGION0_LEN - 256;
    d.guest.push_raw(
        40,
        &[(h, 16, 0), (straddle, SECTOR, F_WRITE), (st, 1, F_WRITE)],
    );
    let canary = d.guest.canary();
    assert_eq!(
        expect_status(&mut d, 40, st, status::IOERR, &canary, &[]),
        1
    );
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    d.guest.push_raw(
        44,
        &[
            (h, 16, 0),
            (REGION1_START, SECTOR, F_WRITE),
            (st, 1, F_WRITE),
        ],
    );
    let canary = d.guest.canary();
    let r1 = (REGION1_START, REGION1_START + u64::from(SECTOR));
    let len = expect_status(&mut d, 44, st, status::OK, &canary, &[r1]);
    assert_eq!(len, SECTOR + 1);
}

fn header_outside_memory_short_or_writable_gets_ioerr(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    for (base, hdr) in [
        (40u16, (1u64 << 40, 16u32, 0u16)),
        (44, (0, 8, 0)),
        (48, (0, 16, F_WRITE)),
    ] {
        let (h, st) = hdr_and_status(&mut d.guest, req::OUT, 0);
        let hdr = if hdr.0 == 0 { (h, hdr.1, hdr.2) } else { hdr };
        d.guest.push_raw(base, &[hdr, (st, 1, F_WRITE)]);
        let canary = d.guest.canary();
        assert_eq!(
            expect_status(&mut d, base, st, status::IOERR, &canary, &[]),
            1,
            "header case {base}"
        );
    }
    assert_still_serves(&mut d);
}

fn single_descriptor_chain_gets_ioerr_in_its_last_byte(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let buf = d.guest.alloc(32);
    d.guest.write_header(buf, req::IN, 0);
    d.guest.push_raw(40, &[(buf, 32, F_WRITE)]);
    let canary = d.guest.canary();
    assert_eq!(
        expect_status(&mut d, 40, buf + 31, status::IOERR, &canary, &[]),
        1
    );
    assert_still_serves(&mut d);
}

/// Write an indirect table at a fresh buffer: `(addr, len, flags, next)` entries.
pub fn indirect_table(g: &mut MockGuest, entries: &[(u64, u32, u16, u16)]) -> u64 {
    let n = u32::try_from(entries.len()).expect("table size");
    let table = g.alloc(n * 16);
    for (i, &(addr, len, flags, next)) in entries.iter().enumerate() {
        g.write_indirect(
            table,
            u16::try_from(i).expect("index"),
            addr,
            len,
            flags,
            next,
        );
    }
    table
}

/// A valid indirect request (header, one data sector, status), from the head and after
/// two direct descriptors (virtio 1.2 §2.7.5.3.2: the device handles both).
fn indirect_chains_work_from_the_head_and_after_direct_descriptors(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let data = d.guest.alloc(SECTOR);
    let table = indirect_table(
        &mut d.guest,
        &[
            (h, 16, F_NEXT, 1),
            (data, SECTOR, F_WRITE | F_NEXT, 2),
            (st, 1, F_WRITE, 0),
        ],
    );
    d.guest.push_raw(40, &[(table, 3 * 16, F_INDIRECT)]);
    let canary = d.guest.canary();
    let r = (data, data + u64::from(SECTOR));
    assert_eq!(
        expect_status(&mut d, 40, st, status::OK, &canary, &[r]),
        SECTOR + 1
    );
    // Header and one data sector direct, then a table with a second sector and the status.
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let a = d.guest.alloc(SECTOR);
    let b = d.guest.alloc(SECTOR);
    let table = indirect_table(
        &mut d.guest,
        &[(b, SECTOR, F_WRITE | F_NEXT, 1), (st, 1, F_WRITE, 0)],
    );
    d.guest.push_raw(
        44,
        &[(h, 16, 0), (a, SECTOR, F_WRITE), (table, 32, F_INDIRECT)],
    );
    let canary = d.guest.canary();
    let allowed = [(a, a + u64::from(SECTOR)), (b, b + u64::from(SECTOR))];
    assert_eq!(
        expect_status(&mut d, 44, st, status::OK, &canary, &allowed),
        2 * SECTOR + 1
    );
    assert_still_serves(&mut d);
}

/// A sound chain (at most the queue size) with more than `MAX_DESCRIPTORS` (1024)
/// descriptors: more buffers than `seg_max` allows, IOERR.
fn more_descriptors_than_seg_max_gets_ioerr(o: DeviceOpts) {
    let mut d = TestDevice::new(DeviceOpts {
        queue_size: 2048,
        ..o
    });
    let n: u16 = 1100;
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let buf = d.guest.alloc(SECTOR);
    let mut entries = vec![(h, 16, F_NEXT, 1)];
    for i in 1..n - 1 {
        entries.push((buf, SECTOR, F_WRITE | F_NEXT, i + 1));
    }
    entries.push((st, 1, F_WRITE, 0));
    let table = indirect_table(&mut d.guest, &entries);
    d.guest
        .push_raw(40, &[(table, u32::from(n) * 16, F_INDIRECT)]);
    let canary = d.guest.canary();
    assert_eq!(
        expect_status(&mut d, 40, st, status::IOERR, &canary, &[]),
        1
    );
    assert_still_serves(&mut d);
}

/// Zero-length data descriptors are skipped (the structure is sound).
fn zero_length_data_descriptors_are_skipped(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let a = d.guest.alloc(SECTOR);
    d.guest.push_raw(
        40,
        &[
            (h, 16, 0),
            (a, 0, F_WRITE),
            (a, SECTOR, F_WRITE),
            (a, 0, F_WRITE),
            (st, 1, F_WRITE),
        ],
    );
    let canary = d.guest.canary();
    let r = (a, a + u64::from(SECTOR));
    assert_eq!(
        expect_status(&mut d, 40, st, status::OK, &canary, &[r]),
        SECTOR + 1
    );
}

fn discard_and_write_zeroes_reject_bad_payloads(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let seg = |g: &mut MockGuest, kind: u32, sector: u64, n: u32, flags: u32| {
        let s = g.submit(kind, 0, &[16], false);
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&sector.to_le_bytes());
        raw[8..12].copy_from_slice(&n.to_le_bytes());
        raw[12..].copy_from_slice(&flags.to_le_bytes());
        g.mem_write(s.data[0].addr, &raw);
        s
    };
    let cases = [
        (req::DISCARD, 0, 8, 1, status::UNSUPP), // unmap flag on DISCARD: not allowed
        (req::WRITE_ZEROES, 0, 8, 2, status::UNSUPP), // unknown flag
        (req::DISCARD, (1 << 20) / 512 - 1, 8, 0, status::IOERR), // past the end
        (req::DISCARD, 0, 8, 0, status::OK),
        (req::WRITE_ZEROES, 0, 8, 1, status::OK),
    ];
    for (kind, sector, n, flags, want) in cases {
        let s = seg(&mut d.guest, kind, sector, n, flags);
        let canary = d.guest.canary();
        expect_status(&mut d, s.head, s.status.0, want, &canary, &[]);
    }
    // Two segments > max_discard_seg; a payload that is not whole segments.
    expect(&mut d, req::DISCARD, 0, &[32], false, status::IOERR);
    expect(&mut d, req::DISCARD, 0, &[15], false, status::IOERR);
    assert_still_serves(&mut d);
}

fn a_full_ring_of_requests_completes_in_one_kick(o: DeviceOpts) {
    let mut d = TestDevice::new(o);
    let n = d.guest.size() / 3; // 3 descriptors per request
    let subs: Vec<_> = (0..n)
        .map(|i| d.guest.submit(req::OUT, u64::from(i), &[SECTOR], false))
        .collect();
    d.kick();
    d.timer();
    assert_eq!(d.guest.take_used().len(), usize::from(n));
    assert!(subs.iter().all(|s| d.guest.status(s) == status::OK));
    assert_eq!(d.counters.snapshot().device.requests, u64::from(n));
}

/// A disk with 4096-byte logical blocks (a 4Kn device under O_DIRECT): reads, writes and
/// discards that are not whole blocks get IOERR before they reach storage, and a refused
/// write leaves the disk untouched.
fn requests_not_aligned_to_a_4096_byte_block_get_ioerr(o: DeviceOpts) {
    let mut d = TestDevice::new(DeviceOpts {
        block_size: 4096,
        ..o
    });
    let block = 8 * SECTOR;
    let s = d.guest.submit(req::OUT, 1, &[block], false);
    d.guest.fill(&s.data[0], 0x44);
    let canary = d.guest.canary();
    expect_status(&mut d, s.head, s.status.0, status::IOERR, &canary, &[]);
    expect(&mut d, req::IN, 8, &[SECTOR], true, status::IOERR);
    expect(&mut d, req::OUT, 8, &[SECTOR, SECTOR], false, status::IOERR);
    let s = d.guest.submit(req::DISCARD, 0, &[16], false);
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&8u64.to_le_bytes());
    raw[8..12].copy_from_slice(&1u32.to_le_bytes());
    d.guest.mem_write(s.data[0].addr, &raw);
    let canary = d.guest.canary();
    expect_status(&mut d, s.head, s.status.0, status::IOERR, &canary, &[]);
    // Whole blocks work, and the refused write changed nothing.
    let (w, (_, wlen)) = run_one(&mut d, req::OUT, 16, &[block], false);
    assert_eq!((d.guest.status(&w), wlen), (status::OK, 1));
    let (r, (_, rlen)) = run_one(&mut d, req::IN, 0, &[block, block], true);
    assert_eq!((d.guest.status(&r), rlen), (status::OK, 2 * block + 1));
    assert!(
        d.guest.read(&r.data[0]).iter().all(|&b| b == 0),
        "the refused write reached the disk"
    );
    assert!(!d.engine.is_broken());
}

matrix!(
    write_then_read_returns_the_same_bytes_and_touches_nothing_else,
    get_id_returns_the_serial_and_flush_succeeds,
    get_id_shorter_than_20_bytes_gets_ioerr_and_nothing_written,
    unknown_request_type_gets_unsupp,
    request_past_the_end_of_the_disk_gets_ioerr,
    data_length_not_a_whole_sector_gets_ioerr,
    wrong_buffer_directions_get_ioerr,
    write_to_read_only_disk_gets_ioerr_and_changes_nothing,
    data_buffer_outside_guest_memory_gets_ioerr,
    data_buffer_across_a_memory_hole_gets_ioerr_and_second_region_works,
    header_outside_memory_short_or_writable_gets_ioerr,
    single_descriptor_chain_gets_ioerr_in_its_last_byte,
    indirect_chains_work_from_the_head_and_after_direct_descriptors,
    more_descriptors_than_seg_max_gets_ioerr,
    zero_length_data_descriptors_are_skipped,
    discard_and_write_zeroes_reject_bad_payloads,
    a_full_ring_of_requests_completes_in_one_kick,
    requests_not_aligned_to_a_4096_byte_block_get_ioerr,
);
