//! Kick waits: poll the available ring for the window the wait policy allows, then sleep.
//! While polling, the worker is not in epoll, so the device also completes finished work
//! and delivers a due hold timer itself ([`crate::notify::QueueNotifier::fire_due`]). The
//! contention gate may turn a poll into a sleep, or end it early, when the worker's CPU
//! samples show a neighbour waiting for it.
//!
//! The loop stays in the device (it knows what work is in flight); [`KickPoller`] gives it
//! the steps: [`KickPoller::begin`], [`has_work`], [`KickPoller::hit`], [`KickPoller::spin`]
//! and [`KickPoller::finish`].

use crate::clock::now_ns;
use crate::counters::{QueueCounters, SharedQueueCounters};
use crate::cpustat::CpuSampler;
use crate::{Result, Ring};
use std::sync::atomic::Ordering;
use virtio_queue::QueueT;
use vm_memory::GuestMemoryMmap;
use vmirq_policy::wait::{ContentionGate, Wait, WaitDecision, Waiter, WakeOutcome};
use vmirq_policy::Nanos;

/// While work is in flight, the poll loop yields the CPU every this many iterations.
/// io_uring hands operations that would block (buffered I/O, page-cache misses) to io-wq
/// worker threads of this process, which inherit the worker's CPU and scheduling policy; a
/// poller that never yields keeps them off that CPU for its whole window. Measured with
/// vmirq-blk on a `/dev/shm` image with `--poll kvm:max_ns=200000`, server and client pinned
/// SCHED_FIFO: QD 1 from 4.8k to 39k IOPS (p50 200 -> 23 µs), QD 32 from 133k to 366-400k;
/// under CFS the QD-1 p99 from 333 to 48 µs.
pub const YIELD_EVERY_SPINS: u64 = 8;

/// Hard cap on poll iterations per window, independent of the clock (each iteration reads
/// the clock and one ring index, well under a microsecond), so a clock anomaly cannot turn
/// a poll into a hang.
pub const MAX_POLL_SPINS: u64 = 50_000_000;

/// What a kick wait starts with.
#[derive(Debug, PartialEq, Eq)]
pub enum PollStart {
    /// Go back to epoll (kicks stay enabled).
    Sleep,
    /// Poll (kicks disabled) within this window.
    Poll(PollWindow),
}

/// A running poll window.
#[derive(Debug, PartialEq, Eq)]
pub struct PollWindow {
    until: Nanos,
    spins: u64,
}

/// One queue's kick waits: the wait policy, the contention gate and its CPU samples.
pub struct KickPoller {
    waiter: Wait,
    contention: ContentionGate,
    cpu: CpuSampler,
    counters: SharedQueueCounters,
    /// When the worker last went to sleep in epoll with a wait pending (for `Waiter::end`).
    sleeping_since: Option<Nanos>,
}

impl std::fmt::Debug for KickPoller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KickPoller")
            .field("waiter", &self.waiter)
            .field("sleeping_since", &self.sleeping_since)
            .finish_non_exhaustive()
    }
}

impl KickPoller {
    /// Kick waits under `waiter`, gated by `contention` on samples of `cpu`.
    #[must_use]
    pub fn new(
        waiter: Wait,
        contention: ContentionGate,
        cpu: CpuSampler,
        counters: SharedQueueCounters,
    ) -> Self {
        Self {
            waiter,
            contention,
            cpu,
            counters,
            sleeping_since: None,
        }
    }

    fn c(&self) -> &QueueCounters {
        (*self.counters).as_ref()
    }

    /// The guest kicked the queue: count it and end a wait that went to sleep.
    pub fn on_kick(&mut self) {
        QueueCounters::add(&self.c().kicks, 1);
        if let Some(_since) = self.sleeping_since.take() {
            self.waiter.end(now_ns(), WakeOutcome::SLEPT);
        }
    }

    /// Forget a pending sleep (device reset, queue recovered).
    pub fn clear(&mut self) {
        self.sleeping_since = None;
    }

    /// The ring is empty: ask the wait policy (and the contention gate) whether to poll.
    /// On `Poll`, kicks are disabled: the driver does not need to exit to tell us.
    ///
    /// # Errors
    /// When the rings cannot be accessed.
    pub fn begin(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) -> Result<PollStart> {
        let start = self.decide();
        if matches!(start, PollStart::Poll(_)) {
            ring.queue_mut().disable_notification(mem)?;
        }
        Ok(start)
    }

    /// [`KickPoller::begin`] for a waiter that owns its rings' notification state itself
    /// (one thread polling several queues): the policy's and the gate's decision only.
    /// On `Poll` the caller keeps kicks disabled on every ring it polls.
    pub fn decide(&mut self) -> PollStart {
        let start = now_ns();
        let wanted = self.waiter.begin(start);
        if matches!(wanted, WaitDecision::Poll { .. }) {
            self.sample_cpu(start);
        }
        let until = match self.contention.admit(start, wanted) {
            WaitDecision::Sleep => {
                if wanted != WaitDecision::Sleep {
                    QueueCounters::add(&self.c().poll_contended, 1);
                }
                self.sleeping_since = Some(start);
                return PollStart::Sleep;
            }
            WaitDecision::Poll { until } => until,
        };
        PollStart::Poll(PollWindow { until, spins: 0 })
    }

    /// [`KickPoller::finish`] for a waiter that owns its rings: the window found nothing and
    /// the caller re-enabled kicks on every ring and found them still empty (counted as a
    /// miss; the worker goes to sleep).
    pub fn slept(&mut self) {
        QueueCounters::add(&self.c().poll_misses, 1);
        self.sleeping_since = Some(now_ns());
    }

    /// One poll iteration found nothing at `now`: returns whether to keep polling (the
    /// window, [`MAX_POLL_SPINS`] and the contention gate bound it), after yielding the CPU
    /// every [`YIELD_EVERY_SPINS`] when `in_flight` work runs on helper threads. When it
    /// returns `false`, call [`KickPoller::finish`].
    pub fn spin(&mut self, w: &mut PollWindow, now: Nanos, in_flight: bool) -> bool {
        w.spins += 1;
        if now >= w.until || w.spins >= MAX_POLL_SPINS {
            return false;
        }
        if !self.sample_cpu(now) {
            // A neighbour wants this CPU: stop polling now, as KVM does.
            QueueCounters::add(&self.c().poll_contended, 1);
            return false;
        }
        if in_flight && w.spins % YIELD_EVERY_SPINS == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        true
    }

    /// Polling found new work at `now` (the device drains again; kicks stay disabled until
    /// its drain re-enables them).
    pub fn hit(&mut self, now: Nanos) {
        QueueCounters::add(&self.c().poll_hits, 1);
        self.waiter.end(now, WakeOutcome::POLLED);
    }

    /// The window is over: re-enable kicks and catch work that raced with that. Returns
    /// `true` for such work (counted as a hit: drain again), `false` when the worker goes to
    /// sleep in epoll.
    ///
    /// # Errors
    /// When the rings cannot be accessed.
    pub fn finish(&mut self, ring: &mut dyn Ring, mem: &GuestMemoryMmap) -> Result<bool> {
        if ring.queue_mut().enable_notification(mem)? {
            self.hit(now_ns());
            return Ok(true);
        }
        QueueCounters::add(&self.c().poll_misses, 1);
        self.sleeping_since = Some(now_ns());
        Ok(false)
    }

    /// Feed the contention gate a CPU sample if one is due; returns whether polling is still
    /// allowed. Nothing is read when the gate is off.
    fn sample_cpu(&mut self, now: Nanos) -> bool {
        let gate = &mut self.contention;
        if !gate.config().enabled() {
            return true;
        }
        match self.cpu.sample(now) {
            Some(sample) => gate.on_sample(now, sample),
            None => gate.is_open(now),
        }
    }
}

/// New descriptors in the available ring?
///
/// # Errors
/// When the available ring cannot be read.
pub fn has_work(ring: &mut dyn Ring, mem: &GuestMemoryMmap) -> Result<bool> {
    let q = ring.queue_mut();
    let avail = q.avail_idx(mem, Ordering::Acquire)?;
    Ok(avail.0 != q.next_avail())
}
