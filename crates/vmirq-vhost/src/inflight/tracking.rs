//! Inflight tracking in a queue (vhost-user INFLIGHT_SHMFD, see [`crate::inflight`]): mark
//! each head taken from the available ring, clear it around the used-ring update, and when
//! the ring starts with an area that was in use, queue the heads still marked for
//! resubmission before the device serves the available ring.
//!
//! The device owns the resubmission itself (it reads the chains again and checks them like
//! new ones); [`Tracking`] holds the marks, the counter and the list. Without an area every
//! hook is one branch on `None`.

use super::area::{QueueLog, Recovery};
use super::QueueSlot;
use crate::{Result, Ring};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use virtio_queue::QueueT;
use vm_memory::GuestMemoryMmap;

/// One queue's inflight-tracking state.
#[derive(Debug, Default)]
pub struct Tracking {
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
    /// Connect this queue to the connection's inflight state.
    pub fn attach(&mut self, slot: Arc<QueueSlot>) {
        self.slot = Some(slot);
    }

    /// A head was taken from the available ring.
    pub fn popped(&mut self, head: u16) {
        if let Some(log) = &self.log {
            log.mark(head, self.counter);
            self.counter = self.counter.wrapping_add(1);
        }
    }

    /// `head` is about to go in the used ring.
    pub fn before_used(&self, head: u16) {
        if let Some(log) = &self.log {
            log.before_used(head);
        }
    }

    /// `head` went in the used ring, whose index is now `used_idx`.
    pub fn after_used(&self, head: u16, used_idx: u16) {
        if let Some(log) = &self.log {
            log.after_used(head, used_idx);
        }
    }

    /// Heads waiting to be resubmitted.
    #[must_use]
    pub fn resubmit_pending(&self) -> usize {
        self.resubmit.len()
    }

    /// The next head to resubmit, oldest first.
    pub fn next_resubmit(&mut self) -> Option<u16> {
        self.resubmit.pop()
    }

    /// If the ring (re)started since the last event, adopt the installed region and follow
    /// the spec's reconnect steps: the available ring resumes after the heads taken before
    /// (`used index + heads still marked`), the marked heads are queued for resubmission
    /// (except those `in_flight` says the device still has: they complete normally and are
    /// not started twice), and the driver gets one notification (completions made before a
    /// crash may never have been signalled, e.g. while a policy held them). `queue` names
    /// the queue in logs.
    ///
    /// # Errors
    /// When the used ring cannot be read or the call eventfd written.
    pub fn start(
        &mut self,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
        queue: u16,
        in_flight: impl Fn(u16) -> bool,
    ) -> Result<()> {
        let Some(log) = self.slot.as_ref().and_then(|s| s.take_start()) else {
            return Ok(());
        };
        self.log = None;
        self.resubmit.clear();
        let Some(log) = log else {
            return Ok(());
        };
        let q = ring.queue_mut();
        let size = q.size();
        if size > log.slots() {
            tracing::error!(
                queue,
                ring_size = size,
                region_size = log.slots(),
                "inflight region smaller than the ring; requests of this ring are not tracked"
            );
            return Ok(());
        }
        let used = q.used_idx(mem, Ordering::Acquire)?.0;
        match log.recover(size, used) {
            Recovery::Fresh => self.counter = 0,
            Recovery::Resume {
                heads,
                next_counter,
                fixed_last_batch,
            } => {
                let marked = u16::try_from(heads.len()).unwrap_or(u16::MAX);
                let next_avail = used.wrapping_add(marked);
                q.set_next_avail(next_avail);
                q.set_next_used(used);
                self.counter = next_counter;
                self.resubmit = heads.into_iter().rev().filter(|&h| !in_flight(h)).collect();
                tracing::info!(
                    queue,
                    resubmit = self.resubmit.len(),
                    used_idx = used,
                    next_avail,
                    fixed_last_batch,
                    "ring resumes from the inflight area"
                );
                ring.signal()?;
            }
        }
        self.log = Some(log);
        Ok(())
    }
}
