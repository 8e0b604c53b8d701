//! A refill of a full receive queue wakes the waiting source's own worker; the refilling
//! port's worker does not drain the source itself.
//!
//! On the per-port data path the refill kick reaches the *destination's* worker. It used
//! to drain every waiting source's transmit queue right there, up to the per-event bound
//! of 1024 frames (about 1 ms). Meanwhile the destination's own transmit queue waited. Under
//! `dim-lat` a bulk source waits for the moderated guest's refill hundreds of times a
//! second, so the guest's short requests on that queue waited behind the bulk. In the
//! three-port mix the request's way to its responder had a p99 of ~1.5-2 ms against
//! ~0.2-0.7 ms unmoderated (crates/vmirq-net/results/README.md, eighth run). Now the
//! destination's worker writes the source's resume eventfd and goes on. The source's
//! worker drains (`Fabric::on_resume`).
//!
//! The first two tests drive the fabric on the test's thread (`common::mock_fabric`):
//! deterministic. The third goes through a running serve-net, whose port workers must
//! register and serve the resume eventfd: without it the waiting source's frames stay in its
//! ring for good once its driver stops kicking.

mod common;

use common::mock_fabric::{offer_tx, post_rx, Rig};
use std::time::{Duration, Instant};
use vmirq_net::queues::Policies;
use vmirq_netload::frame::{self, Kind, Pattern, Probe};
use vmirq_netload::port::{NetPort, PortConfig};

fn rx_frames(rig: &Rig, p: usize) -> u64 {
    rig.fabric
        .slot(p)
        .expect("port")
        .counters
        .snapshot()
        .rx_frames
}

#[test]
fn a_refill_kick_hands_the_waiting_source_to_its_own_worker() {
    let mut rig = Rig::new(&Policies::default());
    post_rx(&mut rig.ports[0].rx, 8);
    // Port 1 has room for 4 of port 0's 40 frames: port 0 waits for its refill.
    post_rx(&mut rig.ports[1].rx, 4);
    offer_tx(&mut rig.ports[0].tx, 40, 60);
    rig.fabric.on_tx_kick(0, 0);
    assert_eq!(rx_frames(&rig, 1), 4);
    assert!(
        !rig.fabric.on_resume(0),
        "nothing refilled yet: no resume pending"
    );

    // Port 1's driver refills and kicks; port 1's worker serves the kick.
    post_rx(&mut rig.ports[1].rx, 64);
    rig.fabric.on_rx_kick(1, 0);
    assert_eq!(
        rx_frames(&rig, 1),
        4,
        "port 1's worker drained port 0's transmit queue itself"
    );

    // Port 0's worker sees its resume eventfd and drains the rest.
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert!(rig.fabric.on_resume(0), "port 0 was not told to resume");
    assert_eq!(rx_frames(&rig, 1), 40);
    assert!(!rig.fabric.on_resume(0), "one resume per refill");
    // Counted: one resume, which waited at least the 2 ms between the refill and the drain.
    let c = rig.fabric.slot(0).expect("port").counters.snapshot();
    assert_eq!(c.tx_resumes, 1, "{c:?}");
    assert!(c.tx_resume_wait_ns >= 2_000_000, "{c:?}");
    // Blocked from the first frame port 1 had no room for to its refill (not to the drain).
    assert!(
        c.tx_blocked_ns > 0 && c.tx_blocked_ns < c.tx_resume_wait_ns,
        "{c:?}"
    );
}

#[test]
fn a_refill_with_no_source_waiting_wakes_nobody() {
    let mut rig = Rig::new(&Policies::default());
    post_rx(&mut rig.ports[1].rx, 64);
    offer_tx(&mut rig.ports[0].tx, 10, 60);
    rig.fabric.on_tx_kick(0, 0);
    assert_eq!(rx_frames(&rig, 1), 10);
    post_rx(&mut rig.ports[1].rx, 8);
    rig.fabric.on_rx_kick(1, 0);
    assert!(!rig.fabric.on_resume(0));
    assert_eq!(
        rig.fabric
            .slot(0)
            .expect("port")
            .counters
            .snapshot()
            .tx_resumes,
        0
    );
}

#[test]
fn a_burst_larger_than_the_receive_ring_arrives_whole_through_the_server() {
    const FRAMES: u64 = 200;
    let server = common::start(2, |_| {});
    let pattern = Pattern::new();
    let connect = |i: usize, rx_queue_size: u16| {
        let cfg = PortConfig {
            rx_queue_size,
            tx_queue_size: 256,
            ..PortConfig::default()
        };
        NetPort::connect(&server.sockets[i], cfg, frame::port_mac(i), &pattern)
            .unwrap_or_else(|e| panic!("connect port {i}: {e:?}"))
    };
    let mut sender = connect(0, 256);
    // 64 receive buffers for 200 frames: port 0 waits for port 1's refills three times.
    let mut receiver = connect(1, 64);
    for seq in 0..FRAMES {
        let probe = Probe {
            kind: Kind::Bulk,
            flow: 1,
            seq,
            t_ns: 0,
            len: 1514,
        };
        assert!(sender.send(&probe, receiver.mac(), &pattern).expect("send"));
    }
    // One kick for the whole burst; the sender never kicks again.
    sender.flush().expect("kick");
    // Read nothing until the burst has filled port 1's ring and port 0 waits for room.
    let waited = Instant::now() + Duration::from_secs(5);
    while server.handle.counters()[0].tx_backpressure == 0 && Instant::now() < waited {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        server.handle.counters()[0].tx_backpressure > 0,
        "the burst never waited for room"
    );
    let mut got = 0;
    let mut scratch = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got < FRAMES && Instant::now() < deadline {
        let n = receiver
            .receive(64, &mut scratch, &mut |_| {})
            .expect("receive");
        got += n as u64;
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(
        got,
        FRAMES,
        "received {got} of {FRAMES}; port 0 waited for room {} times",
        server.handle.counters()[0].tx_backpressure
    );
    // Port 0's own worker took the drain up after the receiver's refills.
    let c = server.handle.counters()[0];
    assert!(c.tx_resumes > 0 && c.tx_resume_wait_ns > 0, "{c:?}");
}
