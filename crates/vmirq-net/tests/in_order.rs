//! VIRTIO_F_IN_ORDER (virtio 1.2 §2.7.9 and §2.7.8): the device offers it, and a driver
//! that negotiates it may rely on buffers being used in the order they were made
//! available. Checked on both data paths with heads offered in a scrambled order (the
//! device reads each head from the available ring, whatever the order), a transmit chain
//! that is dropped and a receive buffer the device cannot write (each used with length 0
//! in its place; the frame that met the bad buffer is dropped), and a receive queue that
//! runs out of buffers mid-burst (the frames that found no room wait in the source's ring
//! and go out, in order, after the refill).

// Packet lengths and tags here are small constants: the casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use common::raw::{RawPort, DATA, F_WRITE};
use vmirq_net::queues::Datapath;
use vmirq_net::virtio::{F_IN_ORDER, F_MRG_RXBUF, HDR_LEN};

const RX: usize = 0;
const TX: usize = 1;
/// Frame length (Ethernet header and payload).
const LEN: usize = 100;
/// Where the transmit buffers start (receive buffers are 2048 bytes each from `DATA`).
const TX_BUF: u64 = DATA + 64 * 1024;
/// Transmit heads in the order the driver offers them; head 6 is device-writable (dropped).
const TX_ORDER: [u16; 8] = [3, 0, 6, 1, 7, 2, 5, 4];
const TX_BAD: u16 = 6;
/// Receive heads offered before the transmit burst (head 2 read-only: room for three
/// frames) and after it.
const RX_FIRST: [u16; 4] = [5, 2, 7, 1];
const RX_BAD: u16 = 2;
const RX_LATER: [u16; 3] = [0, 4, 3];
/// The transmit chains whose frames arrive: not the dropped one, nor the one that met the
/// bad receive buffer (the second chain).
const ARRIVING: [u16; 6] = [3, 1, 7, 2, 5, 4];

/// A net header (no offloads) and a frame of [`LEN`] bytes whose payload is `tag`.
fn packet(tag: u8) -> Vec<u8> {
    let mut p = vec![tag; HDR_LEN + LEN];
    p[..HDR_LEN].fill(0);
    p[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p[HDR_LEN + 6..HDR_LEN + 12].copy_from_slice(&[2, 0, 0, 0, 0, 0]);
    p[HDR_LEN + 12..HDR_LEN + 14].copy_from_slice(&[0x88, 0xb5]);
    p
}

fn post_rx(port: &mut RawPort, heads: &[u16]) {
    for &i in heads {
        let flags = if i == RX_BAD { 0 } else { F_WRITE };
        port.desc(RX, i, DATA + u64::from(i) * 2048, 2048, flags, 0);
        port.offer(RX, i);
    }
}

/// The used entries of `port`'s queue `q` from `from` to `to`: their ids.
fn used_ids(port: &RawPort, q: usize, from: u16, to: u16) -> Vec<u16> {
    (from..to)
        .map(|n| u16::try_from(port.used(q, n).0).expect("id fits a head"))
        .collect()
}

fn buffers_are_used_in_the_order_they_were_made_available_on(datapath: Datapath) {
    let server = common::start(2, |c| c.policies.datapath = datapath);
    let mut p0 = RawPort::connect(&server.sockets[0], F_IN_ORDER | F_MRG_RXBUF);
    server.wait_attached(0);
    let mut p1 = RawPort::connect(&server.sockets[1], F_IN_ORDER | F_MRG_RXBUF);
    server.wait_attached(1);
    assert_ne!(
        p0.features() & F_IN_ORDER,
        0,
        "IN_ORDER offered and negotiated"
    );
    post_rx(&mut p1, &RX_FIRST);
    for &head in &TX_ORDER {
        let at = TX_BUF + u64::from(head) * 256;
        p0.write(at, &packet(head as u8));
        let flags = if head == TX_BAD { F_WRITE } else { 0 };
        p0.desc(TX, head, at, (HDR_LEN + LEN) as u32, flags, 0);
    }
    for &head in &TX_ORDER {
        p0.offer(TX, head);
    }
    // 3 goes into 5, 0 meets the bad buffer 2 (dropped), 6 is dropped, 1 goes into 7 and 7
    // into 1; 2 finds no room and waits with every chain after it.
    assert!(p1.wait_used(RX, 4), "four receive buffers used");
    assert!(p0.wait_used(TX, 5), "five transmit chains completed");
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(
        p0.used_idx(TX),
        5,
        "no chain after the one that found no room"
    );
    assert_eq!(used_ids(&p0, TX, 0, 5), TX_ORDER[..5]);
    post_rx(&mut p1, &RX_LATER);
    assert!(p0.wait_used(TX, 8), "every transmit chain completed");
    assert!(p1.wait_used(RX, 7), "every receive buffer used");
    assert_eq!(
        used_ids(&p0, TX, 0, 8),
        TX_ORDER,
        "transmit chains used in order"
    );
    let rx_order: Vec<u16> = RX_FIRST.iter().chain(&RX_LATER).copied().collect();
    assert_eq!(
        used_ids(&p1, RX, 0, 7),
        rx_order,
        "receive buffers used in order"
    );
    // The bad buffer came back empty; the others hold the arriving frames in ring order.
    let mut arriving = ARRIVING.iter();
    for n in 0..7u16 {
        let (id, len) = p1.used(RX, n);
        if id == u32::from(RX_BAD) {
            assert_eq!(len, 0, "the unwritable buffer is used with length 0");
            continue;
        }
        let head = *arriving.next().expect("one frame per good buffer");
        assert_eq!(len as usize, HDR_LEN + LEN, "entry {n}");
        let got = p1.read(DATA + u64::from(id) * 2048, HDR_LEN + LEN);
        assert_eq!(got[HDR_LEN..], packet(head as u8)[HDR_LEN..], "entry {n}");
    }
    assert_eq!(arriving.next(), None);
    let c = server.handle.counters();
    assert_eq!((c[0].tx_bad_chain, c[1].rx_bad_chain), (1, 1), "{c:?}");
    p0.close();
    p1.close();
    server.stop();
}

#[test]
fn buffers_are_used_in_the_order_they_were_made_available_per_port() {
    buffers_are_used_in_the_order_they_were_made_available_on(Datapath::PerPort);
}

#[test]
fn buffers_are_used_in_the_order_they_were_made_available_pmd() {
    buffers_are_used_in_the_order_they_were_made_available_on(Datapath::Pmd { cpu: None });
}
