//! The vhost-user-net device of one port's frontend connection: the `VhostUserBackend`
//! implementation (features, config space, events) over the shared [`Fabric`].
//!
//! One worker thread serves both queues. Its epoll event ids: 0 the RX kick, 1 the TX
//! kick (registered by vhost-user-backend), 2 its exit event, [`ATTACH_EVENT`] an eventfd
//! the server writes once per connection so that the worker hands the vrings over to the
//! fabric (vhost-user-backend gives the vrings to `handle_event` only).

use crate::fabric::{Attached, Fabric, GuestMem, Vring};
use crate::rx::UsedWindow;
use crate::virtio::{NetConfig, DEVICE_FEATURES, QUEUES, RX_QUEUE, TX_QUEUE};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::VhostUserBackend;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Epoll event id of the attach eventfd.
pub const ATTACH_EVENT: u64 = QUEUES as u64 + 1;

/// The device of one port's connection.
pub struct NetBackend {
    port: usize,
    fabric: Arc<Fabric>,
    config: NetConfig,
    queue_size: u16,
    mem: GuestMem,
    features: Arc<AtomicU64>,
    attach: EventFd,
    exit_fds: Mutex<Vec<RawFd>>,
}

impl NetBackend {
    /// The device of port `port` with guest memory `mem`.
    ///
    /// # Errors
    /// The attach eventfd cannot be created.
    pub fn new(
        port: usize,
        fabric: Arc<Fabric>,
        config: NetConfig,
        queue_size: u16,
        mem: GuestMem,
    ) -> io::Result<Self> {
        Ok(Self {
            port,
            fabric,
            config,
            queue_size,
            mem,
            features: Arc::new(AtomicU64::new(0)),
            attach: EventFd::new(EFD_NONBLOCK)?,
            exit_fds: Mutex::new(Vec::new()),
        })
    }

    /// The attach eventfd (register it with [`ATTACH_EVENT`], then call [`Self::attach`]).
    #[must_use]
    pub fn attach_fd(&self) -> RawFd {
        self.attach.as_raw_fd()
    }

    /// Ask the worker to hand the vrings to the fabric.
    ///
    /// # Errors
    /// The eventfd cannot be written.
    pub fn attach(&self) -> io::Result<()> {
        self.attach.write(1)
    }

    /// The exit-event consumer fds given to vhost-user-backend's worker loop, which
    /// registers them with `into_raw_fd` and never closes them; the server closes them
    /// after the daemon is gone.
    pub fn take_exit_consumer_fds(&self) -> Vec<RawFd> {
        std::mem::take(&mut *self.exit_fds.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl VhostUserBackend for NetBackend {
    type Bitmap = ();
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        QUEUES
    }
    fn max_queue_size(&self) -> usize {
        usize::from(self.queue_size)
    }
    fn features(&self) -> u64 {
        DEVICE_FEATURES
    }
    fn acked_features(&self, features: u64) {
        self.features.store(features, Ordering::Release);
    }
    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
    }
    fn set_event_idx(&self, _enabled: bool) {
        // vhost-user-backend sets EVENT_IDX on each vring's queue.
    }
    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        self.config.read(offset, size)
    }
    fn update_memory(&self, _mem: GuestMem) -> io::Result<()> {
        // The daemon updates the same GuestMemoryAtomic the fabric reads through.
        Ok(())
    }
    fn queues_per_thread(&self) -> Vec<u64> {
        vec![(1 << QUEUES) - 1]
    }
    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        let (consumer, notifier) =
            new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()?;
        self.exit_fds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(consumer.as_raw_fd());
        Some((consumer, notifier))
    }
    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Vring],
        _thread_id: usize,
    ) -> io::Result<()> {
        if !evset.contains(EventSet::IN) {
            return Ok(());
        }
        match usize::from(device_event) {
            RX_QUEUE => self.fabric.on_rx_kick(self.port),
            TX_QUEUE => self.fabric.service_tx(self.port),
            e if e as u64 == ATTACH_EVENT => {
                let _ = self.attach.read();
                if let [rx, tx] = vrings {
                    self.fabric.attach(
                        self.port,
                        Attached {
                            rx: rx.clone(),
                            tx: tx.clone(),
                            mem: self.mem.clone(),
                            features: Arc::clone(&self.features),
                            rx_window: Mutex::new(UsedWindow::default()),
                        },
                    );
                }
            }
            _ => tracing::warn!(event = device_event, "unknown worker event"),
        }
        Ok(())
    }
}
