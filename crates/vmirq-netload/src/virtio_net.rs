//! virtio-net definitions the driver needs (virtio 1.x §5.1): feature bits, the 12-byte
//! `virtio_net_hdr` (VERSION_1 always carries `num_buffers`) and its validation on receive.

/// `VIRTIO_NET_F_MAC`.
pub const F_MAC: u64 = 1 << 5;
/// `VIRTIO_NET_F_MRG_RXBUF`: a received packet may span several buffers.
pub const F_MRG_RXBUF: u64 = 1 << 15;
/// `VIRTIO_NET_F_STATUS`.
pub const F_STATUS: u64 = 1 << 16;
/// `VIRTIO_NET_F_CTRL_VQ`.
pub const F_CTRL_VQ: u64 = 1 << 17;
/// `VIRTIO_NET_F_MQ`.
pub const F_MQ: u64 = 1 << 22;
/// `VIRTIO_RING_F_INDIRECT_DESC`.
pub const F_INDIRECT_DESC: u64 = 1 << 28;
/// `VIRTIO_RING_F_EVENT_IDX`.
pub const F_EVENT_IDX: u64 = 1 << 29;
/// `VHOST_USER_F_PROTOCOL_FEATURES` (vhost-user's use of bit 30).
pub const F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// `VIRTIO_F_VERSION_1`.
pub const F_VERSION_1: u64 = 1 << 32;

/// Length of `virtio_net_hdr` with `num_buffers` (always, under VERSION_1).
pub const HDR_LEN: usize = 12;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;

/// Virtqueue index of the first receive queue.
pub const RX_QUEUE: usize = 0;
/// Virtqueue index of the first transmit queue.
pub const TX_QUEUE: usize = 1;

/// Names of the feature bits this driver knows, for logs.
#[must_use]
pub fn feature_names(features: u64) -> Vec<&'static str> {
    [
        (F_MAC, "MAC"),
        (F_MRG_RXBUF, "MRG_RXBUF"),
        (F_STATUS, "STATUS"),
        (F_CTRL_VQ, "CTRL_VQ"),
        (F_MQ, "MQ"),
        (F_INDIRECT_DESC, "INDIRECT_DESC"),
        (F_EVENT_IDX, "EVENT_IDX"),
        (F_PROTOCOL_FEATURES, "PROTOCOL_FEATURES"),
        (F_VERSION_1, "VERSION_1"),
    ]
    .into_iter()
    .filter(|(bit, _)| features & bit != 0)
    .map(|(_, name)| name)
    .collect()
}

/// What is wrong with a received header (no guest offloads were negotiated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HdrError {
    /// `flags` must be zero without `VIRTIO_NET_F_GUEST_CSUM` (§5.1.6.4.1).
    #[error("flags {0:#x} without GUEST_CSUM")]
    Flags(u8),
    /// `gso_type` must be NONE without guest segmentation offloads (§5.1.6.4.1).
    #[error("gso_type {0} without guest GSO")]
    Gso(u8),
    /// `num_buffers` is 0 or more than the ring holds (MRG_RXBUF).
    #[error("num_buffers {0}")]
    NumBuffers(u16),
}

/// Parse a received header; returns how many buffers the packet spans.
///
/// # Errors
/// [`HdrError`] when the device set something this driver did not negotiate.
pub fn parse_rx_hdr(hdr: &[u8; HDR_LEN], mrg_rxbuf: bool, ring_size: u16) -> Result<u16, HdrError> {
    if hdr[0] != 0 {
        return Err(HdrError::Flags(hdr[0]));
    }
    if hdr[1] != GSO_NONE {
        return Err(HdrError::Gso(hdr[1]));
    }
    if !mrg_rxbuf {
        // Without MRG_RXBUF a packet is one buffer whatever the field says.
        return Ok(1);
    }
    let n = u16::from_le_bytes([hdr[10], hdr[11]]);
    if n == 0 || n > ring_size {
        return Err(HdrError::NumBuffers(n));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(flags: u8, gso: u8, n: u16) -> [u8; HDR_LEN] {
        let mut h = [0u8; HDR_LEN];
        h[0] = flags;
        h[1] = gso;
        h[10..12].copy_from_slice(&n.to_le_bytes());
        h
    }

    #[test]
    fn spec_5_1_6_4_received_headers_are_checked() {
        assert_eq!(parse_rx_hdr(&hdr(0, 0, 3), true, 256), Ok(3));
        assert_eq!(
            parse_rx_hdr(&hdr(0, 0, 0), true, 256),
            Err(HdrError::NumBuffers(0))
        );
        assert_eq!(
            parse_rx_hdr(&hdr(0, 0, 257), true, 256),
            Err(HdrError::NumBuffers(257))
        );
        assert_eq!(parse_rx_hdr(&hdr(0, 0, 0), false, 256), Ok(1));
        assert_eq!(
            parse_rx_hdr(&hdr(1, 0, 1), true, 256),
            Err(HdrError::Flags(1))
        );
        assert_eq!(
            parse_rx_hdr(&hdr(0, 4, 1), true, 256),
            Err(HdrError::Gso(4))
        );
    }

    #[test]
    fn names_known_bits() {
        assert_eq!(
            feature_names(F_VERSION_1 | F_EVENT_IDX),
            vec!["EVENT_IDX", "VERSION_1"]
        );
    }
}
