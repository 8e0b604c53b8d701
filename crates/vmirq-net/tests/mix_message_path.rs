//! The mix on separate queues (issue 15, setup 5 of `scripts/net-moderation.sh`), driven on
//! the test's thread through the per-port path with mock guests: under `dim-lat`, while
//! the bulk port's receive queue is moderated, the message port's queue behaves exactly as
//! unmoderated: every message gets its notification at once, nothing of it is held, no
//! hold timer and no yield touch it, and its counts equal those of `none` in the same
//! sequence. Counts only, no timing (the sleeps only separate the messages into bursts
//! of their own, as 200 µs apart in the real mix).

mod common;

use common::mock_fabric::{offer_tx, post_rx, Rig};
use std::time::Duration;
use vmirq_net::queues::Policies;
use vmirq_vhost::counters::QueueSnapshot;

const MESSAGES: usize = 8;
const BULK_PER_MESSAGE: usize = 32;

/// Ports 0 -> 1 carry the bulk (1514-byte frames), 2 -> 3 the messages (64 bytes);
/// returns the receive counters of ports 1 and 3 and the ports' transmit yields.
fn mix(moderation: &str) -> (QueueSnapshot, QueueSnapshot, [u64; 4]) {
    let policies = Policies {
        moderation: moderation.parse().expect("spec"),
        ..Policies::default()
    };
    let mut rig = Rig::with_ports(&policies, 4);
    post_rx(&mut rig.ports[1].rx, MESSAGES * BULK_PER_MESSAGE);
    post_rx(&mut rig.ports[3].rx, MESSAGES);
    for m in 0..MESSAGES {
        offer_tx(&mut rig.ports[0].tx, BULK_PER_MESSAGE, 1514);
        rig.fabric.service_tx(0);
        offer_tx(&mut rig.ports[2].tx, 1, 64);
        rig.fabric.service_tx(2);
        assert_eq!(
            usize::from(rig.ports[3].rx.guest.used_idx()),
            m + 1,
            "{moderation}: message {m} delivered"
        );
        let c = rig.rx_counters(3);
        assert_eq!(
            (c.notifications, c.held),
            (u64::try_from(m + 1).expect("small"), 0),
            "{moderation}: message {m} notified at once: {c:?}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(
        usize::from(rig.ports[1].rx.guest.used_idx()),
        MESSAGES * BULK_PER_MESSAGE,
        "{moderation}: bulk delivered"
    );
    let yields = std::array::from_fn(|p| {
        rig.fabric
            .slot(p)
            .expect("port")
            .counters
            .snapshot()
            .tx_yields
    });
    (rig.rx_counters(1), rig.rx_counters(3), yields)
}

#[test]
fn messages_on_their_own_queue_are_notified_as_unmoderated_while_the_bulk_is_held() {
    let (bulk_none, msg_none, _) = mix("none");
    let (bulk, msg, yields) = mix("dim-lat");
    // The bulk queue is moderated: some of its frames were held.
    assert!(
        bulk.held > 0 && bulk.notifications < bulk_none.notifications,
        "dim-lat holds the bulk: {bulk:?} (none: {bulk_none:?})"
    );
    // The message queue: the same decisions as unmoderated.
    assert_eq!(msg.held, 0, "{msg:?}");
    assert_eq!(msg.timer_fires, 0, "{msg:?}");
    assert_eq!(
        (msg.notifications, msg.suppressed),
        (msg_none.notifications, msg_none.suppressed),
        "dim-lat {msg:?} against none {msg_none:?}"
    );
    assert_eq!(yields, [0; 4], "no drain reached the per-event bound");
}
