//! The control virtqueue on a live port: the guest's `ethtool -C` (NOTF_COAL RX_SET) is
//! acknowledged and becomes the receive queue's `count` policy, so a received frame's
//! interrupt waits for the hold timer; an unknown command is refused with VIRTIO_NET_ERR;
//! a chain without an ack byte is never completed. The frontend with the control queue is
//! vmirq-vhost's raw test frontend (it acks every offered feature but EVENT_IDX).

// Command bytes here are small constants: the casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use common::raw::{RawPort, DATA};
use std::time::{Duration, Instant};
use vmirq_net::ctrl::{VIRTIO_NET_ERR, VIRTIO_NET_OK};
use vmirq_net::virtio::{F_EVENT_IDX, HDR_LEN};
use vmirq_vhost::mock_guest::Desc;
use vmirq_vhost::raw_frontend::Session;

const CTRL: u16 = 2;

/// Send one control command; returns (used length, ack byte).
fn command(s: &mut Session, bytes: &[u8]) -> (u32, u8) {
    common::ctrl_command(s, CTRL, bytes)
}

#[test]
fn notf_coal_rx_set_becomes_the_receive_queues_count_policy() {
    let server = common::start(2, |_| {});
    let mut s1 = Session::start(&server.sockets[1], 3, 64).expect("frontend with a control queue");
    // An unknown class: refused, nothing changed.
    assert_eq!(command(&mut s1, &[0x7f, 0]), (1, VIRTIO_NET_ERR));
    // NOTF_COAL (class 6) RX_SET (1): 8 packets, 300 µs.
    let mut set = vec![6u8, 1];
    set.extend_from_slice(&8u32.to_le_bytes());
    set.extend_from_slice(&300u32.to_le_bytes());
    assert_eq!(command(&mut s1, &set), (1, VIRTIO_NET_OK));
    // A receive buffer on port 1, one frame from port 0.
    let rx = &mut s1.queues[0].guest;
    let buf = rx.alloc(2048);
    rx.push_chain(&[Desc {
        addr: buf,
        len: 2048,
        write: true,
    }]);
    s1.kick(0).expect("kick");
    let mut p0 = RawPort::connect(&server.sockets[0], F_EVENT_IDX);
    let mut frame = vec![0u8; HDR_LEN + 60];
    frame[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p0.write(DATA, &frame);
    p0.desc(1, 0, DATA, frame.len() as u32, 0, 0);
    p0.offer(1, 0);
    let used = s1.wait_used(0, 1, Duration::from_secs(3));
    assert_eq!(used.len(), 1, "frame delivered");
    assert_eq!(used[0].1 as usize, frame.len());
    // The count policy held its interrupt (one packet of eight) until the 300 µs timer.
    let t = Instant::now();
    loop {
        let (rxq, _) = server.handle.queue_counters(1).expect("port 1");
        if rxq.held >= 1 && rxq.timer_fires >= 1 && rxq.notifications >= 1 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{rxq:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(server.handle.counters()[1].ctrl_commands, 2);
    p0.close();
    drop(s1);
    server.stop();
}

#[test]
fn a_control_chain_without_an_ack_byte_is_never_completed() {
    let server = common::start(2, |_| {});
    let mut s1 = Session::start(&server.sockets[1], 3, 64).expect("frontend with a control queue");
    let g = &mut s1.queues[usize::from(CTRL)].guest;
    let cmd = g.alloc(2);
    g.mem_write(cmd, &[6, 1]);
    // Only a device-readable descriptor: nowhere to write the ack.
    g.push_chain(&[Desc {
        addr: cmd,
        len: 2,
        write: false,
    }]);
    s1.kick(CTRL).expect("kick");
    let t = Instant::now();
    while server.handle.counters()[1].queue_broken == 0 {
        assert!(t.elapsed() < Duration::from_secs(3), "never noticed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(s1.wait_used(CTRL, 1, Duration::from_millis(50)).is_empty());
    assert_eq!(server.handle.counters()[1].ctrl_commands, 0);
    drop(s1);
    server.stop();
}
