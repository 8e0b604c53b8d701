//! The vhost-user-net device of one port's frontend connection: the `VhostUserBackend`
//! implementation (features, config space, events) over the shared [`Fabric`].
//!
//! A device of N queue pairs (`--queues N`) has 2N + 1 virtqueues: RX 0, TX 0, ..., RX N-1,
//! TX N-1, then the control queue (virtio 1.2 §5.1.2); it offers MQ and
//! `max_virtqueue_pairs` when N > 1.
//!
//! One worker thread serves every queue of the port (not one per pair: on the few CPUs
//! this switch is meant for, more threads per port only add wakeups and lock contention,
//! and the worker's work per kick is one queue's batch either way). Its epoll event ids
//! ([`Events`]): 0 to 2N - 1 the queues' kicks and 2N the control queue's (registered by
//! vhost-user-backend), 2N + 1 its exit event, then an attach eventfd the server writes
//! once per connection so that the worker hands the vrings over to the fabric
//! (vhost-user-backend gives the vrings to `handle_event` only), then each pair's RX and
//! TX hold timers (registered by the server), then the resume eventfd: another port's
//! worker writes it when that port, which had no room for this port's frames, got receive
//! buffers, so that this port's own worker drains its transmit queues again
//! ([`crate::fabric::Fabric::on_resume`]).

use crate::counters::PortCounters;
use crate::ctrl::Ctrl;
use crate::fabric::{Attached, Fabric, GuestMem, Pair, Vring};
use crate::queues::{Policies, RxCtl, TxCtl};
use crate::virtio::{device_features, queues, NetConfig};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::VhostUserBackend;
use vm_memory::GuestAddressSpace;
use vmirq_vhost::daemon::{ExitEvents, HasExitEvents};
use vmirq_vhost::sigbus::Revocation;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{EventConsumer, EventNotifier};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// The worker's epoll event ids of a device of `pairs` queue pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Events {
    pairs: u16,
}

/// What one epoll event id of the worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The receive queue of a pair was kicked (its driver added buffers).
    RxKick(usize),
    /// The transmit queue of a pair was kicked.
    TxKick(usize),
    /// The control queue was kicked.
    Ctrl,
    /// The attach eventfd.
    Attach,
    /// A pair's receive hold timer.
    RxTimer(usize),
    /// A pair's transmit hold timer.
    TxTimer(usize),
    /// The resume eventfd: a destination this port waited for has room again.
    Resume,
    /// Nothing of this device (the exit event is vhost-user-backend's own).
    Unknown,
}

impl Events {
    /// For a device of `pairs` queue pairs.
    #[must_use]
    pub const fn new(pairs: u16) -> Self {
        Self { pairs }
    }

    /// The attach eventfd's id (after the queues' and the exit event's).
    #[must_use]
    pub const fn attach(self) -> u64 {
        queues(self.pairs) as u64 + 1
    }

    /// The receive hold timer's id of pair `q`.
    #[must_use]
    pub const fn rx_timer(self, q: usize) -> u64 {
        self.attach() + 1 + 2 * q as u64
    }

    /// The transmit hold timer's id of pair `q`.
    #[must_use]
    pub const fn tx_timer(self, q: usize) -> u64 {
        self.rx_timer(q) + 1
    }

    /// The resume eventfd's id (after the last pair's timers).
    #[must_use]
    pub const fn resume(self) -> u64 {
        self.tx_timer(self.pairs as usize - 1) + 1
    }

    /// What event id `id` is.
    #[must_use]
    pub fn decode(self, id: u64) -> Event {
        let pairs = u64::from(self.pairs);
        let idx = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        match id {
            i if i < 2 * pairs && i % 2 == 0 => Event::RxKick(idx(i / 2)),
            i if i < 2 * pairs => Event::TxKick(idx(i / 2)),
            i if i == 2 * pairs => Event::Ctrl,
            i if i == self.attach() => Event::Attach,
            i if i == self.resume() => Event::Resume,
            i if i > self.attach() && i <= self.tx_timer(idx(pairs) - 1) => {
                let t = i - self.attach() - 1;
                if t % 2 == 0 {
                    Event::RxTimer(idx(t / 2))
                } else {
                    Event::TxTimer(idx(t / 2))
                }
            }
            _ => Event::Unknown,
        }
    }
}

/// The device of one port's connection.
pub struct NetBackend {
    port: usize,
    fabric: Arc<Fabric>,
    config: NetConfig,
    queue_size: u16,
    mem: GuestMem,
    features: Arc<AtomicU64>,
    /// Each pair's receive and transmit moderation, pair 0 first.
    ctls: Box<crate::ctrlq::PairCtls>,
    /// Queue pairs the driver uses (VQ_PAIRS_SET).
    active: Arc<AtomicU16>,
    events: Events,
    attach: EventFd,
    /// Written by other ports' workers ([`Event::Resume`]), shared with the fabric through
    /// the port's [`Attached`].
    resume: Arc<EventFd>,
    exit: ExitEvents,
    ctrl: Mutex<Ctrl>,
    /// The guest memory registered with vmirq-vhost's SIGBUS table: a frontend that
    /// truncates it loses this connection only (see `vmirq_vhost::sigbus`).
    revocation: Arc<Revocation>,
}

impl NetBackend {
    /// The device of port `port` with guest memory `mem`, its queues following `policies`,
    /// with as many queue pairs as the port's slot has (`config.max_pairs` is set to it).
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
        let ctls = slot
            .rx_queues
            .iter()
            .zip(&slot.tx_queues)
            .map(|(rxc, txc)| {
                Ok((
                    Arc::new(Mutex::new(RxCtl::new(policies, rxc.clone())?)),
                    Arc::new(Mutex::new(TxCtl::new(policies, txc.clone())?)),
                ))
            })
            .collect::<io::Result<Box<_>>>()?;
        let pairs = u16::try_from(ctls.len()).unwrap_or(1);
        let mut config = config;
        config.max_pairs = pairs;
        Ok(Self {
            ctls,
            active: Arc::new(AtomicU16::new(1)),
            events: Events::new(pairs),
            port,
            fabric,
            config,
            queue_size,
            mem,
            features: Arc::new(AtomicU64::new(0)),
            attach: EventFd::new(EFD_NONBLOCK)?,
            resume: Arc::new(EventFd::new(EFD_NONBLOCK)?),
            exit: ExitEvents::default(),
            ctrl: Mutex::new(Ctrl::new(0, pairs)),
            revocation: Arc::new(Revocation::new()),
        })
    }

    /// The attach eventfd (register it with [`Events::attach`], then call
    /// [`Self::attach`]).
    #[must_use]
    pub fn attach_fd(&self) -> RawFd {
        self.attach.as_raw_fd()
    }

    /// The resume eventfd (register it with [`Events::resume`]).
    #[must_use]
    pub fn resume_fd(&self) -> RawFd {
        self.resume.as_raw_fd()
    }

    /// The worker's event ids.
    #[must_use]
    pub const fn events(&self) -> Events {
        self.events
    }

    /// The hold timer fds of each pair's receive and transmit queues (register them with
    /// [`Events::rx_timer`] and [`Events::tx_timer`]).
    #[must_use]
    pub fn timer_fds(&self) -> Vec<(RawFd, RawFd)> {
        // One lock at a time: the data path takes a port's TX moderation lock before its
        // RX one (`Fabric::service_tx`), never the other way round.
        self.ctls
            .iter()
            .map(|(rx, tx)| {
                let rx = rx
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .notifier
                    .timer_fd();
                let tx = tx
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .notifier
                    .timer_fd();
                (rx, tx)
            })
            .collect()
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
        queues(self.config.max_pairs)
    }
    fn max_queue_size(&self) -> usize {
        usize::from(self.queue_size)
    }
    fn features(&self) -> u64 {
        device_features(self.config.max_pairs)
    }
    fn acked_features(&self, features: u64) {
        self.features.store(features, Ordering::Release);
        // Features set again: the device starts over with one pair (§5.1.6.5.5).
        self.active.store(1, Ordering::Release);
        *self.ctrl.lock().unwrap_or_else(PoisonError::into_inner) =
            Ctrl::new(features, self.config.max_pairs);
        // A driver reset sets the rings up again at used indices of the frontend's choosing:
        // the receive windows cannot tell where the next entries start (the transmit side
        // follows its ring's position at each publish, see `TxCtl::used_next`).
        // Parked receive entries belong to the rings of before the reset.
        for (rx, _) in self.ctls.iter() {
            let mut rx = rx.lock().unwrap_or_else(PoisonError::into_inner);
            rx.window.restart();
            rx.parked.discard();
        }
    }
    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        // MQ: the frontend asks GET_QUEUE_NUM (2N + 1) before it sets up N > 1 pairs.
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ
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
    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        let index = usize::try_from(queue_index).unwrap_or(usize::MAX);
        self.fabric.on_ring_stop(self.port, index);
        Ok(())
    }
    fn queues_per_thread(&self) -> Vec<u64> {
        // One worker for every queue (see the module docs); at most 2 * PAIRS_MAX + 1 < 64.
        vec![(1 << self.num_queues()) - 1]
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
        match self.events.decode(u64::from(device_event)) {
            Event::RxKick(q) => self.fabric.on_rx_kick(self.port, q),
            Event::TxKick(q) => self.fabric.on_tx_kick(self.port, q),
            Event::Ctrl => {
                if let Some(vring) = vrings.get(crate::virtio::ctrl_queue(self.config.max_pairs)) {
                    let s = crate::ctrlq::service(
                        vring,
                        &self.mem,
                        &self.ctrl,
                        &self.ctls,
                        &self.active,
                    );
                    if let Some(slot) = self.fabric.slot(self.port) {
                        PortCounters::add(&slot.counters.ctrl_commands, s.answered);
                        PortCounters::add(&slot.counters.queue_broken, s.broken);
                    }
                }
            }
            Event::RxTimer(q) => self.fabric.on_rx_timer(self.port, q),
            Event::TxTimer(q) => self.fabric.on_tx_timer(self.port, q),
            Event::Resume => {
                // Consumed by the fabric through the attached port; between connections
                // here, or epoll would report it for ever.
                if !self.fabric.on_resume(self.port) {
                    let _ = self.resume.read();
                }
            }
            Event::Attach => {
                let _ = self.attach.read();
                let pairs: Vec<Pair> = self
                    .ctls
                    .iter()
                    .enumerate()
                    .filter_map(|(q, (rx_ctl, tx_ctl))| {
                        Some(Pair {
                            rx: vrings.get(2 * q)?.clone(),
                            tx: vrings.get(2 * q + 1)?.clone(),
                            rx_ctl: Arc::clone(rx_ctl),
                            tx_ctl: Arc::clone(tx_ctl),
                        })
                    })
                    .collect();
                if let Some(a) = Attached::new(
                    pairs,
                    self.mem.clone(),
                    Arc::clone(&self.features),
                    Arc::clone(&self.active),
                    Arc::clone(&self.revocation),
                    Arc::clone(&self.resume),
                    vrings
                        .get(crate::virtio::ctrl_queue(self.config.max_pairs))
                        .filter(|_| self.config.max_pairs > 1)
                        .cloned(),
                ) {
                    self.fabric.attach(self.port, a);
                }
            }
            Event::Unknown => tracing::warn!(event = device_event, "unknown worker event"),
        }
        // The fabric completes nothing that touched revoked memory; the connection ends here.
        self.revocation.check();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, Events};

    #[test]
    fn event_ids_of_one_and_of_three_pairs() {
        let one = Events::new(1);
        assert_eq!(one.decode(0), Event::RxKick(0));
        assert_eq!(one.decode(1), Event::TxKick(0));
        assert_eq!(one.decode(2), Event::Ctrl);
        assert_eq!(one.decode(3), Event::Unknown, "the exit event");
        assert_eq!((one.attach(), one.rx_timer(0), one.tx_timer(0)), (4, 5, 6));
        assert_eq!(one.decode(4), Event::Attach);
        assert_eq!(one.decode(5), Event::RxTimer(0));
        assert_eq!(one.decode(6), Event::TxTimer(0));
        assert_eq!(one.resume(), 7);
        assert_eq!(one.decode(7), Event::Resume);
        assert_eq!(one.decode(8), Event::Unknown);
        let three = Events::new(3);
        assert_eq!(three.decode(5), Event::TxKick(2));
        assert_eq!(three.decode(6), Event::Ctrl);
        assert_eq!(three.decode(7), Event::Unknown);
        assert_eq!(three.decode(three.attach()), Event::Attach);
        assert_eq!(three.decode(three.rx_timer(2)), Event::RxTimer(2));
        assert_eq!(three.decode(three.tx_timer(1)), Event::TxTimer(1));
        assert_eq!(three.decode(three.tx_timer(2) + 1), Event::Resume);
        assert_eq!(three.decode(three.resume() + 1), Event::Unknown);
        assert_eq!(three.decode(u64::MAX), Event::Unknown);
    }
}
