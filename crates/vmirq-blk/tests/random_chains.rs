//! Seeded random descriptor tables and heads (a deterministic, CI-sized cousin of the
//! `blk_requests` fuzz target). Invariants after every kick: no panic, no used entry for a
//! descriptor outside the table, no completion without its status byte (used length 0), used
//! lengths no larger than the chain's writable bytes, and
//! no byte of guest memory changed outside a device-writable buffer ("no write to the wrong
//! place"). A failure prints its seed; `RC_SEED=<seed> RC_DEBUG=1 cargo test -p vmirq-blk
//! --test random_chains` replays one seed and prints every round.
#![allow(missing_docs)]
// Random bits are truncated to narrower fields on purpose.
#![allow(clippy::cast_possible_truncation)]

use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{DeviceOpts, TestDevice, F_NEXT, F_WRITE, REGION0_LEN, REGION1_START};

const SIZE: u16 = 16;
/// Window of guest memory the random buffers live in (and that is checked for stray writes).
const WIN_START: u64 = 1 << 20;
const WIN_LEN: u64 = 64 << 10;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy)]
struct D {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

fn random_desc(r: &mut Rng) -> D {
    let addr = match r.below(10) {
        0 => REGION0_LEN - r.below(600),       // runs into the hole
        1 => REGION1_START + r.below(4096),    // second region
        2 => r.next(),                         // anywhere at all
        _ => WIN_START + r.below(WIN_LEN - 1), // the checked window
    };
    let len = match r.below(6) {
        0 => 0,
        1 => 1,
        2 => 16,
        3 => 512 * (1 + r.below(4) as u32),
        4 => r.below(8192) as u32,
        _ => r.next() as u32,
    };
    let flags = [0, F_NEXT, F_WRITE, F_NEXT | F_WRITE][r.below(4) as usize];
    let next = if r.below(8) == 0 {
        r.below(u64::from(u16::MAX)) as u16
    } else {
        r.below(u64::from(SIZE)) as u16
    };
    D {
        addr,
        len,
        flags,
        next,
    }
}

/// Bytes the device may write for a chain starting at `head`: every writable descriptor
/// reachable from it (following `next` up to SIZE steps).
fn writable_ranges(table: &[D], head: u16) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = head;
    for _ in 0..SIZE {
        let Some(d) = table.get(usize::from(i)) else {
            break;
        };
        if d.flags & F_WRITE != 0 {
            out.push((d.addr, d.addr.saturating_add(u64::from(d.len))));
        }
        if d.flags & F_NEXT == 0 {
            break;
        }
        i = d.next;
    }
    out
}

fn window(d: &TestDevice) -> Vec<u8> {
    let mut buf = vec![0u8; WIN_LEN as usize];
    let desc = vmirq_blk::mock_guest::Desc {
        addr: WIN_START,
        len: WIN_LEN as u32,
        write: false,
    };
    buf.copy_from_slice(&d.guest.read(&desc));
    buf
}

fn run_seed(seed: u64) {
    let mut r = Rng(seed | 1);
    let moderation = ["none", "vic", "count:usecs=20,frames=4"][r.below(3) as usize]
        .parse()
        .expect("spec");
    let mut d = TestDevice::new(DeviceOpts {
        queue_size: SIZE,
        event_idx: r.below(2) == 0,
        read_only: r.below(4) == 0,
        moderation,
        ..DeviceOpts::default()
    });
    // Fill the window with a pattern so stray writes (even of zeroes) show.
    let pattern: Vec<u8> = (0..WIN_LEN).map(|i| (i as u8) ^ 0xA5).collect();
    d.guest.mem_write(WIN_START, &pattern);
    for _round in 0..4 {
        let table: Vec<D> = (0..SIZE).map(|_| random_desc(&mut r)).collect();
        for (i, t) in table.iter().enumerate() {
            d.guest.write_desc(i as u16, t.addr, t.len, t.flags, t.next);
            // Plant a plausible header at some descriptors.
            if t.addr >= WIN_START && t.addr + 16 <= WIN_START + WIN_LEN && r.below(2) == 0 {
                let kind = [0u32, 1, 4, 8, 11, 13, 77][r.below(7) as usize];
                d.guest.write_header(t.addr, kind, r.below(4096));
            }
        }
        let before = window(&d);
        let heads: Vec<u16> = (0..1 + r.below(4))
            .map(|_| {
                if r.below(16) == 0 {
                    SIZE + 3
                } else {
                    r.below(u64::from(SIZE)) as u16
                }
            })
            .collect();
        for &h in &heads {
            d.guest.publish(h);
        }
        d.kick();
        d.timer();
        let used = d.guest.take_used();
        if std::env::var("RC_DEBUG").is_ok() {
            eprintln!(
                "round heads {heads:?} used {used:?} broken {}",
                d.engine.is_broken()
            );
        }
        let mut allowed = Vec::new();
        for &(id, len) in &used {
            assert!(
                id < u32::from(SIZE),
                "seed {seed}: used id {id} outside the table"
            );
            assert!(
                len >= 1,
                "seed {seed}: chain {id} completed without a status byte"
            );
            let ranges = writable_ranges(&table, id as u16);
            let writable: u64 = ranges.iter().map(|(a, b)| b - a).sum();
            if u64::from(len) > writable {
                let mut i = id as u16;
                for _ in 0..SIZE {
                    let Some(t) = table.get(usize::from(i)) else {
                        break;
                    };
                    eprintln!(
                        "desc {i}: addr {:#x} len {} flags {} next {}",
                        t.addr, t.len, t.flags, t.next
                    );
                    if t.flags & F_NEXT == 0 {
                        break;
                    }
                    i = t.next;
                }
                eprintln!("heads {heads:?}");
            }
            assert!(
                u64::from(len) <= writable,
                "seed {seed}: used len {len} > writable bytes {writable}"
            );
            allowed.extend(ranges);
        }
        let after = window(&d);
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            if a != b {
                let addr = WIN_START + i as u64;
                assert!(
                    allowed.iter().any(|&(s, e)| addr >= s && addr < e),
                    "seed {seed}: byte at {addr:#x} changed outside every writable buffer"
                );
            }
        }
        if d.engine.is_broken() {
            return;
        }
    }
}

#[test]
fn random_descriptor_tables_never_write_outside_writable_buffers() {
    if let Ok(one) = std::env::var("RC_SEED") {
        run_seed(one.parse().expect("seed"));
        return;
    }
    for seed in 1..=400u64 {
        run_seed(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
}
