//! The queue engine: one per virtio queue, driven by its worker thread.
//!
//! On a kick it drains the available ring in batches (notifications disabled while it works,
//! the usual virtio pattern), hands each batch to the storage backend, puts the completions
//! in the used ring and feeds every submission and completion to the queue's moderation
//! policy. A `Notify` decision signals the guest at once (subject to EVENT_IDX); the hold
//! timer follows the batch's last decision (armed for `Hold`, cancelled otherwise). Then the wait policy decides
//! whether to poll the available ring (bounded by its window) before going back to epoll.
//!
//! The engine does not know about vhost-user: it works on a [`Ring`] (a `Queue` and a way to
//! signal) and a guest memory snapshot, so tests drive it with a mock guest directly.

mod batch;
mod poll;

use crate::clock::now_ns;
use crate::counters::QueueCounters;
use crate::request::DiskGeometry;
use crate::storage::QueueIo;
use crate::timer::HoldTimer;
use std::io;
use std::sync::Arc;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmirq_policy::moderation::{Decision, Event, Moderation, Moderator};
use vmirq_policy::wait::{Wait, Waiter, WakeOutcome};
use vmirq_policy::Nanos;

/// `VRING_AVAIL_F_NO_INTERRUPT`: the driver asks for no used-buffer notifications.
const VRING_AVAIL_F_NO_INTERRUPT: u16 = 1;

/// Most batches drained in one call before yielding to the event loop (the engine re-arms
/// its timer immediately so it comes back). Bounds the time spent per event.
pub const MAX_BATCHES_PER_EVENT: usize = 64;

/// A virtio queue plus the means to signal the driver: the part of a vring the engine needs.
pub trait Ring {
    /// The queue.
    fn queue_mut(&mut self) -> &mut Queue;
    /// Write the call eventfd (inject the guest interrupt).
    ///
    /// # Errors
    /// When the eventfd write fails.
    fn signal(&self) -> io::Result<()>;
}

/// Errors that stop a queue (the queue is marked broken; other queues keep running).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Reading or writing the rings failed (bad ring addresses, bad head index).
    #[error("virtqueue access failed")]
    Queue(#[from] virtio_queue::Error),
    /// Timer or eventfd failure.
    #[error("event fd operation failed")]
    Io(#[from] io::Error),
}

/// Everything a queue engine is built from.
pub struct EngineParts {
    /// Queue index (for logs).
    pub index: u16,
    /// Storage context of this queue.
    pub io: Box<dyn QueueIo>,
    /// Disk geometry for request validation.
    pub geometry: DiskGeometry,
    /// GET_ID answer.
    pub device_id: [u8; crate::virtio::ID_LEN],
    /// Completion moderation policy.
    pub moderation: Moderation,
    /// Kick wait policy.
    pub waiter: Wait,
    /// Counters of this queue.
    pub counters: Arc<QueueCounters>,
    /// Bound on batches per event before yielding (normally [`MAX_BATCHES_PER_EVENT`]).
    pub max_batches_per_event: usize,
}

/// One queue's engine.
pub struct QueueEngine {
    parts: EngineParts,
    timer: HoldTimer,
    /// When the worker last went to sleep in epoll with a wait pending (for `Waiter::end`).
    sleeping_since: Option<Nanos>,
    /// The engine stopped early and must be resumed by its (immediately armed) timer.
    resume: bool,
    broken: bool,
    /// Request slots and storage operations, kept between batches so a batch allocates nothing.
    buffers: batch::BatchBuffers,
}

impl QueueEngine {
    /// A new engine.
    ///
    /// # Errors
    /// When the hold timer cannot be created.
    pub fn new(parts: EngineParts) -> io::Result<Self> {
        Ok(Self {
            parts,
            timer: HoldTimer::new()?,
            sleeping_since: None,
            resume: false,
            broken: false,
            buffers: batch::BatchBuffers::default(),
        })
    }

    /// The hold timer's fd, to register in the worker's epoll.
    #[must_use]
    pub fn timer_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.timer)
    }

    /// The hold timer deadline currently armed.
    #[must_use]
    pub fn timer_deadline(&self) -> Option<Nanos> {
        self.timer.deadline()
    }

    /// Completions currently held back by the policy.
    #[must_use]
    pub fn held(&self) -> u32 {
        self.parts.moderation.held()
    }

    /// Whether the queue stopped because the guest broke it.
    #[must_use]
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The driver reset the device: forget a broken state and any held-completion timer.
    pub fn reset(&mut self) {
        self.broken = false;
        self.resume = false;
        self.sleeping_since = None;
        if let Err(e) = self.timer.cancel() {
            tracing::warn!(queue = self.parts.index, error = %e, "cannot cancel hold timer");
        }
    }

    /// The guest kicked the queue.
    pub fn on_kick(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) {
        QueueCounters::add(&self.parts.counters.kicks, 1);
        if let Some(_since) = self.sleeping_since.take() {
            self.parts.waiter.end(now_ns(), WakeOutcome::SLEPT);
        }
        self.guarded(ring, mem, |e, r, m| e.run(r, m));
    }

    /// The hold timer's fd became readable.
    pub fn on_timer(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) {
        if !self.timer.consume() {
            return; // stale readiness: re-armed or cancelled since
        }
        QueueCounters::add(&self.parts.counters.timer_fires, 1);
        self.guarded(ring, mem, |e, r, m| {
            // Clear `resume` first: `apply` must arm a `Hold` deadline now, or a held
            // completion would wait for a timer nobody armed (a lost notification).
            let resume = std::mem::take(&mut e.resume);
            let decision = e.parts.moderation.on_event(now_ns(), Event::Timer);
            e.apply(decision, decision == Decision::Notify, r, m)?;
            if resume {
                e.run(r, m)?;
            }
            Ok(())
        });
    }

    /// Run `f` unless the queue is broken; a failure marks it broken.
    fn guarded<F>(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap, f: F)
    where
        F: FnOnce(&mut Self, &mut dyn Ring, &GuestMemoryMmap) -> Result<(), EngineError>,
    {
        if self.broken {
            return;
        }
        if let Err(e) = f(self, ring, mem) {
            tracing::error!(queue = self.parts.index, error = %e, "queue broken; it stops until the driver resets it");
            QueueCounters::add(&self.parts.counters.errors, 1);
            self.broken = true;
            let _ = self.timer.cancel();
        }
    }

    /// Drain the ring, then poll or sleep as the wait policy says, repeatedly, up to the
    /// per-event bound.
    fn run(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) -> Result<(), EngineError> {
        for _ in 0..self.parts.max_batches_per_event.max(1) {
            self.drain(ring, mem)?;
            if !self.poll(ring, mem)? {
                return Ok(());
            }
        }
        // Work is still arriving: come back through the event loop.
        self.resume = true;
        self.timer.arm(now_ns())?;
        Ok(())
    }

    /// Process batches until the ring is empty with notifications re-enabled.
    fn drain(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) -> Result<(), EngineError> {
        for _ in 0..self.parts.max_batches_per_event.max(1) {
            ring.queue_mut().disable_notification(mem)?;
            let n = self.process_batch(ring, mem)?;
            if n == 0 && !ring.queue_mut().enable_notification(mem)? {
                return Ok(());
            }
        }
        self.resume = true;
        self.timer.arm(now_ns())?;
        Ok(())
    }

    /// Signal the driver unless it suppressed signals: EVENT_IDX (`used_event` not passed),
    /// or without EVENT_IDX the available ring's NO_INTERRUPT flag (VIRTIO 1.2 §2.7.7.1; not
    /// handled by virtio-queue's `needs_notification`).
    fn notify(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) -> Result<(), EngineError> {
        let queue = ring.queue_mut();
        let wanted = if queue.event_idx_enabled() {
            queue.needs_notification(mem)?
        } else {
            let flags: u16 = mem
                .load(
                    GuestAddress(queue.avail_ring()),
                    std::sync::atomic::Ordering::Acquire,
                )
                .map(u16::from_le)
                .map_err(virtio_queue::Error::GuestMemory)?;
            flags & VRING_AVAIL_F_NO_INTERRUPT == 0
        };
        if wanted {
            ring.signal()?;
            QueueCounters::add(&self.parts.counters.notifications, 1);
        } else {
            QueueCounters::add(&self.parts.counters.suppressed, 1);
        }
        Ok(())
    }

    /// Execute a moderation decision. `notify` is true when some decision of the batch asked
    /// for a notification.
    fn apply(
        &mut self,
        last: Decision,
        notify: bool,
        ring: &mut dyn Ring,
        mem: &GuestMemoryMmap,
    ) -> Result<(), EngineError> {
        if notify {
            self.notify(ring, mem)?;
        }
        match last {
            Decision::Hold { deadline } if !self.resume => self.timer.arm(deadline)?,
            Decision::Hold { .. } => {}
            Decision::Notify | Decision::Idle if !self.resume => self.timer.cancel()?,
            Decision::Notify | Decision::Idle => {}
        }
        Ok(())
    }
}
