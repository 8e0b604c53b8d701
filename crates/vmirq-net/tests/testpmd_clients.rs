//! DPDK testpmd's virtio-user ports (a client nobody here wrote) on two ports of
//! `serve-net`, in testpmd's classic `io` loopback: the `--tx-first` burst circulates
//! through the switch, so the packet population is fixed and the loop paces itself. Every
//! packet one port transmits is delivered to the other (the switch's counters), testpmd
//! drops nothing, and the same holds after the client process is replaced (a reconnect of
//! both ports).
//!
//! With `--queues 2`, virtio-user's `queues=2` client loops through both queue pairs.
//!
//! Says SKIPPED on stderr when dpdk-testpmd is not installed or hugepages are missing
//! (scripts/setup.sh installs DPDK, scripts/hugepages.sh reserves the pages).

mod common;

use vmirq_net::queues::Datapath;

use std::io::Write as _;
use vmirq_netload::peer::{self, TestPmd, TestPmdConfig};

fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// Statistics reports to wait for per client run (one per second).
const REPORTS: usize = 3;
/// At most one ring of frames in flight per direction at teardown (virtio-user rings hold 256
/// by default; 1024 is the largest queue size serve-net offers).
const RING: u64 = 1024;

fn one_client(server: &common::Running, round: usize, queues: u16) -> Vec<peer::ForwardStats> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = TestPmdConfig::virtio_user_client(
        server.sockets.clone(),
        dir.path().join(format!("client{round}.log")),
    );
    cfg.queues = queues;
    let mut pmd = TestPmd::start(&cfg).expect("testpmd starts");
    let log = cfg.log.clone();
    pmd.wait_until(
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            peer::rx_pps_samples(&text).len() > REPORTS
        },
        "statistics reports",
    )
    .expect("testpmd forwards");
    let text = pmd.stop().expect("testpmd stops");
    let rates = peer::rx_pps_samples(&text);
    let _ = writeln!(std::io::stderr(), "round {round}: rx pps {rates:?}");
    peer::forward_stats(&text)
}

/// One testpmd client at a time: the tests of this file run on threads of one process, and
/// two clients would share the hugepages and the 2 CPUs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether testpmd can run here (else says SKIPPED).
fn can_run(test: &str) -> bool {
    if peer::testpmd_exe().is_none() {
        skip(test, "dpdk-testpmd not installed (apt-get install dpdk)");
        return false;
    }
    if peer::hugepages_free_mb().is_none_or(|mb| mb < 512) {
        skip(
            test,
            "virtio-user needs 512 MiB of free hugepages (scripts/hugepages.sh)",
        );
        return false;
    }
    true
}

/// When `test` can run here: the lock that keeps one testpmd client at a time.
fn exclusive(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    can_run(test).then(|| {
        ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    })
}

/// `--queues 2` against virtio-user's `queues=2` with `--rxq=2 --txq=2`: virtio-user
/// serves the control queue itself and enables both pairs' vrings, so the switch uses both
/// pairs' queues; nothing is dropped and both transmit queues of each port are served.
#[test]
fn testpmd_virtio_user_with_two_queue_pairs_loops_through_the_switch() {
    let test = "testpmd_virtio_user_with_two_queue_pairs_loops_through_the_switch";
    let Some(_one) = exclusive(test) else {
        return;
    };
    let server = common::start(2, |c| c.queue_pairs = 2);
    let stats = one_client(&server, 0, 2);
    for p in 0..2 {
        server.wait_idle(p);
    }
    let now = server.handle.counters();
    let _ = writeln!(std::io::stderr(), "testpmd {stats:?}\nswitch {now:?}");
    assert_eq!(stats.len(), 2, "testpmd printed its forward statistics");
    for s in &stats {
        assert_eq!(s.rx_dropped + s.tx_dropped, 0, "testpmd dropped: {stats:?}");
        assert!(s.rx_packets > 1_000 && s.tx_packets > 1_000, "{stats:?}");
    }
    for (p, c) in now.iter().enumerate() {
        assert_eq!(c.dropped() - c.tx_no_destination, 0, "port {p}: {c:?}");
        assert!(c.tx_no_destination <= RING, "port {p}: {c:?}");
        assert_eq!(c.rx_bad_chain + c.queue_broken, 0, "port {p}: {c:?}");
        for q in 0..2 {
            let (_, tx) = server.handle.pair_counters(p, q).expect("pair");
            assert!(
                tx.notifications + tx.suppressed > 0,
                "port {p}: transmit queue of pair {q} never completed a frame: {tx:?}"
            );
        }
    }
    server.stop();
}

#[test]
fn testpmd_virtio_user_loops_through_the_switch_before_and_after_a_reconnect() {
    let test = "testpmd_virtio_user_loops_through_the_switch_before_and_after_a_reconnect";
    let Some(_one) = exclusive(test) else {
        return;
    };
    // Both data paths, one after the other (two testpmd clients at once would share the
    // hugepages and the 2 CPUs).
    for datapath in [Datapath::PerPort, Datapath::Pmd { cpu: None }] {
        let _ = writeln!(std::io::stderr(), "--datapath {datapath}");
        let server = common::start(2, |c| c.policies.datapath = datapath);
        let mut last = server.handle.counters();
        for round in 0..2 {
            let stats = one_client(&server, round, 1);
            for p in 0..2 {
                server.wait_idle(p);
            }
            let now = server.handle.counters();
            let _ = writeln!(std::io::stderr(), "testpmd {stats:?}\nswitch {now:?}");
            assert_eq!(stats.len(), 2, "testpmd printed its forward statistics");
            for s in &stats {
                assert_eq!(s.rx_dropped + s.tx_dropped, 0, "testpmd dropped: {stats:?}");
                assert!(s.rx_packets > 1_000 && s.tx_packets > 1_000, "{stats:?}");
            }
            let d = |p: usize| -> (u64, u64, u64) {
                (
                    now[p].tx_frames - last[p].tx_frames,
                    now[p].rx_frames - last[p].rx_frames,
                    now[p].tx_no_destination - last[p].tx_no_destination,
                )
            };
            let ((tx0, rx0, gone0), (tx1, rx1, gone1)) = (d(0), d(1));
            // What testpmd sent on a port, the switch took, and delivered to the other port, but
            // for the frames still in flight when testpmd closed the other port first (its
            // shutdown closes one port, then the other): those are dropped as having no
            // destination, counted, and no more than one ring's worth.
            // testpmd stops forwarding before it closes its ports, so at the end frames
            // it queued can still sit in a transmit ring (the other port's receive ring is
            // full because testpmd stopped draining it: backpressure, not loss), and frames
            // the switch delivered can sit in a used ring testpmd no longer reads. Either is
            // at most a ring's worth; what the switch takes it must account for exactly
            // (below).
            for (p, taken, delivered) in [(0, tx0, rx0), (1, tx1, rx1)] {
                let (queued, read) = (stats[p].tx_packets, stats[p].rx_packets);
                assert!(
                    taken <= queued && queued - taken <= RING,
                    "port {p}: testpmd queued {queued}, the switch took {taken}"
                );
                assert!(
                    read <= delivered && delivered - read <= RING,
                    "port {p}: the switch delivered {delivered}, testpmd read {read}"
                );
            }
            assert_eq!(tx0, rx1 + gone0, "port 0 -> 1");
            assert_eq!(tx1, rx0 + gone1, "port 1 -> 0");
            assert!(
                gone0 + gone1 <= RING,
                "more than a ring dropped at teardown"
            );
            for (p, c) in now.iter().enumerate() {
                assert_eq!(
                    c.dropped() - c.tx_no_destination,
                    0,
                    "port {p} dropped: {c:?}"
                );
                assert_eq!(c.rx_bad_chain + c.queue_broken, 0, "port {p}: {c:?}");
                assert_eq!(c.connections, round as u64 + 1);
            }
            last = now;
        }
        server.stop();
    }
}
