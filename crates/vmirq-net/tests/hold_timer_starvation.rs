//! A port worker that keeps forwarding still delivers its port's due hold timers.
//!
//! On the per-port data path a port's worker thread drains its transmit queue in
//! `Fabric::service_tx` for as long as the driver keeps adding frames, and it serves its
//! port's receive hold timer only from epoll. A driver that keeps its transmit ring full
//! therefore delayed the port's held receive interrupts until it paused. The worker now
//! looks at the port's due timers between transmit batches.
//!
//! The test drives the fabric on its own thread with mock guests (no vhost-user, no worker
//! threads, no epoll), so nothing but `service_tx` can deliver the timer: deterministic.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vhost_user_backend::{VringRwLock, VringT};
use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};
use vmirq_net::fabric::{Attached, Fabric, GuestMem};
use vmirq_net::queues::{Policies, RxCtl, TxCtl};
use vmirq_net::switch::{Switch, SwitchMode};
use vmirq_net::virtio::HDR_LEN;
use vmirq_vhost::counters::CounterSet;
use vmirq_vhost::mock_guest::{Desc, Layout, MockGuest, REGION0_LEN};
use vmirq_vhost::sigbus::Revocation;

/// Ring size: two transmit batches of the per-port loop (256 chains each) fit.
const QSIZE: u16 = 512;
/// Receive buffer size (a 60-byte frame plus its header fit).
const RX_BUF: u32 = 2048;
/// The receive hold under test: count's timer (µs), with a frame count never reached.
const HOLD_US: u64 = 200;

struct Queue {
    guest: MockGuest,
    vring: VringRwLock<GuestMem>,
}

/// Queue `n` of the shared memory: rings at `n * 64 KiB`, data in its own 1.5 MiB slice.
fn queue(mem: &Arc<GuestMemoryMmap>, atomic: &GuestMem, n: u64) -> Queue {
    let data_start = (1 << 20) + n * (3 << 19);
    let layout = Layout {
        ring_base: n * (64 << 10),
        data_start,
        data_end: (data_start + (3 << 19)).min(REGION0_LEN),
    };
    let guest = MockGuest::on_memory(Arc::clone(mem), QSIZE, false, layout);
    let vring = VringRwLock::new(atomic.clone(), QSIZE).expect("vring");
    vring.set_queue_size(QSIZE);
    let [desc, avail, used] = guest.ring_addresses();
    vring
        .set_queue_info(desc, avail, used)
        .expect("ring addresses");
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    Queue { guest, vring }
}

struct Port {
    rx: Queue,
    tx: Queue,
}

fn attach(fabric: &Fabric, p: usize, port: &Port, atomic: &GuestMem, policies: &Policies) {
    let slot = fabric.slot(p).expect("port");
    fabric.attach(
        p,
        Attached {
            rx: port.rx.vring.clone(),
            tx: port.tx.vring.clone(),
            mem: atomic.clone(),
            features: Arc::new(AtomicU64::new(0)),
            rx_ctl: Arc::new(Mutex::new(
                RxCtl::new(policies, slot.rx_queue.clone()).expect("rx ctl"),
            )),
            tx_ctl: Arc::new(Mutex::new(
                TxCtl::new(policies, slot.tx_queue.clone()).expect("tx ctl"),
            )),
            revocation: Arc::new(Revocation::new()),
        },
    );
}

fn post_rx(q: &mut Queue, n: usize) {
    for _ in 0..n {
        let addr = q.guest.alloc(RX_BUF);
        q.guest.push_chain(&[Desc {
            addr,
            len: RX_BUF,
            write: true,
        }]);
    }
}

/// Offer `n` 60-byte frames (after a zero net header) on a transmit queue.
fn offer_tx(q: &mut Queue, n: usize) {
    let len = HDR_LEN + 60;
    let mut packet = vec![0u8; len];
    packet[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    packet[HDR_LEN + 6..HDR_LEN + 12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    for _ in 0..n {
        let addr = q.guest.alloc(u32::try_from(len).expect("small"));
        q.guest.mem_write(addr, &packet);
        q.guest.push_chain(&[Desc {
            addr,
            len: u32::try_from(len).expect("small"),
            write: false,
        }]);
    }
}

#[test]
fn a_port_worker_forwarding_a_full_transmit_ring_delivers_its_due_receive_hold() {
    let mem = GuestMemoryMmap::from_ranges(&[(
        GuestAddress(0),
        usize::try_from(REGION0_LEN).expect("64-bit"),
    )])
    .expect("guest memory");
    let atomic: GuestMem = GuestMemoryAtomic::new(mem.clone());
    let mem = Arc::new(mem);
    let mut ports: Vec<Port> = (0..2u64)
        .map(|p| Port {
            rx: queue(&mem, &atomic, 2 * p),
            tx: queue(&mem, &atomic, 2 * p + 1),
        })
        .collect();
    let policies = Policies {
        moderation: format!("count:usecs={HOLD_US},frames=65535")
            .parse()
            .expect("spec"),
        ..Policies::default()
    };
    let fabric = Fabric::new(Switch::new(SwitchMode::Pairs, 2));
    for (p, port) in ports.iter().enumerate() {
        attach(&fabric, p, port, &atomic, &policies);
    }
    post_rx(&mut ports[0].rx, 8);
    post_rx(&mut ports[1].rx, usize::from(QSIZE));
    let rx0 = || fabric.slot(0).expect("port 0").rx_queue.snapshot();

    // Port 1 sends one frame to port 0: its receive interrupt is held for HOLD_US.
    offer_tx(&mut ports[1].tx, 1);
    fabric.service_tx(1);
    assert_eq!(ports[0].rx.guest.used_idx(), 1, "frame delivered to port 0");
    let held = rx0();
    assert_eq!((held.held, held.notifications), (1, 0), "{held:?}");

    // The hold falls due while port 0's driver has filled its transmit ring (two batches
    // of the per-port loop); its worker forwards them all before it gets back to epoll.
    let due = Instant::now() + Duration::from_micros(2 * HOLD_US);
    offer_tx(&mut ports[0].tx, usize::from(QSIZE));
    while Instant::now() < due {
        std::thread::sleep(Duration::from_micros(HOLD_US));
    }
    fabric.service_tx(0);
    assert_eq!(
        ports[1].rx.guest.used_idx(),
        QSIZE,
        "the whole transmit ring was forwarded"
    );
    let after = rx0();
    assert_eq!(
        (after.timer_fires, after.notifications),
        (1, 1),
        "port 0's due receive hold was delivered while its worker forwarded: {after:?}"
    );
}
