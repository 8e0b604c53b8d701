//! The ports of one server and the frame path between them.
//!
//! Threading (see the crate docs): every port's frontend connection has its own
//! vhost-user-backend daemon with one worker thread for both of its queues. A frame moves
//! on the thread that takes it off the source's transmit queue: it holds the source's TX
//! vring lock, copies the frame out of the source's memory and writes it into the
//! destination's receive queue under the destination's RX vring lock. Lock order: at most
//! one TX vring lock, then at most one RX vring lock; an [`Attached`] is cloned out of its
//! slot's mutex before any vring lock is taken, so no thread ever waits for a slot while
//! holding a vring.
//!
//! Backpressure instead of loss: when the destination's receive queue has no room, the
//! source's transmit chain is put back, the source is marked in the destination's
//! `blocked` set, and receive-queue notifications are enabled; the destination driver's next
//! refill kick services the blocked transmit queues again. Floods (learning mode) are best
//! effort: a destination without room drops its copy and counts it.

use crate::counters::PortCounters;
use crate::rx::{arm_refill_kick, deliver, RxOutcome, RxScratch, UsedWindow};
use crate::switch::{Route, Switch};
use crate::tx::{read_chain, TxError};
use crate::virtio::{F_MRG_RXBUF, HDR_LEN};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::{QueueOwnedT, QueueT};
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

/// Guest memory as the vhost-user machinery shares it.
pub type GuestMem = GuestMemoryAtomic<GuestMemoryMmap>;
/// A vring of this device.
pub type Vring = VringRwLock<GuestMem>;

/// Most ports of one server (the blocked sets are 64-bit masks).
pub const PORTS_MAX: usize = 64;
/// Transmit chains taken per batch before completions are published and signalled.
const TX_BATCH: usize = 256;
/// Looks at a full receive queue while its driver keeps adding buffers, before waiting.
const ARM_ATTEMPTS: usize = 8;

/// One port's live frontend connection: its vrings, memory and negotiated features.
pub struct Attached {
    /// Receive queue.
    pub rx: Vring,
    /// Transmit queue.
    pub tx: Vring,
    /// The frontend's memory.
    pub mem: GuestMem,
    /// Negotiated virtio features (set when the frontend acks them).
    pub features: Arc<AtomicU64>,
    /// The receive queue's notification window (used under the RX vring lock).
    pub rx_window: Mutex<UsedWindow>,
}

impl Attached {
    fn mrg_rxbuf(&self) -> bool {
        self.features.load(Ordering::Acquire) & F_MRG_RXBUF != 0
    }
}

/// One port.
#[derive(Default)]
pub struct Slot {
    attached: Mutex<Option<Arc<Attached>>>,
    /// Source ports waiting for room in this port's receive queue (bit per port).
    blocked: AtomicU64,
    /// This port's counters.
    pub counters: Arc<PortCounters>,
}

/// Every port and the switch between them.
pub struct Fabric {
    slots: Vec<Slot>,
    switch: Switch,
}

impl Fabric {
    /// A fabric of `switch.ports()` ports (at most [`PORTS_MAX`]).
    #[must_use]
    pub fn new(switch: Switch) -> Self {
        let n = switch.ports().min(PORTS_MAX);
        Self {
            slots: (0..n).map(|_| Slot::default()).collect(),
            switch,
        }
    }

    /// Ports.
    #[must_use]
    pub fn ports(&self) -> usize {
        self.slots.len()
    }

    /// Port `p`'s slot.
    #[must_use]
    pub fn slot(&self, p: usize) -> Option<&Slot> {
        self.slots.get(p)
    }

    fn attached(&self, p: usize) -> Option<Arc<Attached>> {
        self.slots
            .get(p)?
            .attached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Port `p` has a frontend with these vrings.
    pub fn attach(&self, p: usize, a: Attached) {
        if let Some(s) = self.slots.get(p) {
            *s.attached.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(a));
        }
    }

    /// Port `p`'s frontend is gone: no frame is written into its rings from now on, its
    /// learned addresses are forgotten, and sources blocked on it are serviced again (their
    /// frames to it are now dropped).
    pub fn detach(&self, p: usize) {
        let Some(s) = self.slots.get(p) else {
            return;
        };
        let old = s
            .attached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(old) = old {
            // Waits for a delivery in progress on another thread (it holds the vring lock)
            // and stops any later one that still holds the old `Attached`.
            old.rx.set_queue_ready(false);
            old.tx.set_queue_ready(false);
        }
        self.switch.forget_port(p);
        self.wake_blocked(p);
    }

    /// Port `p`'s receive queue was kicked (its driver added buffers): service the transmit
    /// queues waiting for it.
    pub fn on_rx_kick(&self, p: usize) {
        self.wake_blocked(p);
    }

    fn wake_blocked(&self, p: usize) {
        let Some(s) = self.slots.get(p) else {
            return;
        };
        let mut mask = s.blocked.swap(0, Ordering::AcqRel);
        while mask != 0 {
            let src = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            self.service_tx(src);
        }
    }

    /// Take every available frame off port `src`'s transmit queue and switch it, until the
    /// queue is empty (notifications re-enabled) or a destination has no room.
    pub fn service_tx(&self, src: usize) {
        let (Some(me), Some(slot)) = (self.attached(src), self.slots.get(src)) else {
            return;
        };
        let c = &slot.counters;
        let mem = me.mem.memory();
        let mut tx = me.tx.get_mut();
        if !tx.get_queue().ready() || !tx.is_enabled() {
            return;
        }
        SCRATCH.with_borrow_mut(
            |Scratch {
                 frame,
                 rx: rx_scratch,
             }| {
                let mut dests = Dests::default();
                loop {
                    let mut completed = 0u32;
                    let mut stop = false;
                    let mut empty = false;
                    for _ in 0..TX_BATCH {
                        let q = tx.get_queue_mut();
                        let start = q.next_avail();
                        let chain = match q.iter(&*mem) {
                            Ok(mut it) => it.next(),
                            Err(e) => {
                                tracing::warn!(port = src, error = %e, "transmit queue broken");
                                PortCounters::add(&c.queue_broken, 1);
                                stop = true;
                                break;
                            }
                        };
                        let Some(chain) = chain else {
                            empty = true;
                            break;
                        };
                        let head = chain.head_index();
                        match read_chain(chain, frame) {
                            Ok(()) => match self.switch_frame(
                                src,
                                &frame[HDR_LEN..],
                                &mut dests,
                                rx_scratch,
                            ) {
                                Sent::Done | Sent::Dropped => {
                                    PortCounters::add(&c.tx_frames, 1);
                                    PortCounters::add(&c.tx_bytes, (frame.len() - HDR_LEN) as u64);
                                }
                                Sent::Wait => {
                                    q.set_next_avail(start);
                                    PortCounters::add(&c.tx_backpressure, 1);
                                    stop = true;
                                    break;
                                }
                            },
                            Err(TxError::Header(_)) => PortCounters::add(&c.tx_bad_header, 1),
                            Err(e) => {
                                tracing::debug!(port = src, error = %e, "transmit chain dropped");
                                PortCounters::add(&c.tx_bad_chain, 1);
                            }
                        }
                        if q.add_used(&*mem, head, 0).is_err() {
                            PortCounters::add(&c.queue_broken, 1);
                            stop = true;
                            break;
                        }
                        completed += 1;
                    }
                    self.signal_dests(&mut dests);
                    if completed > 0
                        && tx.needs_notification().unwrap_or(true)
                        && tx.signal_used_queue().is_ok()
                    {
                        PortCounters::add(&c.tx_signals, 1);
                    }
                    if stop {
                        return;
                    }
                    // Empty: re-enable kicks and look again (§2.7.10: the driver may have added
                    // buffers before it saw the notification flag or event index).
                    if empty && !tx.enable_notification().unwrap_or(false) {
                        return;
                    }
                }
            },
        );
    }

    /// Switch one frame from `src`.
    fn switch_frame(&self, src: usize, frame: &[u8], dests: &mut Dests, s: &mut RxScratch) -> Sent {
        let c = &self.slots[src].counters;
        match self.switch.route(src, frame) {
            Route::Drop => {
                PortCounters::add(&c.tx_no_destination, 1);
                Sent::Dropped
            }
            Route::Port(dst) => {
                // Waiting for room: mark the source blocked before arming the refill kick,
                // so that a refill after the arm finds the mark; look again while buffers
                // arrive during the arm (bounded).
                for attempt in 0..ARM_ATTEMPTS {
                    match self.deliver_to(dst, frame, dests, s, attempt > 0) {
                        Some(RxOutcome::Delivered(_)) => return Sent::Done,
                        Some(RxOutcome::NoRoom) if attempt == 0 => {
                            self.slots[dst].blocked.fetch_or(1 << src, Ordering::AcqRel);
                        }
                        Some(RxOutcome::NoRoom) => {}
                        None => {
                            PortCounters::add(&c.tx_no_destination, 1);
                            return Sent::Dropped;
                        }
                        Some(_) => return Sent::Dropped,
                    }
                    if !self.arm(dst, dests) {
                        return Sent::Wait;
                    }
                }
                Sent::Wait
            }
            Route::Flood => {
                let mut any = false;
                for dst in (0..self.slots.len()).filter(|&d| d != src) {
                    match self.deliver_to(dst, frame, dests, s, false) {
                        Some(RxOutcome::Delivered(_)) => any = true,
                        Some(RxOutcome::NoRoom) => {
                            PortCounters::add(&self.slots[dst].counters.rx_no_room, 1);
                        }
                        _ => {}
                    }
                }
                if any {
                    Sent::Done
                } else {
                    PortCounters::add(&c.tx_no_destination, 1);
                    Sent::Dropped
                }
            }
        }
    }

    /// Write `frame` into port `dst`'s receive queue; `None` when it has no running queue.
    fn deliver_to(
        &self,
        dst: usize,
        frame: &[u8],
        dests: &mut Dests,
        rx_scratch: &mut RxScratch,
        retry: bool,
    ) -> Option<RxOutcome> {
        let slot = self.slots.get(dst)?;
        let a = dests.get(dst, || self.attached(dst))?;
        let c = &slot.counters;
        let mem = a.mem.memory();
        let mut rx = a.rx.get_mut();
        if !rx.get_queue().ready() || !rx.is_enabled() {
            return None;
        }
        let mrg = a.mrg_rxbuf();
        let out = deliver(rx.get_queue_mut(), &*mem, frame, mrg, rx_scratch);
        match out {
            RxOutcome::Delivered(n) => {
                PortCounters::add(&c.rx_frames, 1);
                PortCounters::add(&c.rx_bytes, frame.len() as u64);
                PortCounters::add(&c.rx_buffers, u64::from(n));
                dests.used |= 1 << dst;
            }
            RxOutcome::NoRoom => {
                if retry {
                    tracing::trace!(port = dst, "still no room");
                }
            }
            RxOutcome::TooBig => PortCounters::add(&c.rx_too_big, 1),
            RxOutcome::BadChain => {
                PortCounters::add(&c.rx_bad_chain, 1);
                dests.used |= 1 << dst;
            }
            RxOutcome::Broken => {
                tracing::warn!(port = dst, "receive queue broken");
                PortCounters::add(&c.queue_broken, 1);
                drop(rx);
                a.rx.set_queue_ready(false);
            }
        }
        Some(out)
    }

    /// Arm port `dst`'s refill kick; true when buffers arrived meanwhile.
    fn arm(&self, dst: usize, dests: &mut Dests) -> bool {
        let Some(a) = dests.get(dst, || self.attached(dst)) else {
            return false;
        };
        let rx = a.rx.get_mut();
        let mem = a.mem.memory();
        arm_refill_kick(rx.get_queue(), &*mem).unwrap_or(false)
    }

    /// Notify every destination that got buffers in this batch, if its driver wants it.
    fn signal_dests(&self, dests: &mut Dests) {
        let mut mask = std::mem::take(&mut dests.used);
        while mask != 0 {
            let dst = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let Some(a) = dests.get(dst, || self.attached(dst)) else {
                continue;
            };
            let rx = a.rx.get_mut();
            let mem = a.mem.memory();
            let want = a
                .rx_window
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .needs_notification(rx.get_queue(), &*mem)
                .unwrap_or(true);
            if want && rx.signal_used_queue().is_ok() {
                PortCounters::add(&self.slots[dst].counters.rx_signals, 1);
            }
        }
    }
}

enum Sent {
    Done,
    Dropped,
    Wait,
}

/// Destinations looked up during one [`Fabric::service_tx`] call, and which of them got
/// used buffers since the last signal.
#[derive(Default)]
struct Dests {
    cache: Vec<Option<Option<Arc<Attached>>>>,
    used: u64,
}

impl Dests {
    fn get(
        &mut self,
        p: usize,
        load: impl FnOnce() -> Option<Arc<Attached>>,
    ) -> Option<Arc<Attached>> {
        if self.cache.len() <= p {
            self.cache.resize(p + 1, None);
        }
        self.cache[p].get_or_insert_with(load).clone()
    }
}

#[derive(Default)]
struct Scratch {
    frame: Vec<u8>,
    rx: RxScratch,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}
