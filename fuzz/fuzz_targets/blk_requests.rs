//! Fuzz the vmirq-blk request path with arbitrary sequences of driver actions on a mock guest:
//! raw descriptors (any address, length, flags, next index), arbitrary heads published in
//! the available ring, well-formed requests of any type and sector, EVENT_IDX thresholds,
//! kicks and hold-timer events, and (with asynchronous storage) storage finishing or failing
//! operations in any order between them. The engine must never panic, hang, or return a used entry
//! for a descriptor outside the table or without its status byte.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vmirq_blk::manual_io::manual_io;
use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{DeviceOpts, TestDevice, REGION0_LEN};

const QUEUE_SIZE: u16 = 32;

#[path = "../common/guest_addr.rs"]
mod guest_addr;
use guest_addr::Addr;

/// Region 0's data area, where `Addr::Data` lands.
const DATA_AREA: (u64, u64) = (1 << 20, REGION0_LEN - (1 << 20));

#[derive(Arbitrary, Debug)]
enum Op {
    /// Write one descriptor table entry.
    Desc {
        index: u8,
        addr: Addr,
        len: u32,
        flags: u8,
        next: u16,
    },
    /// Put a head index (any value) in the available ring.
    Publish { head: u16 },
    /// A well-formed request: type (raw), sector, data buffer lengths, buffer direction.
    Request {
        kind: u8,
        sector: u64,
        lens: [u16; 2],
        nbufs: u8,
        write: bool,
    },
    /// Move the driver's EVENT_IDX threshold.
    UsedEvent(u16),
    /// Kick the queue.
    Kick,
    /// Deliver the hold timer event.
    Timer,
    /// Asynchronous storage finishes this many of its oldest operations.
    Finish(u8),
    /// Asynchronous storage fails this many of its oldest operations.
    Fail(u8),
    /// The storage completion fd fires.
    IoReady,
}

#[derive(Arbitrary, Debug)]
struct Input {
    event_idx: bool,
    read_only: bool,
    /// 4096-byte logical blocks (a 4Kn device) instead of 512.
    four_k: bool,
    /// VIRTIO_F_RING_INDIRECT_DESC not negotiated (an INDIRECT descriptor breaks the queue).
    no_indirect: bool,
    moderation: u8,
    /// Engine batch bound 1..=4 (small bounds exercise the resume-by-timer path).
    max_batches: u8,
    /// Some(capacity 1..=8): storage completes only on `Finish`/`Fail` (like io_uring).
    async_storage: Option<u8>,
    ops: Vec<Op>,
}

const POLICIES: &[&str] = &[
    "none",
    "count:usecs=50,frames=4",
    "vic",
    "dim",
    "spdk",
    "budget:us=20",
];

fuzz_target!(|input: Input| {
    let moderation = POLICIES[usize::from(input.moderation) % POLICIES.len()]
        .parse()
        .expect("spec");
    let opts = DeviceOpts {
        queue_size: QUEUE_SIZE,
        event_idx: input.event_idx,
        read_only: input.read_only,
        moderation,
        max_batches_per_event: usize::from(input.max_batches % 4) + 1,
        block_size: if input.four_k { 4096 } else { 512 },
        indirect_desc: !input.no_indirect,
        ..DeviceOpts::default()
    };
    let capacity = input.async_storage.map(|c| usize::from(c % 8) + 1);
    let (mut d, io) = match capacity {
        Some(c) => {
            let (io, handle) = manual_io(c, opts.disk_bytes);
            (TestDevice::with_io(opts, Box::new(io)), Some(handle))
        }
        None => (TestDevice::new(opts), None),
    };
    let mut requests = Vec::new();
    for op in input.ops.into_iter().take(64) {
        match op {
            Op::Desc {
                index,
                addr,
                len,
                flags,
                next,
            } => {
                let index = u16::from(index) % QUEUE_SIZE;
                d.guest.write_desc(
                    index,
                    addr.resolve(DATA_AREA),
                    len,
                    u16::from(flags & 7),
                    next,
                );
            }
            Op::Publish { head } => d.guest.publish(head),
            Op::Request {
                kind,
                sector,
                lens,
                nbufs,
                write,
            } => {
                let kinds = [0, 1, 4, 8, 11, 13, u32::from(kind)];
                let kind = kinds[usize::from(kind) % kinds.len()];
                let n = usize::from(nbufs % 3);
                let lens: Vec<u32> = lens[..n].iter().map(|&l| u32::from(l)).collect();
                requests.push(d.guest.submit(kind, sector % 4096, &lens, write));
            }
            Op::UsedEvent(v) => d.guest.set_used_event(v),
            Op::Kick => d.kick(),
            Op::Timer => d.timer(),
            Op::Finish(n) => {
                if let Some(io) = &io {
                    let _ = io.finish(usize::from(n % 4));
                }
            }
            Op::Fail(n) => {
                if let Some(io) = &io {
                    let _ = io.fail(usize::from(n % 4));
                }
            }
            Op::IoReady => d.io_ready(),
        }
        if let Some(c) = capacity {
            assert!(
                d.engine.in_flight() <= c,
                "more requests in flight than storage takes"
            );
        }
        for (id, len) in d.guest.take_used() {
            assert!(
                id < u32::from(QUEUE_SIZE),
                "used entry for descriptor {id} outside the table"
            );
            // Every completion carries its status byte (a chain without one is never completed).
            assert!(len >= 1, "chain {id} completed without a status byte");
        }
    }
    if !d.engine.is_broken() {
        d.kick();
    }
    if let Some(io) = &io {
        // Drain: every started operation finishes and leaves the engine (completed, or
        // dropped when the queue is broken), so nothing keeps a completion fd readable.
        for _ in 0..64 {
            if io.finish(usize::MAX) == 0 && d.engine.in_flight() == 0 {
                break;
            }
            d.io_ready();
        }
        assert_eq!(
            d.engine.in_flight(),
            0,
            "requests left in flight after storage finished"
        );
    }
    let _ = d.guest.take_used();
});
