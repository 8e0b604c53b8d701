//! The port's data path against a device-side queue on its memory (no vhost-user): frames
//! go out intact, merged receive buffers are reassembled, and a device that writes
//! headers, lengths or buffer counts it should not gets counted faults, never a panic or a
//! leaked buffer.

use super::*;
use crate::frame::{port_mac, Encap, Kind, Probe};
use crate::test_device::{Avail, TestDevice};

const FEATURES: u64 = vn::F_VERSION_1 | vn::F_MRG_RXBUF | vn::F_EVENT_IDX;

fn port(cfg: PortConfig, features: u64) -> NetPort {
    NetPort::build(
        Path::new("detached"),
        cfg,
        port_mac(0),
        &Pattern::new(),
        features,
    )
    .expect("port")
}

fn small() -> PortConfig {
    PortConfig {
        rx_queue_size: 8,
        tx_queue_size: 1,
        tx_frame_max: 9014,
        ..PortConfig::default()
    }
}

fn probe(seq: u64, len: u32) -> Probe {
    Probe {
        kind: Kind::Bulk,
        flow: 1,
        seq,
        t_ns: 5,
        len,
    }
}

/// The device reads what the driver transmitted: header, then frame.
fn transmitted(dev: &mut TestDevice) -> Vec<u8> {
    let a = dev.take();
    assert_eq!(a.len(), 1);
    assert!(!a[0].writable);
    let bytes = dev.read(a[0].addr, a[0].len);
    dev.complete(a[0].head, 0);
    bytes
}

#[test]
fn transmitted_frames_are_intact_when_a_buffer_is_reused_with_other_lengths() {
    let pattern = Pattern::new();
    let mut p = port(small(), FEATURES);
    let mut dev = TestDevice::new(&p.mem, p.tx.layout(), true);
    // One TX descriptor: every frame reuses the same buffer, longer and shorter.
    for (seq, len) in [(0, 1514), (1, 60), (2, 9014), (3, 1514)] {
        assert!(p
            .send(&probe(seq, len), port_mac(1), &pattern)
            .expect("send"));
        assert!(!p.send(&probe(9, 60), port_mac(1), &pattern).expect("full"));
        p.flush().expect("flush");
        let bytes = transmitted(&mut dev);
        assert_eq!(
            &bytes[..HDR_LEN],
            &[0u8; HDR_LEN],
            "no offloads, num_buffers 0"
        );
        let got = frame::parse(&bytes[HDR_LEN..], &pattern, true).expect("valid probe");
        assert_eq!(got, probe(seq, len));
        assert_eq!(p.reclaim_tx().expect("reclaim"), 1);
    }
    let c = p.counters();
    assert_eq!((c.tx_frames, c.tx_ring_full, c.faults.total()), (4, 4, 0));
    assert!(
        p.send(&probe(0, 59), port_mac(1), &pattern).is_err(),
        "too short"
    );
    assert!(
        p.send(&probe(0, 9015), port_mac(1), &pattern).is_err(),
        "too long"
    );
}

#[test]
fn a_buffer_reused_across_encapsulations_sends_intact_frames() {
    let pattern = Pattern::new();
    let mut p = port(small(), FEATURES);
    let mut dev = TestDevice::new(&p.mem, p.tx.layout(), true);
    // One TX descriptor: a raw frame after a udp one must find the pattern where the udp
    // headers were (bytes 46..74), and the other way round.
    let sends = [
        (Encap::Raw, 1514),
        (Encap::Udp, 82),
        (Encap::Raw, 60),
        (Encap::Udp, 9014),
        (Encap::Raw, 9014),
        (Encap::Udp, 1514),
        (Encap::Udp, 1514),
        (Encap::Raw, 1514),
    ];
    for (seq, (encap, len)) in (0..).zip(sends) {
        p.set_encap(encap);
        assert_eq!(p.encap(), encap);
        assert!(p
            .send(&probe(seq, len), port_mac(1), &pattern)
            .expect("send"));
        p.flush().expect("flush");
        let bytes = transmitted(&mut dev);
        let got = frame::parse_encap(&bytes[HDR_LEN..], &pattern, true);
        assert_eq!(got, Ok((encap, probe(seq, len))), "frame {seq}");
        assert_eq!(p.reclaim_tx().expect("reclaim"), 1);
    }
    p.set_encap(Encap::Udp);
    assert!(
        p.send(&probe(0, 81), port_mac(1), &pattern).is_err(),
        "shorter than a udp frame's headers and trailer"
    );
    assert!(p.send(&probe(0, 82), port_mac(1), &pattern).expect("send"));
}

/// Device side of the RX ring: hands out buffers in order.
struct Rx {
    dev: TestDevice,
    avail: std::collections::VecDeque<Avail>,
}

impl Rx {
    fn new(p: &NetPort) -> Self {
        Self {
            dev: TestDevice::new(&p.mem, p.rx.layout(), true),
            avail: std::collections::VecDeque::new(),
        }
    }

    fn next(&mut self) -> Avail {
        if self.avail.is_empty() {
            self.avail.extend(self.dev.take());
        }
        let a = self.avail.pop_front().expect("a receive buffer");
        assert!(a.writable);
        a
    }

    /// Write `frame` the way a MRG_RXBUF device does, with `hdr` as the first buffer's
    /// header (its num_buffers is what the test says, not necessarily the truth); `lens`
    /// overrides the used lengths.
    fn deliver(&mut self, hdr: [u8; HDR_LEN], frame: &[u8], lens: Option<&[u32]>) -> usize {
        let mut data = hdr.to_vec();
        data.extend_from_slice(frame);
        let mut used = 0;
        for (i, chunk) in data.chunks(2048).enumerate() {
            let a = self.next();
            self.dev.write(a.addr, chunk);
            let len = lens.map_or_else(|| u32::try_from(chunk.len()).expect("small"), |l| l[i]);
            self.dev.complete(a.head, len);
            used += 1;
        }
        used
    }
}

fn hdr(num_buffers: u16) -> [u8; HDR_LEN] {
    let mut h = [0u8; HDR_LEN];
    h[10..12].copy_from_slice(&num_buffers.to_le_bytes());
    h
}

fn frame_bytes(seq: u64, len: u32) -> Vec<u8> {
    let pattern = Pattern::new();
    frame::build(
        frame::Encap::Raw,
        &probe(seq, len),
        port_mac(1),
        port_mac(0),
        &pattern,
    )
}

fn receive_all(p: &mut NetPort) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut scratch = Vec::new();
    p.receive(64, &mut scratch, &mut |f| out.push(f.to_vec()))
        .expect("receive");
    out
}

#[test]
fn merged_receive_buffers_are_reassembled_in_order() {
    let mut p = port(small(), FEATURES);
    let mut rx = Rx::new(&p);
    let big = frame_bytes(7, 5000);
    let small_frame = frame_bytes(8, 60);
    // 5012 bytes with the header: three 2048-byte buffers.
    assert_eq!(rx.deliver(hdr(3), &big, None), 3);
    assert_eq!(rx.deliver(hdr(1), &small_frame, None), 1);
    let got = receive_all(&mut p);
    assert_eq!(got, vec![big, small_frame]);
    let c = p.counters();
    assert_eq!((c.rx_frames, c.rx_buffers, c.faults.total()), (2, 4, 0));
    assert_eq!(p.rx.free_count(), 0, "every buffer made available again");
}

#[test]
fn hostile_receive_writes_are_faults_and_buffers_come_back() {
    let mut p = port(small(), FEATURES);
    let mut rx = Rx::new(&p);
    let f = frame_bytes(1, 100);
    // num_buffers 0; GSO the driver did not negotiate; flags without GUEST_CSUM.
    rx.deliver(hdr(0), &f, None);
    let mut gso = hdr(1);
    gso[1] = 1;
    rx.deliver(gso, &f, None);
    let mut csum = hdr(1);
    csum[0] = 1;
    rx.deliver(csum, &f, None);
    // A used length longer than the buffer; one shorter than the header.
    rx.deliver(hdr(1), &f, Some(&[4096]));
    rx.deliver(hdr(1), &f, Some(&[5]));
    assert!(receive_all(&mut p).is_empty());
    let faults = p.counters().faults;
    assert_eq!(faults.rx_bad_header, 3);
    assert_eq!(faults.used_len_too_long, 1);
    assert_eq!(faults.rx_short, 1);
    // Claims three buffers but publishes one: dropped, counted.
    rx.deliver(hdr(3), &f, None);
    assert!(receive_all(&mut p).is_empty());
    assert_eq!(p.counters().faults.rx_missing_buffers, 1);
    assert_eq!(p.rx.free_count(), 0, "all buffers recycled");
    // The ring still works.
    let good = frame_bytes(2, 1514);
    rx.deliver(hdr(1), &good, None);
    assert_eq!(receive_all(&mut p), vec![good]);
}

#[test]
fn without_mrg_rxbuf_num_buffers_is_ignored_and_buffers_must_hold_a_frame() {
    let cfg = PortConfig {
        rx_buf_len: 2048,
        tx_frame_max: 1514,
        ..small()
    };
    let mut p = port(cfg, vn::F_VERSION_1);
    let mut rx = Rx::new(&p);
    let f = frame_bytes(3, 1514);
    rx.deliver(hdr(0), &f, None);
    assert_eq!(receive_all(&mut p), vec![f]);
    let too_big = PortConfig {
        tx_frame_max: 9014,
        ..cfg
    };
    let e = NetPort::build(
        Path::new("x"),
        too_big,
        port_mac(0),
        &Pattern::new(),
        vn::F_VERSION_1,
    );
    assert!(matches!(e, Err(PortError::Config(_))));
}

#[test]
fn a_transmit_completion_with_a_length_is_counted() {
    let pattern = Pattern::new();
    let mut p = port(small(), FEATURES);
    let mut dev = TestDevice::new(&p.mem, p.tx.layout(), true);
    p.send(&probe(0, 60), port_mac(1), &pattern).expect("send");
    p.flush().expect("flush");
    let a = dev.take();
    dev.complete(a[0].head, 60);
    assert_eq!(p.reclaim_tx().expect("reclaim"), 1);
    assert_eq!(p.counters().faults.tx_len_nonzero, 1);
}

#[test]
fn configurations_that_cannot_work_are_refused() {
    let bad = [
        PortConfig {
            rx_queue_size: 3,
            ..small()
        },
        PortConfig {
            tx_queue_size: 8192,
            ..small()
        },
        PortConfig {
            rx_buf_len: 100,
            ..small()
        },
        PortConfig {
            tx_frame_max: 20_000,
            ..small()
        },
    ];
    for cfg in bad {
        assert!(matches!(cfg.check(), Err(PortError::Config(_))), "{cfg:?}");
    }
}
