//! DPDK testpmd's virtio-user ports (a client nobody here wrote) on two ports of
//! `serve-net`, in testpmd's classic `io` loopback: the `--tx-first` burst circulates
//! through the switch, so the packet population is fixed and the loop paces itself. Every
//! packet one port transmits is delivered to the other (the switch's counters), testpmd
//! drops nothing, and the same holds after the client process is replaced (a reconnect of
//! both ports).
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

fn one_client(server: &common::Running, round: usize) -> Vec<peer::ForwardStats> {
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = TestPmdConfig::virtio_user_client(
        server.sockets.clone(),
        dir.path().join(format!("client{round}.log")),
    );
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

#[test]
fn testpmd_virtio_user_loops_through_the_switch_before_and_after_a_reconnect() {
    let test = "testpmd_virtio_user_loops_through_the_switch_before_and_after_a_reconnect";
    if peer::testpmd_exe().is_none() {
        skip(test, "dpdk-testpmd not installed (apt-get install dpdk)");
        return;
    }
    if peer::hugepages_free_mb().is_none_or(|mb| mb < 512) {
        skip(
            test,
            "virtio-user needs 512 MiB of free hugepages (scripts/hugepages.sh)",
        );
        return;
    }
    // Both data paths, one after the other (two testpmd clients at once would share the
    // hugepages and the 2 CPUs).
    for datapath in [Datapath::PerPort, Datapath::Pmd { cpu: None }] {
        let _ = writeln!(std::io::stderr(), "--datapath {datapath}");
        let server = common::start(2, |c| c.policies.datapath = datapath);
        let mut last = server.handle.counters();
        for round in 0..2 {
            let stats = one_client(&server, round);
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
            assert_eq!(tx0, stats[0].tx_packets, "port 0");
            assert_eq!(tx1, stats[1].tx_packets, "port 1");
            assert_eq!(tx0, rx1 + gone0, "port 0 -> 1");
            assert_eq!(tx1, rx0 + gone1, "port 1 -> 0");
            assert!(
                gone0 + gone1 <= 1024,
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
