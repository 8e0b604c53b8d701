//! One virtio-net device as a guest driver sees it: guest memory, a vhost-user session, an
//! RX ring full of receive buffers and a TX ring, each with a kick and a call eventfd.
//!
//! Receive buffers are `rx_buf_len` bytes each; with MRG_RXBUF a frame may span several
//! (the header's `num_buffers`), which are reassembled into the caller's scratch buffer (the
//! copy a guest's `recvmsg` makes). Transmit buffers are filled with the probe payload once;
//! a send writes the net header's neighbour (probe header) and trailer only. Whatever the
//! device writes is validated; violations are counted in [`Faults`] and the buffer is
//! recycled, a broken ring is an error. A port sends in one encapsulation at a time
//! ([`NetPort::set_encap`]: `raw` unless set), whoever sends on it.

use crate::frame::{self, Encap, Mac, Pattern};
use crate::memory::{GuestMemory, MemoryError};
use crate::ring::{DriverRing, Fault, RingError, RingLayout};
use crate::vhost::{Session, SessionError};
use crate::virtio_net::{self as vn, HDR_LEN};
use serde::Serialize;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// The net header length in the widths guest arithmetic uses.
const HDR_U32: u32 = 12;
const HDR_U64: u64 = 12;
const _: () = assert!(HDR_U32 as usize == HDR_LEN && HDR_U64 == HDR_U32 as u64);

/// Errors of a port.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The configuration cannot work.
    #[error("invalid port configuration: {0}")]
    Config(&'static str),
    /// Creating memory or eventfds failed.
    #[error("port resources")]
    Resource(#[source] std::io::Error),
    /// Guest memory.
    #[error("guest memory")]
    Memory(#[from] MemoryError),
    /// Ring layout or a fatal device fault.
    #[error("{queue} ring")]
    Ring {
        /// "rx" or "tx".
        queue: &'static str,
        /// The ring error.
        #[source]
        source: RingError,
    },
    /// vhost-user session.
    #[error("vhost-user session with {path}")]
    Session {
        /// Socket path.
        path: PathBuf,
        /// The session error.
        #[source]
        source: SessionError,
    },
    /// A kick could not be written.
    #[error("kick eventfd")]
    Kick(#[source] std::io::Error),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, PortError>;

/// How a port is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortConfig {
    /// Entries of the RX ring (power of two; QEMU's `rx_queue_size`).
    pub rx_queue_size: u16,
    /// Entries of the TX ring (power of two; QEMU's `tx_queue_size`).
    pub tx_queue_size: u16,
    /// Bytes per receive buffer, net header included.
    pub rx_buf_len: u32,
    /// Largest frame this port sends.
    pub tx_frame_max: u32,
    /// Ask for VIRTIO_NET_F_MRG_RXBUF.
    pub mrg_rxbuf: bool,
    /// Ask for VIRTIO_RING_F_EVENT_IDX.
    pub event_idx: bool,
    /// How long to wait for each vhost-user reply.
    pub reply_timeout: Duration,
}

impl Default for PortConfig {
    fn default() -> Self {
        Self {
            rx_queue_size: 256,
            tx_queue_size: 256,
            rx_buf_len: 2048,
            tx_frame_max: 1514,
            mrg_rxbuf: true,
            event_idx: true,
            reply_timeout: Duration::from_secs(5),
        }
    }
}

impl PortConfig {
    fn check(&self) -> Result<()> {
        for size in [self.rx_queue_size, self.tx_queue_size] {
            if !size.is_power_of_two() || size > 4096 {
                return Err(PortError::Config(
                    "queue size must be a power of two up to 4096",
                ));
            }
        }
        if self.rx_buf_len < 256 || self.rx_buf_len > 65536 {
            return Err(PortError::Config("rx buffer length must be 256..=65536"));
        }
        if !(frame::FRAME_LEN_MIN..=frame::FRAME_LEN_MAX).contains(&self.tx_frame_max) {
            return Err(PortError::Config("largest frame must be 60..=9216 bytes"));
        }
        if !self.mrg_rxbuf && self.rx_buf_len < self.tx_frame_max + HDR_U32 {
            return Err(PortError::Config(
                "without MRG_RXBUF a receive buffer must hold the largest frame",
            ));
        }
        Ok(())
    }
}

/// Device misbehaviour seen by this port (a careful guest's counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Faults {
    /// Used id outside the ring.
    pub used_id_out_of_range: u64,
    /// Used id not in flight (twice, or never made available).
    pub used_id_not_in_flight: u64,
    /// Used length larger than the buffer.
    pub used_len_too_long: u64,
    /// First buffer of a packet shorter than the net header.
    pub rx_short: u64,
    /// Net header with flags, GSO or `num_buffers` not negotiated.
    pub rx_bad_header: u64,
    /// A packet's further buffers were not in the used ring.
    pub rx_missing_buffers: u64,
    /// A transmit buffer came back with a non-zero written length.
    pub tx_len_nonzero: u64,
}

impl Faults {
    /// Sum of all faults.
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.used_id_out_of_range
            + self.used_id_not_in_flight
            + self.used_len_too_long
            + self.rx_short
            + self.rx_bad_header
            + self.rx_missing_buffers
            + self.tx_len_nonzero
    }

    fn count_ring(&mut self, fault: Fault) {
        match fault {
            Fault::UsedIdOutOfRange { .. } => self.used_id_out_of_range += 1,
            Fault::UsedIdNotInFlight { .. } => self.used_id_not_in_flight += 1,
            Fault::UsedIdxJump { .. } | Fault::Broken => {}
        }
    }
}

/// What a port did (monotonic counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    /// Frames made available for transmission.
    pub tx_frames: u64,
    /// Their bytes (Ethernet frame, no net header).
    pub tx_bytes: u64,
    /// Frames received and handed to the caller.
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Receive buffers consumed (more than frames when MRG_RXBUF merges).
    pub rx_buffers: u64,
    /// Kicks written on the TX queue.
    pub tx_kicks: u64,
    /// Kicks written on the RX queue (after refills).
    pub rx_kicks: u64,
    /// Device signals on the RX call eventfd.
    pub rx_calls: u64,
    /// Device signals on the TX call eventfd.
    pub tx_calls: u64,
    /// Sends refused because the TX ring was full.
    pub tx_ring_full: u64,
    /// Device faults.
    pub faults: Faults,
}

/// A connected virtio-net device.
#[derive(Debug)]
pub struct NetPort {
    path: PathBuf,
    /// `None` only for the unit tests' detached ports.
    session: Option<Session>,
    features: u64,
    mem: GuestMemory,
    cfg: PortConfig,
    mrg_rxbuf: bool,
    mac: Mac,
    /// Encapsulation of the frames this port sends.
    encap: Encap,
    rx: DriverRing,
    tx: DriverRing,
    rx_kick: EventFd,
    rx_call: EventFd,
    tx_kick: EventFd,
    tx_call: EventFd,
    rx_base: u64,
    tx_base: u64,
    tx_buf_len: u64,
    /// What the last frame sent from each TX buffer wrote over the pattern.
    tx_last: Vec<Written>,
    counters: PortCounters,
}

/// Where the last frame sent from a TX buffer wrote over the payload pattern: its header
/// (`header_len` bytes from the start) and its trailer (the last bytes of `len`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Written {
    /// Frame length (0: nothing sent yet).
    len: u32,
    /// Header length.
    header_len: usize,
}

fn ring_err(queue: &'static str) -> impl FnOnce(RingError) -> PortError {
    move |source| PortError::Ring { queue, source }
}

impl NetPort {
    /// Create guest memory, connect to the vhost-user-net socket at `path`, negotiate,
    /// fill the RX ring and start both rings. `mac` is this port's source address.
    ///
    /// # Errors
    /// [`PortError`].
    pub fn connect(path: &Path, cfg: PortConfig, mac: Mac, pattern: &Pattern) -> Result<Self> {
        cfg.check()?;
        let session_err = |source| PortError::Session {
            path: path.to_path_buf(),
            source,
        };
        let mut wanted = 0;
        if cfg.mrg_rxbuf {
            wanted |= vn::F_MRG_RXBUF;
        }
        if cfg.event_idx {
            wanted |= vn::F_EVENT_IDX;
        }
        let session = Session::connect(path, wanted, 0, cfg.reply_timeout).map_err(session_err)?;
        let features = session.features();
        tracing::debug!(path = %path.display(), features = ?vn::feature_names(features), "negotiated");
        let mut port = Self::build(path, cfg, mac, pattern, features)?;
        port.session = Some(session);
        port.start().map_err(session_err)?;
        Ok(port)
    }

    /// Memory, rings and buffers for `features`, RX ring filled, nothing connected.
    fn build(
        path: &Path,
        cfg: PortConfig,
        mac: Mac,
        pattern: &Pattern,
        features: u64,
    ) -> Result<Self> {
        cfg.check()?;
        let event_idx = features & vn::F_EVENT_IDX != 0;
        let mrg_rxbuf = features & vn::F_MRG_RXBUF != 0;
        if !mrg_rxbuf && cfg.rx_buf_len < cfg.tx_frame_max + HDR_U32 {
            return Err(PortError::Config(
                "backend lacks MRG_RXBUF and rx buffers are too small",
            ));
        }
        let rx_layout = RingLayout::new(cfg.rx_queue_size, 0).map_err(ring_err("rx"))?;
        let tx_layout =
            RingLayout::new(cfg.tx_queue_size, rx_layout.end()).map_err(ring_err("tx"))?;
        let rx_base = tx_layout.end();
        let tx_buf_len = (u64::from(cfg.tx_frame_max) + HDR_U64).next_multiple_of(64);
        let rx_n = u64::from(cfg.rx_queue_size);
        let tx_n = u64::from(cfg.tx_queue_size);
        let tx_base = (rx_base + rx_n * u64::from(cfg.rx_buf_len)).next_multiple_of(4096);
        let total = tx_base + tx_n * tx_buf_len;
        let mem = GuestMemory::new(
            usize::try_from(total).map_err(|_| PortError::Config("memory too large"))?,
        )?;
        let rx = DriverRing::new(&mem, rx_layout, event_idx).map_err(ring_err("rx"))?;
        let tx = DriverRing::new(&mem, tx_layout, event_idx).map_err(ring_err("tx"))?;
        // Every TX buffer: a zero net header (no offloads; num_buffers 0 on transmit), then
        // the payload pattern; a send only writes the probe header and trailer.
        let mut tx_fill = vec![0u8; usize::try_from(tx_buf_len).unwrap_or(0)];
        let frame_room = tx_fill.len() - HDR_LEN;
        tx_fill[HDR_LEN..].copy_from_slice(pattern.prefix(frame_room));
        for i in 0..tx_n {
            mem.write(tx_base + i * tx_buf_len, &tx_fill)?;
        }
        let eventfd = || EventFd::new(EFD_NONBLOCK).map_err(PortError::Resource);
        let (rx_kick, rx_call, tx_kick, tx_call) = (eventfd()?, eventfd()?, eventfd()?, eventfd()?);
        let mut port = Self {
            path: path.to_path_buf(),
            session: None,
            features,
            mem,
            cfg,
            mrg_rxbuf,
            mac,
            encap: Encap::Raw,
            rx,
            tx,
            rx_kick,
            rx_call,
            tx_kick,
            tx_call,
            rx_base,
            tx_base,
            tx_buf_len,
            tx_last: vec![Written::default(); usize::from(cfg.tx_queue_size)],
            counters: PortCounters::default(),
        };
        port.fill_rx()?;
        // TX completions are reaped when sending; no interrupts unless the ring fills.
        port.tx.disable_cb(&port.mem).map_err(ring_err("tx"))?;
        Ok(port)
    }

    fn start(&mut self) -> std::result::Result<(), SessionError> {
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        session.set_memory(&self.mem)?;
        let rx = self.rx.layout();
        let tx = self.tx.layout();
        session.start_ring(vn::RX_QUEUE, rx, &self.mem, &self.rx_kick, &self.rx_call)?;
        session.start_ring(vn::TX_QUEUE, tx, &self.mem, &self.tx_kick, &self.tx_call)
    }

    /// The socket this port is connected to.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This port's MAC address.
    #[must_use]
    pub const fn mac(&self) -> Mac {
        self.mac
    }

    /// The encapsulation of the frames this port sends.
    #[must_use]
    pub const fn encap(&self) -> Encap {
        self.encap
    }

    /// Send the following frames in `encap` ([`crate::run::run`] sets its configuration's
    /// on every port).
    pub fn set_encap(&mut self, encap: Encap) {
        self.encap = encap;
    }

    /// Negotiated virtio features.
    #[must_use]
    pub const fn features(&self) -> u64 {
        self.features
    }

    /// Counters so far.
    #[must_use]
    pub const fn counters(&self) -> PortCounters {
        self.counters
    }

    /// The RX queue's call eventfd (the guest's RX interrupt line).
    #[must_use]
    pub fn rx_call_fd(&self) -> RawFd {
        self.rx_call.as_raw_fd()
    }

    /// The TX queue's call eventfd.
    #[must_use]
    pub fn tx_call_fd(&self) -> RawFd {
        self.tx_call.as_raw_fd()
    }

    /// Free TX descriptors.
    #[must_use]
    pub fn tx_free(&self) -> usize {
        self.tx.free_count()
    }

    /// Frames in the TX ring not yet completed.
    #[must_use]
    pub const fn tx_in_flight(&self) -> u16 {
        self.tx.in_flight()
    }

    /// Read (and reset) both call eventfds, adding the signals to the counters. Returns
    /// (RX, TX) signals read.
    pub fn take_calls(&mut self) -> (u64, u64) {
        let rx = self.rx_call.read().unwrap_or(0);
        let tx = self.tx_call.read().unwrap_or(0);
        self.counters.rx_calls += rx;
        self.counters.tx_calls += tx;
        (rx, tx)
    }

    /// Read (and reset) one call eventfd (`tx`: the TX queue's), adding to the counters.
    pub fn take_call(&mut self, tx: bool) -> u64 {
        let (fd, count) = if tx {
            (&self.tx_call, &mut self.counters.tx_calls)
        } else {
            (&self.rx_call, &mut self.counters.rx_calls)
        };
        let n = fd.read().unwrap_or(0);
        *count += n;
        n
    }

    /// Stop both rings (GET_VRING_BASE) and disconnect.
    ///
    /// # Errors
    /// The backend refused or did not answer.
    pub fn close(mut self) -> Result<()> {
        let path = self.path.clone();
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        for q in [vn::RX_QUEUE, vn::TX_QUEUE] {
            session.stop_ring(q).map_err(|source| PortError::Session {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

/// Connect one port per socket, port `i` with MAC [`frame::port_mac`]`(i)`.
///
/// # Errors
/// The first port that fails.
pub fn connect_all(
    sockets: &[PathBuf],
    cfg: PortConfig,
    pattern: &Pattern,
) -> Result<Vec<NetPort>> {
    sockets
        .iter()
        .enumerate()
        .map(|(i, s)| NetPort::connect(s, cfg, frame::port_mac(i), pattern))
        .collect()
}

fn kick(fd: &EventFd) -> Result<()> {
    fd.write(1).map_err(PortError::Kick)
}

mod rx;
#[cfg(test)]
mod tests;
mod tx;
