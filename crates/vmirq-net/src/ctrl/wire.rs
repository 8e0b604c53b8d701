//! Wire constants of the virtio-net control virtqueue (virtio 1.3 §5.1.6.5) and the
//! little-endian field readers the command parsers share.
//!
//! A control command is `u8 class; u8 command; u8 data[]` in the device-readable part and
//! `u8 result[]; u8 ack` in the device-writable part (the result is empty except for
//! commands that answer, such as NOTF_COAL VQ_GET).

/// Command accepted and applied.
pub const VIRTIO_NET_OK: u8 = 0;
/// Command refused; nothing was changed.
pub const VIRTIO_NET_ERR: u8 = 1;

/// Feature bits that gate control commands (bit numbers, virtio 1.3 §5.1.3).
pub mod feature {
    /// The control virtqueue exists.
    pub const CTRL_VQ: u32 = 17;
    /// RX mode commands (promisc, allmulti) and the MAC filter table.
    pub const CTRL_RX: u32 = 18;
    /// The extra RX mode commands (alluni, nomulti, nouni, nobcast).
    pub const CTRL_RX_EXTRA: u32 = 20;
    /// The driver acknowledges link announcements.
    pub const GUEST_ANNOUNCE: u32 = 21;
    /// Several queue pairs; VQ_PAIRS_SET.
    pub const MQ: u32 = 22;
    /// The driver may set the MAC address (MAC ADDR_SET).
    pub const CTRL_MAC_ADDR: u32 = 23;
    /// Per-virtqueue notification coalescing (NOTF_COAL VQ_SET / VQ_GET).
    pub const VQ_NOTF_COAL: u32 = 52;
    /// Device-wide notification coalescing (NOTF_COAL TX_SET / RX_SET).
    pub const NOTF_COAL: u32 = 53;
}

/// Command classes and their commands.
pub mod class {
    /// Receive filtering modes.
    pub const RX: u8 = 0;
    /// MAC filter table and address.
    pub const MAC: u8 = 1;
    /// VLAN filter (not offered by vmirq: always ERR).
    pub const VLAN: u8 = 2;
    /// Link announcement acknowledgement.
    pub const ANNOUNCE: u8 = 3;
    /// Multiqueue.
    pub const MQ: u8 = 4;
    /// Guest offloads (not offered by vmirq: always ERR).
    pub const GUEST_OFFLOADS: u8 = 5;
    /// Notification coalescing.
    pub const NOTF_COAL: u8 = 6;

    /// `VIRTIO_NET_CTRL_RX_*` commands (the data is one byte, 0 = off, 1 = on).
    pub mod rx {
        /// Promiscuous mode.
        pub const PROMISC: u8 = 0;
        /// Receive all multicast.
        pub const ALLMULTI: u8 = 1;
        /// Receive all unicast (CTRL_RX_EXTRA).
        pub const ALLUNI: u8 = 2;
        /// Receive no multicast (CTRL_RX_EXTRA).
        pub const NOMULTI: u8 = 3;
        /// Receive no unicast (CTRL_RX_EXTRA).
        pub const NOUNI: u8 = 4;
        /// Receive no broadcast (CTRL_RX_EXTRA).
        pub const NOBCAST: u8 = 5;
    }

    /// `VIRTIO_NET_CTRL_MAC_*` commands.
    pub mod mac {
        /// Two tables (`le32 entries; u8 macs[entries][6]`): unicast, then multicast.
        pub const TABLE_SET: u8 = 0;
        /// One 6-byte address.
        pub const ADDR_SET: u8 = 1;
    }

    /// `VIRTIO_NET_CTRL_ANNOUNCE_ACK`.
    pub const ANNOUNCE_ACK: u8 = 0;
    /// `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` (`le16 virtqueue_pairs`).
    pub const MQ_VQ_PAIRS_SET: u8 = 0;

    /// `VIRTIO_NET_CTRL_NOTF_COAL_*` commands.
    pub mod coal {
        /// All transmit queues: `struct virtio_net_ctrl_coal`.
        pub const TX_SET: u8 = 0;
        /// All receive queues: `struct virtio_net_ctrl_coal`.
        pub const RX_SET: u8 = 1;
        /// One queue: `struct virtio_net_ctrl_coal_vq`.
        pub const VQ_SET: u8 = 2;
        /// One queue's values: readable `le16 vq_index`, writable `struct virtio_net_ctrl_coal`.
        pub const VQ_GET: u8 = 3;
    }
}

/// `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MIN`.
pub const VQ_PAIRS_MIN: u16 = 1;
/// `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MAX`.
pub const VQ_PAIRS_MAX: u16 = 0x8000;

/// Whether `bit` is set in `features`.
#[must_use]
pub const fn has(features: u64, bit: u32) -> bool {
    bit < 64 && features & (1 << bit) != 0
}

/// The little-endian u16 at `at`, if the slice holds it.
#[must_use]
pub fn le16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes(s.try_into().ok()?))
}

/// The little-endian u32 at `at`, if the slice holds it.
#[must_use]
pub fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_check_bounds() {
        let b = [1, 2, 3, 4, 5];
        assert_eq!(le16(&b, 0), Some(0x0201));
        assert_eq!(le16(&b, 3), Some(0x0504));
        assert_eq!(le16(&b, 4), None);
        assert_eq!(le16(&b, usize::MAX), None);
        assert_eq!(le32(&b, 1), Some(0x0504_0302));
        assert_eq!(le32(&b, 2), None);
        assert!(has(1 << 53, feature::NOTF_COAL));
        assert!(!has(u64::MAX, 64));
    }
}
