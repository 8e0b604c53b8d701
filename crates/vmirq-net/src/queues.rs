//! The per-queue machinery of one port's connection, from the shared crate `vmirq-vhost`:
//! each receive queue's interrupts and each transmit queue's completions go through a
//! [`QueueNotifier`] (a `vmirq_policy` moderation policy with its hold timerfd, EVENT_IDX
//! on top), and each transmit queue's kick waits through an optional [`KickPoller`].
//!
//! The receive queue publishes a merged packet's used entries with one index store
//! ([`crate::rx::publish_used`]), which virtio-queue's own notification window does not
//! see, so its [`Ring`] ([`WindowRing`]) answers `needs_notification` from the
//! [`UsedWindow`] instead. The transmit queue does the same per burst (its chains go back
//! through `fabric::tx_return`), with [`WindowRing`].

use crate::fabric::GuestMem;
use crate::rx::{buffers_left, LowWater, Parked, UsedWindow};
use std::io;
use std::sync::Arc;
use vhost_user_backend::VringState;
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddressSpace, GuestMemoryMmap};
use vmirq_policy::spec::{ContentionSpec, ModerationSpec, WaitSpec};
use vmirq_vhost::counters::QueueCounters;
use vmirq_vhost::cpustat::{CpuSampler, CpuSource, Siblings, ThreadSchedstat};
use vmirq_vhost::notify::QueueNotifier;
use vmirq_vhost::poll::KickPoller;
use vmirq_vhost::{QueueError, Ring};

/// The policies every port's queues follow (`--moderation`, `--poll`, `--poll-contention`)
/// and which threads run the data path (`--datapath`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policies {
    /// Moderation of receive interrupts and transmit completions.
    pub moderation: ModerationSpec,
    /// Kick waits of transmit queues (of the forwarding thread with `Datapath::Pmd`).
    pub poll: WaitSpec,
    /// When a kick poll gives the CPU up for a neighbour.
    pub contention: ContentionSpec,
    /// Which threads move frames.
    pub datapath: Datapath,
    /// The receive low-water mark (`--rx-low-water`, [`LowWater`]).
    pub rx_low_water: LowWater,
}

/// Which threads move frames (`--datapath`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Datapath {
    /// `per-port`: each port's vhost-user worker drains its own transmit queue when kicked.
    #[default]
    PerPort,
    /// `pmd` or `pmd:cpu=N`: one forwarding thread serves every port's transmit queue in
    /// bursts ([`crate::pmd`]), optionally pinned to CPU `N`.
    Pmd {
        /// CPU the thread is pinned to.
        cpu: Option<usize>,
    },
}

impl std::str::FromStr for Datapath {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "per-port" => Ok(Self::PerPort),
            "pmd" => Ok(Self::Pmd { cpu: None }),
            _ => {
                let cpu = s
                    .strip_prefix("pmd:cpu=")
                    .and_then(|n| n.parse::<usize>().ok())
                    .ok_or_else(|| format!("{s:?}: expected per-port, pmd or pmd:cpu=N"))?;
                Ok(Self::Pmd { cpu: Some(cpu) })
            }
        }
    }
}

impl std::fmt::Display for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::PerPort => f.write_str("per-port"),
            Self::Pmd { cpu: None } => f.write_str("pmd"),
            Self::Pmd { cpu: Some(c) } => write!(f, "pmd:cpu={c}"),
        }
    }
}

impl Default for Policies {
    /// No moderation, no polling: every completion may interrupt (EVENT_IDX permitting),
    /// every kick wait sleeps.
    fn default() -> Self {
        Self {
            moderation: ModerationSpec::None,
            poll: WaitSpec::Never,
            contention: ContentionSpec::default(),
            datapath: Datapath::PerPort,
            rx_low_water: LowWater::Off,
        }
    }
}

/// One port's own moderation (`--port-moderation N=SPEC`): port `N` (counted from 0 in
/// `--socket` order) follows `SPEC` instead of `--moderation`, as each VM's vNIC may have its
/// own coalescing setting (QEMU's and ethtool's settings are per device too). The switch's
/// other policies (`--poll`, `--datapath`, `--rx-low-water`) stay shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortModeration {
    /// The port, in `--socket` order from 0.
    pub port: usize,
    /// Its receive interrupts' and transmit completions' moderation.
    pub spec: ModerationSpec,
}

impl std::str::FromStr for PortModeration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (port, spec) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected PORT=SPEC, e.g. 1=dim"))?;
        let port = port
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("{s:?}: {port:?} is not a port number (0, 1, ...)"))?;
        let spec = spec
            .parse::<ModerationSpec>()
            .map_err(|e| format!("{s:?}: {e}"))?;
        Ok(Self { port, spec })
    }
}

impl std::fmt::Display for PortModeration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.port, self.spec)
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
    /// `dim-lat:wait=on`: the port's transmitted frames of at most this many bytes are told
    /// to this queue's policy (a short message makes it expect a response,
    /// `vmirq_policy::moderation::dim::ResponseWait`); `None` otherwise. Fixed for the
    /// connection (the guest's NOTF_COAL commands replace the policy, not this): the
    /// fabric copies pair 0's into [`crate::fabric::Attached::tx_watch`] at attach and
    /// reads it from there, without this lock.
    pub tx_watch: Option<u32>,
    /// Frames written whose used entries wait for the next notification decision
    /// (`dim-lat:overtake=on`, see [`crate::rx::Parked`]).
    pub parked: Parked,
    /// The receive low-water mark ([`LowWater`]).
    pub low_water: LowWater,
    /// The buffers left were at or below the mark when last looked at.
    below: bool,
}

/// A transmit queue's moderation and kick-wait state.
pub struct TxCtl {
    /// The moderation of its completions.
    pub notifier: QueueNotifier,
    /// Its kick waits.
    pub poller: KickPoller,
    /// Which used entries the last notification decision covered (the transmit used ring
    /// is written per burst by [`crate::rx::publish_used`], like the receive one).
    pub window: UsedWindow,
    /// The queue's `next_used` after the last publish: another value at the next publish
    /// means the frontend set the ring's base anew (SET_VRING_BASE), and the window starts
    /// again there. `None` before the first publish.
    pub used_next: Option<u16>,
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
            tx_watch: match p.moderation {
                ModerationSpec::DimLat(c) => {
                    c.burst.filter(|f| f.response_wait).map(|f| f.small_bytes)
                }
                _ => None,
            },
            parked: Parked::default(),
            low_water: p.rx_low_water,
            below: false,
        })
    }

    /// After frames went into the queue: if the driver's available buffers just fell to
    /// the low-water mark ([`LowWater`], edge-triggered) while the policy holds frames,
    /// notify now. Returns whether the mark fired (the notification may still be
    /// suppressed by the driver).
    ///
    /// # Errors
    /// When the rings or the call eventfd cannot be accessed.
    pub fn check_low_water(
        &mut self,
        state: &mut VringState<GuestMem>,
        mem: &GuestMemoryMmap,
    ) -> vmirq_vhost::Result<bool> {
        if self.low_water == LowWater::Off {
            return Ok(false);
        }
        // Read even when nothing is held: the edge needs the level of every check.
        let q = state.get_queue();
        let left = buffers_left(q, mem).map_err(QueueError::Queue)?;
        let low = self.low_water.reached(left, q.size());
        let crossed = low && !self.below;
        self.below = low;
        if !crossed || self.notifier.held() == 0 {
            return Ok(false);
        }
        let (notifier, mut ring) = self.split(state);
        notifier.signal(&mut ring, mem)?;
        Ok(true)
    }

    /// The queue's notifier, and its vring as the notifier sees it (decisions through the
    /// queue's window, parked entries published first, see [`WindowRing`]).
    pub fn split<'a>(
        &'a mut self,
        state: &'a mut VringState<GuestMem>,
    ) -> (&'a mut QueueNotifier, WindowRing<'a>) {
        let ring = WindowRing {
            state,
            mem: None,
            window: &mut self.window,
            parked: Some(&mut self.parked),
        };
        (&mut self.notifier, ring)
    }

    /// When parked entries must go out now although no notification is due: the policy
    /// holds nothing any more (the guest replaced it), or `force` (the queue could not take
    /// the next frame, so the driver must see its buffers to refill; or the frontend stops
    /// the ring). Publishes them and notifies if the driver wants it.
    ///
    /// # Errors
    /// When the rings or the call eventfd cannot be accessed.
    pub fn settle_parked(
        &mut self,
        state: &mut VringState<GuestMem>,
        mem: &GuestMemoryMmap,
        force: bool,
    ) -> vmirq_vhost::Result<()> {
        if self.parked.is_empty() || (!force && self.notifier.held() > 0) {
            return Ok(());
        }
        let (notifier, mut ring) = self.split(state);
        notifier.signal(&mut ring, mem)
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
            kick_sampler(Box::new(ThreadSchedstat::new())),
            counters.clone(),
        );
        Ok(Self {
            // Transmit completions follow the spec's TX form (DIM: net_dim's TX table).
            notifier: QueueNotifier::new(p.moderation.for_tx_queue().build(), counters)?,
            poller,
            window: UsedWindow::default(),
            used_next: None,
        })
    }
}

impl TxCtl {
    /// The queue's notifier, and its vring as the notifier sees it (decisions through the
    /// queue's window, see [`WindowRing`]).
    pub fn split<'a>(
        &'a mut self,
        state: &'a mut VringState<GuestMem>,
        mem: &'a GuestMem,
    ) -> (&'a mut QueueNotifier, WindowRing<'a>) {
        let ring = WindowRing {
            state,
            mem: Some(mem),
            window: &mut self.window,
            parked: None,
        };
        (&mut self.notifier, ring)
    }
}

/// The CPU sampler of a kick poller of this device. The process's other threads are the
/// other ports' workers, the forwarding thread or an in-process client: peers competing for
/// the CPUs, not helpers of the poller (as io_uring's io-wq workers are in vmirq-blk), so
/// their CPU time is not taken off the poller's run-queue delay.
#[must_use]
pub fn kick_sampler(source: Box<dyn CpuSource>) -> CpuSampler {
    CpuSampler::new(source).with_siblings(Siblings::Ignore)
}

/// A vring as the notifier sees it when its used entries are published by our own writers
/// ([`crate::rx::publish_used`], per frame or per burst), which virtio-queue's own window
/// does not see: notification decisions come from the queue's [`UsedWindow`]. Receive and
/// transmit queues alike; `mem` is the device's guest memory where the notifier may need
/// it anew (transmit: the held completions' resume), `None` otherwise. A receive queue's
/// parked entries ([`Parked`]) are published right before each decision, so a notification
/// covers them.
pub struct WindowRing<'a> {
    /// The vring.
    pub state: &'a mut VringState<GuestMem>,
    /// The device's guest memory, when [`Ring::current_memory`] should read it.
    pub mem: Option<&'a GuestMem>,
    /// Its notification window.
    pub window: &'a mut UsedWindow,
    /// A receive queue's parked entries.
    pub parked: Option<&'a mut Parked>,
}

impl Ring for WindowRing<'_> {
    fn queue_mut(&mut self) -> &mut Queue {
        self.state.get_queue_mut()
    }
    fn signal(&self) -> io::Result<()> {
        self.state.signal_used_queue()
    }
    fn needs_notification(&mut self, mem: &GuestMemoryMmap) -> vmirq_vhost::Result<bool> {
        if let Some(parked) = self.parked.as_deref_mut().filter(|p| !p.is_empty()) {
            parked
                .publish(self.state.get_queue_mut(), mem)
                .map_err(|e| QueueError::Queue(virtio_queue::Error::GuestMemory(e)))?;
        }
        self.window
            .needs_notification(self.state.get_queue(), mem)
            .map_err(|e| QueueError::Queue(virtio_queue::Error::GuestMemory(e)))
    }
    fn current_memory(&self) -> Option<Arc<GuestMemoryMmap>> {
        self.mem.map(|m| m.memory().into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::{kick_sampler, Datapath};
    use vmirq_policy::wait::{ContentionConfig, ContentionGate};
    use vmirq_vhost::cpustat::{CpuSource, CpuTotals, SAMPLE_EVERY_NS};

    /// The collapse of `--poll kvm` on 2 CPUs, as schedstat showed it to one port worker:
    /// per millisecond it runs 0.6 ms and waits 0.4 ms for the polling client on its CPU,
    /// while the other port's worker polls the other CPU (1 ms of process CPU time).
    struct TwoPollersOnTwoCpus {
        ms: u64,
    }

    impl CpuSource for TwoPollersOnTwoCpus {
        fn read(&mut self) -> Option<CpuTotals> {
            self.ms += 1;
            let ran_ns = 600_000 * self.ms;
            Some(CpuTotals {
                ran_ns,
                waited_ns: 400_000 * self.ms,
                process_ns: ran_ns + 1_000_000 * self.ms,
            })
        }
    }

    #[test]
    fn a_worker_waiting_for_the_client_stops_polling_whatever_its_siblings_run() {
        let mut sampler = kick_sampler(Box::new(TwoPollersOnTwoCpus { ms: 0 }));
        let mut gate = ContentionGate::new(ContentionConfig::default());
        let mut open = true;
        for i in 0..20 {
            let now = i * SAMPLE_EVERY_NS;
            if let Some(s) = sampler.sample(now) {
                assert_eq!(s.siblings_ns, 0, "{s:?}");
                open = gate.on_sample(now, s);
            }
        }
        // A 40 % wait is contention (the default threshold is 10 %); discounting the other
        // worker's CPU time as the poller's own work left the gate open forever.
        assert!(!open, "{:?}", gate.stats());
        assert!(gate.stats().contended > 0, "{:?}", gate.stats());
    }

    #[test]
    fn datapath_specs_parse_and_print_back() {
        for s in ["per-port", "pmd", "pmd:cpu=1"] {
            let d: Datapath = s.parse().expect(s);
            assert_eq!(d.to_string(), s);
        }
        assert_eq!("pmd:cpu=3".parse(), Ok(Datapath::Pmd { cpu: Some(3) }));
        for bad in ["", "pmd:cpu=", "pmd:cpu=x", "pmd:cpus=1", "1"] {
            assert!(bad.parse::<Datapath>().is_err(), "{bad}");
        }
    }
}
