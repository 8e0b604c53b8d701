//! Inflight tracking in the engine (vhost-user INFLIGHT_SHMFD): the marks, the counter and
//! the ring-start recovery are `vmirq_vhost::inflight::tracking`'s; here the engine starts
//! the heads to resubmit, before serving the available ring.

use super::{EngineError, QueueEngine, Ring};
use crate::chain::DescTable;
use crate::inflight::QueueSlot;
use std::sync::Arc;
use virtio_queue::QueueT;
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmirq_vhost::notify::Submissions;

impl QueueEngine {
    /// Connect this queue to the connection's inflight state.
    pub fn attach_inflight(&mut self, slot: Arc<QueueSlot>) {
        self.tracking.attach(slot);
    }

    /// Heads waiting to be resubmitted.
    #[must_use]
    pub fn resubmit_pending(&self) -> usize {
        self.tracking.resubmit_pending()
    }

    /// If the ring (re)started, adopt the inflight area and queue the heads to resubmit
    /// (see `Tracking::start`); a head whose storage is still in flight completes normally.
    pub(super) fn start_tracking(
        &mut self,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<(), EngineError> {
        let inflight = &self.inflight;
        self.tracking
            .start(ring, mem, self.parts.index, |h| inflight.holds(h))?;
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
        if self.tracking.resubmit_pending() == 0 {
            return Ok(false);
        }
        let table = {
            let q = ring.queue_mut();
            DescTable {
                addr: GuestAddress(q.desc_table()),
                size: q.size(),
                indirect: self.indirect_desc,
            }
        };
        let mut subs = Submissions::default();
        let mut broken = None;
        while self.inflight.has_free_tag() {
            let Some(head) = self.tracking.next_resubmit() else {
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
