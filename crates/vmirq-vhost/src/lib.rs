//! # vmirq-vhost: device-independent vhost-user backend machinery
//!
//! What every vmirq vhost-user device backend (vmirq-blk, vmirq-net) needs besides its own
//! request handling: per-queue notification moderation ([`notify`]: a `vmirq_policy`
//! moderation policy, its hold timerfd ([`timer`]) and EVENT_IDX / NO_INTERRUPT on top),
//! bounded kick polling ([`poll`], fed by [`cpustat`] for the contention gate), per-queue
//! counters with a device extension point ([`counters`]) and their Prometheus endpoint
//! ([`metrics`]); the vhost-user message guard ([`guard`]), which checks every frontend
//! message before rust-vmm's handler sees it and answers INFLIGHT_SHMFD itself, and the
//! inflight areas it hands to the queues ([`inflight`]); the descriptor chain walker that
//! enforces the virtio ring rules on hostile guests ([`chain`]); one guarded frontend
//! connection's daemon and its leak-free teardown ([`daemon`]); SIGUSR1/SIGINT/SIGTERM
//! handling for a server process ([`signals`]). Behind the `test-utils`
//! feature: the driver-side mock guest (`mock_guest`) and an adversarial vhost-user
//! frontend (`raw_frontend`) for every device's tests and fuzz targets.
//!
//! Nothing here knows a device type or talks vhost-user itself: the queue machinery works on
//! a [`Ring`] (a virtio-queue `Queue` plus a way to signal the driver) and a guest memory
//! snapshot, so tests drive it with a mock guest.

pub mod chain;
pub mod clock;
pub mod counters;
pub mod cpustat;
pub mod daemon;
pub mod guard;
pub mod inflight;
pub mod metrics;
#[cfg(feature = "test-utils")]
pub mod mock_guest;
pub mod notify;
pub mod poll;
#[cfg(feature = "test-utils")]
pub mod raw_frontend;
pub mod signals;
pub mod timer;

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vhost_user_backend::VringState;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

/// Guest memory as the vhost-user machinery shares it.
pub type GuestMem = GuestMemoryAtomic<GuestMemoryMmap>;

/// A virtio queue plus the means to signal the driver: the part of a vring the queue
/// machinery needs.
pub trait Ring {
    /// The queue.
    fn queue_mut(&mut self) -> &mut Queue;
    /// Write the call eventfd (inject the guest interrupt).
    ///
    /// # Errors
    /// When the eventfd write fails.
    fn signal(&self) -> io::Result<()>;

    /// Whether the driver wants a used-buffer notification for the entries added since the
    /// last check: EVENT_IDX (`used_event` passed), or without it the available ring's
    /// NO_INTERRUPT flag (VIRTIO 1.2 §2.7.7.1; not handled by virtio-queue). The default
    /// asks the queue, which tracks the entries `add_used` added; a device that publishes
    /// used entries itself (vmirq-net writes a merged packet's buffers with one index store)
    /// overrides it.
    ///
    /// # Errors
    /// When the rings cannot be read.
    fn needs_notification(&mut self, mem: &GuestMemoryMmap) -> Result<bool> {
        let queue = self.queue_mut();
        if queue.event_idx_enabled() {
            return Ok(queue.needs_notification(mem)?);
        }
        let flags: u16 = mem
            .load(GuestAddress(queue.avail_ring()), Ordering::Acquire)
            .map(u16::from_le)
            .map_err(virtio_queue::Error::GuestMemory)?;
        Ok(flags & VRING_AVAIL_F_NO_INTERRUPT == 0)
    }

    /// Guest memory as it is now, when another thread can change it while the device works
    /// (vhost-user: the frontend's memory-table messages are handled beside the worker, and
    /// a request published after their ack may point into a region the worker's snapshot
    /// lacks). `None`: the snapshot the device was called with stays current.
    fn current_memory(&self) -> Option<Arc<GuestMemoryMmap>> {
        None
    }
}

/// `VRING_AVAIL_F_NO_INTERRUPT`: the driver asks for no used-buffer notifications.
const VRING_AVAIL_F_NO_INTERRUPT: u16 = 1;

/// A vhost-user vring as a device's queue sees it: the vring's queue and call fd, and the
/// device's guest memory, which the frontend's memory-table messages change from another
/// thread (so [`Ring::current_memory`] reads it anew).
pub struct LiveRing<'a> {
    /// The vring (locked by the caller).
    pub state: &'a mut VringState<GuestMem>,
    /// The device's guest memory.
    pub mem: &'a GuestMem,
}

impl Ring for LiveRing<'_> {
    fn queue_mut(&mut self) -> &mut Queue {
        self.state.get_queue_mut()
    }
    fn signal(&self) -> io::Result<()> {
        self.state.signal_used_queue()
    }
    fn current_memory(&self) -> Option<Arc<GuestMemoryMmap>> {
        Some(self.mem.memory().into_inner())
    }
}

/// Failures of the queue machinery: the device usually stops the queue on them.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Reading or writing the rings failed (bad ring addresses, an available index that
    /// moved by more than the queue size).
    #[error("virtqueue access failed")]
    Queue(#[from] virtio_queue::Error),
    /// Timer or eventfd failure.
    #[error("event fd operation failed")]
    Io(#[from] io::Error),
}

/// Result alias of the queue machinery.
pub type Result<T> = std::result::Result<T, QueueError>;
