//! virtio-blk constants and the device configuration space.
//!
//! Numbers come from the VIRTIO 1.2 specification, section 5.2 (block device). The
//! configuration space is serialised by hand into the 60-byte `virtio_blk_config` layout that
//! vhost-user frontends (QEMU, libblkio) read with `VHOST_USER_GET_CONFIG`.

/// Sector size used by virtio-blk request headers, in bytes (fixed by the spec).
pub const SECTOR_SIZE: u64 = 512;
/// log2 of [`SECTOR_SIZE`].
pub const SECTOR_SHIFT: u32 = 9;
/// Length of the request header (`type`, `ioprio`, `sector`), in bytes.
pub const HEADER_LEN: u32 = 16;
/// Length of the GET_ID answer, in bytes.
pub const ID_LEN: usize = 20;
/// Length of one DISCARD / WRITE_ZEROES segment, in bytes.
pub const DISCARD_SEG_LEN: u32 = 16;
/// Length of the configuration space answered to GET_CONFIG, in bytes.
pub const CONFIG_LEN: usize = 60;

/// Request types (`virtio_blk_outhdr.type`).
pub mod req {
    /// Device to driver read.
    pub const IN: u32 = 0;
    /// Driver to device write.
    pub const OUT: u32 = 1;
    /// Cache flush.
    pub const FLUSH: u32 = 4;
    /// Device identifier string.
    pub const GET_ID: u32 = 8;
    /// Discard (unmap) ranges.
    pub const DISCARD: u32 = 11;
    /// Write zeroes to ranges.
    pub const WRITE_ZEROES: u32 = 13;
}

/// Request status values written into the final status byte.
pub mod status {
    /// Success.
    pub const OK: u8 = 0;
    /// Device or driver error.
    pub const IOERR: u8 = 1;
    /// Request type not supported.
    pub const UNSUPP: u8 = 2;
}

/// Feature bits the device may offer.
pub mod feature {
    /// Maximum number of segments in a request is in `seg_max`.
    pub const BLK_SEG_MAX: u32 = 2;
    /// Device is read-only.
    pub const BLK_RO: u32 = 5;
    /// Block size of disk is in `blk_size`.
    pub const BLK_BLK_SIZE: u32 = 6;
    /// Cache flush command support.
    pub const BLK_FLUSH: u32 = 9;
    /// Device supports multiqueue; `num_queues` is valid.
    pub const BLK_MQ: u32 = 12;
    /// Device supports DISCARD.
    pub const BLK_DISCARD: u32 = 13;
    /// Device supports WRITE_ZEROES.
    pub const BLK_WRITE_ZEROES: u32 = 14;
    /// Indirect descriptors.
    pub const RING_INDIRECT_DESC: u32 = 28;
    /// `used_event` / `avail_event` notification suppression.
    pub const RING_EVENT_IDX: u32 = 29;
    /// vhost-user protocol features are negotiated (vhost-user bit, not virtio).
    pub const VHOST_USER_PROTOCOL_FEATURES: u32 = 30;
    /// Compliance with VIRTIO 1.0 or later.
    pub const VERSION_1: u32 = 32;
}

/// The device's configuration space values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlkConfig {
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Maximum number of data segments in one request.
    pub seg_max: u32,
    /// Logical block size in bytes.
    pub blk_size: u32,
    /// Number of request queues.
    pub num_queues: u16,
    /// Largest DISCARD in sectors (0 when DISCARD is not offered).
    pub max_discard_sectors: u32,
    /// Largest WRITE_ZEROES in sectors (0 when WRITE_ZEROES is not offered).
    pub max_write_zeroes_sectors: u32,
}

impl BlkConfig {
    /// Serialise into the little-endian 60-byte `virtio_blk_config` layout.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; CONFIG_LEN] {
        let mut b = [0u8; CONFIG_LEN];
        put(&mut b, 0, &self.capacity_sectors.to_le_bytes());
        // size_max (8..12) stays 0: SIZE_MAX is not offered.
        put(&mut b, 12, &self.seg_max.to_le_bytes());
        // geometry (16..20) stays 0: GEOMETRY is not offered.
        put(&mut b, 20, &self.blk_size.to_le_bytes());
        // topology (24..32) stays 0; writeback (32) and unused (33) stay 0.
        put(&mut b, 34, &self.num_queues.to_le_bytes());
        put(&mut b, 36, &self.max_discard_sectors.to_le_bytes());
        put(
            &mut b,
            40,
            &u32::from(self.max_discard_sectors > 0).to_le_bytes(),
        );
        // discard_sector_alignment, in sectors.
        put(
            &mut b,
            44,
            &(self.blk_size >> SECTOR_SHIFT).max(1).to_le_bytes(),
        );
        put(&mut b, 48, &self.max_write_zeroes_sectors.to_le_bytes());
        put(
            &mut b,
            52,
            &u32::from(self.max_write_zeroes_sectors > 0).to_le_bytes(),
        );
        // write_zeroes_may_unmap (56) and padding (57..60) stay 0.
        b
    }

    /// The bytes `offset .. offset + size` of the configuration space. Bytes past the 60
    /// defined here read as zero (newer frontends ask for a longer `virtio_blk_config` whose
    /// extra fields belong to features this device does not offer). Empty, which makes the
    /// frontend get an error reply, when the range leaves the 256-byte vhost-user limit.
    #[must_use]
    pub fn read(&self, offset: u32, size: u32) -> Vec<u8> {
        let bytes = self.to_bytes();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let len = usize::try_from(size).unwrap_or(usize::MAX);
        match start.checked_add(len) {
            Some(end) if end <= MAX_CONFIG_READ => (start..end)
                .map(|i| bytes.get(i).copied().unwrap_or(0))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Largest configuration-space read a frontend may ask for (vhost-user's limit).
pub const MAX_CONFIG_READ: usize = 256;

fn put(buf: &mut [u8; CONFIG_LEN], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_layout_matches_virtio_blk_config_offsets() {
        let c = BlkConfig {
            capacity_sectors: 0x0102_0304_0506_0708,
            seg_max: 126,
            blk_size: 4096,
            num_queues: 3,
            max_discard_sectors: 77,
            max_write_zeroes_sectors: 0,
        };
        let b = c.to_bytes();
        assert_eq!(b.len(), 60);
        assert_eq!(&b[0..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[12..16], &126u32.to_le_bytes());
        assert_eq!(&b[20..24], &4096u32.to_le_bytes());
        assert_eq!(&b[34..36], &3u16.to_le_bytes());
        assert_eq!(&b[36..40], &77u32.to_le_bytes());
        assert_eq!(&b[40..44], &1u32.to_le_bytes());
        assert_eq!(&b[44..48], &8u32.to_le_bytes());
        assert_eq!(&b[52..56], &0u32.to_le_bytes());
    }

    #[test]
    fn config_read_pads_longer_reads_and_rejects_ranges_past_the_limit() {
        let c = BlkConfig {
            capacity_sectors: 8,
            seg_max: 1,
            blk_size: 512,
            num_queues: 1,
            max_discard_sectors: 0,
            max_write_zeroes_sectors: 0,
        };
        assert_eq!(c.read(0, 60), c.to_bytes().to_vec());
        assert_eq!(c.read(0, 8), 8u64.to_le_bytes().to_vec());
        // A longer (newer) virtio_blk_config: the tail reads as zero.
        let long = c.read(0, 96);
        assert_eq!(long.len(), 96);
        assert_eq!(&long[..60], &c.to_bytes()[..]);
        assert!(long[60..].iter().all(|&b| b == 0));
        assert!(c.read(200, 100).is_empty());
        assert!(c.read(u32::MAX, 2).is_empty());
    }
}
