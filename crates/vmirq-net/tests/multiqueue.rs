//! Multiqueue (`--queues 2`) on live ports driven by vmirq-vhost's raw test frontend (it acks
//! every offered feature but EVENT_IDX, so MQ, CTRL_VQ and MRG_RXBUF): the device has
//! 2N + 1 virtqueues and says so, frames sent on transmit queue 1 (pair 1) arrive, each flow
//! lands on one receive queue in order, VQ_PAIRS_SET 1 after 2 moves every frame back to
//! pair 0 with none lost; without a control queue (as QEMU and virtio-user connect) the
//! enabled receive vrings decide; queue indices past the control queue are refused, and
//! the pmd data path refuses several pairs at start-up.

// Frame fields here are small constants: the casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};
use vmirq_net::ctrl::VIRTIO_NET_OK;
use vmirq_net::queues::Datapath;
use vmirq_net::server::{Server, ServerConfig, ServerError};
use vmirq_net::virtio::{F_MQ, HDR_LEN};
use vmirq_vhost::mock_guest::Desc;
use vmirq_vhost::raw_frontend::{
    req, vring_state, RawFrontend, Reply, Session, FLAG_NEED_REPLY, FLAG_REPLY, VERSION_1,
};

const SIZE: u16 = 64;
/// RX 0, TX 0, RX 1, TX 1, control.
const QUEUES: u16 = 5;
const CTRL: u16 = 4;
const BUF: u32 = 2048;
const WAIT: Duration = Duration::from_secs(5);

/// Send one control command; returns the ack byte.
fn command(s: &mut Session, bytes: &[u8]) -> u8 {
    common::ctrl_command(s, CTRL, bytes).1
}

fn vq_pairs_set(s: &mut Session, n: u16) -> u8 {
    let mut c = vec![4u8, 0]; // MQ, VQ_PAIRS_SET
    c.extend_from_slice(&n.to_le_bytes());
    command(s, &c)
}

/// A UDP/IPv4 frame of flow `flow` (its source port) with sequence number `seq`, behind a
/// zero net header.
fn frame(flow: u16, seq: u16) -> Vec<u8> {
    let mut f = vec![0u8; HDR_LEN + 14 + 28 + 4];
    let e = &mut f[HDR_LEN..];
    e[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    e[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    e[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut e[14..];
    ip[0] = 0x45;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    ip[20..22].copy_from_slice(&(1000 + flow).to_be_bytes());
    ip[22..24].copy_from_slice(&7u16.to_be_bytes());
    ip[28..30].copy_from_slice(&seq.to_be_bytes());
    f
}

/// (flow, seq) of a received buffer's bytes (net header first).
fn parse(b: &[u8]) -> (u16, u16) {
    let ip = &b[HDR_LEN + 14..];
    (
        u16::from_be_bytes([ip[20], ip[21]]) - 1000,
        u16::from_be_bytes([ip[28], ip[29]]),
    )
}

/// Receive buffers posted on one queue: head -> address.
#[derive(Default)]
struct Posted(HashMap<u32, u64>);

impl Posted {
    fn post(&mut self, s: &mut Session, q: u16, n: usize) {
        let g = &mut s.queues[usize::from(q)].guest;
        for _ in 0..n {
            let addr = g.alloc(BUF);
            let head = g.push_chain(&[Desc {
                addr,
                len: BUF,
                write: true,
            }]);
            self.0.insert(u32::from(head), addr);
        }
        s.kick(q).expect("kick");
    }

    /// Every frame that arrived on queue `q` so far (waits `wait` for `want` of them).
    fn take(&self, s: &mut Session, q: u16, want: usize, wait: Duration) -> Vec<(u16, u16)> {
        let used = s.wait_used(q, want, wait);
        let g = &s.queues[usize::from(q)].guest;
        used.iter()
            .map(|&(id, len)| {
                let addr = self.0[&id];
                parse(&g.read(&Desc {
                    addr,
                    len,
                    write: true,
                }))
            })
            .collect()
    }
}

/// Send `frames` on transmit queue `q` (one readable descriptor each); wait until all
/// are returned.
fn send(s: &mut Session, q: u16, frames: &[Vec<u8>]) {
    let g = &mut s.queues[usize::from(q)].guest;
    for f in frames {
        let addr = g.alloc(f.len() as u32);
        g.mem_write(addr, f);
        g.push_chain(&[Desc {
            addr,
            len: f.len() as u32,
            write: false,
        }]);
    }
    s.kick(q).expect("kick");
    assert_eq!(s.wait_used(q, frames.len(), WAIT).len(), frames.len());
}

/// Frames arriving on RX 0 and RX 1 (pair 1's receive queue is virtqueue 2) until `total`
/// arrived (bounded), then a short look for extra ones.
fn receive(s: &mut Session, posted: &[Posted; 2], total: usize) -> [Vec<(u16, u16)>; 2] {
    let mut got = [Vec::new(), Vec::new()];
    let deadline = Instant::now() + WAIT;
    while got[0].len() + got[1].len() < total && Instant::now() < deadline {
        for (i, q) in [0u16, 2].into_iter().enumerate() {
            got[i].extend(posted[i].take(s, q, 1, Duration::from_millis(2)));
        }
    }
    for (i, q) in [0u16, 2].into_iter().enumerate() {
        got[i].extend(posted[i].take(s, q, usize::MAX, Duration::from_millis(20)));
    }
    got
}

#[test]
fn two_pairs_frames_on_tx_queue_1_arrive_in_flow_order_and_vq_pairs_set_1_moves_them_back() {
    let server = common::start(2, |c| c.queue_pairs = 2);
    let mut s0 = Session::start(&server.sockets[0], QUEUES, SIZE).expect("port 0 frontend");
    let mut s1 = Session::start(&server.sockets[1], QUEUES, SIZE).expect("port 1 frontend");
    // 2N + 1 virtqueues, MQ offered.
    assert_eq!(s1.fe.call(req::GET_QUEUE_NUM, &[], &[]).value(), Some(5));
    let features = s1.fe.call(req::GET_FEATURES, &[], &[]).value();
    assert_eq!(features.map(|f| f & F_MQ), Some(F_MQ));
    server.wait_attached(0);
    server.wait_attached(1);
    let mut posted = [Posted::default(), Posted::default()];
    posted[0].post(&mut s1, 0, 56);
    posted[1].post(&mut s1, 2, 56);

    // Before VQ_PAIRS_SET the driver uses one pair: everything goes to RX 0.
    let first: Vec<Vec<u8>> = (0..4).map(|i| frame(i, 0)).collect();
    send(&mut s0, 3, &first);
    let got = receive(&mut s1, &posted, 4);
    assert_eq!(got[0].len(), 4, "{got:?}");
    assert!(got[1].is_empty(), "{got:?}");

    // Two pairs: flows spread over both receive queues, each flow on one, in order.
    assert_eq!(vq_pairs_set(&mut s1, 2), VIRTIO_NET_OK);
    let (flows, per_flow) = (12u16, 4u16);
    let burst: Vec<Vec<u8>> = (0..per_flow)
        .flat_map(|seq| (0..flows).map(move |f| frame(f, seq)))
        .collect();
    send(&mut s0, 3, &burst);
    let got = receive(&mut s1, &posted, burst.len());
    assert_eq!(got[0].len() + got[1].len(), burst.len(), "{got:?}");
    assert!(!got[0].is_empty() && !got[1].is_empty(), "{got:?}");
    for f in 0..flows {
        let want = vmirq_net::flow::rx_pair(&frame(f, 0)[HDR_LEN..], 1, 2);
        let seqs: Vec<u16> = got[want]
            .iter()
            .filter(|(g, _)| *g == f)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            seqs,
            (0..per_flow).collect::<Vec<_>>(),
            "flow {f} on RX pair {want}"
        );
        assert!(
            !got[1 - want].iter().any(|(g, _)| *g == f),
            "flow {f} split"
        );
    }
    let rx1 = server.handle.pair_counters(1, 1).expect("pair 1").0;
    assert!(rx1.notifications > 0, "{rx1:?}");

    // Back to one pair: frames from both transmit queues all reach RX 0, none lost.
    assert_eq!(vq_pairs_set(&mut s1, 1), VIRTIO_NET_OK);
    posted[0].post(&mut s1, 0, 4 + got[0].len());
    let a: Vec<Vec<u8>> = (0..24).map(|i| frame(i % flows, 100 + i)).collect();
    let b: Vec<Vec<u8>> = (0..24).map(|i| frame(i % flows, 200 + i)).collect();
    send(&mut s0, 1, &a);
    send(&mut s0, 3, &b);
    let got = receive(&mut s1, &posted, 48);
    assert_eq!(got[0].len(), 48, "{got:?}");
    assert!(got[1].is_empty(), "{got:?}");
    let c = server.handle.counters();
    assert_eq!(c[0].tx_frames, 4 + burst.len() as u64 + 48, "{:?}", c[0]);
    assert_eq!(c[1].rx_frames, c[0].tx_frames, "{:?}", c[1]);
    assert_eq!(c[0].dropped() + c[1].dropped(), 0, "{c:?}");
    drop(s0);
    drop(s1);
    server.stop();
}

#[test]
fn without_a_control_queue_the_enabled_receive_vrings_decide() {
    // QEMU and DPDK's virtio-user serve the control queue themselves: the device never
    // sees VQ_PAIRS_SET, only which vrings are enabled.
    let server = common::start(2, |c| c.queue_pairs = 2);
    let mut s0 = Session::start(&server.sockets[0], 4, SIZE).expect("port 0 frontend");
    let mut s1 = Session::start(&server.sockets[1], 4, SIZE).expect("port 1 frontend");
    server.wait_attached(0);
    server.wait_attached(1);
    let mut posted = [Posted::default(), Posted::default()];
    posted[0].post(&mut s1, 0, 56);
    posted[1].post(&mut s1, 2, 56);
    let burst: Vec<Vec<u8>> = (0..24).map(|f| frame(f, 0)).collect();
    send(&mut s0, 1, &burst);
    let got = receive(&mut s1, &posted, burst.len());
    assert_eq!(got[0].len() + got[1].len(), burst.len(), "{got:?}");
    assert!(!got[0].is_empty() && !got[1].is_empty(), "{got:?}");
    // Pair 1's receive vring disabled: every flow goes to pair 0.
    s1.expect_ack(req::SET_VRING_ENABLE, &vring_state(2, 0), &[])
        .expect("disable RX 1");
    send(&mut s0, 3, &burst);
    let got = receive(&mut s1, &posted, burst.len());
    assert_eq!(got[0].len(), burst.len(), "{got:?}");
    assert!(got[1].is_empty(), "{got:?}");
    assert_eq!(server.handle.counters()[0].dropped(), 0);
    drop(s0);
    drop(s1);
    server.stop();
}

/// The backend answers with a non-zero value or closes the connection.
fn assert_refused(fe: &RawFrontend) {
    let deadline = Instant::now() + WAIT;
    loop {
        match fe.recv(deadline.saturating_duration_since(Instant::now())) {
            Reply::Closed => return,
            Reply::Timeout => panic!("a hostile message was neither refused nor closed"),
            Reply::Message { payload, flags, .. } => {
                assert!(flags & FLAG_REPLY != 0);
                assert_ne!(payload.get(..8), Some(&0u64.to_le_bytes()[..]), "acked");
            }
        }
    }
}

#[test]
fn vring_indices_past_the_control_queue_are_refused() {
    for (pairs, queues) in [(1u16, 3u16), (2, 5)] {
        let server = common::start(2, |c| c.queue_pairs = pairs);
        for (i, bad) in [u32::from(queues), u32::from(queues) + 1, u32::MAX]
            .into_iter()
            .enumerate()
        {
            let request = [
                req::SET_VRING_NUM,
                req::SET_VRING_BASE,
                req::SET_VRING_ENABLE,
            ][i];
            let s = Session::start(&server.sockets[0], queues, SIZE).expect("frontend");
            assert_eq!(
                s.fe.call(req::GET_QUEUE_NUM, &[], &[]).value(),
                Some(u64::from(queues))
            );
            let _ = s.fe.send(
                request,
                VERSION_1 | FLAG_NEED_REPLY,
                &vring_state(bad, 1),
                &[],
            );
            assert_refused(&s.fe);
            drop(s);
            server.wait_idle(0);
        }
        // The port still serves a well-behaved frontend.
        let s = Session::start(&server.sockets[0], queues, SIZE).expect("fresh frontend");
        drop(s);
        server.stop();
    }
}

#[test]
fn pmd_with_several_pairs_and_pair_counts_out_of_range_are_refused_at_start_up() {
    let dir = tempfile::tempdir().expect("dir");
    let sockets = vec![dir.path().join("a"), dir.path().join("b")];
    let config = |pairs: u16, datapath: Datapath| {
        let mut c = ServerConfig::new(sockets.clone());
        c.queue_pairs = pairs;
        c.policies.datapath = datapath;
        c
    };
    let err = |c: ServerConfig| match Server::new(c) {
        Err(ServerError::Config(msg)) => msg,
        Err(e) => panic!("not a configuration error: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let msg = err(config(2, Datapath::Pmd { cpu: None }));
    assert!(msg.contains("--queues 2") && msg.contains("pmd"), "{msg}");
    assert!(err(config(0, Datapath::PerPort)).contains("--queues 0"));
    assert!(err(config(17, Datapath::PerPort)).contains("--queues 17"));
    assert!(Server::new(config(1, Datapath::Pmd { cpu: None })).is_ok());
    assert!(Server::new(config(16, Datapath::PerPort)).is_ok());
}
