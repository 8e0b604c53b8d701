//! The per-port worker's path (`--datapath` other than pmd): each port's vhost-user worker
//! thread drains its own transmit queues ([`Fabric::service_txq`]), polls them for the
//! kick-wait policy's window when they run empty ([`Fabric::kick_wait`]), delivers the
//! port's hold timers while it is busy ([`Fabric::fire_port_due`]), and reacts to its
//! events: transmit and receive kicks, hold timers, and the refill kick that wakes the
//! sources blocked on it ([`Fabric::wake_blocked`]).
//!
//! The frame path itself (switching, delivery, batches of transmit chains) is in the
//! parent module; the lock order is the parent's.

use super::{lock, Attached, BatchEnd, Dests, Fabric, SCRATCH, TX_BATCH};
use crate::queues::{RxCtl, TxCtl, WindowRing};
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use vhost_user_backend::VringT;
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryMmap};
use vmirq_policy::moderation::CompletionMeta;
use vmirq_vhost::clock::now_ns;
use vmirq_vhost::poll::{has_work, PollStart};
use vmirq_vhost::sigbus::revoked_in;
use vmirq_vhost::LiveRing;

impl Fabric {
    /// Port `p`'s receive queue was kicked (its driver added buffers): service the transmit
    /// queues waiting for it.
    pub fn on_rx_kick(&self, p: usize) {
        self.wake_blocked(p);
    }

    pub(super) fn wake_blocked(&self, p: usize) {
        let Some(s) = self.slots.get(p) else {
            return;
        };
        let mut mask = s.blocked.swap(0, Ordering::AcqRel);
        if let Some(pmd) = &self.pmd {
            if mask != 0 {
                pmd.wake();
            }
            return;
        }
        while mask != 0 {
            let src = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            self.service_tx(src);
        }
    }

    /// [`Self::service_txq`] of every transmit queue of port `src`.
    pub fn service_tx(&self, src: usize) {
        let Some(me) = self.attached(src) else {
            return;
        };
        for q in 0..me.pairs.len() {
            self.service_txq(src, &me, q);
        }
    }

    /// Take every available frame off port `src`'s transmit queue of pair `q` and switch
    /// it, until the queue is empty (kicks re-enabled, after the kick-wait policy's poll
    /// window if it has one) or a destination has no room. Completions go through the
    /// queue's moderation.
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
        let watch = lock(&me.rx_ctl).tx_watch;
        SCRATCH.with_borrow_mut(|scratch| {
            let mut dests = Dests {
                src_q: q,
                ..Dests::default()
            };
            scratch.watch = watch;
            loop {
                let (end, _) = self.tx_batch(
                    src, &mut ring, &mut ctl, &mem, &mut dests, scratch, TX_BATCH,
                );
                self.flush_dests(&mut dests);
                if !scratch.sent_small.is_empty() {
                    self.tell_rx(src, me, &scratch.sent_small);
                    scratch.sent_small.clear();
                }
                match end {
                    BatchEnd::More => {
                        self.fire_port_due(src, me, &mut ring, &mut ctl, &mem);
                        continue;
                    }
                    BatchEnd::Stop => {
                        if revoked_in(&mem).is_some() {
                            me.revocation.check(); // this thread may not be the port's worker
                        }
                        return;
                    }
                    BatchEnd::Empty => {}
                }
                // Empty: re-enable kicks and look again (§2.7.10: the driver may have added
                // buffers before it saw the notification flag or event index).
                if ring.state.enable_notification().unwrap_or(false) {
                    self.fire_port_due(src, me, &mut ring, &mut ctl, &mem);
                    continue;
                }
                if ctl.notifier.resuming() || !self.kick_wait(src, me, &mut ring, &mut ctl, &mem) {
                    return;
                }
            }
        });
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
    /// serves them from epoll, which it does not reach while its driver keeps the transmit
    /// ring from running empty; without this a held receive interrupt of the port waited
    /// for the driver to pause (`tests/hold_timer_starvation.rs`). Costs one clock read
    /// and the receive queue's moderation lock per batch (up to [`TX_BATCH`] frames); the
    /// receive vring is locked only when its hold is due.
    fn fire_port_due(
        &self,
        src: usize,
        me: &Attached,
        tx: &mut LiveRing<'_>,
        ctl: &mut TxCtl,
        mem: &GuestMemoryMmap,
    ) {
        let now = now_ns();
        // Transmit completions are published by our own writer: their notification
        // decisions go through the queue's window (see `WindowRing`).
        let (notifier, mut ring) = ctl.split(&mut *tx.state, tx.mem);
        if let Err(e) = notifier.fire_due(now, &mut ring, mem) {
            tracing::warn!(port = src, error = %e, "transmit notification failed");
        }
        // Lock order: each moderation lock alone, released before `fire_rx_due` takes the
        // receive vrings and then the moderation locks again.
        let rx_due = me.pairs.iter().any(|pair| {
            lock(&pair.rx_ctl)
                .notifier
                .deadline()
                .is_some_and(|d| now >= d)
        });
        if rx_due {
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
            let RxCtl {
                notifier, window, ..
            } = &mut *ctl;
            let mut ring = WindowRing::rx(&mut rx, window);
            if let Err(e) = notifier.transmitted(sent, &mut ring, &mem) {
                tracing::warn!(port = p, error = %e, "receive notification failed");
            }
        }
    }

    /// Deliver port `p`'s receive hold timer if it is due (its worker is busy polling or
    /// forwarding).
    fn fire_rx_due(&self, p: usize, me: &Attached, now: u64) {
        let mem = me.mem.memory();
        for pair in &me.pairs {
            let mut rx = pair.rx.get_mut();
            let mut ctl = pair.rx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
            let RxCtl {
                notifier, window, ..
            } = &mut *ctl;
            if notifier.deadline().is_some_and(|d| now >= d) {
                let mut ring = WindowRing::rx(&mut rx, window);
                if let Err(e) = notifier.fire_due(now, &mut ring, &mem) {
                    tracing::warn!(port = p, error = %e, "receive notification failed");
                }
            }
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
        let mut rx = pair.rx.get_mut();
        let mem = me.mem.memory();
        let mut ctl = pair.rx_ctl.lock().unwrap_or_else(PoisonError::into_inner);
        let RxCtl {
            notifier, window, ..
        } = &mut *ctl;
        if notifier.take_expiry() {
            let mut ring = WindowRing::rx(&mut rx, window);
            if let Err(e) = notifier.on_timer(&mut ring, &mem) {
                tracing::warn!(port = p, error = %e, "receive notification failed");
            }
        }
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
