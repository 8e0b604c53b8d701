//! `dim-lat:overtake=on` on a receive queue shared by a bulk stream and short messages: the
//! bulk frames whose interrupt the policy holds are written into their buffers but their
//! used entries wait (`vmirq_net::rx::Parked`); a short message of another flow is
//! published at once, ahead of them, and its bypass notification publishes them behind
//! it. Checked on the fabric driven from the test's thread (`common::mock_fabric`: no
//! epoll, so DIM's hold timer fires only when the test delivers it): the order of the used
//! entries and the frames in the buffers they name; a small frame of the bulk's own flow
//! staying behind it; nothing parked without `overtake=on` or when the driver negotiated
//! VIRTIO_F_IN_ORDER; every way parked entries must leave: the hold timer, a full ring (the
//! driver must see its buffers to refill), the frontend stopping the ring; and the receive
//! buffers kept for short messages (`reserve`), which let a message from another port in
//! while the bulk waits for the refill.

mod common;

use common::mock_fabric::{post_rx, Queue, Rig, RX_BUF};
use std::collections::HashMap;
use vmirq_net::queues::Policies;
use vmirq_net::virtio::{F_IN_ORDER, HDR_LEN};
use vmirq_vhost::mock_guest::Desc;

const BULK_LEN: usize = 1514;
const MSG_LEN: usize = 96;
/// The bulk stream's UDP port, and the messages'.
const BULK_PORT: u16 = 5001;
const MSG_PORT: u16 = 7001;
/// Offset of the tag byte that names a frame (inside its UDP payload).
const TAG_AT: usize = 14 + 20 + 8;

/// An IPv4/UDP frame from 10.0.0.2 to 10.0.0.1 of `len` bytes between UDP ports `port`,
/// whose payload bytes are `tag`.
fn udp(len: usize, port: u16, tag: u8) -> Vec<u8> {
    let mut f = vec![tag; len];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip.fill(0);
    ip[0] = 0x45;
    let ip_len = u16::try_from(len - 14).expect("short frame");
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 2]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 1]);
    let udp = &mut f[34..42];
    udp[..2].copy_from_slice(&port.to_be_bytes());
    udp[2..4].copy_from_slice(&port.to_be_bytes());
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    udp[6..8].fill(0);
    f
}

/// Offer `frames` (each after a zero net header) on a transmit queue, in one batch.
fn offer(q: &mut Queue, frames: &[Vec<u8>]) {
    for f in frames {
        let len = u32::try_from(HDR_LEN + f.len()).expect("short frame");
        let addr = q.guest.alloc(len);
        q.guest.mem_write(addr, &[0u8; HDR_LEN]);
        q.guest.mem_write(addr + HDR_LEN as u64, f);
        q.guest.push_chain(&[Desc {
            addr,
            len,
            write: false,
        }]);
    }
}

/// Post `n` receive buffers; returns each head's buffer address.
fn post(q: &mut Queue, n: usize) -> HashMap<u32, u64> {
    (0..n)
        .map(|_| {
            let addr = q.guest.alloc(RX_BUF);
            let head = q.guest.push_chain(&[Desc {
                addr,
                len: RX_BUF,
                write: true,
            }]);
            (u32::from(head), addr)
        })
        .collect()
}

/// The tags of the frames in the used entries published since the last call, in used-ring
/// order; every frame's bytes are checked against the one sent with its tag.
fn received(q: &mut Queue, bufs: &HashMap<u32, u64>, sent: &[Vec<u8>]) -> Vec<u8> {
    q.guest
        .take_used()
        .into_iter()
        .map(|(id, len)| {
            let addr = bufs[&id];
            let mut got = vec![0u8; len as usize - HDR_LEN];
            got.iter_mut().enumerate().for_each(|(i, b)| {
                *b = q.guest.byte_at(addr + (HDR_LEN + i) as u64);
            });
            let tag = got[TAG_AT];
            let want = sent.iter().find(|f| f[TAG_AT] == tag).expect("a sent tag");
            assert_eq!(&got, want, "frame {tag} intact");
            tag
        })
        .collect()
}

struct Case {
    rig: Rig,
    bufs: HashMap<u32, u64>,
}

/// Ports 0 and 1 under `moderation`, drivers with `features`; port 0 has `rx_buffers`.
fn case(moderation: &str, features: u64, rx_buffers: usize) -> Case {
    let policies = Policies {
        moderation: moderation.parse().expect("spec"),
        ..Policies::default()
    };
    let mut rig = Rig::with_features(&policies, 2, features);
    let bufs = post(&mut rig.ports[0].rx, rx_buffers);
    post_rx(&mut rig.ports[1].rx, 8);
    Case { rig, bufs }
}

impl Case {
    /// Port 1 sends `frames` to port 0 in one batch.
    fn send(&mut self, frames: &[Vec<u8>]) {
        offer(&mut self.rig.ports[1].tx, frames);
        self.rig.fabric.service_tx(1);
    }

    fn received(&mut self, sent: &[Vec<u8>]) -> Vec<u8> {
        received(&mut self.rig.ports[0].rx, &self.bufs, sent)
    }

    fn port0(&self) -> vmirq_net::counters::PortSnapshot {
        self.rig.fabric.slot(0).expect("port").counters.snapshot()
    }
}

fn bulk(tags: std::ops::Range<u8>) -> Vec<Vec<u8>> {
    tags.map(|t| udp(BULK_LEN, BULK_PORT, t)).collect()
}

#[test]
fn a_short_message_of_another_flow_is_read_ahead_of_the_held_bulk() {
    let mut c = case("dim-lat:overtake=on", 0, 16);
    let stream = bulk(1..5);
    c.send(&stream);
    assert_eq!(c.received(&stream), [], "the held bulk frames are parked");
    assert_eq!(c.rig.rx_counters(0).held, 4);
    let msg = vec![udp(MSG_LEN, MSG_PORT, 9)];
    c.send(&msg);
    let all: Vec<Vec<u8>> = stream.iter().chain(&msg).cloned().collect();
    assert_eq!(
        c.received(&all),
        [9, 1, 2, 3, 4],
        "message first, bulk in order"
    );
    let p = c.port0();
    assert_eq!(
        (p.rx_parked, p.rx_overtakes, p.rx_frames),
        (4, 1, 5),
        "{p:?}"
    );
    assert_eq!(
        c.rig.rx_counters(0).notifications,
        1,
        "the bypass covers all"
    );
}

#[test]
fn a_small_frame_of_the_bulk_flow_stays_behind_it() {
    let mut c = case("dim-lat:overtake=on", 0, 16);
    let mut frames = bulk(1..5);
    frames.push(udp(MSG_LEN, BULK_PORT, 9));
    c.send(&frames);
    assert_eq!(c.received(&frames), [1, 2, 3, 4, 9]);
    let p = c.port0();
    assert_eq!((p.rx_parked, p.rx_overtakes), (5, 0), "{p:?}");
}

#[test]
fn nothing_is_parked_without_overtake_or_with_in_order() {
    for (moderation, features) in [
        ("dim-lat", 0),
        ("dim-lat:overtake=on", F_IN_ORDER),
        ("dim", 0),
    ] {
        let mut c = case(moderation, features, 16);
        let stream = bulk(1..5);
        c.send(&stream);
        assert_eq!(
            c.received(&stream),
            [1, 2, 3, 4],
            "{moderation}: published at once"
        );
        let msg = vec![udp(MSG_LEN, MSG_PORT, 9)];
        c.send(&msg);
        assert_eq!(c.received(&msg), [9], "{moderation}");
        let p = c.port0();
        assert_eq!((p.rx_parked, p.rx_overtakes), (0, 0), "{moderation}: {p:?}");
    }
}

#[test]
fn the_hold_timer_publishes_the_parked_frames() {
    let mut c = case("dim-lat:overtake=on", 0, 16);
    let stream = bulk(1..5);
    c.send(&stream);
    assert_eq!(c.received(&stream), []);
    // DIM's default receive profile holds for microseconds; its timerfd has expired by now.
    std::thread::sleep(std::time::Duration::from_millis(5));
    c.rig.fabric.on_rx_timer(0, 0);
    assert_eq!(c.received(&stream), [1, 2, 3, 4]);
    assert_eq!(c.rig.rx_counters(0).notifications, 1);
}

#[test]
fn a_replaced_policy_leaves_nothing_parked() {
    let mut c = case("dim-lat:overtake=on", 0, 16);
    let stream = bulk(1..5);
    c.send(&stream);
    assert_eq!(c.received(&stream), []);
    // The guest's NOTF_COAL RX_SET replaces the policy (as ctrl::coal does): the new one
    // holds nothing and parks nothing; the old hold's timer still fires, and the parked
    // frames go out then.
    let count = "count:usecs=100,frames=64".parse::<vmirq_policy::spec::ModerationSpec>();
    c.rig.rx_ctls[0]
        .lock()
        .expect("rx ctl")
        .notifier
        .set_policy(count.expect("spec").build());
    std::thread::sleep(std::time::Duration::from_millis(5));
    c.rig.fabric.on_rx_timer(0, 0);
    assert_eq!(c.received(&stream), [1, 2, 3, 4]);
    // From now on frames are published as they arrive (the count policy parks nothing).
    let more = bulk(5..7);
    c.send(&more);
    assert_eq!(c.received(&more), [5, 6]);
    assert_eq!(c.port0().rx_parked, 4);
}

#[test]
fn a_full_ring_publishes_the_parked_frames_so_the_driver_can_refill() {
    // No reserve for short messages: the bulk may fill the ring.
    let mut c = case("dim-lat:overtake=on,reserve=0", 0, 4);
    let stream = bulk(1..6);
    c.send(&stream);
    // Four parked, the fifth found no room: the four go out (and are signalled) at once.
    assert_eq!(c.received(&stream), [1, 2, 3, 4]);
    assert_eq!(c.rig.rx_counters(0).notifications, 1);
    assert_eq!(c.port0().rx_frames, 4);
    // The driver refills; the fifth frame, waiting in port 1's ring, goes into it, drained
    // by port 1's worker (its resume), not by port 0's, whose refill kick this is.
    c.bufs.extend(post(&mut c.rig.ports[0].rx, 4));
    c.rig.fabric.on_rx_kick(0, 0);
    assert_eq!(c.port0().rx_frames, 4, "port 0's worker drained port 1");
    assert!(c.rig.fabric.on_resume(1), "port 1 was not told to resume");
    assert!(!c.rig.fabric.on_resume(1), "one resume per refill");
    std::thread::sleep(std::time::Duration::from_millis(5));
    c.rig.fabric.on_rx_timer(0, 0);
    assert_eq!(c.received(&stream), [5]);
}

#[test]
fn stopping_the_ring_publishes_the_parked_frames_first() {
    let mut c = case("dim-lat:overtake=on", 0, 16);
    let stream = bulk(1..5);
    c.send(&stream);
    // A transmit queue's stop (vring 1) leaves the receive queue's parked frames alone.
    c.rig.fabric.on_ring_stop(0, 1);
    assert_eq!(c.received(&stream), []);
    // GET_VRING_BASE of the receive queue (vring 0): every buffer taken comes back.
    c.rig.fabric.on_ring_stop(0, 0);
    assert_eq!(c.received(&stream), [1, 2, 3, 4]);
}

/// Port 0 holds `rx_buffers` buffers; ports 1 and 2 both send to it (a learning switch:
/// port 0 has sent one frame, so its address is known; 8 buffers each on 1 and 2).
fn learning_case(moderation: &str, rx_buffers: usize) -> Case {
    use vmirq_net::switch::SwitchMode;
    let policies = Policies {
        moderation: moderation.parse().expect("spec"),
        ..Policies::default()
    };
    let mut rig = Rig::with_switch(&policies, 3, 0, SwitchMode::Learn);
    post_rx(&mut rig.ports[1].rx, 8);
    post_rx(&mut rig.ports[2].rx, 8);
    // Port 0 announces 02:00:00:00:00:01 (flooded to 1 and 2).
    let mut hello = udp(MSG_LEN, MSG_PORT, 0);
    hello[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    offer(&mut rig.ports[0].tx, &[hello]);
    rig.fabric.service_tx(0);
    let bufs = post(&mut rig.ports[0].rx, rx_buffers);
    Case { rig, bufs }
}

#[test]
fn a_short_message_finds_a_reserved_buffer_when_the_bulk_has_filled_the_rest() {
    // 12 buffers, 8 of them kept for short messages: the bulk gets 4.
    let mut c = learning_case("dim-lat:overtake=on", 12);
    let stream = bulk(1..7);
    offer(&mut c.rig.ports[1].tx, &stream);
    c.rig.fabric.service_tx(1);
    // The fifth bulk frame would take a reserved buffer: it waits (and the parked four go
    // out, so that the driver sees what to refill).
    assert_eq!(c.received(&stream), [1, 2, 3, 4]);
    let p = c.port0();
    assert!(p.rx_reserved >= 1, "{p:?}");
    assert_eq!(
        c.rig
            .fabric
            .slot(1)
            .expect("port")
            .counters
            .snapshot()
            .tx_backpressure,
        1
    );
    // A message from port 2 is not held up by the waiting bulk.
    let msg = vec![udp(MSG_LEN, MSG_PORT, 9)];
    offer(&mut c.rig.ports[2].tx, &msg);
    c.rig.fabric.service_tx(2);
    assert_eq!(c.received(&msg), [9], "the message used a reserved buffer");
    // Without the reserve the message would find no buffer at all.
    let mut none = learning_case("dim-lat:overtake=on,reserve=0", 4);
    offer(&mut none.rig.ports[1].tx, &stream);
    none.rig.fabric.service_tx(1);
    assert_eq!(none.received(&stream), [1, 2, 3, 4]);
    offer(&mut none.rig.ports[2].tx, &msg);
    none.rig.fabric.service_tx(2);
    assert_eq!(none.received(&msg), [], "no room for the message");
    assert_eq!(none.port0().rx_reserved, 0);
}

#[test]
fn the_pmd_data_path_refuses_overtaking_at_start_up() {
    use vmirq_net::queues::Datapath;
    use vmirq_net::server::{Server, ServerConfig, ServerError};
    let dir = tempfile::tempdir().expect("dir");
    let sockets = vec![dir.path().join("a"), dir.path().join("b")];
    let config = |moderation: &str, datapath: Datapath| {
        let mut c = ServerConfig::new(sockets.clone());
        c.policies.moderation = moderation.parse().expect("spec");
        c.policies.datapath = datapath;
        c
    };
    let pmd = Datapath::Pmd { cpu: None };
    match Server::new(config("dim-lat:overtake=on", pmd)) {
        Err(ServerError::Config(msg)) => {
            assert!(
                msg.contains("overtake=on") && msg.contains("per-port"),
                "{msg}"
            );
        }
        Err(e) => panic!("not a configuration error: {e}"),
        Ok(_) => panic!("accepted"),
    }
    assert!(Server::new(config("dim-lat", pmd)).is_ok());
    assert!(Server::new(config("dim-lat:overtake=on", Datapath::PerPort)).is_ok());
}
