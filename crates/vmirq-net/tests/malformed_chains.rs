//! Hostile guests on `serve-net`: malformed transmit chains, a lying available index and
//! bad or too small receive buffers are dropped and counted; the chains are completed (or
//! left alone) as the device's rules say, other frames still cross intact, and the
//! backend stays alive for the next frontend. A chain that breaks a ring rule (a loop, an
//! index outside the table) stops its queue until the frontend resets it.

// Packet lengths and pattern bytes here are small constants: the casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use vmirq_net::queues::Datapath;

use common::raw::{RawPort, DATA, F_NEXT, F_WRITE, MEM_LEN};
use std::time::{Duration, Instant};
use vmirq_net::counters::PortSnapshot;
use vmirq_net::virtio::{F_EVENT_IDX, F_MRG_RXBUF, HDR_LEN};

const RX: usize = 0;
const TX: usize = 1;

/// A net header (no offloads) and an Ethernet frame of `len` bytes tagged with `tag`.
fn packet(len: usize, tag: u8) -> Vec<u8> {
    let mut p = vec![0u8; HDR_LEN + len];
    p[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p[HDR_LEN + 6..HDR_LEN + 12].copy_from_slice(&[2, 0, 0, 0, 0, 0]);
    for (i, b) in p[HDR_LEN + 14..].iter_mut().enumerate() {
        *b = tag ^ (i as u8);
    }
    p
}

/// Wait (bounded) until port `p`'s counters satisfy `ok`.
fn wait_counters(
    server: &common::Running,
    p: usize,
    ok: impl Fn(&PortSnapshot) -> bool,
) -> PortSnapshot {
    let t = Instant::now();
    loop {
        let c = server.handle.counters()[p];
        if ok(&c) {
            return c;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "port {p}: {c:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Post receive buffer `i` (2048 bytes) on `port`.
fn post_rx(port: &mut RawPort, i: u16) {
    port.desc(RX, i, DATA + u64::from(i) * 2048, 2048, F_WRITE, 0);
    port.offer(RX, i);
}

fn malformed_transmit_chains_are_dropped_and_counted_on(datapath: Datapath) {
    let server = common::start(2, |c| c.policies.datapath = datapath);
    let mut p0 = RawPort::connect(&server.sockets[0], F_MRG_RXBUF | F_EVENT_IDX);
    server.wait_attached(0);
    let mut p1 = RawPort::connect(&server.sockets[1], F_MRG_RXBUF | F_EVENT_IDX);
    server.wait_attached(1);
    for i in 0..8 {
        post_rx(&mut p1, i);
    }
    let buf = DATA;
    let good = packet(100, 7);
    p0.write(buf, &good);
    let mut gso = packet(100, 8);
    gso[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4, not offered
    p0.write(buf + 4096, &gso);
    // 0: device-writable; 1: outside guest memory; 2: shorter than the headers;
    // 3: GSO header; 4: a good frame. (Chains that break a ring rule stop the queue
    // instead: `a_ring_rule_break_stops_the_queue_*`.)
    p0.desc(TX, 0, buf, 112, F_WRITE, 0);
    p0.desc(TX, 1, MEM_LEN + 4096, 112, 0, 0);
    p0.desc(TX, 2, buf, 20, 0, 0);
    p0.desc(TX, 3, buf + 4096, 112, 0, 0);
    p0.desc(TX, 4, buf, 112, 0, 0);
    for head in 0..5 {
        p0.offer(TX, head);
    }
    assert!(p0.wait_used(TX, 5), "every transmit chain completed");
    for n in 0..4 {
        assert_eq!(
            p0.used(TX, n).1,
            0,
            "transmit chains complete with length 0"
        );
    }
    let c0 = wait_counters(&server, 0, |c| {
        c.tx_bad_chain + c.tx_bad_header + c.tx_frames == 5
    });
    assert_eq!(c0.tx_bad_header, 1, "{c0:?}");
    assert_eq!(c0.tx_bad_chain, 3, "{c0:?}");
    assert_eq!(c0.tx_frames, 1, "{c0:?}");
    assert_eq!(c0.queue_broken, 0, "{c0:?}");
    // The good frame arrived intact (header with num_buffers 1, then the frame).
    let got = p1.used_idx(RX);
    assert!(got >= 1);
    let found = (0..got).any(|n| {
        let (id, len) = p1.used(RX, n);
        len as usize == good.len() && {
            let bytes = p1.read(DATA + u64::from(id) * 2048, good.len());
            bytes[10..12] == [1, 0] && bytes[HDR_LEN..] == good[HDR_LEN..]
        }
    });
    assert!(found, "good frame delivered intact");
    // The backend is alive: another good frame crosses.
    p0.desc(TX, 5, buf, 112, 0, 0);
    p0.offer(TX, 5);
    assert!(p0.wait_used(TX, 6));
    wait_counters(&server, 1, |c| c.rx_frames == c0.tx_frames + 1);
    p0.close();
    p1.close();
    server.stop();
}

fn an_available_index_jump_breaks_the_queue_and_the_next_frontend_works_on(datapath: Datapath) {
    let server = common::start(2, |c| c.policies.datapath = datapath);
    let p0 = RawPort::connect(&server.sockets[0], F_EVENT_IDX);
    server.wait_attached(0);
    let mut p1 = RawPort::connect(&server.sockets[1], F_EVENT_IDX);
    server.wait_attached(1);
    post_rx(&mut p1, 0);
    // 1000 chains "available" in a 64-entry ring.
    p0.set_avail_idx(TX, 1000);
    let c = wait_counters(&server, 0, |c| c.queue_broken == 1);
    assert_eq!(c.tx_frames, 0);
    assert_eq!(p0.used_idx(TX), 0, "nothing completed on a broken queue");
    p0.close();
    server.wait_idle(0);
    let mut p0 = RawPort::connect(&server.sockets[0], F_EVENT_IDX);
    server.wait_attached(0);
    let good = packet(60, 3);
    p0.write(DATA, &good);
    p0.desc(TX, 0, DATA, good.len() as u32, 0, 0);
    p0.offer(TX, 0);
    assert!(p0.wait_used(TX, 1));
    assert!(p1.wait_used(RX, 1), "the new frontend's frame arrives");
    let (id, len) = p1.used(RX, 0);
    assert_eq!((id, len as usize), (0, good.len()));
    assert_eq!(p1.read(DATA + HDR_LEN as u64, 60), good[HDR_LEN..].to_vec());
    p0.close();
    p1.close();
    server.stop();
}

/// Transmit chains that break a ring rule, each on a connection of its own: a descriptor
/// loop, a head outside the table, a `next` outside the table.
#[derive(Clone, Copy, Debug)]
enum RingBreak {
    Loop,
    HeadOutside,
    NextOutside,
}

/// A chain that breaks a ring rule cannot be completed (its head may name no descriptor):
/// the chain before it is completed and its frame crosses, the transmit queue stops there
/// (neither the bad chain nor the good one after it is completed or forwarded), and the
/// port's next frontend works.
fn a_ring_rule_break_stops_the_transmit_queue_on(datapath: Datapath) {
    let server = common::start(2, |c| c.policies.datapath = datapath);
    let mut p1 = RawPort::connect(&server.sockets[1], F_EVENT_IDX);
    server.wait_attached(1);
    for i in 0..8 {
        post_rx(&mut p1, i);
    }
    let good = packet(100, 5);
    for (n, case) in [
        RingBreak::Loop,
        RingBreak::HeadOutside,
        RingBreak::NextOutside,
    ]
    .into_iter()
    .enumerate()
    {
        let before = server.handle.counters();
        let mut p0 = RawPort::connect(&server.sockets[0], F_EVENT_IDX);
        server.wait_attached(0);
        p0.write(DATA, &good);
        p0.desc(TX, 0, DATA, good.len() as u32, 0, 0);
        p0.desc(TX, 3, DATA, good.len() as u32, 0, 0);
        let bad_head = match case {
            RingBreak::Loop => {
                p0.desc(TX, 1, DATA, 64, F_NEXT, 2);
                p0.desc(TX, 2, DATA, 64, F_NEXT, 1);
                1
            }
            RingBreak::HeadOutside => 64 + 1,
            RingBreak::NextOutside => {
                p0.desc(TX, 1, DATA, 64, F_NEXT, 64 + 9);
                1
            }
        };
        p0.offer(TX, 0);
        p0.offer(TX, bad_head);
        p0.offer(TX, 3);
        let c = wait_counters(&server, 0, |c| c.queue_broken == before[0].queue_broken + 1);
        assert!(
            p0.wait_used(TX, 1),
            "{case:?}: the chain before the break completes"
        );
        assert_eq!(p0.used(TX, 0).0, 0, "{case:?}");
        wait_counters(&server, 1, |c| c.rx_frames == before[1].rx_frames + 1);
        // Nothing after the break moves, however long one waits.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            p0.used_idx(TX),
            1,
            "{case:?}: nothing completed after the break"
        );
        let after = server.handle.counters();
        assert_eq!(
            after[0].tx_frames,
            before[0].tx_frames + 1,
            "{case:?}: {c:?}"
        );
        assert_eq!(
            after[0].tx_bad_chain, before[0].tx_bad_chain,
            "{case:?}: {c:?}"
        );
        assert_eq!(after[1].rx_frames, before[1].rx_frames + 1, "{case:?}");
        assert_eq!(p1.used_idx(RX), n as u16 + 1, "{case:?}");
        p0.close();
        server.wait_idle(0);
    }
    p1.close();
    server.stop();
}

/// A receive chain that breaks a ring rule (a loop) stops the receive queue: the frame is
/// not delivered, no used entry is written, and the queue takes no later frame.
fn a_ring_rule_break_stops_the_receive_queue_on(datapath: Datapath) {
    let server = common::start(2, |c| c.policies.datapath = datapath);
    let mut p0 = RawPort::connect(&server.sockets[0], F_EVENT_IDX);
    server.wait_attached(0);
    let mut p1 = RawPort::connect(&server.sockets[1], F_MRG_RXBUF | F_EVENT_IDX);
    server.wait_attached(1);
    let good = packet(100, 6);
    p0.write(DATA, &good);
    p1.desc(RX, 0, DATA, 1024, F_WRITE | F_NEXT, 1);
    p1.desc(RX, 1, DATA + 1024, 1024, F_WRITE | F_NEXT, 0);
    p1.offer(RX, 0);
    post_rx(&mut p1, 2);
    for i in 0..2 {
        p0.desc(TX, i, DATA, good.len() as u32, 0, 0);
        p0.offer(TX, i);
    }
    wait_counters(&server, 1, |c| c.queue_broken == 1);
    assert!(
        p0.wait_used(TX, 2),
        "the source's chains complete (their frames dropped)"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        p1.used_idx(RX),
        0,
        "nothing published on the broken receive queue"
    );
    let c = server.handle.counters();
    assert_eq!(c[1].rx_frames, 0, "{:?}", c[1]);
    p0.close();
    p1.close();
    server.stop();
}

fn bad_and_too_small_receive_buffers_drop_the_frame_and_are_counted_on(datapath: Datapath) {
    let server = common::start(2, |c| c.policies.datapath = datapath);
    let mut p0 = RawPort::connect(&server.sockets[0], F_EVENT_IDX);
    server.wait_attached(0);
    // No MRG_RXBUF: a frame must fit one receive chain.
    let mut p1 = RawPort::connect(&server.sockets[1], F_EVENT_IDX);
    server.wait_attached(1);
    assert_eq!(p1.features() & F_MRG_RXBUF, 0);
    let big = packet(100, 1);
    let small = packet(50, 2);
    p0.write(DATA, &big);
    p0.write(DATA + 4096, &small);
    // Receive chain 0 is device-readable: returned unused, the frame dropped.
    p1.desc(RX, 0, DATA, 2048, 0, 0);
    p1.offer(RX, 0);
    p0.desc(TX, 0, DATA, big.len() as u32, 0, 0);
    p0.offer(TX, 0);
    assert!(p0.wait_used(TX, 1));
    assert!(p1.wait_used(RX, 1));
    assert_eq!(p1.used(RX, 0), (0, 0));
    wait_counters(&server, 1, |c| c.rx_bad_chain == 1);
    // Receive chain 1 holds 64 bytes: the 112-byte packet can never fit (dropped, the
    // buffer stays available), the 62-byte one does.
    p1.desc(RX, 1, DATA + 8192, 64, F_WRITE, 0);
    p1.offer(RX, 1);
    p0.desc(TX, 1, DATA, big.len() as u32, 0, 0);
    p0.offer(TX, 1);
    assert!(p0.wait_used(TX, 2));
    wait_counters(&server, 1, |c| c.rx_too_big == 1);
    assert_eq!(p1.used_idx(RX), 1, "the small buffer was not consumed");
    p0.desc(TX, 2, DATA + 4096, small.len() as u32, 0, 0);
    p0.offer(TX, 2);
    assert!(p1.wait_used(RX, 2));
    assert_eq!(p1.used(RX, 1), (1, small.len() as u32));
    let got = p1.read(DATA + 8192, small.len());
    assert_eq!(&got[10..12], &[1, 0], "num_buffers is 1 without MRG_RXBUF");
    assert_eq!(got[HDR_LEN..], small[HDR_LEN..]);
    let c = server.handle.counters();
    assert_eq!(c[0].tx_frames, 3);
    assert_eq!(c[1].rx_frames, 1);
    p0.close();
    p1.close();
    server.stop();
}

#[test]
fn malformed_transmit_chains_are_dropped_and_counted() {
    malformed_transmit_chains_are_dropped_and_counted_on(Datapath::PerPort);
}

#[test]
fn malformed_transmit_chains_are_dropped_and_counted_with_one_forwarding_thread() {
    malformed_transmit_chains_are_dropped_and_counted_on(Datapath::Pmd { cpu: None });
}

#[test]
fn an_available_index_jump_breaks_the_queue_and_the_next_frontend_works() {
    an_available_index_jump_breaks_the_queue_and_the_next_frontend_works_on(Datapath::PerPort);
}

#[test]
fn an_available_index_jump_breaks_the_queue_and_the_next_frontend_works_with_one_forwarding_thread()
{
    an_available_index_jump_breaks_the_queue_and_the_next_frontend_works_on(Datapath::Pmd {
        cpu: None,
    });
}

#[test]
fn bad_and_too_small_receive_buffers_drop_the_frame_and_are_counted() {
    bad_and_too_small_receive_buffers_drop_the_frame_and_are_counted_on(Datapath::PerPort);
}

#[test]
fn bad_and_too_small_receive_buffers_drop_the_frame_and_are_counted_with_one_forwarding_thread() {
    bad_and_too_small_receive_buffers_drop_the_frame_and_are_counted_on(Datapath::Pmd {
        cpu: None,
    });
}

#[test]
fn a_ring_rule_break_stops_the_transmit_queue() {
    a_ring_rule_break_stops_the_transmit_queue_on(Datapath::PerPort);
}

#[test]
fn a_ring_rule_break_stops_the_transmit_queue_with_one_forwarding_thread() {
    a_ring_rule_break_stops_the_transmit_queue_on(Datapath::Pmd { cpu: None });
}

#[test]
fn a_ring_rule_break_stops_the_receive_queue() {
    a_ring_rule_break_stops_the_receive_queue_on(Datapath::PerPort);
}

#[test]
fn a_ring_rule_break_stops_the_receive_queue_with_one_forwarding_thread() {
    a_ring_rule_break_stops_the_receive_queue_on(Datapath::Pmd { cpu: None });
}
