//! The receive low-water mark (`--rx-low-water`, `vmirq_net::rx::LowWater`): a receive
//! notification the policy holds goes out as soon as the driver's available buffers fall to
//! the mark, once per crossing (edge-triggered, as e1000's RXDMT0), and never without a
//! mark. The fabric runs on the test's thread (`common::mock_fabric`: no epoll, so the
//! policy's own timer never fires here).

mod common;

use common::mock_fabric::{offer_tx, post_rx, Rig, QSIZE};
use vmirq_net::queues::Policies;
use vmirq_net::rx::LowWater;

/// A count policy that holds every frame of these tests (its timer is not delivered).
const HOLD_ALL: &str = "count:usecs=100000,frames=10000";

fn rig(mark: &str) -> Rig {
    let policies = Policies {
        moderation: HOLD_ALL.parse().expect("spec"),
        rx_low_water: mark.parse().expect("mark"),
        ..Policies::default()
    };
    let mut rig = Rig::new(&policies);
    post_rx(&mut rig.ports[0].rx, usize::from(QSIZE));
    rig
}

/// Port 1 sends `n` frames to port 0.
fn send(rig: &mut Rig, n: usize) {
    offer_tx(&mut rig.ports[1].tx, n, 1000);
    rig.fabric.service_tx(1);
}

fn fired(rig: &Rig) -> u64 {
    rig.fabric
        .slot(0)
        .expect("port")
        .counters
        .snapshot()
        .rx_low_water
}

#[test]
fn a_held_notification_goes_out_when_half_the_ring_is_used() {
    let mut rig = rig("1/2");
    let half = usize::from(QSIZE / 2);
    send(&mut rig, half - 1);
    assert_eq!(rig.rx_counters(0).notifications, 0, "above the mark: held");
    send(&mut rig, 1);
    let c = rig.rx_counters(0);
    assert_eq!((c.notifications, fired(&rig)), (1, 1), "at the mark: {c:?}");
    send(&mut rig, 40);
    assert_eq!(fired(&rig), 1, "once per crossing");
    assert_eq!(rig.rx_counters(0).notifications, 1);
    // The driver takes what it was told of and refills; the next crossing fires again.
    let used = rig.ports[0].rx.guest.take_used().len();
    assert_eq!(used, half + 40);
    post_rx(&mut rig.ports[0].rx, used);
    send(&mut rig, 1);
    assert_eq!(fired(&rig), 1, "refilled: above the mark again");
    send(&mut rig, half);
    assert_eq!(fired(&rig), 2, "the second crossing");
    assert_eq!(rig.rx_counters(0).notifications, 2);
    assert_eq!(
        rig.rx_counters(0).held,
        u64::try_from(2 * half + 41).expect("fits")
    );
}

#[test]
fn without_a_mark_or_with_a_lower_one_the_policy_alone_decides() {
    let mut off = rig("off");
    send(&mut off, usize::from(QSIZE) - 8);
    assert_eq!((off.rx_counters(0).notifications, fired(&off)), (0, 0));
    let mut eighth = rig("1/8");
    send(&mut eighth, usize::from(QSIZE / 2));
    assert_eq!(fired(&eighth), 0, "half used is above 1/8 left");
    send(&mut eighth, usize::from(QSIZE * 3 / 8));
    assert_eq!(fired(&eighth), 1, "7/8 used: 1/8 left");
    assert_eq!(LowWater::Off.to_string(), "off");
}
