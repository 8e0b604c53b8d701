//! The ports of one server and the frame path between them.
//!
//! Threading (see the crate docs): every port's frontend connection has its own
//! vhost-user-backend daemon with one worker thread for both of its queues. A frame moves
//! on the thread that takes it off the source's transmit queue: it holds the source's TX
//! vring lock, copies the frame out of the source's memory and writes it into the
//! destination's receive queue under the destination's RX vring lock. Lock order: at most
//! one TX vring lock, then at most one RX vring lock; an [`Attached`] is cloned out of its
//! slot's mutex before any vring lock is taken, so no thread ever waits for a slot while
//! holding a vring. A queue's moderation lock (`tx_ctl`, `rx_ctl`) is taken after its vring
//! lock, or alone; a TX side (vring, then `tx_ctl`) may be held while an RX one is taken,
//! never the reverse. A port's receive hold deadlines are also mirrored in atomics
//! ([`vmirq_vhost::timer::DeadlineWatch`], one per pair in its [`Attached`]) that its worker
//! reads with no lock between transmit batches; they only say whether to take the locks.
//!
//! Multiqueue (`--queues N`): the port's worker serves every transmit queue of its port
//! (each kick names its queue), and a frame goes to one of the destination's enabled receive
//! queues picked by [`crate::flow::rx_pair`] (a flow hash, so one flow keeps its order).
//! Each queue has its own moderation, kick waits and counters.
//!
//! Backpressure instead of loss: when the destination's receive queue has no room, the
//! source's transmit chain is put back, the source is marked in the destination's
//! `blocked` set, and receive-queue notifications are enabled; the destination driver's next
//! refill kick wakes the blocked sources' own workers (each port's resume eventfd), which
//! drain their transmit queues again. The destination's worker does not drain them itself:
//! a source's drain runs up to a per-event bound of 1,024 frames, and the destination's own
//! transmit queue (a guest's request behind a refill it made for a bulk stream) would wait
//! for all of them. Floods (learning mode) are best
//! effort: a destination without room drops its copy and counts it.

mod burst;
mod per_port;
mod tx_return;

use tx_return::{TxReturn, TxUsed};

use crate::classify::classify;
use crate::counters::PortCounters;
use crate::flow::flow_hash;
use crate::flow::rx_pair;
use crate::pmd::Pmd;
use crate::queues::{RxCtl, TxCtl, WindowRing};
use crate::rx::{
    arm_refill_kick, buffers_left, deliver, deliver_unpublished, publish_pending,
    quiet_refill_kicks, RxOutcome, RxScratch,
};
use crate::switch::{Route, Switch};
use crate::tap::Tap;
use crate::tx::{read_chain, TxError};
use crate::virtio::{F_IN_ORDER, F_MRG_RXBUF, HDR_LEN, PAIRS_MAX};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost_user_backend::{VringRwLock, VringState, VringT};
use virtio_queue::{QueueOwnedT, QueueT};
use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryMmap};
use vmirq_policy::moderation::{CompletionMeta, RequestKind};
use vmirq_vhost::chain::DescTable;
use vmirq_vhost::clock::now_ns;
use vmirq_vhost::counters::QueueCounters;
use vmirq_vhost::notify::{Completions, QueueNotifier};
use vmirq_vhost::sigbus::{revoked_in, Revocation};
use vmirq_vhost::timer::DeadlineWatch;
use vmirq_vhost::LiveRing;
use vmm_sys_util::eventfd::EventFd;

/// Guest memory as the vhost-user machinery shares it.
pub use vmirq_vhost::GuestMem;
/// A vring of this device.
pub type Vring = VringRwLock<GuestMem>;

/// Most ports of one server (the blocked sets are 64-bit masks).
pub const PORTS_MAX: usize = 64;
/// Transmit chains taken per batch before completions are published and signalled.
const TX_BATCH: usize = 256;
/// Looks at a full receive queue while its driver keeps adding buffers, before waiting.
const ARM_ATTEMPTS: usize = 8;

/// One queue pair of a port's connection.
#[derive(Clone)]
pub struct Pair {
    /// Receive queue.
    pub rx: Vring,
    /// Transmit queue.
    pub tx: Vring,
    /// The receive queue's moderation (locked after its vring).
    pub rx_ctl: Arc<Mutex<RxCtl>>,
    /// The transmit queue's moderation and kick waits (locked after its vring).
    pub tx_ctl: Arc<Mutex<TxCtl>>,
}

impl Pair {
    /// Run `f` on the receive queue's moderation and its notification view, locked in
    /// this module's order (the vring, then the moderation); then publish parked entries
    /// that no held notification covers any more ([`RxCtl::settle_parked`]).
    pub(crate) fn with_rx_moderation<R>(
        &self,
        mem: &GuestMemoryMmap,
        f: impl FnOnce(&mut QueueNotifier, &mut WindowRing<'_>) -> R,
    ) -> R {
        let mut rx = self.rx.get_mut();
        let mut ctl = self.rx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
        let r = {
            let (notifier, mut ring) = ctl.split(&mut rx);
            f(notifier, &mut ring)
        };
        if let Err(e) = ctl.settle_parked(&mut rx, mem, false) {
            tracing::warn!(error = %e, "receive notification failed");
        }
        r
    }
}

/// One port's live frontend connection: its vrings, memory and negotiated features.
///
/// `rx`, `tx`, `rx_ctl` and `tx_ctl` are queue pair 0's (also `pairs[0]`): the pmd path,
/// which serves one pair per port, uses them.
pub struct Attached {
    /// Receive queue of pair 0.
    pub rx: Vring,
    /// Transmit queue of pair 0.
    pub tx: Vring,
    /// The frontend's memory.
    pub mem: GuestMem,
    /// Negotiated virtio features (set when the frontend acks them).
    pub features: Arc<AtomicU64>,
    /// The receive queue's moderation (locked after its vring).
    pub rx_ctl: Arc<Mutex<RxCtl>>,
    /// The transmit queue's moderation and kick waits (locked after its vring).
    pub tx_ctl: Arc<Mutex<TxCtl>>,
    /// The connection's SIGBUS protection: whoever sees its memory revoked ends it.
    pub revocation: Arc<Revocation>,
    /// The port worker's resume eventfd: written when a destination this port waited for
    /// got receive buffers ([`Fabric::wake_blocked`]).
    pub resume: Arc<EventFd>,
    /// Every queue pair, pair 0 first (`--queues`; at least one).
    pub pairs: Vec<Pair>,
    /// Queue pairs the driver uses (VQ_PAIRS_SET; 1 until then), when the frontend hands
    /// the control queue to the device (see `Attached::pairs_in_use`).
    pub active: Arc<AtomicU16>,
    /// The control queue (with several pairs).
    pub ctrl: Option<Vring>,
    /// `dim-lat:wait=on`: the port's transmitted frames of at most this many bytes are told
    /// to its receive queues' policies (pair 0's `RxCtl::tx_watch`, fixed for the
    /// connection: the guest's NOTF_COAL commands replace the policy, not the watch), read
    /// per transmit batch without a lock.
    pub tx_watch: Option<u32>,
    /// `dim-lat:overtake=on`: received frames may be parked (pair 0's policy at attach,
    /// read without a lock; a replaced policy parks nothing, see [`crate::rx::Parked`]).
    pub overtake: bool,
    /// Each pair's receive hold deadline (`u64::MAX`: none armed), read without the
    /// moderation lock by the port's worker between transmit batches
    /// ([`Fabric::fire_port_due`]); a hint, the lock-held check decides.
    rx_deadlines: Vec<DeadlineWatch>,
}

impl Attached {
    /// The connection of queue pairs `pairs` (at least one; pair 0 is also `rx`, `tx`, ...).
    #[must_use]
    pub fn new(
        pairs: Vec<Pair>,
        mem: GuestMem,
        features: Arc<AtomicU64>,
        active: Arc<AtomicU16>,
        revocation: Arc<Revocation>,
        resume: Arc<EventFd>,
        ctrl: Option<Vring>,
    ) -> Option<Self> {
        if pairs.len() > usize::from(PAIRS_MAX) {
            return None;
        }
        let first = pairs.first()?.clone();
        // Each moderation lock alone (no vring is held here).
        let (tx_watch, overtake) = {
            let ctl = lock(&first.rx_ctl);
            (ctl.tx_watch, ctl.notifier.policy().overtakes())
        };
        let rx_deadlines = pairs
            .iter()
            .map(|p| lock(&p.rx_ctl).notifier.deadline_watch())
            .collect();
        Some(Self {
            rx: first.rx,
            tx: first.tx,
            mem,
            features,
            rx_ctl: first.rx_ctl,
            tx_ctl: first.tx_ctl,
            revocation,
            resume,
            pairs,
            active,
            ctrl,
            tx_watch,
            overtake,
            rx_deadlines,
        })
    }

    /// The earliest receive hold deadline of the port's pairs (`u64::MAX`: none), read
    /// without a lock: a hint (see [`DeadlineWatch`]).
    fn rx_deadline(&self) -> u64 {
        self.rx_deadlines
            .iter()
            .map(|d| d.load(Ordering::Relaxed))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Each pair's receive hold deadline watch, pair 0 first.
    fn rx_deadlines(&self) -> &[DeadlineWatch] {
        &self.rx_deadlines
    }

    fn mrg_rxbuf(&self) -> bool {
        self.features.load(Ordering::Acquire) & F_MRG_RXBUF != 0
    }

    /// Whether received frames may be parked ([`crate::rx::Parked`]): the policy overtakes
    /// (`dim-lat:overtake=on`) and the driver did not ask for buffers used in order
    /// (VIRTIO_F_IN_ORDER).
    fn parking(&self) -> bool {
        self.overtake && self.features.load(Ordering::Acquire) & F_IN_ORDER == 0
    }

    /// How many pairs' receive queues frames may go to. A frontend that sets up the
    /// control queue leaves it to the device: the driver's VQ_PAIRS_SET decides (1 until
    /// then, virtio 1.2 §5.1.6.5.5). QEMU and DPDK's virtio-user serve the control queue
    /// themselves and say which pairs are in use by enabling their vrings
    /// (SET_VRING_ENABLE): then every pair counts, and a frame whose pair's receive queue
    /// is not enabled goes to pair 0 ([`Fabric::deliver_to`]).
    fn pairs_in_use(&self) -> usize {
        if self.pairs.len() <= 1 {
            return 1;
        }
        let ctrl_served = self.ctrl.as_ref().is_some_and(|c| {
            let c = c.get_ref();
            c.get_queue().ready() && c.is_enabled()
        });
        if ctrl_served {
            usize::from(self.active.load(Ordering::Acquire)).clamp(1, self.pairs.len())
        } else {
            self.pairs.len()
        }
    }

    /// The receive queue pair a frame sent on transmit pair `src_q` goes to: pair 0 when
    /// the pair its flow picks has no running receive queue.
    fn rx_pair(&self, frame: &[u8], src_q: usize) -> usize {
        let q = rx_pair(frame, src_q, self.pairs_in_use());
        let running = |p: &Pair| {
            let rx = p.rx.get_ref();
            rx.get_queue().ready() && rx.is_enabled()
        };
        if q > 0 && self.pairs.get(q).is_some_and(running) {
            q
        } else {
            0
        }
    }
}

/// One port.
pub struct Slot {
    attached: Mutex<Option<Arc<Attached>>>,
    /// A tap device instead of a vhost-user frontend (`--tap`; see [`crate::tap`]).
    tap: std::sync::OnceLock<Arc<Tap>>,
    /// Source ports waiting for room in this port's receive queue (bit per port).
    blocked: AtomicU64,
    /// When this port's resume eventfd was first written since its worker last took a
    /// resume up (`vmirq_vhost::clock::now_ns`; 0: none pending), for `tx_resume_wait_ns`.
    resume_at: AtomicU64,
    /// When this port's transmit queue began to wait for room in a destination (0: not
    /// waiting), for `tx_blocked_ns`.
    blocked_at: AtomicU64,
    /// This port's counters.
    pub counters: Arc<PortCounters>,
    /// Its receive queues' generic counters, one per queue pair.
    pub rx_queues: Vec<Arc<QueueCounters>>,
    /// Its transmit queues' generic counters, one per queue pair.
    pub tx_queues: Vec<Arc<QueueCounters>>,
}

impl Slot {
    fn new(pairs: u16) -> Self {
        let n = usize::from(pairs.clamp(1, PAIRS_MAX));
        Self {
            attached: Mutex::default(),
            tap: std::sync::OnceLock::new(),
            blocked: AtomicU64::new(0),
            resume_at: AtomicU64::new(0),
            blocked_at: AtomicU64::new(0),
            counters: Arc::default(),
            rx_queues: (0..n).map(|_| Arc::default()).collect(),
            tx_queues: (0..n).map(|_| Arc::default()).collect(),
        }
    }

    /// Queue pairs of this port.
    #[must_use]
    pub fn pairs(&self) -> usize {
        self.rx_queues.len()
    }
}

/// Every port and the switch between them.
pub struct Fabric {
    slots: Vec<Slot>,
    switch: Switch,
    /// The forwarding thread of `--datapath pmd` (the port workers only wake it).
    pmd: Option<Arc<Pmd>>,
}

impl Fabric {
    /// A fabric of `switch.ports()` ports (at most [`PORTS_MAX`]) of one queue pair each.
    #[must_use]
    pub fn new(switch: Switch) -> Self {
        Self::with_pairs(switch, 1)
    }

    /// A fabric of `switch.ports()` ports (at most [`PORTS_MAX`]) of `pairs` queue pairs
    /// each (1 to [`PAIRS_MAX`]).
    #[must_use]
    pub fn with_pairs(switch: Switch, pairs: u16) -> Self {
        let n = switch.ports().min(PORTS_MAX);
        Self {
            slots: (0..n).map(|_| Slot::new(pairs)).collect(),
            switch,
            pmd: None,
        }
    }

    /// A fabric whose transmit queues are served by one forwarding thread
    /// ([`crate::pmd::run`] with the returned [`Pmd`]), not by the port workers.
    #[must_use]
    pub fn with_pmd(switch: Switch) -> (Self, Arc<Pmd>) {
        let pmd = Arc::new(Pmd::default());
        let mut f = Self::new(switch);
        f.pmd = Some(Arc::clone(&pmd));
        (f, pmd)
    }

    /// The forwarding thread's state, with `--datapath pmd`.
    #[must_use]
    pub fn pmd(&self) -> Option<&Arc<Pmd>> {
        self.pmd.as_ref()
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

    /// Port `p` is the tap `tap` (once, before traffic; a tap port never has vrings).
    pub fn set_tap(&self, p: usize, tap: Arc<Tap>) {
        if let Some(s) = self.slots.get(p) {
            let _ = s.tap.set(tap);
        }
    }

    /// A frame the kernel sent on tap port `src`: switched like a transmitted one, but never
    /// waited for (a destination without room drops it, as a NIC would).
    pub fn from_tap(&self, src: usize, frame: &[u8]) {
        let Some(slot) = self.slots.get(src) else {
            return;
        };
        let c = &slot.counters;
        PortCounters::add(&c.tx_frames, 1);
        PortCounters::add(&c.tx_bytes, frame.len() as u64);
        SCRATCH.with_borrow_mut(|scratch| {
            let mut dests = Dests::default();
            if let Sent::Wait = self.switch_frame(src, frame, &mut dests, &mut scratch.rx) {
                PortCounters::add(&c.tx_backpressure, 1);
            }
            self.flush_dests(&mut dests);
        });
    }

    /// Whether port `p`'s frontend has handed its vrings to the fabric (frames can reach
    /// it from now on; its worker does that shortly after the connection is set up).
    #[must_use]
    pub fn is_attached(&self, p: usize) -> bool {
        self.attached(p).is_some()
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
            for (i, pair) in old.pairs.iter().enumerate() {
                pair.rx.set_queue_ready(false);
                pair.tx.set_queue_ready(false);
                let q = u16::try_from(2 * i).unwrap_or(u16::MAX);
                lock(&pair.rx_ctl).notifier.clear(q);
                lock(&pair.tx_ctl).notifier.clear(q + 1);
            }
        }
        self.switch.forget_port(p);
        self.wake_blocked(p);
    }

    /// One pass of the forwarding thread: a burst of at most `burst` transmit chains off
    /// every port in turn, kicks left as they are. Returns the chains taken.
    pub fn pmd_pass(&self, burst: usize) -> usize {
        (0..self.slots.len())
            .map(|p| self.pmd_burst(p, burst))
            .sum()
    }

    fn pmd_burst(&self, src: usize, burst: usize) -> usize {
        let Some(me) = self.attached(src) else {
            return 0;
        };
        let mem = me.mem.memory();
        let mut tx = me.tx.get_mut();
        if !tx.get_queue().ready() || !tx.is_enabled() {
            return 0;
        }
        let mut ctl = me.tx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
        if ctl.notifier.resuming() {
            return 0;
        }
        let mut ring = LiveRing {
            state: &mut tx,
            mem: &me.mem,
        };
        let (n, broken) = BURST_SCRATCH.with_borrow_mut(|b| {
            let n = self.burst(src, &mut ring, &mut ctl, &mem, b, burst);
            (n, b.broken)
        });
        if revoked_in(&mem).is_some() {
            me.revocation.check(); // the forwarding thread, not the port's worker, saw it
        }
        if broken {
            // Stop looking at it (every pass would count it again); a new frontend
            // connection brings new rings.
            drop(ctl);
            drop(tx);
            me.tx.set_queue_ready(false);
        }
        n
    }

    /// Turn kicks on (`true`) or off on every attached port's transmit queue (the
    /// forwarding thread's sleep and wake). Returns whether a queue has chains available
    /// after turning them on (do not sleep).
    pub fn pmd_kicks(&self, on: bool) -> bool {
        let mut work = false;
        for p in 0..self.slots.len() {
            let Some(me) = self.attached(p) else {
                continue;
            };
            let mut tx = me.tx.get_mut();
            if !tx.get_queue().ready() || !tx.is_enabled() {
                continue;
            }
            if on {
                work |= tx.enable_notification().unwrap_or(false);
            } else {
                let _ = tx.disable_notification();
            }
        }
        work
    }

    /// One batch of at most `limit` transmit chains; also returns the chains taken.
    #[allow(clippy::too_many_arguments)]
    fn tx_batch(
        &self,
        src: usize,
        tx: &mut LiveRing<'_>,
        ctl: &mut TxCtl,
        mem: &GuestMemoryMmap,
        dests: &mut Dests,
        scratch: &mut Scratch,
        limit: usize,
    ) -> (BatchEnd, usize) {
        let c = &self.slots[src].counters;
        let mut back = TxReturn::new(&mut scratch.used);
        let mut end = BatchEnd::More;
        let mut taken = 0;
        for _ in 0..limit {
            let q = tx.state.get_queue_mut();
            let start = q.next_avail();
            let chain = match q.iter(mem) {
                Ok(mut it) => it.next(),
                Err(e) => {
                    tracing::warn!(port = src, error = %e, "transmit queue broken");
                    PortCounters::add(&c.queue_broken, 1);
                    end = BatchEnd::Stop;
                    break;
                }
            };
            let Some(chain) = chain else {
                end = BatchEnd::Empty;
                break;
            };
            taken += 1;
            let head = chain.head_index();
            let table = DescTable {
                addr: GuestAddress(q.desc_table()),
                size: q.size(),
                indirect: false,
            };
            let mut bytes = 0;
            let read = read_chain(mem, table, head, &mut scratch.descs, &mut scratch.frame);
            if revoked_in(mem).is_some() {
                // The frontend truncated its memory (the read saw zeros): forward and
                // complete nothing; the worker drops the connection (vmirq_vhost::sigbus).
                q.set_next_avail(start);
                q.set_ready(false);
                PortCounters::add(&c.queue_broken, 1);
                end = BatchEnd::Stop;
                break;
            }
            match read {
                Ok(()) => {
                    let frame = &scratch.frame[HDR_LEN..];
                    match self.switch_frame(src, frame, dests, &mut scratch.rx) {
                        Sent::Done | Sent::Dropped => {
                            bytes = u32::try_from(frame.len()).unwrap_or(u32::MAX);
                            if scratch.watch.is_some_and(|max| bytes <= max) {
                                scratch.sent_small.push(classify(frame).completion_meta());
                            }
                            PortCounters::add(&c.tx_frames, 1);
                            PortCounters::add(&c.tx_bytes, u64::from(bytes));
                        }
                        Sent::Wait => {
                            q.set_next_avail(start);
                            taken -= 1;
                            PortCounters::add(&c.tx_backpressure, 1);
                            end = BatchEnd::Stop;
                            break;
                        }
                    }
                }
                Err(TxError::Header(_)) => PortCounters::add(&c.tx_bad_header, 1),
                Err(TxError::Ring(v)) => {
                    // A ring rule broken: the chain cannot be completed (its head may name
                    // no descriptor); the queue stops until the driver resets it.
                    tracing::warn!(port = src, error = %v, "transmit queue broken");
                    PortCounters::add(&c.queue_broken, 1);
                    q.set_next_avail(start);
                    q.set_ready(false);
                    end = BatchEnd::Stop;
                    break;
                }
                Err(e) => {
                    tracing::debug!(port = src, error = %e, "transmit chain dropped");
                    PortCounters::add(&c.tx_bad_chain, 1);
                }
            }
            if !back.chain(ctl, tx, mem, head, bytes, c) {
                end = BatchEnd::Stop;
                break;
            }
        }
        if back.finish(ctl, tx, mem, c) {
            end = BatchEnd::Stop;
        }
        (end, taken)
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
                // so that a refill after the arm finds the mark; then always look once more
                // (buffers the driver added between the failed delivery and the arm raise
                // no kick, since the arm's event index is already past them, and do not show
                // as a change during the arm: waiting then stalled the source until its next
                // transmit kick, for good once the driver stopped sending); look again while
                // buffers arrive during the arm (bounded).
                let q = self.rx_pair(dst, frame, dests);
                for attempt in 0..ARM_ATTEMPTS {
                    match self.deliver_to(dst, q, frame, dests, s, attempt > 0) {
                        Some(RxOutcome::Delivered(_)) => return Sent::Done,
                        Some(RxOutcome::NoRoom) if attempt == 0 => {
                            let _ = self.slots[src].blocked_at.compare_exchange(
                                0,
                                now_ns().max(1),
                                Ordering::AcqRel,
                                Ordering::Relaxed,
                            );
                            self.slots[dst].blocked.fetch_or(1 << src, Ordering::AcqRel);
                        }
                        Some(RxOutcome::NoRoom) => {}
                        None => {
                            PortCounters::add(&c.tx_no_destination, 1);
                            return Sent::Dropped;
                        }
                        Some(_) => return Sent::Dropped,
                    }
                    if !self.arm(dst, q, dests) && attempt > 0 {
                        return Sent::Wait;
                    }
                }
                Sent::Wait
            }
            Route::Flood => {
                let mut any = false;
                for dst in (0..self.slots.len()).filter(|&d| d != src) {
                    let q = self.rx_pair(dst, frame, dests);
                    match self.deliver_to(dst, q, frame, dests, s, false) {
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

    /// The receive queue pair of port `dst` that `frame` goes to (0 when `dst` is not
    /// attached or has one pair).
    fn rx_pair(&self, dst: usize, frame: &[u8], dests: &mut Dests) -> usize {
        let src_q = dests.src_q;
        dests
            .get(dst, || self.attached(dst))
            .map_or(0, |a| a.rx_pair(frame, src_q))
    }

    /// Write `frame` into port `dst`'s receive queue of pair `q`; `None` when it has no
    /// running queue there.
    fn deliver_to(
        &self,
        dst: usize,
        q: usize,
        frame: &[u8],
        dests: &mut Dests,
        rx_scratch: &mut RxScratch,
        retry: bool,
    ) -> Option<RxOutcome> {
        let slot = self.slots.get(dst)?;
        if let Some(tap) = slot.tap.get() {
            return Some(to_tap(tap, &slot.counters, frame));
        }
        let a = dests.get(dst, || self.attached(dst))?;
        let c = &slot.counters;
        let mem = a.mem.memory();
        if revoked_in(&mem).is_some() {
            return None; // its frontend truncated its memory: the connection is going away
        }
        let pair = a.pairs.get(q)?;
        let mut rx = pair.rx.get_mut();
        if !rx.get_queue().ready() || !rx.is_enabled() {
            return None;
        }
        let mrg = a.mrg_rxbuf();
        let parking = a.parking();
        // The moderation lock after the vring's, once for the whole delivery: the data
        // path's other holders take the vring first, so holding it across the copy delays
        // only the control path's rare calls (NOTF_COAL, attach, reset).
        let mut ctl = lock(&pair.rx_ctl);
        // The frame's classification (bytes, TCP ACK-only) is what `dim-lat`'s burst
        // heuristics decide on; the other policies use only the bytes, so only `dim-lat`
        // pays for parsing the headers.
        let meta = if ctl.classify {
            classify(frame).completion_meta()
        } else {
            CompletionMeta::new(
                RequestKind::Read,
                u32::try_from(frame.len()).unwrap_or(u32::MAX),
            )
        };
        let out = if !parking {
            deliver(rx.get_queue_mut(), &mem, frame, mrg, rx_scratch)
        } else if self.leaves_reserve(dst, &ctl, &rx, &mem, &meta) {
            RxOutcome::NoRoom
        } else {
            // Published below, or parked, once the policy has seen the frame.
            deliver_unpublished(rx.get_queue_mut(), &mem, frame, mrg, rx_scratch)
        };
        let out = match out {
            RxOutcome::Delivered(n) => {
                PortCounters::add(&c.rx_frames, 1);
                PortCounters::add(&c.rx_bytes, frame.len() as u64);
                PortCounters::add(&c.rx_buffers, u64::from(n));
                let batch = dests.batch(dst, q, || ctl.notifier.completions());
                let out = if parking {
                    self.park_or_publish(dst, &mut ctl, &mut rx, &mem, frame, meta, rx_scratch, out)
                } else {
                    out
                };
                let (notifier, mut ring) = ctl.split(&mut rx);
                let done = notifier
                    .completed(batch, meta, &mut ring, &mem)
                    .and_then(|_| ctl.check_low_water(&mut rx, &mem));
                match done {
                    Ok(true) => PortCounters::add(&c.rx_low_water, 1),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(port = dst, error = %e, "receive notification failed");
                    }
                }
                out
            }
            out if parking => {
                // Chains of a bad receive chain go back at once (nothing of theirs is
                // parked); with no room the parked entries go out, so that the driver sees
                // the buffers it must refill.
                let out = publish_pending(rx.get_queue_mut(), &mem, rx_scratch, out);
                if out == RxOutcome::NoRoom {
                    if let Err(e) = ctl.settle_parked(&mut rx, &mem, true) {
                        tracing::warn!(port = dst, error = %e, "receive notification failed");
                    }
                }
                out
            }
            out => out,
        };
        drop(ctl);
        match out {
            RxOutcome::Delivered(_) => {}
            RxOutcome::NoRoom => {
                if retry {
                    tracing::trace!(port = dst, "still no room");
                }
            }
            RxOutcome::TooBig => PortCounters::add(&c.rx_too_big, 1),
            RxOutcome::BadChain => {
                // The chains went back unused; the driver learns of them with the next
                // notification (not worth one of its own).
                PortCounters::add(&c.rx_bad_chain, 1);
            }
            RxOutcome::Broken => {
                tracing::warn!(port = dst, "receive queue broken");
                PortCounters::add(&c.queue_broken, 1);
                drop(rx);
                pair.rx.set_queue_ready(false);
            }
        }
        Some(out)
    }

    /// Whether a frame of class `meta` must wait because it would take one of the receive
    /// buffers the policy keeps for short messages (`dim-lat:overtake=on`'s `reserve`):
    /// counted in `rx_reserved`. A ring that cannot be read counts as having room (the
    /// delivery then finds out).
    fn leaves_reserve(
        &self,
        dst: usize,
        ctl: &RxCtl,
        rx: &VringState<GuestMem>,
        mem: &GuestMemoryMmap,
        meta: &CompletionMeta,
    ) -> bool {
        let reserve = ctl.notifier.policy().rx_reserve(meta);
        if reserve == 0 {
            return false;
        }
        let short = buffers_left(rx.get_queue(), mem).is_ok_and(|left| left <= reserve);
        if short {
            PortCounters::add(&self.slots[dst].counters.rx_reserved, 1);
        }
        short
    }

    /// A frame just written into port `dst`'s receive queue with its used entries left in
    /// `s` ([`deliver_unpublished`]): park them when the policy holds frames like it
    /// (`dim-lat:overtake=on`) or its flow already waits, otherwise publish them now, ahead
    /// of whatever is parked ([`crate::rx::Parked`]). Returns `out`, or
    /// [`RxOutcome::Broken`] when the used ring cannot be written.
    #[allow(clippy::too_many_arguments)]
    fn park_or_publish(
        &self,
        dst: usize,
        ctl: &mut RxCtl,
        rx: &mut VringState<GuestMem>,
        mem: &GuestMemoryMmap,
        frame: &[u8],
        meta: CompletionMeta,
        s: &mut RxScratch,
        out: RxOutcome,
    ) -> RxOutcome {
        let c = &self.slots[dst].counters;
        let hash = flow_hash(frame);
        if ctl.notifier.policy().parks(&meta) || ctl.parked.holds_flow(hash) {
            ctl.parked.park(s.pending_mut(), hash);
            PortCounters::add(&c.rx_parked, 1);
            return out;
        }
        if !ctl.parked.is_empty() {
            PortCounters::add(&c.rx_overtakes, 1);
        }
        publish_pending(rx.get_queue_mut(), mem, s, out)
    }

    /// Arm the refill kick of port `dst`'s receive queue of pair `q`; true when buffers
    /// arrived meanwhile.
    fn arm(&self, dst: usize, q: usize, dests: &mut Dests) -> bool {
        let Some(a) = dests.get(dst, || self.attached(dst)) else {
            return false;
        };
        let Some(pair) = a.pairs.get(q) else {
            return false;
        };
        let rx = pair.rx.get_mut();
        let mem = a.mem.memory();
        arm_refill_kick(rx.get_queue(), &*mem).unwrap_or(false)
    }

    /// End every destination's batch of receive completions (deferred notifications, hold
    /// timer following the policy's last decision).
    fn flush_dests(&self, dests: &mut Dests) {
        for i in 0..dests.batches.len() {
            let Some(batch) = dests.batches[i].take() else {
                continue;
            };
            let (dst, q) = (i / usize::from(PAIRS_MAX), i % usize::from(PAIRS_MAX));
            let Some(a) = dests.get(dst, || self.attached(dst)) else {
                continue;
            };
            let Some(pair) = a.pairs.get(q) else {
                continue;
            };
            let mut rx = pair.rx.get_mut();
            let mem = a.mem.memory();
            // No source waits for room in this port's queues: a driver without EVENT_IDX
            // need not kick on its refills (each kick an eventfd write or a VM exit, and a
            // worker wakeup here); as the pmd path does after a run. Under the RX vring
            // lock, which every arm holds, after its mark: an arm by another worker lands
            // before this (its mark is seen here) or after (it clears the flag again).
            if self.slots[dst].blocked.load(Ordering::Acquire) == 0 {
                if let Err(e) = quiet_refill_kicks(rx.get_queue(), &*mem) {
                    tracing::warn!(port = dst, error = %e, "receive used ring unreachable");
                }
            }
            let mut ctl = pair.rx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
            let (notifier, mut ring) = ctl.split(&mut rx);
            let done = notifier
                .completions_done(batch, &mut ring, &mem)
                .and_then(|last| notifier.follow(last))
                .and_then(|()| ctl.settle_parked(&mut rx, &mem, false));
            if let Err(e) = done {
                tracing::warn!(port = dst, error = %e, "receive notification failed");
            }
        }
    }
}

/// Hand `frame` to a tap port's kernel side (dropped and counted when it has no room).
fn to_tap(tap: &Tap, c: &PortCounters, frame: &[u8]) -> RxOutcome {
    match tap.send(frame) {
        Ok(true) => {
            PortCounters::add(&c.rx_frames, 1);
            PortCounters::add(&c.rx_bytes, frame.len() as u64);
            RxOutcome::Delivered(1)
        }
        Ok(false) => {
            PortCounters::add(&c.rx_no_room, 1);
            RxOutcome::TooBig
        }
        Err(e) => {
            tracing::warn!(tap = tap.name(), error = %e, "tap write failed");
            PortCounters::add(&c.rx_no_room, 1);
            RxOutcome::TooBig
        }
    }
}

/// How a batch of transmit chains ended.
enum BatchEnd {
    /// The batch limit: take the next batch.
    More,
    /// The queue is empty.
    Empty,
    /// A destination has no room, or the queue broke: stop until woken.
    Stop,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

enum Sent {
    Done,
    Dropped,
    Wait,
}

/// Destinations looked up during one [`Fabric::service_tx`] call, and which of them got
/// receive completions are in an open batch.
#[derive(Default)]
struct Dests {
    cache: Vec<Option<Option<Arc<Attached>>>>,
    /// The open batch of receive completions of each destination's receive queue (index
    /// `port * PAIRS_MAX + pair`).
    batches: Vec<Option<Completions>>,
    /// The transmit queue pair the frames come from (the receive queue of a frame without
    /// a flow hash, see [`crate::flow`]).
    src_q: usize,
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

    fn batch(
        &mut self,
        p: usize,
        q: usize,
        open: impl FnOnce() -> Completions,
    ) -> &mut Completions {
        let i = p * usize::from(PAIRS_MAX) + q;
        if self.batches.len() <= i {
            self.batches.resize_with(i + 1, || None);
        }
        self.batches[i].get_or_insert_with(open)
    }
}

#[derive(Default)]
struct Scratch {
    descs: Vec<virtio_queue::desc::split::Descriptor>,
    frame: Vec<u8>,
    rx: RxScratch,
    used: TxUsed,
    /// The source port's receive policy wants its transmitted frames of at most this size.
    watch: Option<u32>,
    /// Those frames of the current batch.
    sent_small: Vec<CompletionMeta>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
    static BURST_SCRATCH: std::cell::RefCell<burst::BurstScratch> =
        std::cell::RefCell::new(burst::BurstScratch::default());
}
