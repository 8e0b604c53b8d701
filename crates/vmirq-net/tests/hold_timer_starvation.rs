//! A port worker that keeps forwarding still delivers its port's due hold timers.
//!
//! On the per-port data path a port's worker thread drains its transmit queue in
//! `Fabric::service_tx` for as long as the driver keeps adding frames, and it serves its
//! port's receive hold timer only from epoll. A driver that keeps its transmit ring full
//! therefore delayed the port's held receive interrupts until it paused. The worker now
//! looks at the port's due timers between transmit batches. (Its drain also goes back to
//! epoll after at most 1024 frames, `tests/per_event_bound.rs`, but a hold of 50-200 µs
//! would still wait up to those 1024 frames, about 1 ms: the two transmit batches here
//! fit in one event, so only the between-batches delivery can fire the hold.)
//!
//! The fabric runs on the test's thread (`common::mock_fabric`), so nothing but
//! `service_tx` can deliver the timer: deterministic.

mod common;

use common::mock_fabric::{offer_tx, post_rx, Rig, QSIZE};
use std::time::{Duration, Instant};
use vmirq_net::queues::Policies;

/// The receive hold under test: count's timer (µs), with a frame count never reached.
const HOLD_US: u64 = 200;

#[test]
fn a_port_worker_forwarding_a_full_transmit_ring_delivers_its_due_receive_hold() {
    let policies = Policies {
        moderation: format!("count:usecs={HOLD_US},frames=65535")
            .parse()
            .expect("spec"),
        ..Policies::default()
    };
    let mut rig = Rig::new(&policies);
    post_rx(&mut rig.ports[0].rx, 8);
    post_rx(&mut rig.ports[1].rx, usize::from(QSIZE));

    // Port 1 sends one frame to port 0: its receive interrupt is held for HOLD_US.
    offer_tx(&mut rig.ports[1].tx, 1, 60);
    rig.fabric.service_tx(1);
    assert_eq!(
        rig.ports[0].rx.guest.used_idx(),
        1,
        "frame delivered to port 0"
    );
    let held = rig.rx_counters(0);
    assert_eq!((held.held, held.notifications), (1, 0), "{held:?}");

    // The hold falls due while port 0's driver has filled its transmit ring (two batches
    // of the per-port loop); its worker forwards them all before it gets back to epoll.
    let due = Instant::now() + Duration::from_micros(2 * HOLD_US);
    offer_tx(&mut rig.ports[0].tx, usize::from(QSIZE), 60);
    while Instant::now() < due {
        std::thread::sleep(Duration::from_micros(HOLD_US));
    }
    rig.fabric.service_tx(0);
    assert_eq!(
        rig.ports[1].rx.guest.used_idx(),
        QSIZE,
        "the whole transmit ring was forwarded"
    );
    let after = rig.rx_counters(0);
    assert_eq!(
        (after.timer_fires, after.notifications),
        (1, 1),
        "port 0's due receive hold was delivered while its worker forwarded: {after:?}"
    );
}
