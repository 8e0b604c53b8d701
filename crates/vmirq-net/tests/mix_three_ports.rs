//! The mix on three ports through an in-process serve-net with MAC learning (`--switch
//! learn`), as `vmirq netload --ports 3 --sender wire` runs it: the wire thread streams from
//! port 0 to port 1, the client on port 1 sends its requests to port 2, a responder thread
//! on port 2 answers them. The bulk and the responses come from two source ports and meet
//! only in port 1's one receive queue (issue 15's shared queue as the talk has it: the
//! responses no longer leave the bulk sender's transmit ring).
//!
//! Checked, in `udp` frames: every frame verified, none lost, every request answered; after
//! netload's path probes every address is learned, so the run floods nothing: serve-net's
//! port counters account for every frame (port 0 receives none; port 2 receives exactly
//! what port 1 sent, the requests and its probes; port 1 exactly what ports 0 and 2 sent,
//! the bulk, the responses and their probes) and each client port read all it was given.

mod common;

use common::slow_mix::{assert_mix_whole, connect, udp_mix};

use vmirq_net::counters::PortSnapshot;
use vmirq_net::switch::SwitchMode;
use vmirq_netload::port::NetPort;
use vmirq_netload::run::{await_paths, run, Napi, Report, RunConfig, RunError};
use vmirq_netload::workload::WorkloadError;

/// [`common::slow_mix::udp_mix`] from the wire, read by per-queue NAPI.
fn three_port_mix() -> RunConfig {
    let mut cfg = udp_mix();
    cfg.napi = Napi::Queue;
    cfg.wire_sender = Some(None);
    cfg
}

/// serve-net's counters of every port once they stopped moving: a frame in flight has its
/// receive side counted before its transmit side (the delivery comes first), so a snapshot
/// taken while one moves may count it once. Two snapshots 20 ms apart must agree (bounded).
fn switch_counters(server: &common::Running) -> Vec<PortSnapshot> {
    let start = std::time::Instant::now();
    let mut last = server.handle.counters();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = server.handle.counters();
        if now == last || start.elapsed() > std::time::Duration::from_secs(2) {
            assert_eq!(now.len(), 3);
            return now;
        }
        last = now;
    }
}

/// Frames each port's driver sent (`tx`) and serve-net delivered to it (`rx`) between two
/// snapshots.
fn deltas(a: &[PortSnapshot], b: &[PortSnapshot]) -> ([u64; 3], [u64; 3]) {
    let d = |f: fn(&PortSnapshot) -> u64| [0, 1, 2].map(|p| f(&b[p]) - f(&a[p]));
    (d(|c| c.tx_frames), d(|c| c.rx_frames))
}

/// The client's view: clean, every frame a `udp` probe, every request answered.
fn assert_run_whole(r: &Report) {
    assert_mix_whole(r);
    let (b, t) = (r.bulk.expect("bulk"), r.rr.expect("rr"));
    assert_eq!(r.received_frames.raw, 0, "{:?}", r.received_frames);
    assert_eq!(r.hellos.received_udp, r.hellos.received, "{:?}", r.hellos);
    // One receive queue carries both flows: no per-flow interrupt count (as on two ports).
    assert_eq!(
        (b.interrupts, t.interrupts),
        (None, None),
        "{}",
        r.summary()
    );
}

/// Every frame the run sent went to its one destination and was read there.
fn assert_accounted(r: &Report, (tx, rx): ([u64; 3], [u64; 3]), read: [u64; 3]) {
    let (b, t) = (r.bulk.expect("bulk"), r.rr.expect("rr"));
    let answered = t.answered.expect("the responder's count");
    // Nothing reached the wire's port: no frame of the run was flooded.
    assert_eq!(rx[0], 0, "tx {tx:?} rx {rx:?}");
    // Port 2 received what port 1 sent, port 1 what ports 0 and 2 sent: the bulk and the
    // responses in its one receive queue.
    assert_eq!(rx[2], tx[1], "tx {tx:?} rx {rx:?}");
    assert_eq!(rx[1], tx[0] + tx[2], "tx {tx:?} rx {rx:?}");
    // What each port sent beyond its flow were path probes, at least one per path (1 -> 2,
    // 2 -> 1, 0 -> 1), and they add up to the probes the run sent.
    let probes = [tx[0] - b.sent, tx[1] - answered, tx[2] - answered];
    assert!(probes.iter().all(|&h| h >= 1), "probes {probes:?}");
    assert_eq!(probes.iter().sum::<u64>(), r.hellos.sent, "{:?}", r.hellos);
    // The client read everything delivered to port 1 (the responder: to port 2).
    assert_eq!(read[1], rx[1], "client read {read:?}, delivered {rx:?}");
    assert_eq!(read[2], rx[2], "responder read {read:?}, delivered {rx:?}");
}

/// The switch found nothing wrong and dropped nothing.
fn assert_switch_clean(server: &common::Running) {
    for (p, c) in switch_counters(server).iter().enumerate() {
        assert_eq!(c.dropped(), 0, "port {p}: {c:?}");
        assert_eq!(c.rx_bad_chain + c.queue_broken, 0, "port {p}: {c:?}");
    }
}

fn read_counts(ports: &[NetPort]) -> [u64; 3] {
    [0, 1, 2].map(|p| ports[p].counters().rx_frames)
}

/// A three-port mix through serve-net under `moderation`, accounted frame by frame.
fn three_ports_under(moderation: &str) {
    let server = common::start(3, |c| {
        c.switch = SwitchMode::Learn;
        c.policies.moderation = moderation.parse().expect("spec");
    });
    let mut ports: Vec<NetPort> = (0..3).map(|i| connect(&server.sockets[i], i)).collect();
    // Without the wire sender: refused before any frame.
    let mut client_sends = three_port_mix();
    client_sends.wire_sender = None;
    let refused = run(&mut ports, &client_sends);
    assert!(
        matches!(
            refused,
            Err(RunError::Workload(WorkloadError::ThreePortsNeedWire))
        ),
        "{refused:?}"
    );
    assert!(ports.iter().all(|p| p.counters().tx_frames == 0));
    // Learn every address first, so the run's own probes show no flood either.
    let hellos = await_paths(&mut ports).expect("paths 1 -> 2, 2 -> 1, 0 -> 1");
    assert!(hellos.received >= 3, "{hellos:?}");
    // Path probes still in flight (one a millisecond until the first arrives) would be read
    // by the run's own path check: let the switch settle, then read them here.
    let before = switch_counters(&server);
    let mut scratch = Vec::new();
    for p in &mut ports {
        p.receive(usize::MAX, &mut scratch, &mut |_| {})
            .expect("stale probes read");
    }
    let read_before = read_counts(&ports);
    let r = run(&mut ports, &three_port_mix()).expect("mix runs");
    let after = switch_counters(&server);
    let read = read_counts(&ports);
    assert_run_whole(&r);
    assert_accounted(
        &r,
        deltas(&before, &after),
        [0, 1, 2].map(|p| read[p] - read_before[p]),
    );
    for p in ports {
        p.close().expect("rings stop");
    }
    assert_switch_clean(&server);
    server.stop();
}

#[test]
fn a_three_port_mix_meets_in_port_1s_one_receive_queue() {
    three_ports_under("none");
}

#[test]
fn a_three_port_mix_stays_whole_with_overtaking() {
    three_ports_under("dim-lat:overtake=on");
}
