//! vmirq-netload's `udp` frames (`--frames udp`) as serve-net sees them: each netload flow
//! is a UDP flow of its own to `flow::flow_hash` (raw frames between two ports all share
//! one hash, their MAC pair) and `classify` reads them as UDP of their real length; a mix
//! crosses an in-process serve-net in `udp` frames, every frame verified, none lost, from
//! every sender (the client thread, and the wire thread's stream and answers).

mod common;

use common::slow_mix::{assert_mix_whole, connect, udp_mix};

use vmirq_net::classify::{classify, Network, Transport};
use vmirq_net::flow::flow_hash;
use vmirq_netload::frame::{self, Encap, Pattern, Probe};
use vmirq_netload::port::NetPort;
use vmirq_netload::run::flows::{response_to, BulkFlow, RrFlow};
use vmirq_netload::run::{run, Report, RunError, BULK_FLOW, HELLO_FLOW, RR_FLOW};
use vmirq_netload::workload::{Workload, WorkloadError};

/// Netload's frames of one run between ports 0 and 1: a path probe, a bulk frame, a request
/// (0 -> 1) and its response (1 -> 0).
struct Frames {
    hello: Vec<u8>,
    bulk: Vec<u8>,
    request: Vec<u8>,
    response: Vec<u8>,
    /// A bulk frame sent the other way (1 -> 0), the response's direction.
    bulk_back: Vec<u8>,
}

fn frames(encap: Encap) -> Frames {
    let pattern = Pattern::new();
    let (a, b) = (frame::port_mac(0), frame::port_mac(1));
    let build = |p: &Probe, src, dst| frame::build(encap, p, src, dst, &pattern);
    let mut bulk = BulkFlow::new(BULK_FLOW, 0, 1, 1514, None, 64);
    let mut rr = RrFlow::new(RR_FLOW, 0, 1, 96, 1, 0);
    let hello = Probe {
        flow: HELLO_FLOW,
        len: encap.frame_len_min(),
        ..bulk.next_probe(0)
    };
    let request = rr.next_request(5);
    Frames {
        hello: build(&hello, a, b),
        bulk: build(&bulk.next_probe(10), a, b),
        request: build(&request, a, b),
        response: build(&response_to(&request), b, a),
        bulk_back: build(&bulk.next_probe(20), b, a),
    }
}

fn hash(f: &[u8]) -> u64 {
    flow_hash(f).expect("a hash")
}

#[test]
fn udp_frames_give_each_netload_flow_its_own_flow_hash() {
    let raw = frames(Encap::Raw);
    // Raw: one hash per direction, whatever the flow (the MAC pair).
    assert_eq!(hash(&raw.bulk), hash(&raw.request));
    assert_eq!(hash(&raw.bulk), hash(&raw.hello));
    assert_eq!(hash(&raw.response), hash(&raw.bulk_back));
    let udp = frames(Encap::Udp);
    assert_ne!(hash(&udp.bulk), hash(&udp.request));
    assert_ne!(hash(&udp.bulk), hash(&udp.hello));
    assert_ne!(hash(&udp.request), hash(&udp.hello));
    assert_ne!(hash(&udp.response), hash(&udp.bulk_back));
    assert_ne!(
        hash(&udp.response),
        hash(&udp.request),
        "the other direction"
    );
    // One flow, one hash: other frames of the stream (other sequence numbers, send times
    // and lengths) hash alike.
    let pattern = Pattern::new();
    let mut stream = BulkFlow::new(BULK_FLOW, 0, 1, 1514, None, 64);
    for now in [0, 1_000, 2_000] {
        let p = Probe {
            len: 200 + u32::try_from(now / 10).expect("small"),
            ..stream.next_probe(now)
        };
        let f = frame::build(
            Encap::Udp,
            &p,
            frame::port_mac(0),
            frame::port_mac(1),
            &pattern,
        );
        assert_eq!(hash(&f), hash(&udp.bulk));
    }
}

#[test]
fn classify_sees_udp_frames_as_udp_of_their_length() {
    let udp = frames(Encap::Udp);
    for f in [
        &udp.hello,
        &udp.bulk,
        &udp.request,
        &udp.response,
        &udp.bulk_back,
    ] {
        let info = classify(f);
        let len = u32::try_from(f.len()).expect("small");
        assert_eq!(info.frame_bytes, len);
        assert_eq!(info.network, Network::Ipv4);
        assert_eq!(info.transport, Transport::Udp);
        // Everything after the Ethernet, IPv4 and UDP headers is UDP payload.
        assert_eq!(info.payload_bytes, len - 14 - 20 - 8, "{len}-byte frame");
        assert!(!info.ack_only());
    }
    assert_eq!(udp.bulk.len(), 1514);
    assert_eq!(udp.request.len(), 96);
    assert_eq!(udp.hello.len(), 82);
    let raw = frames(Encap::Raw);
    let info = classify(&raw.bulk);
    assert_eq!(
        (info.network, info.transport),
        (Network::Other, Transport::Other)
    );
}

/// The run was clean and everything the client received was a valid `udp` probe.
fn assert_all_udp(r: &Report) {
    assert_mix_whole(r);
    let (b, t) = (r.bulk.expect("bulk"), r.rr.expect("rr"));
    assert_eq!(r.frames, Encap::Udp);
    let got = r.received_frames;
    assert_eq!(got.raw, 0, "raw frames received: {got:?}");
    assert!(got.udp >= b.received + t.transactions, "{got:?}");
    let h = r.hellos;
    assert!(h.received > 0 && h.received_udp == h.received, "{h:?}");
}

/// serve-net found nothing wrong with the frames or chains.
fn assert_switch_clean(server: &common::Running, ports: usize) {
    let counters = server.handle.counters();
    for (p, c) in counters.iter().enumerate().take(ports) {
        assert_eq!(
            c.tx_bad_chain + c.tx_bad_header + c.rx_bad_chain + c.queue_broken,
            0,
            "port {p}: {c:?}"
        );
        assert_eq!(c.rx_too_big + c.rx_no_room, 0, "port {p}: {c:?}");
    }
}

#[test]
fn a_udp_mix_on_four_ports_crosses_serve_net_whole() {
    let server = common::start(4, |_| {});
    let mut ports: Vec<NetPort> = (0..4).map(|i| connect(&server.sockets[i], i)).collect();
    // 64-byte messages cannot carry the IPv4 and UDP headers: refused before any frame.
    let mut short = udp_mix();
    if let Workload::Mix { msg_len, .. } = &mut short.workload {
        *msg_len = 64;
    }
    let refused = run(&mut ports, &short);
    assert!(
        matches!(
            refused,
            Err(RunError::Workload(WorkloadError::TooShortFor {
                len: 64,
                min: 82,
                ..
            }))
        ),
        "{refused:?}"
    );
    assert_eq!(ports[0].counters().tx_frames, 0);
    // The stream 0 -> 1 and the messages 2 <-> 3, all sent by the client thread.
    let r = run(&mut ports, &udp_mix()).expect("mix runs");
    assert_all_udp(&r);
    for p in ports {
        p.close().expect("rings stop");
    }
    assert_switch_clean(&server, 4);
    server.stop();
}

#[test]
fn a_udp_mix_from_the_wire_crosses_serve_net_whole() {
    let server = common::start(2, |_| {});
    let mut ports: Vec<NetPort> = (0..2).map(|i| connect(&server.sockets[i], i)).collect();
    // The wire thread sends the stream to port 1 and answers its requests.
    let mut cfg = udp_mix();
    cfg.wire_sender = Some(None);
    let r = run(&mut ports, &cfg).expect("mix runs");
    assert_all_udp(&r);
    assert_eq!(ports[0].encap(), Encap::Udp, "the wire's port");
    for p in ports {
        p.close().expect("rings stop");
    }
    assert_switch_clean(&server, 2);
    server.stop();
}
