//! The vhost-user-net device of one port's frontend connection: the `VhostUserBackend`
//! implementation (features, config space, events) over the shared [`Fabric`].
//!
//! One worker thread serves both queues. Its epoll event ids: 0 the RX kick, 1 the TX
//! kick (registered by vhost-user-backend), 2 its exit event, [`ATTACH_EVENT`] an eventfd
//! the server writes once per connection so that the worker hands the vrings over to the
//! fabric (vhost-user-backend gives the vrings to `handle_event` only), [`RX_TIMER_EVENT`]
//! and [`TX_TIMER_EVENT`] the queues' hold timers (registered by the server).

use crate::counters::PortCounters;
use crate::ctrl::Ctrl;
use crate::fabric::{Attached, Fabric, GuestMem, Vring};
use crate::queues::{Policies, RxCtl, TxCtl};
use crate::virtio::{NetConfig, CTRL_QUEUE, DEVICE_FEATURES, QUEUES, RX_QUEUE, TX_QUEUE};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::VhostUserBackend;
use vm_memory::GuestAddressSpace;
use vmirq_vhost::daemon::{ExitEvents, HasExitEvents};
use vmirq_vhost::sigbus::Revocation;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{EventConsumer, EventNotifier};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Epoll event id of the attach eventfd.
pub const ATTACH_EVENT: u64 = QUEUES as u64 + 1;
/// Epoll event id of the receive queue's hold timer.
pub const RX_TIMER_EVENT: u64 = QUEUES as u64 + 2;
/// Epoll event id of the transmit queue's hold timer.
pub const TX_TIMER_EVENT: u64 = QUEUES as u64 + 3;

/// The device of one port's connection.
pub struct NetBackend {
    port: usize,
    fabric: Arc<Fabric>,
    config: NetConfig,
    queue_size: u16,
    mem: GuestMem,
    features: Arc<AtomicU64>,
    rx_ctl: Arc<Mutex<RxCtl>>,
    tx_ctl: Arc<Mutex<TxCtl>>,
    attach: EventFd,
    exit: ExitEvents,
    ctrl: Mutex<Ctrl>,
    /// The guest memory registered with vmirq-vhost's SIGBUS table: a frontend that
    /// truncates it loses this connection only (see `vmirq_vhost::sigbus`).
    revocation: Arc<Revocation>,
}

impl NetBackend {
    /// The device of port `port` with guest memory `mem`, its queues following `policies`.
    ///
    /// # Errors
    /// The attach eventfd or a hold timer cannot be created.
    pub fn new(
        port: usize,
        fabric: Arc<Fabric>,
        config: NetConfig,
        queue_size: u16,
        mem: GuestMem,
        policies: &Policies,
    ) -> io::Result<Self> {
        let slot = fabric
            .slot(port)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no such port"))?;
        let rx_ctl = Arc::new(Mutex::new(RxCtl::new(policies, slot.rx_queue.clone())?));
        let tx_ctl = Arc::new(Mutex::new(TxCtl::new(policies, slot.tx_queue.clone())?));
        Ok(Self {
            rx_ctl,
            tx_ctl,
            port,
            fabric,
            config,
            queue_size,
            mem,
            features: Arc::new(AtomicU64::new(0)),
            attach: EventFd::new(EFD_NONBLOCK)?,
            exit: ExitEvents::default(),
            ctrl: Mutex::new(Ctrl::new(0, 1)),
            revocation: Arc::new(Revocation::new()),
        })
    }

    /// The attach eventfd (register it with [`ATTACH_EVENT`], then call [`Self::attach`]).
    #[must_use]
    pub fn attach_fd(&self) -> RawFd {
        self.attach.as_raw_fd()
    }

    /// The hold timer fds of the receive and transmit queues (register them with
    /// [`RX_TIMER_EVENT`] and [`TX_TIMER_EVENT`]).
    #[must_use]
    pub fn timer_fds(&self) -> (RawFd, RawFd) {
        // One lock at a time: the data path takes a port's TX moderation lock before its
        // RX one (`Fabric::service_tx`), never the other way round.
        let rx = self
            .rx_ctl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .notifier
            .timer_fd();
        let tx = self
            .tx_ctl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .notifier
            .timer_fd();
        (rx, tx)
    }

    /// The connection's SIGBUS protection: give it the daemon's shutdown handle; read what
    /// was revoked after the connection ended.
    #[must_use]
    pub fn revocation(&self) -> &Revocation {
        &self.revocation
    }

    /// Ask the worker to hand the vrings to the fabric.
    ///
    /// # Errors
    /// The eventfd cannot be written.
    pub fn attach(&self) -> io::Result<()> {
        self.attach.write(1)
    }
}

impl HasExitEvents for NetBackend {
    fn exit_events(&self) -> &ExitEvents {
        &self.exit
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
        *self.ctrl.lock().unwrap_or_else(PoisonError::into_inner) = Ctrl::new(features, 1);
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
    fn update_memory(&self, mem: GuestMem) -> io::Result<()> {
        // The daemon updates the same GuestMemoryAtomic the fabric reads through; the new
        // mappings are registered with the SIGBUS handler (the old ones unregistered).
        self.revocation.update(mem.memory().into_inner());
        self.revocation.check();
        Ok(())
    }
    fn queues_per_thread(&self) -> Vec<u64> {
        vec![(1 << QUEUES) - 1]
    }
    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        self.exit.create()
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
            TX_QUEUE => self.fabric.on_tx_kick(self.port),
            CTRL_QUEUE => {
                if let Some(vring) = vrings.get(CTRL_QUEUE) {
                    let s = crate::ctrlq::service(
                        vring,
                        &self.mem,
                        &self.ctrl,
                        &self.rx_ctl,
                        &self.tx_ctl,
                    );
                    if let Some(slot) = self.fabric.slot(self.port) {
                        PortCounters::add(&slot.counters.ctrl_commands, s.answered);
                        PortCounters::add(&slot.counters.queue_broken, s.broken);
                    }
                }
            }
            e if e as u64 == RX_TIMER_EVENT => self.fabric.on_rx_timer(self.port),
            e if e as u64 == TX_TIMER_EVENT => self.fabric.on_tx_timer(self.port),
            e if e as u64 == ATTACH_EVENT => {
                let _ = self.attach.read();
                if let [rx, tx, ..] = vrings {
                    self.fabric.attach(
                        self.port,
                        Attached {
                            rx: rx.clone(),
                            tx: tx.clone(),
                            mem: self.mem.clone(),
                            features: Arc::clone(&self.features),
                            rx_ctl: Arc::clone(&self.rx_ctl),
                            tx_ctl: Arc::clone(&self.tx_ctl),
                            revocation: Arc::clone(&self.revocation),
                        },
                    );
                }
            }
            _ => tracing::warn!(event = device_event, "unknown worker event"),
        }
        // The fabric completes nothing that touched revoked memory; the connection ends here.
        self.revocation.check();
        Ok(())
    }
}
