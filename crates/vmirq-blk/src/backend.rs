//! The vhost-user-blk device: the `VhostUserBackend` implementation that connects the
//! rust-vmm vhost-user machinery (protocol, memory table, vrings, worker epoll loops) to one
//! [`QueueEngine`] per queue.
//!
//! Event ids in each worker's epoll: `0..k` are the kicks of the worker's `k` vrings (ids
//! are positions among the worker's vrings; registered by vhost-user-backend), `queues` is
//! its exit/enable event, `queues + 1 + q` is the hold timer of queue `q` and
//! `2 * queues + 1 + q` its storage completion fd, if it has one (both registered by the
//! server after the daemon is created).

use crate::engine::{Dropped, QueueEngine};
use crate::virtio::{feature, BlkConfig};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::{ShutdownHandle, VhostUserBackend, VringRwLock, VringT};
use vm_memory::GuestAddressSpace;
use vmirq_vhost::daemon::{ExitEvents, HasExitEvents};
use vmirq_vhost::sigbus::{Revocation, Revoked};
use vmirq_vhost::LiveRing;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{EventConsumer, EventNotifier};

pub use vmirq_vhost::GuestMem;

/// The device of one frontend connection.
pub struct BlkBackend {
    config: BlkConfig,
    queue_size: u16,
    features: u64,
    mem: GuestMem,
    engines: Vec<Mutex<QueueEngine>>,
    /// Queue bitmask per worker thread.
    masks: Vec<u64>,
    /// The exit events handed to the worker epoll loops (closed by the connection's
    /// teardown, see [`vmirq_vhost::daemon::ExitEvents`]).
    exit_events: ExitEvents,
    /// Each queue's vring, remembered from the worker events (vhost-user-backend hands the
    /// vrings only to `handle_event`), so `stop_vring` can complete requests in flight. A
    /// queue that never had an event has nothing in flight.
    vrings: Mutex<Vec<Option<VringRwLock<GuestMem>>>>,
    /// Bit `q` set: queue `q`'s vring is in `vrings` (checked without the lock per event).
    vrings_known: AtomicU64,
    /// The guest memory mappings registered with the SIGBUS handler, and what to do when
    /// the frontend truncates one: the SIGBUS handler (`vmirq_vhost::sigbus`) keeps the
    /// process alive, the engines complete nothing that may have touched the memory and break
    /// their queues, and the first worker event that sees the revocation records it once and
    /// shuts the connection down.
    revocation: Revocation,
}

impl BlkBackend {
    /// A device over `engines` (one per queue, in order), split into `params.threads`
    /// contiguous groups of queues.
    #[must_use]
    pub fn new(params: DeviceParams, mem: GuestMem, engines: Vec<QueueEngine>) -> Self {
        let DeviceParams {
            config,
            read_only,
            queue_size,
            threads,
        } = params;
        let mut features = bit(feature::VERSION_1)
            | bit(feature::RING_INDIRECT_DESC)
            | bit(feature::RING_EVENT_IDX)
            | bit(feature::VHOST_USER_PROTOCOL_FEATURES)
            | bit(feature::BLK_SEG_MAX)
            | bit(feature::BLK_BLK_SIZE)
            | bit(feature::BLK_FLUSH)
            | bit(feature::BLK_MQ);
        if read_only {
            features |= bit(feature::BLK_RO);
        } else {
            features |= bit(feature::BLK_DISCARD) | bit(feature::BLK_WRITE_ZEROES);
        }
        let masks = thread_masks(engines.len(), usize::from(threads));
        let vrings = Mutex::new(vec![None; engines.len()]);
        let engines = engines.into_iter().map(Mutex::new).collect();
        Self {
            config,
            queue_size,
            features,
            mem,
            engines,
            masks,
            exit_events: ExitEvents::default(),
            vrings,
            vrings_known: AtomicU64::new(0),
            revocation: Revocation::new(),
        }
    }

    /// The handle that ends this connection's daemon: used when the frontend truncates its
    /// guest memory. If that already happened, the connection is shut down at once.
    pub fn set_shutdown(&self, handle: Option<ShutdownHandle>) {
        self.revocation.set_shutdown(handle);
    }

    /// The guest memory region the frontend truncated, if it did.
    #[must_use]
    pub fn revoked(&self) -> Option<Revoked> {
        self.revocation.revoked()
    }

    /// After each worker event: if a mapping of this connection was revoked, record it once
    /// and end the connection (the engines have already broken their queues or will at
    /// their next event; nothing touching that memory is completed).
    fn check_revoked(&self) {
        self.revocation.check();
    }

    /// Remember the vrings of `thread` (once per queue).
    fn remember_vrings(&self, thread: usize, vrings: &[VringRwLock<GuestMem>]) {
        let mask = self.masks.get(thread).copied().unwrap_or(0);
        if self.vrings_known.load(Ordering::Acquire) & mask == mask {
            return;
        }
        let mut known = self.vrings.lock().unwrap_or_else(PoisonError::into_inner);
        for (local, vring) in vrings.iter().enumerate() {
            if let Some(slot) =
                global_index(&self.masks, thread, local).and_then(|q| known.get_mut(q))
            {
                if slot.is_none() {
                    *slot = Some(vring.clone());
                }
            }
        }
        self.vrings_known.fetch_or(mask, Ordering::Release);
    }

    /// Queue bitmask of each worker thread.
    #[must_use]
    pub fn masks(&self) -> &[u64] {
        &self.masks
    }

    /// The frontend is gone: detach every queue engine (wait for its storage in flight and
    /// forget those requests; see [`QueueEngine::detach`]). Returns the totals.
    pub fn detach(&self) -> Dropped {
        let mut total = Dropped::default();
        for e in &self.engines {
            total.add(e.lock().unwrap_or_else(PoisonError::into_inner).detach());
        }
        total
    }

    /// Hold-timer fd of queue `q`.
    #[must_use]
    pub fn timer_fd(&self, q: usize) -> Option<RawFd> {
        let e = self.engines.get(q)?;
        Some(e.lock().unwrap_or_else(PoisonError::into_inner).timer_fd())
    }

    /// Storage completion fd of queue `q`, when its storage completes asynchronously.
    #[must_use]
    pub fn io_fd(&self, q: usize) -> Option<RawFd> {
        let e = self.engines.get(q)?;
        e.lock().unwrap_or_else(PoisonError::into_inner).io_fd()
    }

    /// Epoll event id of queue `q`'s storage completion fd.
    #[must_use]
    pub fn io_event(&self, q: usize) -> u64 {
        (2 * self.engines.len() + 1 + q) as u64
    }

    /// Epoll event id of queue `q`'s hold timer.
    #[must_use]
    pub fn timer_event(&self, q: usize) -> u64 {
        (self.engines.len() + 1 + q) as u64
    }

    fn with_engine<F: FnOnce(&mut QueueEngine, &mut LiveRing<'_>)>(
        &self,
        q: usize,
        vrings: &[VringRwLock<GuestMem>],
        thread: usize,
        f: F,
    ) {
        let Some(local) = local_index(&self.masks, thread, q) else {
            return;
        };
        let (Some(engine), Some(vring)) = (self.engines.get(q), vrings.get(local)) else {
            return;
        };
        let mut engine = engine.lock().unwrap_or_else(PoisonError::into_inner);
        let mut state = vring.get_mut();
        f(
            &mut engine,
            &mut LiveRing {
                state: &mut state,
                mem: &self.mem,
            },
        );
    }
}

/// Device-level parameters of [`BlkBackend::new`].
#[derive(Debug, Clone, Copy)]
pub struct DeviceParams {
    /// Configuration space.
    pub config: BlkConfig,
    /// Read-only device.
    pub read_only: bool,
    /// Largest queue size the frontend may choose.
    pub queue_size: u16,
    /// Worker threads.
    pub threads: u16,
}

fn bit(n: u32) -> u64 {
    1u64 << n
}

/// Split `queues` into `threads` contiguous groups; queue `q` goes to thread `q * threads / queues`.
fn thread_masks(queues: usize, threads: usize) -> Vec<u64> {
    let threads = threads.clamp(1, queues.max(1));
    let mut masks = vec![0u64; threads];
    for q in 0..queues.min(64) {
        masks[q * threads / queues] |= 1 << q;
    }
    masks
}

/// Position of queue `q` among the vrings of `thread` (vhost-user-backend passes each worker
/// only its own vrings, in queue order).
fn local_index(masks: &[u64], thread: usize, q: usize) -> Option<usize> {
    let mask = *masks.get(thread)?;
    if q >= 64 || mask & (1 << q) == 0 {
        return None;
    }
    Some((mask & ((1u64 << q) - 1)).count_ones() as usize)
}

/// Queue number of the `local`-th vring of `thread`.
fn global_index(masks: &[u64], thread: usize, local: usize) -> Option<usize> {
    let mask = *masks.get(thread)?;
    (0..64).filter(|q| mask & (1 << q) != 0).nth(local)
}

impl HasExitEvents for BlkBackend {
    fn exit_events(&self) -> &ExitEvents {
        &self.exit_events
    }
}

impl VhostUserBackend for BlkBackend {
    type Bitmap = ();
    type Vring = VringRwLock<GuestMem>;

    fn num_queues(&self) -> usize {
        self.engines.len()
    }
    fn max_queue_size(&self) -> usize {
        usize::from(self.queue_size)
    }
    fn features(&self) -> u64 {
        self.features
    }
    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
    }
    fn reset_device(&self) {
        for e in &self.engines {
            e.lock().unwrap_or_else(PoisonError::into_inner).reset();
        }
    }
    fn acked_features(&self, features: u64) {
        let indirect = features & bit(feature::RING_INDIRECT_DESC) != 0;
        for e in &self.engines {
            e.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set_indirect_desc(indirect);
        }
    }
    fn set_event_idx(&self, _enabled: bool) {
        // vhost-user-backend sets EVENT_IDX on each vring's queue; the engine asks the queue.
    }
    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        self.config.read(offset, size)
    }
    fn update_memory(&self, mem: GuestMem) -> io::Result<()> {
        // The daemon updates the same GuestMemoryAtomic the engines read through; the new
        // mappings are registered with the SIGBUS handler (and the old ones unregistered).
        self.revocation.update(mem.memory().into_inner());
        self.check_revoked();
        Ok(())
    }
    fn queues_per_thread(&self) -> Vec<u64> {
        self.masks.clone()
    }
    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        let q = queue_index as usize;
        let vring = self
            .vrings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(q)
            .cloned()
            .flatten();
        if let (Some(vring), Some(engine)) = (vring, self.engines.get(q)) {
            let mem = self.mem.memory().into_inner();
            // Same lock order as the worker (engine, then vring).
            let mut engine = engine.lock().unwrap_or_else(PoisonError::into_inner);
            let mut state = vring.get_mut();
            let mut ring = LiveRing {
                state: &mut state,
                mem: &self.mem,
            };
            engine.on_stop(&mut ring, &mem);
        }
        self.check_revoked();
        Ok(())
    }
    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        self.exit_events.create()
    }
    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Self::Vring],
        thread_id: usize,
    ) -> io::Result<()> {
        let event = usize::from(device_event);
        let n = self.engines.len();
        if !evset.contains(EventSet::IN) {
            return Ok(());
        }
        if event < vrings.len() {
            self.remember_vrings(thread_id, vrings);
        }
        let mem = self.mem.memory().into_inner();
        if event < vrings.len() {
            // Kick ids are positions among this worker's vrings, not queue numbers.
            if let Some(q) = global_index(&self.masks, thread_id, event) {
                self.with_engine(q, vrings, thread_id, |e, r| e.on_kick(r, &mem));
            }
        } else if event > n && event <= 2 * n {
            let q = event - n - 1;
            self.with_engine(q, vrings, thread_id, |e, r| e.on_timer(r, &mem));
        } else if event > 2 * n && event <= 3 * n {
            let q = event - 2 * n - 1;
            self.with_engine(q, vrings, thread_id, |e, r| e.on_io(r, &mem));
        } else {
            tracing::warn!(event = device_event, "unknown worker event");
        }
        self.check_revoked();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_masks_split_queues_into_contiguous_groups() {
        assert_eq!(thread_masks(4, 4), vec![1, 2, 4, 8]);
        assert_eq!(thread_masks(4, 2), vec![0b0011, 0b1100]);
        assert_eq!(thread_masks(3, 1), vec![0b111]);
        assert_eq!(local_index(&[0b1100], 0, 3), Some(1));
        assert_eq!(local_index(&[0b1100], 0, 1), None);
        assert_eq!(local_index(&[0b1100], 1, 3), None);
        assert_eq!(global_index(&[0b0011, 0b1100], 1, 1), Some(3));
        assert_eq!(global_index(&[0b0011, 0b1100], 1, 2), None);
    }
}
