//! `--datapath pmd`: one forwarding thread serves both ports. vmirq-netload's driver (interrupt
//! and polling modes) gets every frame intact through it, before and after a reconnect;
//! the thread accounts for every chain it took; and once traffic stops it goes back to
//! sleep on kicks (with `--poll never` at once, with a `fixed` window after the window),
//! instead of spinning.

mod common;

use std::io::Write as _;
use std::time::Duration;
use vmirq_net::queues::Datapath;
use vmirq_netload::frame::{self, Pattern};
use vmirq_netload::port::{NetPort, PortConfig};
use vmirq_netload::run::{run, Mode, RunConfig};
use vmirq_netload::workload::Workload;
use vmirq_policy::spec::WaitSpec;

fn connect(path: &std::path::Path, i: usize) -> NetPort {
    connect_max(path, i, 1514)
}

fn connect_max(path: &std::path::Path, i: usize, tx_frame_max: u32) -> NetPort {
    let cfg = PortConfig {
        rx_queue_size: 512,
        tx_queue_size: 256,
        tx_frame_max,
        ..PortConfig::default()
    };
    NetPort::connect(path, cfg, frame::port_mac(i), &Pattern::new())
        .unwrap_or_else(|e| panic!("connect port {i}: {e:?}"))
}

fn stream(ports: &mut [NetPort], mode: Mode, frame_len: u32, rate_pps: Option<u64>) -> u64 {
    let mut cfg = RunConfig::new(
        Workload::Stream {
            frame_len,
            rate_pps,
        },
        mode,
    );
    cfg.warmup = Duration::from_millis(100);
    cfg.measure = Duration::from_millis(300);
    cfg.drain_max = Duration::from_secs(2);
    let r = run(ports, &cfg).expect("stream runs");
    common::assert_clean(&r);
    let b = r.bulk.expect("bulk report");
    assert_eq!(b.sent, b.received);
    assert_eq!(b.out_of_order, 0);
    b.received
}

/// Passes the forwarding thread makes in `ms` milliseconds of no traffic.
fn idle_passes(server: &common::Running, ms: u64) -> u64 {
    let pmd = |s: &common::Running| s.handle.pmd_counters().expect("pmd datapath").0;
    let before = pmd(server);
    std::thread::sleep(Duration::from_millis(ms));
    let after = pmd(server);
    assert_eq!(after.chains, before.chains, "traffic while idle");
    after.passes - before.passes
}

fn check(poll: WaitSpec) {
    let server = common::start(2, |c| {
        c.policies.datapath = Datapath::Pmd { cpu: None };
        c.policies.poll = poll;
    });
    let mut ports = vec![
        connect(&server.sockets[0], 0),
        connect(&server.sockets[1], 1),
    ];
    assert!(stream(&mut ports, Mode::Interrupt, 1514, Some(20_000)) > 1_000);
    let p1 = ports.pop().expect("two ports");
    p1.close().expect("rings stop");
    server.wait_idle(1);
    ports.push(connect(&server.sockets[1], 1));
    assert!(stream(&mut ports, Mode::Poll, 64, None) > 1_000);
    assert!(stream(&mut ports, Mode::Interrupt, 64, Some(50_000)) > 1_000);
    // The window of any poll policy here is far below 100 ms: after it the thread sleeps,
    // woken only by its 50 ms stop check (a pass each).
    std::thread::sleep(Duration::from_millis(100));
    let passes = idle_passes(&server, 300);
    assert!(passes <= 20, "{passes} passes in 300 ms of no traffic");
    for p in ports {
        p.close().expect("rings stop");
    }
    let (pmd, q) = server.handle.pmd_counters().expect("pmd datapath");
    let ports = server.handle.counters();
    let _ = writeln!(std::io::stderr(), "{pmd}\n{q:?}\n{ports:?}");
    // Every chain the thread took was a valid frame switched (or dropped for want of a
    // destination: the reconnect) or a bad chain; the port workers took none.
    let taken: u64 = ports
        .iter()
        .map(|c| c.tx_frames + c.tx_bad_chain + c.tx_bad_header)
        .sum();
    assert_eq!(pmd.chains, taken, "{pmd} {ports:?}");
    assert_eq!(
        ports[0].tx_frames - ports[0].tx_no_destination,
        ports[1].rx_frames
    );
    assert_eq!(
        ports[1].tx_frames - ports[1].tx_no_destination,
        ports[0].rx_frames
    );
    assert!(pmd.sleeps > 0 && pmd.wakeups > 0, "{pmd}");
    server.stop();
}

#[test]
fn one_forwarding_thread_moves_every_frame_and_sleeps_when_idle() {
    check(WaitSpec::Never);
}

#[test]
fn a_bounded_busy_window_ends_in_sleep() {
    check(WaitSpec::Fixed(200_000));
}

#[test]
fn jumbo_frames_are_copied_once_into_merged_buffers() {
    let server = common::start(2, |c| c.policies.datapath = Datapath::Pmd { cpu: None });
    let mut ports = vec![
        connect_max(&server.sockets[0], 0, 9014),
        connect_max(&server.sockets[1], 1, 9014),
    ];
    // Payloads are verified byte for byte by the client.
    let received = stream(&mut ports, Mode::Interrupt, 9014, Some(5_000));
    assert!(received > 500);
    let b = ports[1].counters();
    // 2048-byte buffers: a 9014-byte frame and its header need five; a hello needs one.
    let hellos = b.rx_frames - received;
    assert_eq!(b.rx_buffers, 5 * received + hellos, "{b:?}");
    assert_eq!(server.handle.counters()[1].rx_buffers, b.rx_buffers);
    for p in ports {
        p.close().expect("rings stop");
    }
    server.stop();
}
