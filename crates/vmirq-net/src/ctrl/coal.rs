//! VIRTIO_NET_CTRL_NOTF_COAL (virtio 1.3 §5.1.6.5.9): the coalescing parameters the guest's
//! `ethtool -C` sets, and the per-queue table the device answers VQ_GET from.
//!
//! Layouts (all little-endian):
//! - TX_SET / RX_SET data: `struct virtio_net_ctrl_coal { le32 max_packets; le32 max_usecs; }`
//!   (8 bytes);
//! - VQ_SET data: `struct virtio_net_ctrl_coal_vq { le16 vq_index; le16 reserved;
//!   struct virtio_net_ctrl_coal coal; }` (12 bytes);
//! - VQ_GET: readable `le16 vq_index` (a driver that sends the whole 12-byte
//!   `virtio_net_ctrl_coal_vq` is accepted too: the rest is ignored), writable
//!   `struct virtio_net_ctrl_coal` before the ack.
//!
//! Rules kept here: TX_SET / RX_SET need VIRTIO_NET_F_NOTF_COAL, VQ_SET / VQ_GET need
//! VIRTIO_NET_F_VQ_NOTF_COAL; `vq_index` must name a receive or transmit queue of the device
//! (not the control queue); the last write wins whichever command made it; a queue that is
//! reset goes back to the last TX_SET / RX_SET values (0 if none); a device reset sets
//! everything to 0. Values above [`MAX_USECS`] / [`MAX_PACKETS`] are refused with
//! VIRTIO_NET_ERR (the spec requires a VQ_SET the device cannot apply to fail).

use vmirq_policy::moderation::{CountConfig, TimerStart};

use super::wire::{le16, le32};
use super::Reject;

/// Largest `max_usecs` accepted: one second (the bound vmirq's `count` policy spec uses).
pub const MAX_USECS: u32 = 1_000_000;
/// Largest `max_packets` accepted (the bound vmirq's `count` policy spec uses).
pub const MAX_PACKETS: u32 = 65_535;

/// Size of `struct virtio_net_ctrl_coal`.
pub const COAL_BYTES: usize = 8;
/// Size of `struct virtio_net_ctrl_coal_vq`.
pub const COAL_VQ_BYTES: usize = 12;

/// One queue's coalescing parameters (`struct virtio_net_ctrl_coal`). Either field 0 means
/// "notify after every packet"; both map onto vmirq-policy's `count` policy as
/// `frames = max_packets`, `usecs = max_usecs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Coal {
    /// Packets received / sent before a notification.
    pub max_packets: u32,
    /// Microseconds a notification may be delayed.
    pub max_usecs: u32,
}

impl Coal {
    /// Parse and validate the 8-byte structure at the start of `b`.
    pub(super) fn parse(b: &[u8]) -> Result<Self, Reject> {
        let (Some(max_packets), Some(max_usecs)) = (le32(b, 0), le32(b, 4)) else {
            return Err(Reject::Short);
        };
        if max_packets > MAX_PACKETS || max_usecs > MAX_USECS {
            return Err(Reject::ValueOutOfRange);
        }
        Ok(Self {
            max_packets,
            max_usecs,
        })
    }

    /// The `count` policy these values program (virtio and `count` agree that either field
    /// 0 means "notify every packet"). The timer counts from the first held packet.
    #[must_use]
    pub fn count_config(self) -> CountConfig {
        CountConfig {
            usecs: self.max_usecs,
            frames: self.max_packets,
            timer: TimerStart::FirstCompletion,
        }
    }

    /// The 8-byte wire form.
    #[must_use]
    pub fn to_bytes(self) -> [u8; COAL_BYTES] {
        let mut b = [0; COAL_BYTES];
        b[..4].copy_from_slice(&self.max_packets.to_le_bytes());
        b[4..].copy_from_slice(&self.max_usecs.to_le_bytes());
        b
    }
}

/// Which queues a coalescing change applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoalTarget {
    /// Every transmit queue (TX_SET).
    AllTx,
    /// Every receive queue (RX_SET).
    AllRx,
    /// One virtqueue by its device index (VQ_SET): `2n` is pair n's RX queue, `2n + 1` its TX.
    Queue(u16),
}

impl CoalTarget {
    /// Whether this target includes virtqueue `vq` (RX queues are even, TX queues odd).
    #[must_use]
    pub fn covers(self, vq: u16) -> bool {
        match self {
            CoalTarget::AllRx => vq % 2 == 0,
            CoalTarget::AllTx => vq % 2 == 1,
            CoalTarget::Queue(q) => q == vq,
        }
    }
}

/// The coalescing values in force for every RX/TX queue of a device, fixed-size from creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoalTable {
    per_vq: Vec<Coal>,
    all_rx: Coal,
    all_tx: Coal,
}

impl CoalTable {
    /// A table for `pairs` queue pairs, all zero (the state after a device reset).
    #[must_use]
    pub fn new(pairs: u16) -> Self {
        Self {
            per_vq: vec![Coal::default(); usize::from(pairs) * 2],
            all_rx: Coal::default(),
            all_tx: Coal::default(),
        }
    }

    /// Number of RX/TX virtqueues covered.
    #[must_use]
    pub fn queues(&self) -> usize {
        self.per_vq.len()
    }

    /// The values in force for virtqueue `vq`, if it is an RX/TX queue of the device.
    #[must_use]
    pub fn get(&self, vq: u16) -> Option<Coal> {
        self.per_vq.get(usize::from(vq)).copied()
    }

    /// Record `coal` for `target` (last writer wins).
    pub fn set(&mut self, target: CoalTarget, coal: Coal) {
        match target {
            CoalTarget::AllRx => self.all_rx = coal,
            CoalTarget::AllTx => self.all_tx = coal,
            CoalTarget::Queue(_) => {}
        }
        for (vq, c) in (0..=u16::MAX).zip(self.per_vq.iter_mut()) {
            if target.covers(vq) {
                *c = coal;
            }
        }
    }

    /// Queue `vq` was reset (disabled and enabled again): it goes back to the last TX_SET /
    /// RX_SET values. Returns what now applies, or `None` for a queue the device lacks.
    pub fn queue_reset(&mut self, vq: u16) -> Option<Coal> {
        let dflt = if vq % 2 == 0 {
            self.all_rx
        } else {
            self.all_tx
        };
        let c = self.per_vq.get_mut(usize::from(vq))?;
        *c = dflt;
        Some(dflt)
    }

    /// Device reset: every value 0.
    pub fn reset(&mut self) {
        self.per_vq.iter_mut().for_each(|c| *c = Coal::default());
        self.all_rx = Coal::default();
        self.all_tx = Coal::default();
    }
}

/// Parse the `vq_index` of VQ_SET / VQ_GET and check it names an RX/TX queue.
pub(super) fn vq_index(data: &[u8], table: &CoalTable) -> Result<u16, Reject> {
    let vq = le16(data, 0).ok_or(Reject::Short)?;
    if usize::from(vq) >= table.queues() {
        return Err(Reject::QueueOutOfRange);
    }
    Ok(vq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coal_round_trips_and_bounds_values() {
        let c = Coal {
            max_packets: 64,
            max_usecs: 8,
        };
        assert_eq!(Coal::parse(&c.to_bytes()), Ok(c));
        assert_eq!(Coal::parse(&[0; 7]), Err(Reject::Short));
        let mut b = c.to_bytes();
        b[4..].copy_from_slice(&(MAX_USECS + 1).to_le_bytes());
        assert_eq!(Coal::parse(&b), Err(Reject::ValueOutOfRange));
        let mut b = c.to_bytes();
        b[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Coal::parse(&b), Err(Reject::ValueOutOfRange));
        let edge = Coal {
            max_packets: MAX_PACKETS,
            max_usecs: MAX_USECS,
        };
        assert_eq!(Coal::parse(&edge.to_bytes()), Ok(edge));
        assert_eq!(
            (edge.count_config().frames, edge.count_config().usecs),
            (MAX_PACKETS, MAX_USECS)
        );
    }

    #[test]
    fn rx_set_and_tx_set_touch_only_their_direction_and_reset_reverts() {
        let mut t = CoalTable::new(3);
        let rx = Coal {
            max_packets: 32,
            max_usecs: 50,
        };
        let tx = Coal {
            max_packets: 16,
            max_usecs: 20,
        };
        t.set(CoalTarget::AllRx, rx);
        t.set(CoalTarget::AllTx, tx);
        for vq in 0..6 {
            assert_eq!(
                t.get(vq),
                Some(if vq % 2 == 0 { rx } else { tx }),
                "vq {vq}"
            );
        }
        assert_eq!(t.get(6), None);
        let q = Coal {
            max_packets: 1,
            max_usecs: 1,
        };
        t.set(CoalTarget::Queue(4), q);
        assert_eq!(t.get(4), Some(q));
        assert_eq!(t.get(2), Some(rx));
        assert_eq!(t.queue_reset(4), Some(rx));
        assert_eq!(t.get(4), Some(rx));
        assert_eq!(t.queue_reset(6), None);
        t.reset();
        assert_eq!(t.get(1), Some(Coal::default()));
        assert_eq!(t.queue_reset(1), Some(Coal::default()));
    }
}
