//! Two ports of a [`Fabric`] driven on the test's own thread with mock guests (no
//! vhost-user, no worker threads, no epoll): only what the test calls runs, so tests of
//! the per-port loop's timing-dependent paths are deterministic.

use std::sync::atomic::{AtomicU16, AtomicU64};
use std::sync::{Arc, Mutex};
use vhost_user_backend::{VringRwLock, VringT};
use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};
use vmirq_net::fabric::{Attached, Fabric, GuestMem, Pair};
use vmirq_net::queues::{Policies, RxCtl, TxCtl};
use vmirq_net::switch::{Switch, SwitchMode};
use vmirq_net::virtio::HDR_LEN;
use vmirq_vhost::counters::{CounterSet, QueueSnapshot};
use vmirq_vhost::mock_guest::{Desc, Layout, MockGuest, REGION0_LEN};
use vmirq_vhost::sigbus::Revocation;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Ring size: two transmit batches of the per-port loop (256 chains each) fit.
pub const QSIZE: u16 = 512;
/// Receive buffer size (a full-size frame plus its header fit).
pub const RX_BUF: u32 = 2048;

/// One queue: the driver's side and the device's vring.
pub struct Queue {
    pub guest: MockGuest,
    pub vring: VringRwLock<GuestMem>,
}

/// Queue `n` of the shared memory: rings at `n * 64 KiB`, data in its own 1.5 MiB slice.
pub fn queue(mem: &Arc<GuestMemoryMmap>, atomic: &GuestMem, n: u64) -> Queue {
    queue_sized(mem, atomic, n, QSIZE, 64 << 10)
}

/// Queue `n` with `size` entries: rings at `n * ring_stride` (room for the rings of the
/// largest queue), data in its own 1.5 MiB slice.
pub fn queue_sized(
    mem: &Arc<GuestMemoryMmap>,
    atomic: &GuestMem,
    n: u64,
    size: u16,
    ring_stride: u64,
) -> Queue {
    queue_in(mem, atomic, n, size, ring_stride, 3 << 19)
}

/// Queue `n` with `size` entries, rings at `n * ring_stride`, data in its own slice of
/// `slice` bytes after the first MiB.
pub fn queue_in(
    mem: &Arc<GuestMemoryMmap>,
    atomic: &GuestMem,
    n: u64,
    size: u16,
    ring_stride: u64,
    slice: u64,
) -> Queue {
    let data_start = (1 << 20) + n * slice;
    let layout = Layout {
        ring_base: n * ring_stride,
        data_start,
        data_end: (data_start + slice).min(REGION0_LEN),
    };
    let guest = MockGuest::on_memory(Arc::clone(mem), size, false, layout);
    let vring = VringRwLock::new(atomic.clone(), size).expect("vring");
    vring.set_queue_size(size);
    let [desc, avail, used] = guest.ring_addresses();
    vring
        .set_queue_info(desc, avail, used)
        .expect("ring addresses");
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    Queue { guest, vring }
}

/// One port's two queues.
pub struct Port {
    pub rx: Queue,
    pub tx: Queue,
}

pub fn attach(fabric: &Fabric, p: usize, port: &Port, atomic: &GuestMem, policies: &Policies) {
    attach_with(fabric, p, port, atomic, policies, 0);
}

/// [`attach`] with the virtio `features` the driver negotiated; returns the receive queue's
/// moderation state (what the control queue's NOTF_COAL commands change).
pub fn attach_with(
    fabric: &Fabric,
    p: usize,
    port: &Port,
    atomic: &GuestMem,
    policies: &Policies,
    features: u64,
) -> Arc<Mutex<RxCtl>> {
    let slot = fabric.slot(p).expect("port");
    let rx_ctl = Arc::new(Mutex::new(
        RxCtl::new(policies, slot.rx_queues[0].clone()).expect("rx ctl"),
    ));
    let pair = Pair {
        rx: port.rx.vring.clone(),
        tx: port.tx.vring.clone(),
        rx_ctl: Arc::clone(&rx_ctl),
        tx_ctl: Arc::new(Mutex::new(
            TxCtl::new(policies, slot.tx_queues[0].clone()).expect("tx ctl"),
        )),
    };
    attach_features(fabric, p, vec![pair], atomic, features);
    rx_ctl
}

/// Attach port `p` with `pairs` in use, no control queue, no features negotiated.
pub fn attach_pairs(fabric: &Fabric, p: usize, pairs: Vec<Pair>, atomic: &GuestMem) {
    attach_features(fabric, p, pairs, atomic, 0);
}

/// [`attach_pairs`] with the virtio `features` the driver negotiated.
pub fn attach_features(
    fabric: &Fabric,
    p: usize,
    pairs: Vec<Pair>,
    atomic: &GuestMem,
    features: u64,
) {
    let active = u16::try_from(pairs.len()).expect("pairs");
    let attached = Attached::new(
        pairs,
        atomic.clone(),
        Arc::new(AtomicU64::new(features)),
        Arc::new(AtomicU16::new(active)),
        Arc::new(Revocation::new()),
        Arc::new(EventFd::new(EFD_NONBLOCK).expect("resume eventfd")),
        None,
    )
    .expect("pairs");
    fabric.attach(p, attached);
}

pub fn post_rx(q: &mut Queue, n: usize) {
    for _ in 0..n {
        let addr = q.guest.alloc(RX_BUF);
        q.guest.push_chain(&[Desc {
            addr,
            len: RX_BUF,
            write: true,
        }]);
    }
}

/// Offer `n` frames of `len` bytes (after a zero net header) on a transmit queue.
pub fn offer_tx(q: &mut Queue, n: usize, len: usize) {
    let len = HDR_LEN + len;
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

/// Attached ports in pairs mode (0 <-> 1, 2 <-> 3, ...) over one guest memory, their queues
/// following `policies`.
pub struct Rig {
    pub fabric: Fabric,
    pub ports: Vec<Port>,
    /// Each port's receive moderation state.
    pub rx_ctls: Vec<Arc<Mutex<RxCtl>>>,
}

impl Rig {
    /// Two ports.
    pub fn new(policies: &Policies) -> Self {
        Self::with_ports(policies, 2)
    }

    /// `n` ports (up to 2: each queue's data in 1.5 MiB; more share the region).
    pub fn with_ports(policies: &Policies, n: usize) -> Self {
        Self::with_features(policies, n, 0)
    }

    /// [`Rig::with_ports`] with drivers that negotiated the virtio `features`.
    pub fn with_features(policies: &Policies, n: usize, features: u64) -> Self {
        Self::with_switch(policies, n, features, SwitchMode::Pairs)
    }

    /// [`Rig::with_features`] with the switch in `mode`.
    pub fn with_switch(policies: &Policies, n: usize, features: u64, mode: SwitchMode) -> Self {
        let mem = GuestMemoryMmap::from_ranges(&[(
            GuestAddress(0),
            usize::try_from(REGION0_LEN).expect("64-bit"),
        )])
        .expect("guest memory");
        let atomic: GuestMem = GuestMemoryAtomic::new(mem.clone());
        let mem = Arc::new(mem);
        // Two ports keep the 1.5 MiB data slices; more share the region's 7 MiB.
        let queues = 2 * n as u64;
        let slice = (3 << 19).min(((REGION0_LEN - (1 << 20)) / queues) & !0xfff);
        let ports: Vec<Port> = (0..n as u64)
            .map(|p| Port {
                rx: queue_in(&mem, &atomic, 2 * p, QSIZE, 64 << 10, slice),
                tx: queue_in(&mem, &atomic, 2 * p + 1, QSIZE, 64 << 10, slice),
            })
            .collect();
        let fabric = Fabric::new(Switch::new(mode, n));
        let rx_ctls = ports
            .iter()
            .enumerate()
            .map(|(p, port)| attach_with(&fabric, p, port, &atomic, policies, features))
            .collect();
        Self {
            fabric,
            ports,
            rx_ctls,
        }
    }

    /// Port `p`'s receive queue counters.
    pub fn rx_counters(&self, p: usize) -> QueueSnapshot {
        self.fabric.slot(p).expect("port").rx_queues[0].snapshot()
    }
}
