//! A port worker does a bounded amount of transmit work per event: a driver that keeps one
//! transmit queue full does not keep the worker from the port's other queues.
//!
//! One worker serves every queue of its port from one epoll. Its transmit drain used to
//! run for as long as the driver kept the ring from running empty, so the port's other
//! transmit queues (and its control queue, timers, attach and detach, served from the same
//! epoll) waited for that driver to pause. The drain now stops after
//! `FRAMES_PER_EVENT` (1024) frames, arms the queue's timer at once with kicks left off,
//! and the worker comes back through epoll (`Fabric::on_tx_timer`).
//!
//! The worker's epoll is emulated on the test's thread, deterministically: ready events
//! are served in the order they became ready (kicks when the driver kicked, the transmit
//! timer once its fd is readable), and pair 0's driver tops its ring up to full after
//! every event. The frames go to port 1, which has no frontend: each is taken, dropped and
//! counted (the drain's control flow is the same as for a delivered frame). A second test:
//! a kick while a resume is pending does not lose the resume.

mod common;

use common::mock_fabric::{attach_pairs, offer_tx, queue_sized, Queue};
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};
use vmirq_net::fabric::{Fabric, GuestMem, Pair};
use vmirq_net::queues::{Policies, RxCtl, TxCtl};
use vmirq_net::switch::{Switch, SwitchMode};
use vmirq_vhost::mock_guest::REGION0_LEN;

/// The worker's bound on frames per event (`fabric::per_port::FRAMES_PER_EVENT`).
const FRAMES_PER_EVENT: u16 = 1024;
/// Pair 0's transmit ring: more than one event's worth.
const BIG: u16 = 4096;
/// The other queues' rings.
const SMALL: u16 = 256;
/// `VRING_USED_F_NO_NOTIFY`.
const NO_NOTIFY: u16 = 1;

/// Whether the device asks its driver not to kick (the used ring's flags).
fn kicks_off(mem: &GuestMemoryMmap, q: &Queue) -> bool {
    let used = q.guest.ring_addresses()[2];
    let flags: u16 = mem.read_obj(GuestAddress(used)).expect("used flags");
    u16::from_le(flags) & NO_NOTIFY != 0
}

/// Wait (at most a second) for `fd` to be readable, as epoll would report it.
fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call; the fd stays open (the
    // notifier owning it is alive).
    let n = unsafe { libc::poll(&mut p, 1, 1000) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    Kick(usize),
    Timer(usize),
}

/// Port 0 of a two-port fabric (pairs mode: its frames go to port 1, which has no
/// frontend) with two queue pairs: pair 0's transmit ring is [`BIG`].
struct Port0 {
    fabric: Fabric,
    mem: Arc<GuestMemoryMmap>,
    /// Receive 0, transmit 0, receive 1, transmit 1.
    queues: Vec<Queue>,
    tx_ctls: Vec<Arc<Mutex<TxCtl>>>,
}

impl Port0 {
    fn new() -> Self {
        let policies = Policies::default();
        let mem = GuestMemoryMmap::from_ranges(&[(
            GuestAddress(0),
            usize::try_from(REGION0_LEN).expect("64-bit"),
        )])
        .expect("guest memory");
        let atomic: GuestMem = GuestMemoryAtomic::new(mem.clone());
        let mem = Arc::new(mem);
        let fabric = Fabric::with_pairs(Switch::new(SwitchMode::Pairs, 2), 2);
        let slot = fabric.slot(0).expect("port 0");
        let queues: Vec<Queue> = [SMALL, BIG, SMALL, SMALL]
            .iter()
            .enumerate()
            .map(|(n, &size)| queue_sized(&mem, &atomic, n as u64, size, 128 << 10))
            .collect();
        let tx_ctls: Vec<Arc<Mutex<TxCtl>>> = (0..2)
            .map(|q| {
                Arc::new(Mutex::new(
                    TxCtl::new(&policies, slot.tx_queues[q].clone()).expect("tx ctl"),
                ))
            })
            .collect();
        let pairs = (0..2)
            .map(|q| Pair {
                rx: queues[2 * q].vring.clone(),
                tx: queues[2 * q + 1].vring.clone(),
                rx_ctl: Arc::new(Mutex::new(
                    RxCtl::new(&policies, slot.rx_queues[q].clone()).expect("rx ctl"),
                )),
                tx_ctl: Arc::clone(&tx_ctls[q]),
            })
            .collect();
        attach_pairs(&fabric, 0, pairs, &atomic);
        Self {
            fabric,
            mem,
            queues,
            tx_ctls,
        }
    }

    fn timer_fd(&self, q: usize) -> RawFd {
        self.tx_ctls[q].lock().expect("tx ctl").notifier.timer_fd()
    }

    fn resuming(&self, q: usize) -> bool {
        self.tx_ctls[q].lock().expect("tx ctl").notifier.resuming()
    }

    /// Chains pair 0's transmit queue has returned.
    fn used0(&self) -> u16 {
        self.queues[1].guest.used_idx()
    }
}

#[test]
fn a_full_transmit_queue_leaves_the_worker_to_the_ports_other_queue_after_a_bounded_drain() {
    let mut port = Port0::new();
    let Port0 {
        fabric,
        mem,
        queues,
        tx_ctls,
    } = &mut port;
    let fabric = &*fabric;
    let slot = fabric.slot(0).expect("port 0");
    let timer_fd = |q: usize| tx_ctls[q].lock().expect("tx ctl").notifier.timer_fd();
    let resuming = |q: usize| tx_ctls[q].lock().expect("tx ctl").notifier.resuming();

    // Both drivers transmit and kick: pair 0 a full ring, pair 1 a few frames.
    offer_tx(&mut queues[1], usize::from(BIG), 60);
    offer_tx(&mut queues[3], 8, 60);
    let mut ready = VecDeque::from([Ev::Kick(0), Ev::Kick(1)]);

    let mut events = 0u32;
    let mut pair1_served_at = None;
    let mut topped_up = 0u32;
    let mut offered = u32::from(BIG);
    while let Some(ev) = ready.pop_front() {
        events += 1;
        assert!(events <= 64, "the worker never got through its events");
        let before = queues[1].guest.used_idx();
        match ev {
            Ev::Kick(q) => fabric.on_tx_kick(0, q),
            Ev::Timer(q) => fabric.on_tx_timer(0, q),
        }
        let took = queues[1].guest.used_idx().wrapping_sub(before);
        assert!(
            took <= FRAMES_PER_EVENT,
            "event {events} ({ev:?}) took {took} frames off pair 0"
        );
        if pair1_served_at.is_none() && queues[3].guest.used_idx() == 8 {
            pair1_served_at = Some(events);
        }
        if resuming(0) {
            // Stopped at the bound: kicks stay off while the resume is pending, so the
            // driver topping its ring up does not kick; the timer is ready at once.
            assert!(
                kicks_off(mem, &queues[1]),
                "pair 0's kicks on while resuming"
            );
            if topped_up < 3 {
                offer_tx(&mut queues[1], usize::from(took), 60);
                offered += u32::from(took);
                topped_up += 1;
            }
            assert!(readable(timer_fd(0)), "the resume timer never fired");
            if !ready.contains(&Ev::Timer(0)) {
                ready.push_back(Ev::Timer(0));
            }
        }
    }

    // Pair 1 went second: right after pair 0's first bounded drain, not after its driver
    // stopped topping up.
    assert_eq!(
        pair1_served_at,
        Some(2),
        "pair 1 served at event {pair1_served_at:?}"
    );
    assert_eq!(topped_up, 3);
    // Nothing lost: every frame pair 0's driver offered was taken and completed, at most
    // 1024 per event; then the ring ran empty, kicks came back on and no resume is left.
    let used = queues[1].guest.used_idx();
    assert_eq!(u32::from(used), offered % 65536);
    assert!(
        !kicks_off(mem, &queues[1]),
        "pair 0's kicks stay off after its drain"
    );
    assert!(!resuming(0) && !resuming(1));
    let c = slot.counters.snapshot();
    assert_eq!(c.tx_frames, u64::from(offered) + 8);
    assert_eq!(c.tx_no_destination, u64::from(offered) + 8);
    let full_events = u64::from(offered / u32::from(FRAMES_PER_EVENT));
    assert!(
        c.tx_yields >= full_events - 1 && c.tx_yields <= full_events,
        "{} yields for {offered} frames",
        c.tx_yields
    );
    // Two kicks and one timer event per bounded drain.
    assert_eq!(u64::from(events), 2 + c.tx_yields, "{events} events");
}

/// A kick while a resume is pending (a stale kick, or another port's refill servicing this
/// queue through `wake_blocked`) drains the rest of the ring; the pending resume must
/// survive it. The drain's between-batches timer delivery used to be able to consume the
/// resume's timer (armed at once, so always due) while the resume stayed marked: then the
/// timer never fired again, the mark stayed for good, and the queue's moderation could no
/// longer arm a hold (decisions do not touch the timer while a resume is pending).
#[test]
fn a_kick_while_a_resume_is_pending_leaves_the_resume_to_its_timer() {
    let mut port = Port0::new();
    // One event's worth and 300 frames more (two batches: the between-batches delivery
    // runs once).
    let rest = 300;
    offer_tx(
        &mut port.queues[1],
        usize::from(FRAMES_PER_EVENT) + rest,
        60,
    );
    port.fabric.on_tx_kick(0, 0);
    assert_eq!(port.used0(), FRAMES_PER_EVENT);
    assert!(
        port.resuming(0),
        "the bound was reached: a resume is pending"
    );
    // Kicked again before the timer is served: the rest goes now.
    port.fabric.on_tx_kick(0, 0);
    assert_eq!(
        usize::from(port.used0()),
        usize::from(FRAMES_PER_EVENT) + rest
    );
    assert!(
        !kicks_off(&port.mem, &port.queues[1]),
        "the ring ran empty: kicks back on"
    );
    // The resume is still pending and its timer still armed: epoll serves it.
    assert!(port.resuming(0));
    assert!(
        readable(port.timer_fd(0)),
        "the resume's timer was consumed while the resume stayed pending"
    );
    port.fabric.on_tx_timer(0, 0);
    assert!(!port.resuming(0), "the resume was served");
    // And the queue goes on working.
    offer_tx(&mut port.queues[1], 5, 60);
    port.fabric.on_tx_kick(0, 0);
    assert_eq!(
        usize::from(port.used0()),
        usize::from(FRAMES_PER_EVENT) + rest + 5
    );
    let c = port.fabric.slot(0).expect("port 0").counters.snapshot();
    assert_eq!(c.tx_yields, 1);
}
