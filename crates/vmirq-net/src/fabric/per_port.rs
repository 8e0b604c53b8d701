//! The per-port worker's path (`--datapath` other than pmd): each port's vhost-user worker
//! thread drains its own transmit queues ([`Fabric::service_txq`]), polls them for the
//! kick-wait policy's window when they run empty ([`Fabric::kick_wait`]), delivers the
//! port's hold timers while it is busy ([`Fabric::fire_port_due`]), and reacts to its
//! events: transmit and receive kicks, hold timers, the refill kick that wakes the sources
//! blocked on it ([`Fabric::wake_blocked`]), and its own resume eventfd, written when a
//! destination it waited for has room ([`Fabric::on_resume`]).
//!
//! The frame path itself (switching, delivery, batches of transmit chains) is in the
//! parent module; the lock order is the parent's.

use super::{Attached, BatchEnd, Dests, Fabric, Scratch, SCRATCH, TX_BATCH};
use crate::counters::PortCounters;
use crate::queues::TxCtl;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use vhost_user_backend::VringT;
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryMmap};
use vmirq_policy::moderation::CompletionMeta;
use vmirq_vhost::clock::now_ns;
use vmirq_vhost::counters::QueueCounters;
use vmirq_vhost::poll::{has_work, PollStart};
use vmirq_vhost::sigbus::revoked_in;
use vmirq_vhost::LiveRing;

/// Transmit chains one event may take off one transmit queue before the worker goes back
/// to epoll: four batches. A full ring of the usual sizes (256 to 1024) goes in one event,
/// and the detour through epoll (one timerfd arm, one epoll wakeup and one timerfd read,
/// a few microseconds) costs well under 1 % of the forwarding of 1024 frames, while the
/// port's other queues, control queue and timers wait for at most those 1024 frames
/// (about 1 ms at the per-port path's 1 µs per frame) instead of for as long as the
/// driver keeps its ring from running empty.
const FRAMES_PER_EVENT: usize = 4 * TX_BATCH;
/// Drain rounds one event may run: a round ends with the ring empty and is followed by a
/// raced re-enable or a kick wait's hit. A polling wait keeps the worker out of epoll
/// for its window; a driver that keeps hitting it (ping-pong, a frame per round) would
/// keep it there for good. 64 rounds, as vmirq-blk's `MAX_BATCHES_PER_EVENT`.
const ROUNDS_PER_EVENT: usize = 64;

impl Fabric {
    /// Port `p`'s receive queue of pair `q` was kicked (its driver added buffers): count it
    /// and service the transmit queues waiting for it.
    pub fn on_rx_kick(&self, p: usize, q: usize) {
        if let Some(c) = self.slots.get(p).and_then(|s| s.rx_queues.get(q)) {
            QueueCounters::add(&c.kicks, 1);
        }
        self.wake_blocked(p);
    }

    /// Port `p` got receive buffers (or went away): wake the sources that waited for room
    /// in it. Each source's own worker drains its transmit queues (its resume eventfd); the
    /// caller, usually `p`'s worker, does not: a drain runs up to [`FRAMES_PER_EVENT`]
    /// frames (~1 ms here), and `p`'s own transmit queue would wait for all of them. Under
    /// `dim-lat` a bulk source waits for a moderated guest's refill hundreds of times a
    /// second; while `p`'s worker drained it, `p`'s short requests waited behind the bulk
    /// (a request's way to its responder: p99 ~1.5-2 ms, against ~0.2-0.7 ms unmoderated).
    /// A source not attached has nothing to drain.
    pub(super) fn wake_blocked(&self, p: usize) {
        let Some(s) = self.slots.get(p) else {
            return;
        };
        let mask = s.blocked.swap(0, Ordering::AcqRel);
        if mask == 0 {
            return;
        }
        let now = now_ns();
        for src in bits(mask) {
            let at = self.slots[src].blocked_at.swap(0, Ordering::AcqRel);
            if at != 0 {
                PortCounters::add(
                    &self.slots[src].counters.tx_blocked_ns,
                    now.saturating_sub(at),
                );
            }
        }
        if let Some(pmd) = &self.pmd {
            pmd.wake();
            return;
        }
        for src in bits(mask) {
            if let Some(me) = self.attached(src) {
                // The first resume since the source's worker took the last one up starts
                // the wait `tx_resume_wait_ns` measures.
                let _ = self.slots[src].resume_at.compare_exchange(
                    0,
                    now.max(1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
                // Fails only when the counter would overflow: resumes are pending anyway.
                let _ = me.resume.write(1);
            }
        }
    }

    /// Port `p`'s resume eventfd is readable: a destination it waited for has room. Consume
    /// it first (a resume written during the drain wakes the worker again), then drain the
    /// port's transmit queues (bounded, as on a kick). Returns whether a resume was pending;
    /// false also when the port is not attached (the caller then clears its eventfd).
    pub fn on_resume(&self, p: usize) -> bool {
        let Some(me) = self.attached(p) else {
            return false;
        };
        if me.resume.read().is_err() {
            return false;
        }
        let slot = &self.slots[p];
        let at = slot.resume_at.swap(0, Ordering::AcqRel);
        PortCounters::add(&slot.counters.tx_resumes, 1);
        if at != 0 {
            PortCounters::add(
                &slot.counters.tx_resume_wait_ns,
                now_ns().saturating_sub(at),
            );
        }
        for q in 0..me.pairs.len() {
            self.service_txq(p, &me, q);
        }
        true
    }

    /// `service_txq` (a bounded drain) of every transmit queue of port `src`.
    pub fn service_tx(&self, src: usize) {
        let Some(me) = self.attached(src) else {
            return;
        };
        for q in 0..me.pairs.len() {
            self.service_txq(src, &me, q);
        }
    }

    /// Take the available frames off port `src`'s transmit queue of pair `q` and switch
    /// them, until the queue is empty (kicks re-enabled, after the kick-wait policy's poll
    /// window if it has one), a destination has no room, or the per-event bound
    /// ([`FRAMES_PER_EVENT`], [`ROUNDS_PER_EVENT`]) is reached: then the queue's timer is
    /// armed at once ([`vmirq_vhost::notify::QueueNotifier::resume_later`]), kicks stay
    /// off, and the worker goes back to epoll, serves whatever else is ready (the port's
    /// other queues, its control queue, its timers, attach and detach) and comes back
    /// through [`Self::on_tx_timer`]. Completions go through the queue's moderation.
    fn service_txq(&self, src: usize, me: &Attached, q: usize) {
        let Some(pair) = me.pairs.get(q) else {
            return;
        };
        let mem = me.mem.memory();
        let mut tx = pair.tx.get_mut();
        if !tx.get_queue().ready() || !tx.is_enabled() {
            return;
        }
        let mut ctl = pair.tx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ring = LiveRing {
            state: &mut tx,
            mem: &me.mem,
        };
        SCRATCH.with_borrow_mut(|scratch| {
            let mut dests = Dests {
                src_q: q,
                ..Dests::default()
            };
            scratch.watch = me.tx_watch;
            loop {
                if self.drain(src, me, &mut ring, &mut ctl, &mem, &mut dests, scratch) {
                    return;
                }
                // The bound: kicks stay off (the ring is not empty; a resumed drain
                // re-enables them when it is, and looks again, §2.7.10).
                let _ = ring.state.disable_notification();
                match ctl.notifier.resume_later() {
                    Ok(()) => {
                        PortCounters::add(&self.slots[src].counters.tx_yields, 1);
                        return;
                    }
                    // Without its timer the queue would never resume: drain on.
                    Err(e) => tracing::warn!(port = src, error = %e, "cannot arm the resume"),
                }
            }
        });
    }

    /// [`Self::service_txq`]'s drain: true when it is over (the queue is empty with kicks
    /// on, or stopped), false at the per-event bound.
    #[allow(clippy::too_many_arguments)]
    fn drain(
        &self,
        src: usize,
        me: &Attached,
        ring: &mut LiveRing<'_>,
        ctl: &mut TxCtl,
        mem: &GuestMemoryMmap,
        dests: &mut Dests,
        scratch: &mut Scratch,
    ) -> bool {
        let mut left = FRAMES_PER_EVENT;
        for _ in 0..ROUNDS_PER_EVENT {
            // Kicks off while draining (with EVENT_IDX a no-op: the driver kicks once when
            // it passes the event index, which the drain leaves behind).
            let _ = ring.state.disable_notification();
            loop {
                if left == 0 {
                    return false;
                }
                let (end, taken) =
                    self.tx_batch(src, ring, ctl, mem, dests, scratch, left.min(TX_BATCH));
                left = left.saturating_sub(taken.max(1));
                self.flush_dests(dests);
                if !scratch.sent_small.is_empty() {
                    self.tell_rx(src, me, &scratch.sent_small);
                    scratch.sent_small.clear();
                }
                match end {
                    BatchEnd::More => self.fire_port_due(src, me, ring, ctl, mem),
                    BatchEnd::Stop => {
                        if revoked_in(mem).is_some() {
                            me.revocation.check(); // this thread may not be the port's worker
                        }
                        return true;
                    }
                    BatchEnd::Empty => break,
                }
            }
            // Empty: re-enable kicks and look again (§2.7.10: the driver may have added
            // buffers before it saw the notification flag or event index).
            if ring.state.enable_notification().unwrap_or(false) {
                self.fire_port_due(src, me, ring, ctl, mem);
                continue;
            }
            if ctl.notifier.resuming() || !self.kick_wait(src, me, ring, ctl, mem) {
                return true;
            }
        }
        false
    }

    /// The transmit queue is empty with kicks enabled: poll it for the wait policy's window
    /// (kicks off meanwhile; hold timers of this port's queues delivered here, since its
    /// worker is not in epoll). True when work arrived: drain again.
    fn kick_wait(
        &self,
        src: usize,
        me: &Attached,
        tx: &mut LiveRing<'_>,
        ctl: &mut TxCtl,
        mem: &GuestMemoryMmap,
    ) -> bool {
        let Ok(PollStart::Poll(mut w)) = ctl.poller.begin(tx, mem) else {
            return false;
        };
        loop {
            let now = now_ns();
            if has_work(tx, mem).unwrap_or(false) {
                ctl.poller.hit(now);
                return true;
            }
            let (notifier, mut ring) = ctl.split(&mut *tx.state, tx.mem);
            let _ = notifier.fire_due(now, &mut ring, mem);
            self.fire_rx_due(src, me, now);
            if !ctl.poller.spin(&mut w, now, false) {
                return ctl.poller.finish(tx, mem).unwrap_or(false);
            }
        }
    }

    /// Between transmit batches: deliver port `src`'s hold timers that are due. Its worker
    /// serves them from epoll, which it reaches only at the per-event bound or when its
    /// driver lets the transmit ring run empty; without this a held receive interrupt of
    /// the port waited up to [`FRAMES_PER_EVENT`] frames, several hold times
    /// (`tests/hold_timer_starvation.rs`). With nothing armed it costs one load per pair
    /// and no lock and no clock read; the receive queue's vring and moderation lock are
    /// taken only when its hold is due.
    fn fire_port_due(
        &self,
        src: usize,
        me: &Attached,
        tx: &mut LiveRing<'_>,
        ctl: &mut TxCtl,
        mem: &GuestMemoryMmap,
    ) {
        // A pending resume's timer is left to epoll by `fire_due` (`on_tx_timer` resumes
        // the drain).
        let tx_at = ctl.notifier.deadline();
        let rx_at = me.rx_deadline();
        if tx_at.is_none() && rx_at == u64::MAX {
            return;
        }
        let now = now_ns();
        if tx_at.is_some_and(|d| now >= d) {
            // Transmit completions are published by our own writer: their notification
            // decisions go through the queue's window (see `WindowRing`).
            let (notifier, mut ring) = ctl.split(&mut *tx.state, tx.mem);
            if let Err(e) = notifier.fire_due(now, &mut ring, mem) {
                tracing::warn!(port = src, error = %e, "transmit notification failed");
            }
        }
        if now >= rx_at {
            self.fire_rx_due(src, me, now);
        }
    }

    /// Tell port `p`'s receive moderation what its driver just transmitted (the small
    /// frames of a batch, `dim-lat` only): a short message may release the held receive
    /// completions ahead of its response.
    fn tell_rx(&self, p: usize, me: &Attached, sent: &[CompletionMeta]) {
        let mem = me.mem.memory();
        // The response may come back on any of the port's receive queues (the flow hash
        // picks it), so every running one is told.
        for pair in &me.pairs {
            let mut rx = pair.rx.get_mut();
            if !rx.get_queue().ready() || !rx.is_enabled() {
                continue;
            }
            let mut ctl = pair.rx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
            let (notifier, mut ring) = ctl.split(&mut rx);
            if let Err(e) = notifier.transmitted(sent, &mut ring, &mem) {
                tracing::warn!(port = p, error = %e, "receive notification failed");
            }
        }
    }

    /// Deliver port `p`'s receive hold timers that are due (its worker is busy polling or
    /// forwarding). A pair whose deadline watch shows nothing due is skipped without a
    /// lock; otherwise its receive vring, then its moderation lock, are taken and the
    /// deadline checked again under them (the watch is only a hint).
    fn fire_rx_due(&self, p: usize, me: &Attached, now: u64) {
        for (pair, at) in me.pairs.iter().zip(me.rx_deadlines()) {
            if now < at.load(Ordering::Relaxed) {
                continue;
            }
            // The memory is loaded only for a due pair (a kick wait calls this per spin).
            let mem = me.mem.memory();
            pair.with_rx_moderation(&mem, |notifier, ring| {
                if notifier.deadline().is_some_and(|d| now >= d) {
                    if let Err(e) = notifier.fire_due(now, ring, &mem) {
                        tracing::warn!(port = p, error = %e, "receive notification failed");
                    }
                }
            });
        }
    }

    /// Port `p`'s frontend stops vring `index` (GET_VRING_BASE, before the backend reads
    /// its position): a receive queue's parked entries go out now
    /// ([`crate::rx::Parked`]), so that every buffer taken from the ring is returned.
    pub fn on_ring_stop(&self, p: usize, index: usize) {
        let Some(me) = self.attached(p) else {
            return;
        };
        // Receive queues have the even indices below the control queue's.
        let Some(pair) = me.pairs.get(index / 2).filter(|_| index % 2 == 0) else {
            return;
        };
        let mem = me.mem.memory();
        let mut rx = pair.rx.get_mut();
        let mut ctl = pair.rx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = ctl.settle_parked(&mut rx, &mem, true) {
            tracing::warn!(port = p, error = %e, "receive notification failed");
        }
    }

    /// Port `p`'s receive hold timer of queue pair `q` fired.
    pub fn on_rx_timer(&self, p: usize, q: usize) {
        let Some(me) = self.attached(p) else {
            return;
        };
        let Some(pair) = me.pairs.get(q) else {
            return;
        };
        let mem = me.mem.memory();
        pair.with_rx_moderation(&mem, |notifier, ring| {
            if notifier.take_expiry() {
                if let Err(e) = notifier.on_timer(ring, &mem) {
                    tracing::warn!(port = p, error = %e, "receive notification failed");
                }
            }
        });
    }

    /// Port `p`'s transmit hold timer of queue pair `q` fired (held completions, or a
    /// resume).
    pub fn on_tx_timer(&self, p: usize, q: usize) {
        let Some(me) = self.attached(p) else {
            return;
        };
        let Some(pair) = me.pairs.get(q) else {
            return;
        };
        let resume = {
            let mut tx = pair.tx.get_mut();
            let mem = me.mem.memory();
            let mut ctl = pair.tx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
            let (notifier, mut ring) = ctl.split(&mut tx, &me.mem);
            notifier.take_expiry() && notifier.on_timer(&mut ring, &mem).unwrap_or(false)
        };
        if resume {
            match &self.pmd {
                Some(pmd) => pmd.wake(),
                None => self.service_txq(p, &me, q),
            }
        }
    }

    /// Port `p`'s transmit queue of pair `q` was kicked.
    pub fn on_tx_kick(&self, p: usize, q: usize) {
        let me = self.attached(p);
        if let Some(pair) = me.as_ref().and_then(|me| me.pairs.get(q)) {
            pair.tx_ctl
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .poller
                .on_kick();
        }
        match (&self.pmd, me) {
            (Some(pmd), _) => pmd.wake(),
            (None, Some(me)) => self.service_txq(p, &me, q),
            (None, None) => {}
        }
    }
}

/// The indexes of the set bits of `mask`, lowest first.
fn bits(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            i
        })
    })
}
