//! Receive frames written into their buffers whose used entries wait for the queue's next
//! notification (`dim-lat:overtake=on`, `vmirq_policy::moderation::dim::burst`).
//!
//! Why: a driver reads its used ring in order, so a short message written behind bulk
//! frames whose interrupt is held is read after all of them, however early its own
//! interrupt comes. When the policy holds a bulk frame's notification and says it parks
//! ([`vmirq_policy::moderation::Moderation::parks`]), the device keeps the frame's used
//! entries here instead of publishing them; a frame that does not park is published at
//! once, ahead of the parked ones. The parked entries are published, in the order their
//! frames arrived, right before the queue's next notification decision (its
//! [`crate::queues::WindowRing`] does it), so no notification ever covers an unpublished
//! entry.
//!
//! The rules that keep this correct:
//! - Order within a flow: a frame whose flow ([`crate::flow::flow_hash`], one bit of it per
//!   flow here: a false match only costs an overtake) already has parked frames parks too.
//!   A frame without a flow hash (an IP header cut short) never overtakes anything, and
//!   parked it stands for every flow.
//! - VIRTIO_F_IN_ORDER forbids using buffers out of ring order: the fabric does not park on
//!   a queue whose driver negotiated it.
//! - Nothing stays parked for good: the entries go out with the next notification decision
//!   (the policy's `Notify`, its hold timer, a bypass); when the policy holds nothing any
//!   more (its policy was replaced by the guest's NOTF_COAL command) or the queue has no
//!   room for the next frame (the driver must see its buffers to refill), at the end of the
//!   batch; and when the frontend stops the ring (GET_VRING_BASE), before it reads the ring
//!   position. A driver reset forgets them with the rest of the ring.

use super::UsedBatch;
use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;

/// A receive queue's parked used entries and the flows they belong to.
#[derive(Debug, Default)]
pub struct Parked {
    used: UsedBatch,
    /// One bit per flow hash (its value modulo 64) with a parked frame.
    flows: u64,
}

impl Parked {
    /// No entry waiting.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }

    /// Whether a frame of flow `hash` must wait behind the parked frames (its flow has
    /// parked frames; a frame without a flow hash waits behind anything parked).
    #[must_use]
    pub fn holds_flow(&self, hash: Option<u64>) -> bool {
        !self.is_empty() && hash.is_none_or(|h| self.flows & flow_bit(h) != 0)
    }

    /// Park the entries of one frame of flow `hash` (taken out of `frame`).
    pub fn park(&mut self, frame: &mut UsedBatch, hash: Option<u64>) {
        self.flows |= hash.map_or(u64::MAX, flow_bit);
        self.used.append(frame);
    }

    /// Publish every parked entry ([`UsedBatch::publish`]) and forget the flows.
    ///
    /// # Errors
    /// The used ring lies outside guest memory (the entries are forgotten either way: the
    /// queue is broken).
    pub fn publish(
        &mut self,
        q: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<(), vm_memory::GuestMemoryError> {
        self.flows = 0;
        self.used.publish(q, mem)
    }

    /// Forget every parked entry without publishing it (the driver reset the device: its
    /// rings start anew).
    pub fn discard(&mut self) {
        self.flows = 0;
        self.used.clear();
    }
}

fn flow_bit(hash: u64) -> u64 {
    1 << (hash % 64)
}
