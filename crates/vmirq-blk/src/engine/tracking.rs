//! Inflight tracking in the engine (vhost-user INFLIGHT_SHMFD, see [`crate::inflight`]):
//! mark each head taken from the available ring, clear it around the used-ring update, and
//! when the ring starts with an area that was in use, resubmit the heads still marked before
//! serving the available ring.
//!
//! Without an area every hook is one branch on `None`.

use super::{EngineError, QueueEngine, Ring};
use crate::chain::DescTable;
use crate::inflight::area::{QueueLog, Recovery};
use crate::inflight::QueueSlot;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use virtio_queue::QueueT;
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmirq_vhost::notify::Submissions;

/// The engine's inflight-tracking state.
#[derive(Debug, Default)]
pub(super) struct Tracking {
    /// Where the vhost-user side installs the area and signals ring starts.
    slot: Option<Arc<QueueSlot>>,
    /// The region marks go to (while the ring runs with an area).
    log: Option<QueueLog>,
    /// Counter value of the next head taken.
    counter: u64,
    /// Heads still to resubmit, the oldest last.
    resubmit: Vec<u16>,
}

impl Tracking {
    /// A head was taken from the available ring.
    pub(super) fn popped(&mut self, head: u16) {
        if let Some(log) = &self.log {
            log.mark(head, self.counter);
            self.counter = self.counter.wrapping_add(1);
        }
    }

    /// `head` is about to go in the used ring.
    pub(super) fn before_used(&self, head: u16) {
        if let Some(log) = &self.log {
            log.before_used(head);
        }
    }

    /// `head` went in the used ring, whose index is now `used_idx`.
    pub(super) fn after_used(&self, head: u16, used_idx: u16) {
        if let Some(log) = &self.log {
            log.after_used(head, used_idx);
        }
    }
}

impl QueueEngine {
    /// Connect this queue to the connection's inflight state.
    pub fn attach_inflight(&mut self, slot: Arc<QueueSlot>) {
        self.tracking.slot = Some(slot);
    }

    /// Heads waiting to be resubmitted.
    #[must_use]
    pub fn resubmit_pending(&self) -> usize {
        self.tracking.resubmit.len()
    }

    /// If the ring (re)started since the last event, adopt the installed region and follow
    /// the spec's reconnect steps: the available ring resumes after the heads taken before
    /// (`used index + heads still marked`), the marked heads are queued for resubmission, and
    /// the driver gets one notification (completions made before a crash may never have been
    /// signalled, e.g. while a policy held them).
    pub(super) fn start_tracking(
        &mut self,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<(), EngineError> {
        let Some(log) = self.tracking.slot.as_ref().and_then(|s| s.take_start()) else {
            return Ok(());
        };
        self.tracking.log = None;
        self.tracking.resubmit.clear();
        let Some(log) = log else {
            return Ok(());
        };
        let queue = ring.queue_mut();
        let size = queue.size();
        if size > log.slots() {
            tracing::error!(
                queue = self.parts.index,
                ring_size = size,
                region_size = log.slots(),
                "inflight region smaller than the ring; requests of this ring are not tracked"
            );
            return Ok(());
        }
        let used = queue.used_idx(mem, Ordering::Acquire)?.0;
        match log.recover(size, used) {
            Recovery::Fresh => self.tracking.counter = 0,
            Recovery::Resume {
                heads,
                next_counter,
                fixed_last_batch,
            } => {
                let marked = u16::try_from(heads.len()).unwrap_or(u16::MAX);
                let next_avail = used.wrapping_add(marked);
                queue.set_next_avail(next_avail);
                queue.set_next_used(used);
                self.tracking.counter = next_counter;
                // A head still in flight here (the ring restarted while storage was busy)
                // completes normally; it is not started twice.
                self.tracking.resubmit = heads
                    .into_iter()
                    .rev()
                    .filter(|&h| !self.inflight.holds(h))
                    .collect();
                tracing::info!(
                    queue = self.parts.index,
                    resubmit = self.tracking.resubmit.len(),
                    used_idx = used,
                    next_avail,
                    fixed_last_batch,
                    "ring resumes from the inflight area"
                );
                ring.signal()?;
            }
        }
        self.tracking.log = Some(log);
        Ok(())
    }

    /// Start as many resubmitted heads as there are free tags (before anything is taken from
    /// the available ring). The chains are read again from the descriptor table and checked
    /// like new ones (a chain that breaks a ring rule breaks the queue again); they keep their
    /// marks and counters. Returns whether there were any.
    pub(super) fn resubmit(
        &mut self,
        ring: &mut dyn Ring,
        mem: &Arc<GuestMemoryMmap>,
    ) -> Result<bool, EngineError> {
        if self.tracking.resubmit.is_empty() {
            return Ok(false);
        }
        let table = {
            let q = ring.queue_mut();
            DescTable {
                addr: GuestAddress(q.desc_table()),
                size: q.size(),
            }
        };
        let mut subs = Submissions::default();
        let mut broken = None;
        while self.inflight.has_free_tag() {
            let Some(head) = self.tracking.resubmit.pop() else {
                break;
            };
            if let Err(e) = self.take_chain(head, table, mem, &mut subs) {
                broken = Some(e);
                break;
            }
        }
        self.end_batch(subs, broken, ring, mem)?;
        Ok(true)
    }
}
