//! Hostile and malformed guest input, driven through the mock guest. Every case checks the
//! status the driver gets (or the used length when there is no status byte), that nothing
//! is written where it must not be, and that the queue keeps serving afterwards.
#![allow(missing_docs)]

use vmirq_blk::mock_guest::{
    DeviceOpts, MockGuest, Submitted, TestDevice, F_INDIRECT, F_NEXT, F_WRITE, REGION0_LEN,
    REGION1_START, TEST_SERIAL,
};
use vmirq_blk::virtio::{req, status};

const SECTOR: u32 = 512;

fn dev() -> TestDevice {
    TestDevice::new(DeviceOpts::default())
}

/// Submit one request, kick, and return its used entry.
fn run_one(
    d: &mut TestDevice,
    kind: u32,
    sector: u64,
    lens: &[u32],
    write: bool,
) -> (Submitted, (u32, u32)) {
    let s = d.guest.submit(kind, sector, lens, write);
    d.kick();
    let used = d.guest.take_used();
    assert_eq!(
        used.len(),
        1,
        "expected exactly one completion, got {used:?}"
    );
    (s, used[0])
}

/// The queue still serves a normal write + read after whatever happened before.
fn assert_still_serves(d: &mut TestDevice) {
    let (w, (_, wlen)) = run_one(d, req::OUT, 8, &[SECTOR], false);
    assert_eq!(
        d.guest.status(&w),
        status::OK,
        "queue stopped serving writes"
    );
    assert_eq!(wlen, 1);
    let (r, (_, rlen)) = run_one(d, req::IN, 8, &[SECTOR], true);
    assert_eq!(
        d.guest.status(&r),
        status::OK,
        "queue stopped serving reads"
    );
    assert_eq!(rlen, SECTOR + 1);
    assert!(!d.engine.is_broken());
}

#[test]
fn write_then_read_returns_the_same_bytes_and_touches_nothing_else() {
    let mut d = dev();
    let s = d.guest.submit(req::OUT, 3, &[SECTOR, 2 * SECTOR], false);
    d.guest.fill(&s.data[0], 0x11);
    d.guest.fill(&s.data[1], 0x22);
    d.kick();
    assert_eq!(d.guest.take_used(), vec![(u32::from(s.head), 1)]);
    assert_eq!(d.guest.status(&s), status::OK);
    // Read sectors 2..7: 2 untouched, 3 = 0x11, 4..5 = 0x22, 6 untouched.
    let (r, (_, len)) = run_one(&mut d, req::IN, 2, &[5 * SECTOR], true);
    assert_eq!(len, 5 * SECTOR + 1);
    let back = d.guest.read(&r.data[0]);
    assert!(back[..512].iter().all(|&b| b == 0));
    assert!(back[512..1024].iter().all(|&b| b == 0x11));
    assert!(back[1024..2048].iter().all(|&b| b == 0x22));
    assert!(back[2048..].iter().all(|&b| b == 0));
}

#[test]
fn get_id_returns_the_serial_and_flush_succeeds() {
    let mut d = dev();
    let (s, (_, len)) = run_one(&mut d, req::GET_ID, 0, &[20], true);
    assert_eq!(d.guest.status(&s), status::OK);
    assert_eq!(len, 21);
    assert_eq!(d.guest.read(&s.data[0]), TEST_SERIAL.to_vec());
    let (f, (_, flen)) = run_one(&mut d, req::FLUSH, 0, &[], false);
    assert_eq!(d.guest.status(&f), status::OK);
    assert_eq!(flen, 1);
}

#[test]
fn unknown_request_type_gets_unsupp() {
    let mut d = dev();
    let (s, _) = run_one(&mut d, 99, 0, &[SECTOR], false);
    assert_eq!(d.guest.status(&s), status::UNSUPP);
    assert_still_serves(&mut d);
}

#[test]
fn request_past_the_end_of_the_disk_gets_ioerr() {
    let mut d = dev();
    let last = (1 << 20) / 512; // first sector past the end
    let (s, _) = run_one(&mut d, req::IN, last, &[SECTOR], true);
    assert_eq!(d.guest.status(&s), status::IOERR);
    let (s, _) = run_one(&mut d, req::OUT, last - 1, &[2 * SECTOR], false);
    assert_eq!(
        d.guest.status(&s),
        status::IOERR,
        "write straddling the end"
    );
    let (s, _) = run_one(&mut d, req::OUT, u64::MAX, &[SECTOR], false);
    assert_eq!(d.guest.status(&s), status::IOERR, "sector * 512 overflow");
    assert_still_serves(&mut d);
}

#[test]
fn data_length_not_a_whole_sector_gets_ioerr() {
    let mut d = dev();
    let (s, _) = run_one(&mut d, req::OUT, 0, &[100], false);
    assert_eq!(d.guest.status(&s), status::IOERR);
    assert_still_serves(&mut d);
}

#[test]
fn wrong_buffer_directions_get_ioerr() {
    let mut d = dev();
    // IN into a device-readable buffer: the device must not write it.
    let s = d.guest.submit(req::IN, 0, &[SECTOR], false);
    d.guest.fill(&s.data[0], 0x33);
    d.kick();
    d.guest.take_used();
    assert_eq!(d.guest.status(&s), status::IOERR);
    assert!(
        d.guest.read(&s.data[0]).iter().all(|&b| b == 0x33),
        "device wrote a driver-only buffer"
    );
    // OUT from a device-writable buffer.
    let (s, _) = run_one(&mut d, req::OUT, 0, &[SECTOR], true);
    assert_eq!(d.guest.status(&s), status::IOERR);
    assert_still_serves(&mut d);
}

#[test]
fn write_to_read_only_disk_gets_ioerr_and_changes_nothing() {
    let mut d = TestDevice::new(DeviceOpts {
        read_only: true,
        ..DeviceOpts::default()
    });
    let s = d.guest.submit(req::OUT, 0, &[SECTOR], false);
    d.guest.fill(&s.data[0], 0x44);
    d.kick();
    d.guest.take_used();
    assert_eq!(d.guest.status(&s), status::IOERR);
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

/// A request built by hand from `(addr, len, flags)` descriptors at table index `base`;
/// returns the used entry (exactly one is expected).
fn run_raw(d: &mut TestDevice, base: u16, descs: &[(u64, u32, u16)]) -> (u32, u32) {
    d.guest.push_raw(base, descs);
    d.kick();
    let used = d.guest.take_used();
    assert_eq!(used.len(), 1, "expected one completion, got {used:?}");
    used[0]
}

/// Header + status buffers for a hand-built request.
fn hdr_and_status(g: &mut MockGuest, kind: u32, sector: u64) -> (u64, u64) {
    let h = g.alloc(16);
    g.write_header(h, kind, sector);
    (h, g.alloc_status())
}

#[test]
fn data_buffer_outside_guest_memory_gets_ioerr() {
    let mut d = dev();
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let used = run_raw(
        &mut d,
        40,
        &[(h, 16, 0), (1 << 40, SECTOR, F_WRITE), (st, 1, F_WRITE)],
    );
    assert_eq!(used, (40, 1));
    assert_eq!(d.guest.byte_at(st), status::IOERR);
    assert_still_serves(&mut d);
}

#[test]
fn data_buffer_across_a_memory_hole_gets_ioerr_and_second_region_works() {
    let mut d = dev();
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let straddle = REGION0_LEN - 256;
    let used = run_raw(
        &mut d,
        40,
        &[(h, 16, 0), (straddle, SECTOR, F_WRITE), (st, 1, F_WRITE)],
    );
    assert_eq!(used, (40, 1));
    assert_eq!(d.guest.byte_at(st), status::IOERR);
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let used = run_raw(
        &mut d,
        44,
        &[
            (h, 16, 0),
            (REGION1_START, SECTOR, F_WRITE),
            (st, 1, F_WRITE),
        ],
    );
    assert_eq!(used, (44, SECTOR + 1));
    assert_eq!(d.guest.byte_at(st), status::OK);
}

#[test]
fn header_outside_memory_short_or_writable_gets_ioerr() {
    let mut d = dev();
    for (base, hdr) in [
        (40u16, (1u64 << 40, 16u32, 0u16)),
        (44, (0, 8, 0)),
        (48, (0, 16, F_WRITE)),
    ] {
        let (h, st) = hdr_and_status(&mut d.guest, req::OUT, 0);
        let hdr = if hdr.0 == 0 { (h, hdr.1, hdr.2) } else { hdr };
        let used = run_raw(&mut d, base, &[hdr, (st, 1, F_WRITE)]);
        assert_eq!(used, (u32::from(base), 1), "header case {base}");
        assert_eq!(d.guest.byte_at(st), status::IOERR, "header case {base}");
    }
    assert_still_serves(&mut d);
}

#[test]
fn unusable_status_byte_returns_the_chain_with_len_zero_and_writes_nothing() {
    let mut d = dev();
    // Status descriptor readable-only, then zero-length, then outside memory.
    for (base, st_len, st_flags, outside) in [
        (40u16, 1u32, 0u16, false),
        (44, 0, F_WRITE, false),
        (48, 1, F_WRITE, true),
    ] {
        let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
        let data = d.guest.alloc(SECTOR);
        let st_addr = if outside { 1 << 40 } else { st };
        let used = run_raw(
            &mut d,
            base,
            &[
                (h, 16, 0),
                (data, SECTOR, F_WRITE),
                (st_addr, st_len, st_flags),
            ],
        );
        assert_eq!(used, (u32::from(base), 0), "status case {base}");
        assert_eq!(
            d.guest.byte_at(st),
            0xFF,
            "status case {base}: status written"
        );
        assert!(
            (0..SECTOR).all(|i| d.guest.byte_at(data + u64::from(i)) == 0),
            "status case {base}: data written for a rejected chain"
        );
    }
    assert_still_serves(&mut d);
}

#[test]
fn looping_chain_is_returned_without_status_and_does_not_hang() {
    let mut d = dev();
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    d.guest.write_desc(50, h, 16, F_NEXT, 51);
    d.guest.write_desc(51, st, 1, F_WRITE | F_NEXT, 50);
    d.guest.publish(50);
    d.kick();
    assert_eq!(d.guest.take_used(), vec![(50, 0)]);
    assert_eq!(d.guest.byte_at(st), 0xFF);
    assert_still_serves(&mut d);
}

#[test]
fn next_index_out_of_range_is_returned_without_status() {
    let mut d = dev();
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    d.guest.write_desc(50, h, 16, F_NEXT, 5000);
    d.guest.write_desc(51, st, 1, F_WRITE, 0);
    d.guest.publish(50);
    d.kick();
    assert_eq!(d.guest.take_used(), vec![(50, 0)]);
    assert_still_serves(&mut d);
}

#[test]
fn single_descriptor_chain_gets_ioerr_in_its_last_byte() {
    let mut d = dev();
    let buf = d.guest.alloc(32);
    d.guest.write_header(buf, req::IN, 0);
    let used = run_raw(&mut d, 40, &[(buf, 32, F_WRITE)]);
    assert_eq!(used, (40, 1));
    assert_eq!(d.guest.byte_at(buf + 31), status::IOERR);
    assert_still_serves(&mut d);
}

#[test]
fn indirect_chains_work_and_oversized_indirect_tables_are_refused() {
    let mut d = dev();
    // A valid indirect request: header, one data sector, status.
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let data = d.guest.alloc(SECTOR);
    let table = d.guest.alloc(3 * 16);
    d.guest.write_indirect(table, 0, h, 16, F_NEXT, 1);
    d.guest
        .write_indirect(table, 1, data, SECTOR, F_WRITE | F_NEXT, 2);
    d.guest.write_indirect(table, 2, st, 1, F_WRITE, 0);
    assert_eq!(
        run_raw(&mut d, 40, &[(table, 3 * 16, F_INDIRECT)]),
        (40, SECTOR + 1)
    );
    assert_eq!(d.guest.byte_at(st), status::OK);
    // A 2000-entry indirect chain exceeds MAX_DESCRIPTORS.
    let n: u16 = 2000;
    let (h, st) = hdr_and_status(&mut d.guest, req::IN, 0);
    let big = d.guest.alloc(u32::from(n) * 16);
    d.guest.write_indirect(big, 0, h, 16, F_NEXT, 1);
    for i in 1..n - 1 {
        let buf = d.guest.alloc(SECTOR);
        d.guest
            .write_indirect(big, i, buf, SECTOR, F_WRITE | F_NEXT, i + 1);
    }
    d.guest.write_indirect(big, n - 1, st, 1, F_WRITE, 0);
    assert_eq!(
        run_raw(&mut d, 44, &[(big, u32::from(n) * 16, F_INDIRECT)]),
        (44, 0)
    );
    assert_eq!(d.guest.byte_at(st), 0xFF);
    assert_still_serves(&mut d);
}

#[test]
fn head_index_outside_the_queue_breaks_only_that_queue_without_panic() {
    let mut d = dev();
    d.guest.publish(d.guest.size() + 7);
    d.kick();
    assert!(
        d.engine.is_broken(),
        "a head outside the table must stop the queue (device needs reset)"
    );
    assert_eq!(d.counters.snapshot().errors, 1);
    // Further kicks are ignored, not crashes.
    let _ = d.guest.submit(req::IN, 0, &[SECTOR], true);
    d.kick();
    // A fresh queue on another device is unaffected.
    assert_still_serves(&mut dev());
}

#[test]
fn discard_and_write_zeroes_reject_bad_payloads() {
    let mut d = dev();
    let seg = |g: &mut MockGuest, sector: u64, n: u32, flags: u32| {
        let s = g.submit(req::DISCARD, 0, &[16], false);
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&sector.to_le_bytes());
        raw[8..12].copy_from_slice(&n.to_le_bytes());
        raw[12..].copy_from_slice(&flags.to_le_bytes());
        g.mem_write(s.data[0].addr, &raw);
        s
    };
    let s = seg(&mut d.guest, 0, 8, 1); // unmap flag on DISCARD: not allowed
    d.kick();
    d.guest.take_used();
    assert_eq!(d.guest.status(&s), status::UNSUPP);
    let s = seg(&mut d.guest, (1 << 20) / 512 - 1, 8, 0); // past the end
    d.kick();
    d.guest.take_used();
    assert_eq!(d.guest.status(&s), status::IOERR);
    let (s, _) = run_one(&mut d, req::DISCARD, 0, &[32], false); // two segments > max_discard_seg
    assert_eq!(d.guest.status(&s), status::IOERR);
    let s = seg(&mut d.guest, 0, 8, 0);
    d.kick();
    d.guest.take_used();
    assert_eq!(d.guest.status(&s), status::OK);
    assert_still_serves(&mut d);
}

#[test]
fn a_full_ring_of_requests_completes_in_one_kick() {
    let mut d = dev();
    let n = d.guest.size() / 3; // 3 descriptors per request
    let subs: Vec<_> = (0..n)
        .map(|i| d.guest.submit(req::OUT, u64::from(i), &[SECTOR], false))
        .collect();
    d.kick();
    assert_eq!(d.guest.take_used().len(), usize::from(n));
    assert!(subs.iter().all(|s| d.guest.status(s) == status::OK));
    assert_eq!(d.counters.snapshot().requests, u64::from(n));
}

#[test]
fn avail_index_jumping_past_the_queue_size_breaks_the_queue_without_a_flood() {
    let mut d = dev();
    let _ = d.guest.submit(req::IN, 0, &[SECTOR], true);
    // Claim 1000 new entries in a 64-entry ring.
    d.guest.set_avail_idx(1000);
    d.kick();
    assert!(
        d.engine.is_broken(),
        "an impossible avail index must stop the queue"
    );
    assert!(
        d.guest.take_used().is_empty(),
        "entries were completed from a bogus ring"
    );
    assert_eq!(d.counters.snapshot().requests, 0);
}

/// A disk with 4096-byte logical blocks (a 4Kn device under O_DIRECT): reads, writes and
/// discards that are not whole blocks get IOERR before they reach storage, and a refused
/// write leaves the disk untouched.
#[test]
fn requests_not_aligned_to_a_4096_byte_block_get_ioerr() {
    let mut d = TestDevice::new(DeviceOpts {
        block_size: 4096,
        ..DeviceOpts::default()
    });
    let block = 8 * SECTOR;
    // Offset of one sector, whole-block length: refused, nothing written.
    let s = d.guest.submit(req::OUT, 1, &[block], false);
    d.guest.fill(&s.data[0], 0x44);
    d.kick();
    assert_eq!(d.guest.take_used().len(), 1);
    assert_eq!(d.guest.status(&s), status::IOERR, "write at sector 1");
    // Aligned offset, one-sector length: refused too.
    let (s, _) = run_one(&mut d, req::IN, 8, &[SECTOR], true);
    assert_eq!(d.guest.status(&s), status::IOERR, "512-byte read");
    let (s, _) = run_one(&mut d, req::OUT, 8, &[SECTOR, SECTOR], false);
    assert_eq!(d.guest.status(&s), status::IOERR, "1024-byte write");
    // A discard of one sector.
    let s = d.guest.submit(req::DISCARD, 0, &[16], false);
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&8u64.to_le_bytes());
    raw[8..12].copy_from_slice(&1u32.to_le_bytes());
    d.guest.mem_write(s.data[0].addr, &raw);
    d.kick();
    d.guest.take_used();
    assert_eq!(d.guest.status(&s), status::IOERR, "one-sector discard");
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
