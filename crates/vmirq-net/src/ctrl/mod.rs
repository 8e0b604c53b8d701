//! The virtio-net control virtqueue (virtio 1.3 §5.1.6.5) as a pure parser and state machine
//! over byte slices: no guest memory, no I/O, no allocation per command.
//!
//! # API (for the data path)
//! ```text
//! let mut ctrl = Ctrl::new(negotiated_features, max_queue_pairs);
//! // per control-queue chain: gather the device-readable bytes (bounded by the data path),
//! // pass the device-writable area (gathered into a small buffer, copied back after):
//! match ctrl.handle(&readable, &mut writable) {
//!     Ok(reply) => {
//!         // reply.used_len bytes of `writable` were written (result, then the ack byte);
//!         // reply.ack is VIRTIO_NET_OK or VIRTIO_NET_ERR; on OK apply reply.outcome's Action:
//!         //   Action::Coalesce { target, coal }  -> each queue vq with target.covers(vq) gets
//!         //       vmirq-policy's `count` with coal.count_config() (frames = max_packets,
//!         //       usecs = max_usecs; either 0: notify every packet), re-evaluated at once;
//!         //   Action::QueuePairs(n), Action::MacAddr(mac), Action::MacTable {..},
//!         //   Action::RxMode {..}, Action::AnnounceAck: device state to apply;
//!         //   Action::CoalReport {..}: VQ_GET answered, nothing to apply.
//!         // on ERR, reply.outcome is Err(Reject) saying why (log it at debug level).
//!     }
//!     Err(CtrlError::NoStatusByte) => { /* never complete this chain: no ack can be written */ }
//! }
//! ctrl.note_applied(vq, coal);  // the device changed a queue itself (CLI default, DIM loop):
//!                               // VQ_GET answers what is in force
//! ctrl.queue_reset(vq);         // queue disabled + re-enabled: back to TX_SET/RX_SET values
//! ctrl.reset();                 // device reset: coalescing 0, one queue pair, filters default
//! ```
//!
//! Commands: RX (PROMISC, ALLMULTI; ALLUNI, NOMULTI, NOUNI, NOBCAST with CTRL_RX_EXTRA), MAC
//! (TABLE_SET, ADDR_SET), ANNOUNCE_ACK, MQ VQ_PAIRS_SET (1 to the device's maximum), and
//! NOTF_COAL (TX_SET, RX_SET, VQ_SET, VQ_GET). Everything else — VLAN, guest offloads, RSS,
//! unknown classes or commands, a command whose feature was not negotiated, short or trailing
//! bytes, a queue index out of range, absurd values — gets VIRTIO_NET_ERR and changes nothing.

mod coal;
mod mac;
pub mod wire;

pub use coal::{Coal, CoalTable, CoalTarget, COAL_BYTES, COAL_VQ_BYTES, MAX_PACKETS, MAX_USECS};
pub use mac::{MacList, MAC_BYTES, MAC_TABLE_ENTRIES};
pub use wire::{VIRTIO_NET_ERR, VIRTIO_NET_OK};

use wire::{class, feature, has, le16};

/// Why a command got VIRTIO_NET_ERR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// The command is shorter than its class, command and data need.
    #[error("command too short")]
    Short,
    /// The data has the wrong size or inconsistent counts.
    #[error("command data malformed")]
    Malformed,
    /// A class vmirq does not implement.
    #[error("unknown command class {0}")]
    UnknownClass(u8),
    /// A command vmirq does not implement in a known class.
    #[error("unknown command {command} in class {class}")]
    UnknownCommand {
        /// The class.
        class: u8,
        /// The command.
        command: u8,
    },
    /// The command needs a feature bit the driver did not negotiate.
    #[error("feature bit {0} not negotiated")]
    NotNegotiated(u32),
    /// The virtqueue index names no RX/TX queue of the device.
    #[error("virtqueue index out of range")]
    QueueOutOfRange,
    /// A value outside what the device accepts.
    #[error("value out of range")]
    ValueOutOfRange,
    /// The device-writable part cannot hold the command's result and the ack.
    #[error("device-writable part too small for the result")]
    ResultDoesNotFit,
}

/// A chain the device cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CtrlError {
    /// The chain has no device-writable byte for the ack: it must never be completed.
    #[error("control command has no device-writable ack byte")]
    NoStatusByte,
}

/// The receive-filter modes of class RX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxMode {
    /// Promiscuous.
    Promisc,
    /// All multicast.
    AllMulti,
    /// All unicast.
    AllUni,
    /// No multicast.
    NoMulti,
    /// No unicast.
    NoUni,
    /// No broadcast.
    NoBcast,
}

impl RxMode {
    const ALL: [RxMode; 6] = [
        RxMode::Promisc,
        RxMode::AllMulti,
        RxMode::AllUni,
        RxMode::NoMulti,
        RxMode::NoUni,
        RxMode::NoBcast,
    ];

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// What an accepted command asks the device to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    /// Turn a receive-filter mode on or off.
    RxMode {
        /// The mode.
        mode: RxMode,
        /// On or off.
        on: bool,
    },
    /// Replace the MAC filter tables.
    MacTable {
        /// Unicast addresses.
        unicast: MacList<'a>,
        /// Multicast addresses.
        multicast: MacList<'a>,
    },
    /// Set the device's MAC address.
    MacAddr([u8; MAC_BYTES]),
    /// The driver saw the link announcement: clear VIRTIO_NET_S_ANNOUNCE.
    AnnounceAck,
    /// Use this many queue pairs.
    QueuePairs(u16),
    /// Program these coalescing parameters on `target` (the `count` policy).
    Coalesce {
        /// Which queues.
        target: CoalTarget,
        /// The values.
        coal: Coal,
    },
    /// VQ_GET answered (the values were written before the ack); nothing to apply.
    CoalReport {
        /// The virtqueue.
        vq: u16,
        /// The values reported.
        coal: Coal,
    },
}

/// The answer to one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply<'a> {
    /// VIRTIO_NET_OK or VIRTIO_NET_ERR (already written into the device-writable part).
    pub ack: u8,
    /// Bytes written into the device-writable part (the used length to report).
    pub used_len: usize,
    /// The action to apply, or why the command was refused.
    pub outcome: Result<Action<'a>, Reject>,
}

/// The control-queue state of one virtio-net device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ctrl {
    features: u64,
    max_pairs: u16,
    pairs: u16,
    rx_modes: u8,
    mac: Option<[u8; MAC_BYTES]>,
    coal: CoalTable,
}

impl Ctrl {
    /// A device with these negotiated features and up to `max_pairs` queue pairs (clamped
    /// to 1..=0x8000).
    #[must_use]
    pub fn new(features: u64, max_pairs: u16) -> Self {
        let max_pairs = max_pairs.clamp(wire::VQ_PAIRS_MIN, wire::VQ_PAIRS_MAX);
        Self {
            features,
            max_pairs,
            pairs: 1,
            rx_modes: RxMode::Promisc.bit(),
            mac: None,
            coal: CoalTable::new(max_pairs),
        }
    }

    /// Queue pairs in use (1 until the driver sends VQ_PAIRS_SET).
    #[must_use]
    pub fn queue_pairs(&self) -> u16 {
        self.pairs
    }

    /// Whether a receive-filter mode is on (promiscuous is on until the driver says otherwise).
    #[must_use]
    pub fn rx_mode(&self, mode: RxMode) -> bool {
        self.rx_modes & mode.bit() != 0
    }

    /// The MAC address the driver set, if any.
    #[must_use]
    pub fn mac(&self) -> Option<[u8; MAC_BYTES]> {
        self.mac
    }

    /// The coalescing values in force for RX/TX virtqueue `vq`.
    #[must_use]
    pub fn coal(&self, vq: u16) -> Option<Coal> {
        self.coal.get(vq)
    }

    /// The device programmed `coal` on `vq` itself (a CLI default, the DIM control loop), so
    /// that VQ_GET answers what is in force. An index that names no RX/TX queue is ignored.
    pub fn note_applied(&mut self, vq: u16, coal: Coal) {
        self.coal.set(CoalTarget::Queue(vq), coal);
    }

    /// Queue `vq` was disabled and enabled again: it reverts to the TX_SET / RX_SET values.
    pub fn queue_reset(&mut self, vq: u16) -> Option<Coal> {
        self.coal.queue_reset(vq)
    }

    /// Device reset: everything back to its initial state under the same features (a driver
    /// that negotiates other features afterwards gets a new [`Ctrl::new`]).
    pub fn reset(&mut self) {
        *self = Self::new(self.features, self.max_pairs);
    }

    /// Handle one command: `readable` is the chain's device-readable bytes, `writable` its
    /// device-writable area. Writes the result (if any) and the ack into `writable`.
    pub fn handle<'a>(
        &mut self,
        readable: &'a [u8],
        writable: &mut [u8],
    ) -> Result<Reply<'a>, CtrlError> {
        if writable.is_empty() {
            return Err(CtrlError::NoStatusByte);
        }
        let is_get = readable.get(..2) == Some(&[class::NOTF_COAL, class::coal::VQ_GET][..]);
        let result_len = if is_get { COAL_BYTES } else { 0 };
        let (ack_at, outcome) = if writable.len() > result_len {
            (result_len, self.command(readable))
        } else {
            (writable.len() - 1, Err(Reject::ResultDoesNotFit))
        };
        let ack = match outcome {
            Ok(Action::CoalReport { coal, .. }) => {
                writable[..COAL_BYTES].copy_from_slice(&coal.to_bytes());
                VIRTIO_NET_OK
            }
            Ok(_) => VIRTIO_NET_OK,
            Err(_) => {
                writable[..ack_at].fill(0);
                VIRTIO_NET_ERR
            }
        };
        writable[ack_at] = ack;
        Ok(Reply {
            ack,
            used_len: ack_at + 1,
            outcome,
        })
    }

    fn need(&self, bit: u32) -> Result<(), Reject> {
        if has(self.features, bit) {
            Ok(())
        } else {
            Err(Reject::NotNegotiated(bit))
        }
    }

    /// Parse, validate and apply one command to the state; nothing changes on error.
    fn command<'a>(&mut self, readable: &'a [u8]) -> Result<Action<'a>, Reject> {
        use class::{coal as c, mac as m};
        let [cls, cmd, data @ ..] = readable else {
            return Err(Reject::Short);
        };
        match (*cls, *cmd) {
            (class::RX, cmd @ 0..=class::rx::NOBCAST) => self.rx(cmd, data),
            (class::MAC, m::TABLE_SET) => {
                self.need(feature::CTRL_RX)?;
                let (unicast, multicast) = mac::table(data)?;
                Ok(Action::MacTable { unicast, multicast })
            }
            (class::MAC, m::ADDR_SET) => {
                self.need(feature::CTRL_MAC_ADDR)?;
                let addr = mac::addr(data)?;
                self.mac = Some(addr);
                Ok(Action::MacAddr(addr))
            }
            (class::ANNOUNCE, class::ANNOUNCE_ACK) => {
                self.need(feature::GUEST_ANNOUNCE)?;
                if !data.is_empty() {
                    return Err(Reject::Malformed);
                }
                Ok(Action::AnnounceAck)
            }
            (class::MQ, class::MQ_VQ_PAIRS_SET) => self.mq(data),
            (class::NOTF_COAL, cmd @ (c::TX_SET | c::RX_SET)) => self.coal_all(cmd, data),
            (class::NOTF_COAL, c::VQ_SET) => self.coal_vq_set(data),
            (class::NOTF_COAL, c::VQ_GET) => self.coal_vq_get(data),
            (class::RX | class::MAC | class::ANNOUNCE | class::MQ | class::NOTF_COAL, cmd) => {
                Err(Reject::UnknownCommand {
                    class: *cls,
                    command: cmd,
                })
            }
            (other, _) => Err(Reject::UnknownClass(other)),
        }
    }

    fn rx(&mut self, cmd: u8, data: &[u8]) -> Result<Action<'static>, Reject> {
        let mode = *RxMode::ALL
            .get(usize::from(cmd))
            .ok_or(Reject::UnknownCommand {
                class: class::RX,
                command: cmd,
            })?;
        self.need(feature::CTRL_RX)?;
        if cmd > class::rx::ALLMULTI {
            self.need(feature::CTRL_RX_EXTRA)?;
        }
        let on = match data {
            [0] => false,
            [1] => true,
            [_] => return Err(Reject::ValueOutOfRange),
            _ => return Err(Reject::Malformed),
        };
        if on {
            self.rx_modes |= mode.bit();
        } else {
            self.rx_modes &= !mode.bit();
        }
        Ok(Action::RxMode { mode, on })
    }

    fn mq(&mut self, data: &[u8]) -> Result<Action<'static>, Reject> {
        self.need(feature::MQ)?;
        if data.len() != 2 {
            return Err(Reject::Malformed);
        }
        let n = le16(data, 0).ok_or(Reject::Short)?;
        if !(wire::VQ_PAIRS_MIN..=self.max_pairs).contains(&n) {
            return Err(Reject::ValueOutOfRange);
        }
        self.pairs = n;
        Ok(Action::QueuePairs(n))
    }

    /// TX_SET / RX_SET.
    fn coal_all(&mut self, cmd: u8, data: &[u8]) -> Result<Action<'static>, Reject> {
        self.need(feature::NOTF_COAL)?;
        if data.len() != COAL_BYTES {
            return Err(Reject::Malformed);
        }
        let coal = Coal::parse(data)?;
        let target = if cmd == class::coal::TX_SET {
            CoalTarget::AllTx
        } else {
            CoalTarget::AllRx
        };
        self.coal.set(target, coal);
        Ok(Action::Coalesce { target, coal })
    }

    fn coal_vq_set(&mut self, data: &[u8]) -> Result<Action<'static>, Reject> {
        self.need(feature::VQ_NOTF_COAL)?;
        if data.len() != COAL_VQ_BYTES {
            return Err(Reject::Malformed);
        }
        let vq = coal::vq_index(data, &self.coal)?;
        let coal = Coal::parse(data.get(4..).ok_or(Reject::Short)?)?;
        let target = CoalTarget::Queue(vq);
        self.coal.set(target, coal);
        Ok(Action::Coalesce { target, coal })
    }

    fn coal_vq_get(&self, data: &[u8]) -> Result<Action<'static>, Reject> {
        self.need(feature::VQ_NOTF_COAL)?;
        if data.len() != 2 && data.len() != COAL_VQ_BYTES {
            return Err(Reject::Malformed);
        }
        let vq = coal::vq_index(data, &self.coal)?;
        let coal = self.coal.get(vq).ok_or(Reject::QueueOutOfRange)?;
        Ok(Action::CoalReport { vq, coal })
    }
}

#[cfg(test)]
mod tests;
