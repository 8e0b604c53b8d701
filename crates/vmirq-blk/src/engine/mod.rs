//! The queue engine: one per virtio queue, driven by its worker thread.
//!
//! On a kick it drains the available ring in batches (notifications disabled while it works,
//! the usual virtio pattern), starts each request's storage operation, and whenever storage
//! finishes (at once for RAM and null disks; when the io_uring completion eventfd fires, or
//! while polling, for image files) puts the completions in the used ring. Every submission
//! and completion goes to the queue's moderation policy. A `Notify` decision signals the guest
//! at once (subject to EVENT_IDX); the hold timer follows the last decision (armed for `Hold`,
//! cancelled otherwise). Then the wait policy decides whether to poll the available ring
//! (bounded by its window, and not while the contention gate is closed) before going back to
//! epoll. At most the storage context's capacity of requests is in flight; further chains
//! stay in the ring until tags free up.
//!
//! The engine does not know about vhost-user: it works on a [`Ring`] (a `Queue` and a way to
//! signal) and a guest memory snapshot, so tests drive it with a mock guest directly.

mod batch;
mod poll;
mod tracking;

use crate::chain::Violation;
use crate::counters::{BlkQueueCounters, QueueCounters};
use crate::request::DiskGeometry;
use crate::storage::QueueIo;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use virtio_queue::QueueT;
use vm_memory::GuestMemoryMmap;
use vmirq_policy::moderation::Moderation;
use vmirq_policy::wait::{ContentionGate, Wait};
use vmirq_policy::Nanos;
use vmirq_vhost::cpustat::CpuSampler;
use vmirq_vhost::notify::QueueNotifier;
use vmirq_vhost::poll::KickPoller;
use vmirq_vhost::sigbus::revoked_in;

pub use vmirq_vhost::Ring;

/// What became of the requests whose storage operations were in flight when the engine was
/// detached from its frontend ([`QueueEngine::detach`]). None of them is completed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// Requests in flight (their storage operations were waited for, then forgotten).
    pub requests: u64,
    /// Operations storage reported failed (e.g. cancelled by the kernel).
    pub failed: u64,
    /// Operations still running after [`QUIESCE_TIMEOUT_MS`] (their memory stays mapped).
    pub unfinished: u64,
}

impl Dropped {
    /// Add `other`'s counts to these.
    pub fn add(&mut self, other: Dropped) {
        self.requests += other.requests;
        self.failed += other.failed;
        self.unfinished += other.unfinished;
    }
}

/// How long a reset or teardown waits for storage operations in flight before it gives up
/// (and leaks their guest-memory mappings rather than let the kernel write into memory that
/// could be reused).
pub const QUIESCE_TIMEOUT_MS: u32 = 30_000;

/// Most batches drained in one call before yielding to the event loop (the engine re-arms
/// its timer immediately so it comes back). Bounds the time spent per event.
pub const MAX_BATCHES_PER_EVENT: usize = 64;

/// Errors that stop a queue (the queue is marked broken; other queues keep running).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A chain broke a ring rule or has no writable status byte: it is never completed.
    #[error("chain at head {head} breaks a ring rule: {violation}")]
    Chain {
        /// Head index of the chain.
        head: u16,
        /// The rule it broke.
        violation: Violation,
    },
    /// A status byte the parser accepted could not be written at completion; the chain is
    /// not completed (the driver would read a stale status).
    #[error("status byte of the chain at head {head} cannot be written")]
    StatusWrite {
        /// Head index of the chain.
        head: u16,
    },
    /// Reading or writing the rings failed (bad ring addresses, an available index that
    /// moved by more than the queue size).
    #[error("virtqueue access failed")]
    Queue(#[from] virtio_queue::Error),
    /// Timer or eventfd failure.
    #[error("event fd operation failed")]
    Io(#[from] io::Error),
    /// The frontend shrank the file under a guest memory region (an access raised SIGBUS and
    /// was given a zero page, see `vmirq_vhost::sigbus`): nothing that may have touched that
    /// memory is completed.
    #[error("{0}")]
    MemoryRevoked(vmirq_vhost::sigbus::Revoked),
}

impl From<vmirq_vhost::QueueError> for EngineError {
    fn from(e: vmirq_vhost::QueueError) -> Self {
        match e {
            vmirq_vhost::QueueError::Queue(e) => Self::Queue(e),
            vmirq_vhost::QueueError::Io(e) => Self::Io(e),
        }
    }
}

/// `e` and its sources, joined with ": " (one log line names the whole cause).
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
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
    /// Stops kick polling while the worker's CPU is contended.
    pub contention: ContentionGate,
    /// The worker thread's CPU time and run-queue delay, for the contention gate.
    pub cpu: CpuSampler,
    /// Counters of this queue.
    pub counters: Arc<BlkQueueCounters>,
    /// Bound on batches per event before yielding (normally [`MAX_BATCHES_PER_EVENT`]).
    pub max_batches_per_event: usize,
}

/// The parts of [`EngineParts`] the engine keeps itself (the policies went to the notifier
/// and the poller).
struct Parts {
    index: u16,
    io: Box<dyn QueueIo>,
    geometry: DiskGeometry,
    device_id: [u8; crate::virtio::ID_LEN],
    counters: Arc<BlkQueueCounters>,
    max_batches_per_event: usize,
}

/// One queue's engine.
pub struct QueueEngine {
    parts: Parts,
    /// The moderation policy, the hold timer and the signal (vmirq-vhost).
    notifier: QueueNotifier,
    /// Kick waits (vmirq-vhost).
    poller: KickPoller,
    broken: bool,
    /// The chain (head, rule) that broke the queue last, if a chain did.
    broken_by: Option<(u16, Violation)>,
    /// Every tag is in flight: the ring is not drained until storage gives tags back.
    stalled: bool,
    /// Requests in flight and reusable buffers.
    inflight: batch::Inflight,
    /// Inflight-area marks and resubmission (vhost-user INFLIGHT_SHMFD).
    tracking: vmirq_vhost::inflight::tracking::Tracking,
    /// The driver negotiated VIRTIO_F_RING_INDIRECT_DESC: without it an INDIRECT
    /// descriptor breaks the queue.
    indirect_desc: bool,
    /// The frontend is gone: nothing is read from or written to the rings again.
    detached: bool,
}

impl QueueEngine {
    /// A new engine.
    ///
    /// # Errors
    /// When the hold timer cannot be created.
    pub fn new(parts: EngineParts) -> io::Result<Self> {
        let EngineParts {
            index,
            io,
            geometry,
            device_id,
            moderation,
            waiter,
            contention,
            cpu,
            counters,
            max_batches_per_event,
        } = parts;
        let inflight = batch::Inflight::new(io.capacity());
        let notifier = QueueNotifier::new(moderation, counters.clone())?;
        let poller = KickPoller::new(waiter, contention, cpu, counters.clone());
        Ok(Self {
            parts: Parts {
                index,
                io,
                geometry,
                device_id,
                counters,
                max_batches_per_event,
            },
            notifier,
            poller,
            broken: false,
            broken_by: None,
            stalled: false,
            inflight,
            tracking: vmirq_vhost::inflight::tracking::Tracking::default(),
            indirect_desc: false,
            detached: false,
        })
    }

    /// The storage completion fd, to register in the worker's epoll (`None` when storage
    /// finishes every operation inside the batch).
    #[must_use]
    pub fn io_fd(&self) -> Option<RawFd> {
        self.parts.io.completion_fd()
    }

    /// Requests whose storage operation is in flight.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// The hold timer's fd, to register in the worker's epoll.
    #[must_use]
    pub fn timer_fd(&self) -> RawFd {
        self.notifier.timer_fd()
    }

    /// The hold timer deadline currently armed.
    #[must_use]
    pub fn timer_deadline(&self) -> Option<Nanos> {
        self.notifier.deadline()
    }

    /// Completions currently held back by the policy.
    #[must_use]
    pub fn held(&self) -> u32 {
        self.notifier.held()
    }

    /// Whether the queue stopped because the guest broke it.
    #[must_use]
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The chain that broke the queue (its head and the rule), if the queue is broken by a
    /// chain.
    #[must_use]
    pub fn broken_by(&self) -> Option<(u16, Violation)> {
        self.broken_by.filter(|_| self.broken)
    }

    /// The features the driver acknowledged: whether it negotiated
    /// VIRTIO_F_RING_INDIRECT_DESC (until it says so, INDIRECT descriptors are refused).
    pub fn set_indirect_desc(&mut self, negotiated: bool) {
        self.indirect_desc = negotiated;
    }

    /// The driver reset the device: forget a broken state and any held-completion timer.
    pub fn reset(&mut self) {
        let _ = self.quiesce();
        self.recover("device reset");
    }

    /// Forget the loop state, and a broken state with the policy state of the requests it
    /// dropped (`why` goes to the log line that says the queue serves again).
    fn recover(&mut self, why: &str) {
        if self.broken {
            self.broken = false;
            self.notifier.restore_policy();
            tracing::info!(queue = self.parts.index, "broken queue recovered: {why}");
        }
        self.stalled = false;
        self.poller.clear();
        self.notifier.clear(self.parts.index);
    }

    /// The frontend is gone (it disconnected, or the server stops): wait for the storage
    /// operations in flight, forget their requests without completing them (nobody reads
    /// the rings any more; with an inflight area the next connection resubmits them), and
    /// ignore every later event but storage completions. Call it while the worker thread that
    /// submitted the operations is still alive: io_uring cancels the operations of a thread
    /// that exits (see `Server::serve_connection`).
    pub fn detach(&mut self) -> Dropped {
        let dropped = self.quiesce();
        self.detached = true;
        self.notifier.clear(self.parts.index);
        dropped
    }

    /// Wait for storage operations in flight and forget their requests (the driver reset
    /// the device, or the connection is going away). Operations that do not finish within
    /// [`QUIESCE_TIMEOUT_MS`] keep their guest memory mapped for the life of the process.
    fn quiesce(&mut self) -> Dropped {
        let requests = self.inflight.len();
        if requests == 0 && self.parts.io.in_flight() == 0 {
            return Dropped::default();
        }
        self.wait_for_storage(QUIESCE_TIMEOUT_MS);
        let failed = self.inflight.failed_done();
        let unfinished = self.parts.io.in_flight();
        if unfinished > 0 {
            tracing::error!(
                queue = self.parts.index,
                unfinished,
                "storage operations did not finish; keeping their guest memory mapped"
            );
            self.inflight.leak_memory_of_unfinished();
        }
        tracing::debug!(queue = self.parts.index, "dropped requests in flight");
        self.inflight.clear();
        let n = |x: usize| u64::try_from(x).unwrap_or(u64::MAX);
        Dropped {
            requests: n(requests),
            failed: n(failed),
            unfinished: n(unfinished),
        }
    }

    /// Storage finished operations (the completion fd became readable).
    pub fn on_io(&mut self, ring: &mut dyn Ring, mem: &Arc<GuestMemoryMmap>) {
        if self.broken || self.detached {
            // Nobody completes requests on a broken queue, but storage must still be reaped,
            // or its level-triggered completion fd would keep the worker spinning.
            self.discard_finished();
            return;
        }
        self.guarded(ring, mem, |e, r, m| {
            if let Some(d) = e.complete_finished(r, m)? {
                e.notifier.follow(d)?;
            }
            if e.stalled {
                // Tags are free again: pick up the chains left in the ring.
                e.drain(r, m)?;
            }
            Ok(())
        });
    }

    /// The frontend stops the ring (vhost-user GET_VRING_BASE: the VM stops or migrates):
    /// wait for storage in flight and put every finished request in the used ring before the
    /// ring's position is reported, so no request is lost across the stop and no buffer
    /// changes after it. Chains still in the available ring stay there (the reported
    /// position is the next one to pop).
    ///
    /// A broken queue recovers here: storage in flight is waited for and dropped (nothing of
    /// a broken queue is completed), and the queue serves again once the frontend restarts
    /// the ring.
    pub fn on_stop(&mut self, ring: &mut dyn Ring, mem: &Arc<GuestMemoryMmap>) {
        if self.detached {
            return;
        }
        if self.broken {
            let _ = self.quiesce();
            self.recover("the frontend stopped the ring");
            return;
        }
        self.guarded(ring, mem, |e, r, m| {
            e.wait_for_storage(QUIESCE_TIMEOUT_MS);
            let completed = e.complete_finished(r, m)?.is_some();
            if e.parts.io.in_flight() > 0 {
                tracing::error!(
                    queue = e.parts.index,
                    "storage operations did not finish before the ring stopped"
                );
            }
            // Whatever the policy held goes out now: the ring stops.
            e.notifier.flush(completed, r, m)?;
            Ok(())
        });
    }

    /// The guest kicked the queue.
    pub fn on_kick(&mut self, ring: &mut dyn Ring, mem: &Arc<GuestMemoryMmap>) {
        self.poller.on_kick();
        self.guarded(ring, mem, |e, r, m| e.run(r, m));
    }

    /// The hold timer's fd became readable.
    pub fn on_timer(&mut self, ring: &mut dyn Ring, mem: &Arc<GuestMemoryMmap>) {
        if !self.notifier.take_expiry() {
            return; // stale readiness: re-armed or cancelled since
        }
        self.guarded(ring, mem, |e, r, m| {
            if e.notifier.on_timer(r, m)? {
                e.run(r, m)?;
            }
            Ok(())
        });
    }

    /// Run `f` unless the queue is broken; a failure marks it broken.
    fn guarded<F>(&mut self, ring: &mut dyn Ring, mem: &Arc<GuestMemoryMmap>, f: F)
    where
        F: FnOnce(&mut Self, &mut dyn Ring, &Arc<GuestMemoryMmap>) -> Result<(), EngineError>,
    {
        if self.broken || self.detached {
            return;
        }
        let result = f(self, ring, mem).and_then(|()| match revoked_in(mem) {
            // A fault in the batch (or in another thread) may have fed zeros to anything.
            Some(r) => Err(EngineError::MemoryRevoked(r)),
            None => Ok(()),
        });
        if let Err(e) = result {
            self.break_queue(&e);
        }
    }

    /// Stop the queue: log one line naming the queue and the cause (for a chain: its head and
    /// the rule), count it, and drop whatever has finished. Nothing of this queue is put in
    /// the used ring again, and its avail ring is not read, until the frontend stops the
    /// ring (GET_VRING_BASE), resets the device or reconnects. Storage in flight is still
    /// reaped as it finishes (`on_io`), so no memory or tag leaks and no fd stays readable.
    fn break_queue(&mut self, e: &EngineError) {
        tracing::error!(
            queue = self.parts.index,
            "queue {} broken: {}; it completes nothing until the frontend stops the ring \
             (GET_VRING_BASE), resets the device or reconnects",
            self.parts.index,
            describe(e)
        );
        let c = &self.parts.counters.queue;
        QueueCounters::add(&c.broken, 1);
        QueueCounters::add(&c.errors, 1);
        self.broken = true;
        self.broken_by = match *e {
            EngineError::Chain { head, violation } => Some((head, violation)),
            _ => None,
        };
        self.notifier.clear(self.parts.index);
        self.discard_finished();
    }

    /// Drain the ring, then poll or sleep as the wait policy says, repeatedly, up to the
    /// per-event bound.
    fn run(&mut self, ring: &mut dyn Ring, mem: &Arc<GuestMemoryMmap>) -> Result<(), EngineError> {
        self.start_tracking(ring, mem)?;
        for _ in 0..self.parts.max_batches_per_event.max(1) {
            self.drain(ring, mem)?;
            if self.stalled || !self.poll(ring, mem)? {
                return Ok(());
            }
        }
        // Work is still arriving: come back through the event loop.
        self.notifier.resume_later()?;
        Ok(())
    }

    /// Process batches until the ring is empty with notifications re-enabled, or every tag
    /// is in flight (then notifications stay off: storage completions resume the drain).
    fn drain(
        &mut self,
        ring: &mut dyn Ring,
        mem: &Arc<GuestMemoryMmap>,
    ) -> Result<(), EngineError> {
        if self.resubmit(ring, mem)? && self.stalled {
            return Ok(());
        }
        for _ in 0..self.parts.max_batches_per_event.max(1) {
            ring.queue_mut().disable_notification(&**mem)?;
            let n = self.process_batch(ring, mem)?;
            if self.stalled {
                return Ok(());
            }
            if n == 0 && !ring.queue_mut().enable_notification(&**mem)? {
                return Ok(());
            }
        }
        self.notifier.resume_later()?;
        Ok(())
    }
}

impl Drop for QueueEngine {
    fn drop(&mut self) {
        // The kernel must be done with guest buffers before their mapping can go away.
        let _ = self.quiesce();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broken_queue_log_line_names_the_head_and_the_rule() {
        let e = EngineError::Chain {
            head: 7,
            violation: Violation::IndirectWithNext,
        };
        assert_eq!(
            describe(&e),
            "chain at head 7 breaks a ring rule: descriptor has both INDIRECT and NEXT"
        );
        let e = EngineError::Queue(virtio_queue::Error::InvalidAvailRingIndex);
        assert!(describe(&e).starts_with("virtqueue access failed: "));
    }
}
