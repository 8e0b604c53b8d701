//! Receive refill kicks with drivers without EVENT_IDX (DPDK's virtio PMD, testpmd's
//! loopback client), on both data paths: such a driver kicks a receive queue after every
//! refill unless the used ring's flags say VIRTQ_USED_F_NO_NOTIFY (each kick an eventfd
//! write or a VM exit, and a wakeup here). The device needs those kicks only while a source
//! waits for room there, so after delivering into a queue no source waits on, the data path
//! sets the flag; a source that finds no room clears it (the refill arm) and is woken by the
//! next refill. On the per-port path two workers deliver into one receive queue: the
//! source's own, and the destination's, which drains the blocked source when its refill
//! kick arrives; neither may leave the flag set while the other waits. The pmd path's one
//! forwarding thread sets it after each burst into a queue.

mod common;

use std::io::Write as _;
use std::time::Duration;
use vmirq_net::queues::Datapath;
use vmirq_netload::frame::{self, Pattern};
use vmirq_netload::port::{NetPort, PortConfig};
use vmirq_netload::run::{run, Mode, RunConfig};
use vmirq_netload::virtio_net::F_EVENT_IDX;
use vmirq_netload::workload::Workload;

fn connect_no_event_idx(path: &std::path::Path, i: usize, rx_queue_size: u16) -> NetPort {
    let cfg = PortConfig {
        rx_queue_size,
        tx_queue_size: 256,
        event_idx: false,
        ..PortConfig::default()
    };
    let p = NetPort::connect(path, cfg, frame::port_mac(i), &Pattern::new())
        .unwrap_or_else(|e| panic!("connect port {i}: {e:?}"));
    assert_eq!(p.features() & F_EVENT_IDX, 0, "EVENT_IDX negotiated");
    p
}

/// Run `workload` over `ports`; every frame must arrive intact and in order. Returns the
/// bulk frames received, or the transactions completed.
fn check_run(ports: &mut [NetPort], workload: Workload, mode: Mode) -> u64 {
    let mut cfg = RunConfig::new(workload, mode);
    cfg.warmup = Duration::from_millis(100);
    cfg.measure = Duration::from_millis(300);
    cfg.drain_max = Duration::from_secs(2);
    let r = run(ports, &cfg).expect("workload runs");
    common::assert_clean(&r);
    if let Some(rr) = r.rr {
        assert_eq!(rr.unexpected, 0, "{}", r.summary());
        return rr.transactions;
    }
    let b = r.bulk.expect("a bulk or a request/response report");
    assert_eq!(b.sent, b.received);
    assert_eq!(b.out_of_order, 0);
    b.received
}

#[test]
fn per_port_receive_refills_kick_only_while_a_source_waits_without_event_idx() {
    refills_kick_only_while_a_source_waits(Datapath::PerPort);
}

#[test]
fn pmd_receive_refills_kick_only_while_a_source_waits_without_event_idx() {
    refills_kick_only_while_a_source_waits(Datapath::Pmd { cpu: None });
}

fn refills_kick_only_while_a_source_waits(datapath: Datapath) {
    let server = common::start(2, |c| c.policies.datapath = datapath);
    let mut ports = vec![
        connect_no_event_idx(&server.sockets[0], 0, 512),
        connect_no_event_idx(&server.sockets[1], 1, 512),
    ];
    // A paced polling stream: the client refills its receive ring after every poll.
    let received = check_run(
        &mut ports,
        Workload::Stream {
            frame_len: 64,
            rate_pps: Some(50_000),
        },
        Mode::Poll,
    );
    let (rx, _) = server.handle.queue_counters(1).expect("port 1");
    let waits = server.handle.counters()[0].tx_backpressure;
    let _ = writeln!(
        std::io::stderr(),
        "paced: {received} frames received, {} receive kicks, {waits} waits for room",
        rx.kicks
    );
    assert!(received > 1_000);
    // The first refills kick before any delivery (the flag starts clear), and each wait
    // for room arms one more; without the flag the driver kicks after every poll that
    // refilled (hundreds in this run).
    assert!(
        rx.kicks <= 4 + 2 * waits,
        "{} receive kicks for {received} frames ({waits} waits for room)",
        rx.kicks
    );
    for p in ports {
        p.close().expect("rings stop");
    }
    // 16-entry receive rings behind 256-entry transmit rings at full rate: the source waits
    // for room again and again (per-port: the destination's worker drains it on each refill
    // kick while the source's own worker drains it on transmit kicks; pmd: the forwarding
    // thread, woken by the refill kick if it sleeps); every frame still
    // arrives, intact and in order (a flag left set while a source waits would stall it
    // until the run's drain limit: lost frames).
    let mut ports = vec![
        connect_no_event_idx(&server.sockets[0], 0, 16),
        connect_no_event_idx(&server.sockets[1], 1, 16),
    ];
    let stream = Workload::Stream {
        frame_len: 64,
        rate_pps: None,
    };
    assert!(check_run(&mut ports, stream, Mode::Interrupt) > 1_000);
    let waits = server.handle.counters()[0].tx_backpressure;
    let _ = writeln!(std::io::stderr(), "{:?}", server.handle.counters());
    assert!(waits > 0, "the 16-entry ring never made the source wait");
    // Both ports transmit and receive (request/response, 8 in flight): each port's worker
    // delivers into the other's small ring, and each ring's refill kick wakes its source.
    let rr = Workload::Rr {
        frame_len: 64,
        depth: 8,
    };
    assert!(check_run(&mut ports, rr, Mode::Interrupt) > 100);
    for p in ports {
        p.close().expect("rings stop");
    }
    server.stop();
}
