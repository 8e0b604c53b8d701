//! Restart without losing I/O: VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD for split rings.
//!
//! The frontend asks for an inflight area once (GET_INFLIGHT_FD: the device allocates a sealed
//! memfd, [`area::create`]) and hands it back on every device start (SET_INFLIGHT_FD:
//! [`InflightState::set`]). While a ring runs, its engine marks each head it takes from the
//! available ring and clears the mark when the head goes in the used ring
//! ([`area::QueueLog`]). The frontend keeps the memfd when the backend dies; the next backend
//! process maps it, and when each ring starts it resubmits the heads still marked, oldest
//! first, before serving the available ring again ([`tracking`], which each device queue holds).
//!
//! This module holds what the vhost-user side (the [`crate::guard`], which answers the two
//! messages) and the queue engines share for one connection: one [`QueueSlot`] per queue.

pub mod area;
pub mod tracking;

use area::{AreaError, AreaLimits, InflightArea, QueueLog};
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost::vhost_user::message::VhostUserInflight;

/// What one queue's engine and the vhost-user side share.
#[derive(Debug, Default)]
pub struct QueueSlot {
    /// The queue's region of the last area the frontend set.
    log: Mutex<Option<QueueLog>>,
    /// The ring started (or the area changed) since the engine last looked: it must adopt the
    /// log and resubmit before serving the available ring.
    start: AtomicBool,
}

impl QueueSlot {
    /// A slot with no area.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Install the queue's region of a new area (the ring picks it up when it next starts).
    pub fn install(&self, log: Option<QueueLog>) {
        *self.log.lock().unwrap_or_else(PoisonError::into_inner) = log;
    }

    /// Whether an area is installed.
    #[must_use]
    pub fn has_log(&self) -> bool {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The ring (re)starts: the engine recovers from the installed region at its next event.
    pub fn ring_started(&self) {
        self.start.store(true, Ordering::Release);
    }

    /// For the engine: `Some(log)` once after each [`QueueSlot::ring_started`] (the log may be
    /// `None` when no area is installed); one relaxed load otherwise.
    pub fn take_start(&self) -> Option<Option<QueueLog>> {
        if !self.start.load(Ordering::Relaxed) || !self.start.swap(false, Ordering::AcqRel) {
            return None;
        }
        Some(
            self.log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// The inflight state of one frontend connection.
#[derive(Debug)]
pub struct InflightState {
    slots: Vec<Arc<QueueSlot>>,
    limits: AreaLimits,
}

impl InflightState {
    /// State for a device of `queues` queues of at most `max_queue_size` entries.
    #[must_use]
    pub fn new(queues: u16, max_queue_size: u16) -> Self {
        Self {
            slots: (0..queues).map(|_| Arc::new(QueueSlot::new())).collect(),
            limits: AreaLimits {
                max_queues: queues,
                max_queue_size,
            },
        }
    }

    /// The slot of queue `q`.
    #[must_use]
    pub fn slot(&self, q: usize) -> Option<&Arc<QueueSlot>> {
        self.slots.get(q)
    }

    /// GET_INFLIGHT_FD: a fresh zeroed area for the queues and size the frontend asks for.
    /// Returns the reply payload and the memfd.
    ///
    /// # Errors
    /// When the geometry is not this device's or the memfd cannot be created.
    pub fn get(&self, req: &VhostUserInflight) -> Result<(VhostUserInflight, File), AreaError> {
        let (num_queues, queue_size) = (req.num_queues, req.queue_size);
        let l = self.limits;
        if num_queues == 0
            || num_queues > l.max_queues
            || queue_size == 0
            || queue_size > l.max_queue_size
        {
            return Err(AreaError::Geometry {
                num_queues,
                queue_size,
                max_queues: l.max_queues,
                max_queue_size: l.max_queue_size,
            });
        }
        let (file, mmap_size) = area::create(num_queues, queue_size)?;
        Ok((
            VhostUserInflight::new(mmap_size, 0, num_queues, queue_size),
            file,
        ))
    }

    /// SET_INFLIGHT_FD: map the frontend's area and install each queue's region. Rings pick
    /// their region up when they next start ([`QueueSlot::ring_started`]).
    ///
    /// # Errors
    /// When the message or the file is not acceptable (see [`AreaError`]).
    pub fn set(&self, msg: &VhostUserInflight, file: File) -> Result<(), AreaError> {
        let area = InflightArea::map(file, msg, self.limits)?;
        for (q, slot) in (0u16..).zip(&self.slots) {
            slot.install(area.queue(q));
        }
        tracing::info!(
            queues = area.queues(),
            queue_size = msg.queue_size,
            "inflight area set"
        );
        Ok(())
    }
}
