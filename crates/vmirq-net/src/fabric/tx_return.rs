//! Transmit chains going back to their driver: the per-port loop and the pmd bursts both
//! return their chains through a [`TxReturn`].
//!
//! The used ring is written by [`crate::rx::publish_used`] (as the receive side does), not
//! by virtio-queue's `add_used`: the entries of up to [`CHUNK`] chains are written, then
//! published with ONE used-index store, then the moderation policy sees the chunk's
//! submissions and completions (one call each, `Moderation::on_submits` and
//! `on_completions`) and makes its notification decision for the whole chunk
//! through the queue's [`UsedWindow`](crate::rx::UsedWindow) ([`WindowRing`]). The rules of
//! `add_used` stay: a head outside the descriptor table is refused (the queue is broken),
//! the index wraps at 2^16 and the slot at the ring size, a used ring outside guest memory
//! is an error (the queue is broken), and no entry is visible before it is written (the
//! index store is a release). Net has no INFLIGHT, so there is no inflight bookkeeping.
//!
//! A chunk is published when it is full, so a driver polling the used ring (testpmd's
//! virtio-user) sees its buffers back after at most [`CHUNK`] frames of a long batch.

use super::TxCtl;
use crate::counters::PortCounters;
use crate::rx::publish_used;
use virtio_queue::QueueT;
use vm_memory::GuestMemoryMmap;
use vmirq_policy::moderation::{CompletionMeta, RequestKind};
use vmirq_vhost::notify::Submissions;
use vmirq_vhost::LiveRing;

/// Most chains published with one index store and one notification decision.
pub(super) const CHUNK: usize = 32;
/// The used length of every transmit chain (the device writes nothing into it).
const ZERO_LENS: [u32; CHUNK] = [0; CHUNK];

/// Reusable buffers of a [`TxReturn`] (no allocation per batch once warm).
#[derive(Debug, Default)]
pub(super) struct TxUsed {
    /// At most [`CHUNK`] heads (published when full).
    heads: Vec<u16>,
    metas: Vec<CompletionMeta>,
}

/// Transmit chains going back to their driver in one batch (see the module docs).
pub(super) struct TxReturn<'s> {
    s: &'s mut TxUsed,
    /// The queue broke (a bad head or used ring): nothing more is returned.
    broken: bool,
}

impl<'s> TxReturn<'s> {
    pub(super) fn new(s: &'s mut TxUsed) -> Self {
        s.heads.clear();
        s.metas.clear();
        Self { s, broken: false }
    }

    /// Chain `head` (which carried `bytes` of frame) goes back with length 0 (the device
    /// wrote nothing into it); false when the ring or its notification broke (counted),
    /// which ends the batch.
    #[inline(always)]
    pub(super) fn chain(
        &mut self,
        ctl: &mut TxCtl,
        tx: &mut LiveRing<'_>,
        mem: &GuestMemoryMmap,
        head: u16,
        bytes: u32,
        c: &PortCounters,
    ) -> bool {
        if self.broken {
            return false;
        }
        // `add_used`'s rule: a used entry names a descriptor of the table.
        if head >= tx.state.get_queue().size() {
            tracing::warn!(head, "transmit chain head outside the descriptor table");
            self.break_queue(c);
            return false;
        }
        self.s.heads.push(head);
        self.s
            .metas
            .push(CompletionMeta::new(RequestKind::Write, bytes));
        if self.s.heads.len() >= CHUNK {
            return self.publish(ctl, tx, mem, c);
        }
        true
    }

    /// The batch is complete: publish what is left, the moderation decides on its
    /// notification. Returns whether the queue broke during the batch (counted).
    pub(super) fn finish(
        mut self,
        ctl: &mut TxCtl,
        tx: &mut LiveRing<'_>,
        mem: &GuestMemoryMmap,
        c: &PortCounters,
    ) -> bool {
        if !self.broken {
            let _ = self.publish(ctl, tx, mem, c);
        }
        self.broken
    }

    fn break_queue(&mut self, c: &PortCounters) {
        self.broken = true;
        self.s.heads.clear();
        self.s.metas.clear();
        PortCounters::add(&c.queue_broken, 1);
    }

    /// Publish the waiting entries with one index store, then feed their events to the
    /// policy and act on its decision; false when the ring broke.
    fn publish(
        &mut self,
        ctl: &mut TxCtl,
        tx: &mut LiveRing<'_>,
        mem: &GuestMemoryMmap,
        c: &PortCounters,
    ) -> bool {
        if self.s.heads.is_empty() {
            return true;
        }
        let q = tx.state.get_queue_mut();
        if ctl.used_next != Some(q.next_used()) {
            // First publish, or the frontend set the ring's base anew: the window starts
            // at the ring's position now.
            ctl.window.reset(q.next_used());
        }
        // `heads` holds at most CHUNK entries (published when full).
        let lens = &ZERO_LENS[..self.s.heads.len().min(CHUNK)];
        if publish_used(q, mem, &self.s.heads, lens).is_err() {
            tracing::warn!("transmit used ring outside guest memory");
            self.break_queue(c);
            return false;
        }
        ctl.used_next = Some(q.next_used());
        self.s.heads.clear();
        let (notifier, mut ring) = ctl.split(&mut *tx.state, tx.mem);
        // The chunk's events in one call each (the same decisions as one per chain).
        let n = u32::try_from(self.s.metas.len()).unwrap_or(u32::MAX);
        let mut subs = Submissions::default();
        notifier.submitted_n(&mut subs, n);
        let mut batch = notifier.completions();
        let done = notifier
            .submissions_done(&subs, &mut ring, mem)
            .and_then(|_| notifier.completed_all(&mut batch, &self.s.metas, &mut ring, mem))
            .and_then(|_| notifier.completions_done(batch, &mut ring, mem))
            .and_then(|last| notifier.follow(last));
        self.s.metas.clear();
        if let Err(e) = done {
            tracing::warn!(error = %e, "transmit notification failed");
        }
        true
    }
}

#[cfg(test)]
mod tests;
