//! Fuzz vmirq-net's two trust boundaries of the data path with hostile descriptor tables:
//! transmitted chains (`tx::read_chain`, the per-port path's reader, against
//! `tx::scan_chain`, the burst path's reader, which must agree on every chain), the frame
//! classifier `dim-lat` runs on guest frames (`classify::classify`), and receive delivery
//! (`rx::deliver`) into chains of any shape. Never a panic or a hang; a frame is delivered
//! only whole (its used lengths add up to the net header plus the frame, or one buffer holds
//! it all without MRG_RXBUF); used entries name only heads of the table; the device writes
//! nothing but device-writable buffers (the mock guest's canary).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vm_memory::GuestAddress;
use vmirq_net::classify::classify;
use vmirq_net::regions::RegionCache;
use vmirq_net::rx::{deliver, RxOutcome, RxScratch};
use vmirq_net::tx::{read_chain, scan_chain, COPY_LEN};
use vmirq_net::virtio::{ETH_HDR_LEN, FRAME_LEN_MAX, HDR_LEN};
use vmirq_vhost::chain::{DescTable, TableView};
use vmirq_vhost::mock_guest::{MockGuest, F_INDIRECT, F_NEXT, F_WRITE};

/// Entries of the queues' descriptor tables.
const SIZE: u16 = 16;
/// Where the fuzzer's buffers go in region 0 (above the mock guest's rings).
const DATA: u64 = 1 << 20;

#[path = "../common/guest_addr.rs"]
mod guest_addr;
use guest_addr::Addr;

/// Where `Addr::Data` lands: the buffers the transmit side fills with the input's bytes.
const DATA_AREA: (u64, u64) = (DATA, DATA + (64 << 10));

/// One raw descriptor: table index, address, length, flags (NEXT, WRITE, INDIRECT in the
/// low three bits), next index.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct RawDesc {
    index: u8,
    addr: Addr,
    len: u32,
    flags: u8,
    next: u8,
}

impl RawDesc {
    fn flags(self) -> u16 {
        u16::from(self.flags) & (F_NEXT | F_WRITE | F_INDIRECT)
    }
    /// Lengths mostly near frame sizes, sometimes anything.
    fn len(self) -> u32 {
        if self.len & 0x8000_0000 != 0 {
            self.len
        } else {
            self.len % 4096
        }
    }
}

#[derive(Arbitrary, Debug)]
enum RxOp {
    /// Write one descriptor of the receive table.
    Desc(RawDesc),
    /// Offer a head (any value) in the available ring.
    Publish(u16),
    /// Overwrite the available index (a jump, a wrap).
    AvailIdx(u16),
    /// Deliver a frame of this length (filled with a pattern), with or without MRG_RXBUF.
    Deliver { len: u16, mrg: bool },
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// The transmit table and the bytes its buffers hold.
    tx_descs: Vec<RawDesc>,
    tx_bytes: Vec<u8>,
    tx_head: u16,
    /// Raw frames for the classifier.
    frames: Vec<Vec<u8>>,
    rx_ops: Vec<RxOp>,
}

fuzz_target!(|input: Input| {
    transmit(&input);
    for f in input.frames.iter().take(16) {
        check_classify(f);
    }
    receive(&input.rx_ops);
});

fn check_classify(frame: &[u8]) {
    let info = classify(frame);
    assert_eq!(
        info.frame_bytes as usize,
        frame.len().min(u32::MAX as usize)
    );
    assert!(info.payload_bytes <= info.frame_bytes, "{info:?}");
}

/// Both transmit readers on the same hostile chain: the same verdict, the same frame.
fn transmit(input: &Input) {
    let g = MockGuest::new(SIZE, false);
    let fill = if input.tx_bytes.is_empty() {
        vec![0xA5]
    } else {
        input.tx_bytes.clone()
    };
    let mut pattern = Vec::with_capacity(64 << 10);
    while pattern.len() < (64 << 10) {
        pattern.extend_from_slice(&fill);
    }
    g.mem_write(DATA, &pattern[..64 << 10]);
    for d in input.tx_descs.iter().take(64) {
        g.write_desc(
            u16::from(d.index) % SIZE,
            d.addr.resolve(DATA_AREA),
            d.len(),
            d.flags(),
            u16::from(d.next),
        );
    }
    let [desc_table, _, _] = g.ring_addresses();
    let table = DescTable {
        addr: GuestAddress(desc_table),
        size: SIZE,
        indirect: false,
    };
    let head = input.tx_head % (SIZE + 2); // now and then a head outside the table
    let mut descs = Vec::new();
    let mut buf = Vec::new();
    let read = read_chain(&g.mem, table, head, &mut descs, &mut buf);
    let cache = RegionCache::new(&g.mem);
    let view = TableView::new(&g.mem, table);
    let mut prefix = [0u8; COPY_LEN];
    let scanned = scan_chain(&cache, &view, head, &mut descs, &mut prefix);
    match (&read, &scanned) {
        (Ok(()), Ok(len)) => {
            assert_eq!(
                buf.len(),
                HDR_LEN + len,
                "the readers disagree on the length"
            );
            assert!(*len >= ETH_HDR_LEN && *len <= FRAME_LEN_MAX, "{len}");
            let n = buf.len().min(COPY_LEN);
            assert_eq!(&prefix[..n], &buf[..n], "the readers disagree on the bytes");
            check_classify(&buf[HDR_LEN..]);
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "the readers refuse for different reasons"),
        _ => panic!("one reader accepts what the other refuses: {read:?} / {scanned:?}"),
    }
}

/// Receive delivery on a hostile receive table.
fn receive(ops: &[RxOp]) {
    let mut g = MockGuest::new(SIZE, false);
    // Data buffers the descriptors may point at: allocated before the canary so that the
    // canary covers them; which of them the device may write is decided per delivery.
    let _ = g.alloc(64 << 10);
    let mut table: Vec<Option<RawDesc>> = vec![None; usize::from(SIZE)];
    let mut s = RxScratch::default();
    let mut broken = false;
    for op in ops.iter().take(128) {
        match *op {
            RxOp::Desc(d) => {
                let i = u16::from(d.index) % SIZE;
                g.write_desc(
                    i,
                    d.addr.resolve(DATA_AREA),
                    d.len(),
                    d.flags(),
                    u16::from(d.next),
                );
                table[usize::from(i)] = Some(d);
            }
            RxOp::Publish(head) => g.publish(head),
            RxOp::AvailIdx(idx) => g.set_avail_idx(idx),
            RxOp::Deliver { len, mrg } => {
                let len = usize::from(len) % (FRAME_LEN_MAX + 64);
                let frame: Vec<u8> = (0..len).map(|i| (i % 251) as u8 ^ 0x3C).collect();
                // The device may write the writable buffers of the table as it is now (a
                // superset of the chains it takes) and nothing else. An indirect table's
                // buffers are not tracked: skip the canary when the table has one.
                let indirect = table.iter().flatten().any(|d| d.flags() & F_INDIRECT != 0);
                let allowed: Vec<(u64, u64)> = table
                    .iter()
                    .flatten()
                    .filter(|d| d.flags() & F_WRITE != 0)
                    .map(|d| {
                        let a = d.addr.resolve(DATA_AREA);
                        (a, a.saturating_add(u64::from(d.len())))
                    })
                    .collect();
                let canary = (!indirect).then(|| g.canary());
                let mem = g.mem.clone();
                let out = deliver(&mut g.ring.queue, &mem, &frame, mrg, &mut s);
                if let Some(c) = &canary {
                    g.assert_canary(c, &allowed);
                }
                let used = g.take_used();
                for &(id, _) in &used {
                    assert!(id < u32::from(SIZE), "used entry for head {id}: {out:?}");
                }
                let total: u64 = used.iter().map(|&(_, l)| u64::from(l)).sum();
                match out {
                    RxOutcome::Delivered(n) => {
                        assert!(!broken, "delivered on a broken queue");
                        let whole = (HDR_LEN + frame.len()) as u64;
                        let written: Vec<_> = used.iter().filter(|&&(_, l)| l > 0).collect();
                        assert_eq!(written.len(), usize::from(n), "{used:?}");
                        assert_eq!(
                            total,
                            whole,
                            "frame of {} delivered as {used:?}",
                            frame.len()
                        );
                        if !mrg {
                            assert_eq!(n, 1, "one buffer without MRG_RXBUF");
                        }
                    }
                    RxOutcome::NoRoom | RxOutcome::TooBig => {
                        assert!(used.is_empty(), "{out:?} consumed {used:?}");
                    }
                    // Bad chains go back with length 0.
                    RxOutcome::BadChain => assert_eq!(total, 0, "{used:?}"),
                    RxOutcome::Broken => broken = true,
                }
            }
        }
    }
}
