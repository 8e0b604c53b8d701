//! The per-queue machinery of one port's connection, from the shared crate `vmirq-vhost`:
//! each receive queue's interrupts and each transmit queue's completions go through a
//! [`QueueNotifier`] (a `vmirq_policy` moderation policy with its hold timerfd, EVENT_IDX
//! on top), and each transmit queue's kick waits through an optional [`KickPoller`].
//!
//! The receive queue publishes a merged packet's used entries with one index store
//! ([`crate::rx::publish_used`]), which virtio-queue's own notification window does not
//! see, so its [`Ring`] ([`RxRing`]) answers `needs_notification` from the
//! [`UsedWindow`] instead.

use crate::fabric::GuestMem;
use crate::rx::UsedWindow;
use std::io;
use std::sync::Arc;
use vhost_user_backend::VringState;
use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;
use vmirq_policy::spec::{ContentionSpec, ModerationSpec, WaitSpec};
use vmirq_vhost::counters::QueueCounters;
use vmirq_vhost::cpustat::{CpuSampler, ThreadSchedstat};
use vmirq_vhost::notify::QueueNotifier;
use vmirq_vhost::poll::KickPoller;
use vmirq_vhost::{QueueError, Ring};

/// The policies every port's queues follow (`--moderation`, `--poll`, `--poll-contention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policies {
    /// Moderation of receive interrupts and transmit completions.
    pub moderation: ModerationSpec,
    /// Kick waits of transmit queues.
    pub poll: WaitSpec,
    /// When a kick poll gives the CPU up for a neighbour.
    pub contention: ContentionSpec,
}

impl Default for Policies {
    /// No moderation, no polling: every completion may interrupt (EVENT_IDX permitting),
    /// every kick wait sleeps.
    fn default() -> Self {
        Self {
            moderation: ModerationSpec::None,
            poll: WaitSpec::Never,
            contention: ContentionSpec::default(),
        }
    }
}

/// A receive queue's moderation state.
pub struct RxCtl {
    /// The moderation of its interrupts.
    pub notifier: QueueNotifier,
    /// Which used entries the last notification decision covered.
    pub window: UsedWindow,
    /// Whether delivered frames are parsed for the policy (only `dim-lat` decides on a
    /// frame's headers; every other policy needs its length alone).
    pub classify: bool,
}

/// A transmit queue's moderation and kick-wait state.
pub struct TxCtl {
    /// The moderation of its completions.
    pub notifier: QueueNotifier,
    /// Its kick waits.
    pub poller: KickPoller,
}

impl RxCtl {
    /// For one connection.
    ///
    /// # Errors
    /// The hold timer cannot be created.
    pub fn new(p: &Policies, counters: Arc<QueueCounters>) -> io::Result<Self> {
        Ok(Self {
            notifier: QueueNotifier::new(p.moderation.build(), counters)?,
            window: UsedWindow::default(),
            classify: matches!(p.moderation, ModerationSpec::DimLat(_)),
        })
    }
}

impl TxCtl {
    /// For one connection.
    ///
    /// # Errors
    /// The hold timer cannot be created.
    pub fn new(p: &Policies, counters: Arc<QueueCounters>) -> io::Result<Self> {
        let poller = KickPoller::new(
            p.poll.build(),
            p.contention.build(),
            CpuSampler::new(Box::new(ThreadSchedstat::new())),
            counters.clone(),
        );
        Ok(Self {
            // Transmit completions follow the spec's TX form (DIM: net_dim's TX table).
            notifier: QueueNotifier::new(p.moderation.for_tx_queue().build(), counters)?,
            poller,
        })
    }
}

/// A receive vring as the notifier sees it.
pub struct RxRing<'a> {
    /// The vring.
    pub state: &'a mut VringState<GuestMem>,
    /// Its notification window.
    pub window: &'a mut UsedWindow,
}

impl Ring for RxRing<'_> {
    fn queue_mut(&mut self) -> &mut Queue {
        self.state.get_queue_mut()
    }
    fn signal(&self) -> io::Result<()> {
        self.state.signal_used_queue()
    }
    fn needs_notification(&mut self, mem: &GuestMemoryMmap) -> vmirq_vhost::Result<bool> {
        self.window
            .needs_notification(self.state.get_queue(), mem)
            .map_err(|e| QueueError::Queue(virtio_queue::Error::GuestMemory(e)))
    }
}
