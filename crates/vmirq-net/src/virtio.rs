//! virtio-net definitions the device needs (virtio 1.2 §5.1): feature bits, the 12-byte
//! `virtio_net_hdr` (VERSION_1 always carries `num_buffers`), and the configuration space
//! with MAC and STATUS.

/// `VIRTIO_NET_F_MAC`.
pub const F_MAC: u64 = 1 << 5;
/// `VIRTIO_NET_F_MRG_RXBUF`.
pub const F_MRG_RXBUF: u64 = 1 << 15;
/// `VIRTIO_NET_F_STATUS`.
pub const F_STATUS: u64 = 1 << 16;
/// `VIRTIO_NET_F_CTRL_VQ`.
pub const F_CTRL_VQ: u64 = 1 << 17;
/// `VIRTIO_NET_F_MQ`: several queue pairs, `max_virtqueue_pairs` in the config space.
pub const F_MQ: u64 = 1 << 22;
/// `VIRTIO_NET_F_VQ_NOTF_COAL`.
pub const F_VQ_NOTF_COAL: u64 = 1 << 52;
/// `VIRTIO_NET_F_NOTF_COAL`.
pub const F_NOTF_COAL: u64 = 1 << 53;
/// `VIRTIO_RING_F_EVENT_IDX`.
pub const F_EVENT_IDX: u64 = 1 << 29;
/// `VHOST_USER_F_PROTOCOL_FEATURES`.
pub const F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// `VIRTIO_F_VERSION_1`.
pub const F_VERSION_1: u64 = 1 << 32;
/// `VIRTIO_F_IN_ORDER` (virtio 1.2 §6): the device uses buffers in the order the driver
/// made them available. Every path of this device already does (chains are taken in ring
/// order, a chain that finds no room is put back with every one after it, used entries go
/// out in the order their chains were taken), so offering it costs nothing here; a driver
/// that negotiates it may take a cheaper path (DPDK's virtio PMD: its in-order receive and
/// transmit functions, with descriptors used in table order).
pub const F_IN_ORDER: u64 = 1 << 35;

/// Features the device offers.
pub const DEVICE_FEATURES: u64 = F_MAC
    | F_MRG_RXBUF
    | F_STATUS
    | F_CTRL_VQ
    | F_NOTF_COAL
    | F_VQ_NOTF_COAL
    | F_EVENT_IDX
    | F_PROTOCOL_FEATURES
    | F_VERSION_1
    | F_IN_ORDER;

/// Features a device of `pairs` queue pairs offers: [`DEVICE_FEATURES`], and `MQ` when
/// `pairs > 1` (a one-pair device does not offer it, as QEMU's `queues=1` does not).
#[must_use]
pub const fn device_features(pairs: u16) -> u64 {
    if pairs > 1 {
        DEVICE_FEATURES | F_MQ
    } else {
        DEVICE_FEATURES
    }
}

/// Length of `virtio_net_hdr` under VERSION_1 (with `num_buffers`).
pub const HDR_LEN: usize = 12;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// Ethernet header length: the least a frame must have to be switched.
pub const ETH_HDR_LEN: usize = 14;
/// Largest frame the device switches (64 KiB plus an Ethernet header: the largest a driver
/// without segmentation offloads can send).
pub const FRAME_LEN_MAX: usize = 65_536 + ETH_HDR_LEN;

/// Virtqueue index of the receive queue.
pub const RX_QUEUE: usize = 0;
/// Virtqueue index of the transmit queue.
pub const TX_QUEUE: usize = 1;
/// Virtqueue index of the control queue (with CTRL_VQ, one queue pair).
pub const CTRL_QUEUE: usize = 2;
/// Virtqueues per device (one RX/TX pair and the control queue).
pub const QUEUES: usize = 3;
/// Most queue pairs per port (`--queues`).
pub const PAIRS_MAX: u16 = 16;

/// Virtqueues of a device of `pairs` queue pairs (virtio 1.2 §5.1.2: receiveq1,
/// transmitq1, ..., receiveqN, transmitqN, then the control queue).
#[must_use]
pub const fn queues(pairs: u16) -> usize {
    2 * pairs as usize + 1
}

/// Virtqueue index of the control queue of a device of `pairs` queue pairs.
#[must_use]
pub const fn ctrl_queue(pairs: u16) -> usize {
    2 * pairs as usize
}

/// `VIRTIO_NET_S_LINK_UP`.
pub const S_LINK_UP: u16 = 1;

/// A MAC address.
pub type Mac = [u8; 6];

/// Why a transmitted header is refused (no offloads were offered, §5.1.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxHdrError {
    /// `flags` must be zero without `VIRTIO_NET_F_CSUM`.
    #[error("flags {0:#x} without CSUM")]
    Flags(u8),
    /// `gso_type` must be NONE without host segmentation offloads.
    #[error("gso_type {0} without host GSO")]
    Gso(u8),
}

/// Check a transmitted header.
///
/// # Errors
/// [`TxHdrError`] when it asks for an offload the device did not offer.
pub const fn check_tx_hdr(hdr: &[u8; HDR_LEN]) -> Result<(), TxHdrError> {
    if hdr[0] != 0 {
        return Err(TxHdrError::Flags(hdr[0]));
    }
    if hdr[1] != GSO_NONE {
        return Err(TxHdrError::Gso(hdr[1]));
    }
    Ok(())
}

/// The header the device writes in front of a received frame spanning `num_buffers`.
#[must_use]
pub fn rx_hdr(num_buffers: u16) -> [u8; HDR_LEN] {
    let mut h = [0u8; HDR_LEN];
    h[10..12].copy_from_slice(&num_buffers.to_le_bytes());
    h
}

/// The device configuration space (`struct virtio_net_config`, §5.1.4) up to `status`,
/// and `max_virtqueue_pairs` when the device offers MQ (more than one pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetConfig {
    /// `mac`.
    pub mac: Mac,
    /// `status` (link state).
    pub status: u16,
    /// `max_virtqueue_pairs` (1: the field is not part of the space, MQ is not offered).
    pub max_pairs: u16,
}

impl NetConfig {
    /// The config space as bytes (8, or 10 with `max_virtqueue_pairs`).
    #[must_use]
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(10);
        b.extend_from_slice(&self.mac);
        b.extend_from_slice(&self.status.to_le_bytes());
        if self.max_pairs > 1 {
            b.extend_from_slice(&self.max_pairs.to_le_bytes());
        }
        b
    }

    /// Read `size` bytes at `offset`; an out-of-range read returns nothing (vhost-user
    /// then answers with an empty payload), never a panic.
    #[must_use]
    pub fn read(&self, offset: u32, size: u32) -> Vec<u8> {
        let b = self.bytes();
        let (Ok(start), Ok(size)) = (usize::try_from(offset), usize::try_from(size)) else {
            return Vec::new();
        };
        match start.checked_add(size) {
            Some(end) if end <= b.len() => b[start..end].to_vec(),
            _ => Vec::new(),
        }
    }
}

/// The MAC of port `index` when none is given: locally administered, the port in the last
/// byte (52:54:00:76:6e:xx).
#[must_use]
pub fn default_mac(index: usize) -> Mac {
    [
        0x52,
        0x54,
        0x00,
        0x76,
        0x6e,
        u8::try_from(index & 0xff).unwrap_or(0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_5_1_6_2_offloads_not_offered_are_refused() {
        let mut h = [0u8; HDR_LEN];
        assert_eq!(check_tx_hdr(&h), Ok(()));
        h[0] = 1;
        assert_eq!(check_tx_hdr(&h), Err(TxHdrError::Flags(1)));
        h[0] = 0;
        h[1] = 1;
        assert_eq!(check_tx_hdr(&h), Err(TxHdrError::Gso(1)));
    }

    #[test]
    fn spec_5_1_4_config_space_has_mac_and_status() {
        let c = NetConfig {
            mac: [1, 2, 3, 4, 5, 6],
            status: S_LINK_UP,
            max_pairs: 1,
        };
        assert_eq!(c.read(0, 6), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(c.read(6, 2), vec![1, 0]);
        assert!(c.read(7, 2).is_empty());
        assert!(c.read(8, 2).is_empty(), "no max_virtqueue_pairs without MQ");
        assert!(c.read(u32::MAX, 2).is_empty());
        assert!(c.read(0, u32::MAX).is_empty());
    }

    #[test]
    fn spec_5_1_4_mq_device_has_max_virtqueue_pairs_and_2n_plus_1_queues() {
        let c = NetConfig {
            mac: [1, 2, 3, 4, 5, 6],
            status: S_LINK_UP,
            max_pairs: 4,
        };
        assert_eq!(c.read(8, 2), vec![4, 0]);
        assert!(c.read(9, 2).is_empty());
        assert_eq!(device_features(4) & F_MQ, F_MQ);
        assert_eq!(device_features(1) & F_MQ, 0);
        assert_eq!((queues(1), ctrl_queue(1)), (QUEUES, CTRL_QUEUE));
        assert_eq!((queues(4), ctrl_queue(4)), (9, 8));
    }

    #[test]
    fn rx_header_carries_num_buffers() {
        let h = rx_hdr(3);
        assert_eq!(&h[10..12], &[3, 0]);
        assert!(h[..10].iter().all(|&b| b == 0));
    }
}
