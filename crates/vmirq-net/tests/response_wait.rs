//! `dim-lat:wait=on` on a receive queue shared by a bulk stream and the responses to its driver's
//! requests: when the port transmits a short message, the bulk frames held on its receive
//! queue are signalled at once, so that the response is not read behind them
//! (`vmirq_policy::moderation::dim::ResponseWait`), and the queue holds nothing until the
//! response arrives (the policy's unit tests cover the wait). The fabric runs on the test's
//! thread (`common::mock_fabric`).

mod common;

use common::mock_fabric::{offer_tx, post_rx, Rig, QSIZE};
use vmirq_net::queues::Policies;

fn rig(moderation: &str) -> Rig {
    let policies = Policies {
        moderation: moderation.parse().expect("spec"),
        ..Policies::default()
    };
    let mut rig = Rig::new(&policies);
    post_rx(&mut rig.ports[0].rx, usize::from(QSIZE));
    post_rx(&mut rig.ports[1].rx, usize::from(QSIZE));
    rig
}

/// Port 1 sends `n` bulk frames to port 0: DIM's default profile holds the first (its
/// timer is not delivered here: the test has no epoll).
fn bulk_to_port0(rig: &mut Rig, n: usize) {
    offer_tx(&mut rig.ports[1].tx, n, 1500);
    rig.fabric.service_tx(1);
}

#[test]
fn a_short_transmitted_message_releases_the_held_bulk_ahead_of_its_response() {
    for (moderation, releases) in [
        ("dim-lat:wait=on", true),
        ("dim-lat", false),
        ("dim", false),
    ] {
        let mut rig = rig(moderation);
        bulk_to_port0(&mut rig, 1);
        let before = rig.rx_counters(0);
        assert_eq!(before.held, 1, "{moderation}: {before:?}");
        // Port 0's driver sends a request (a 64-byte frame) to port 1.
        offer_tx(&mut rig.ports[0].tx, 1, 64);
        rig.fabric.service_tx(0);
        let after = rig.rx_counters(0);
        assert_eq!(
            after.notifications - before.notifications,
            u64::from(releases),
            "{moderation}: {after:?}"
        );
    }
}
