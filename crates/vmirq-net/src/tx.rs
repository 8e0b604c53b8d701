//! Reading one transmitted descriptor chain (the trust boundary of the transmit queue):
//! every descriptor device-readable and inside guest memory, the total bounded by
//! [`FRAME_LEN_MAX`] plus the net header, the net header free of offloads not offered, and
//! at least an Ethernet header after it. A chain that fails is completed with length 0 and
//! its frame dropped and counted; the queue carries on.
//!
//! The chain's shape is checked first by the shared walker (`vmirq_vhost::chain`: index
//! ranges, loops, chain length, indirect-table rules); virtio-queue's own iterator would end
//! such a chain silently.

use crate::regions::RegionCache;
use crate::virtio::{check_tx_hdr, TxHdrError, ETH_HDR_LEN, FRAME_LEN_MAX, HDR_LEN};
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestMemoryBackend, GuestMemoryMmap};
use vmirq_vhost::chain::{walk_chain, walk_chain_in, DescTable, TableView, Violation};

/// Why a transmitted chain is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxError {
    /// A descriptor is device-writable.
    #[error("device-writable descriptor in a transmit chain")]
    Writable,
    /// A descriptor lies outside guest memory.
    #[error("descriptor outside guest memory")]
    OutsideMemory,
    /// More bytes than a net header and the largest frame.
    #[error("chain longer than the largest frame")]
    TooLong,
    /// Fewer bytes than a net header and an Ethernet header.
    #[error("chain shorter than a net header and an Ethernet header")]
    Runt,
    /// The net header asks for an offload.
    #[error("net header: {0}")]
    Header(#[from] TxHdrError),
    /// The chain breaks a ring rule.
    #[error("ring rule: {0}")]
    Ring(#[from] Violation),
}

/// Read the chain at `head` of `table` into `buf` (net header included); `descs` is
/// scratch. On success `buf[HDR_LEN..]` is the Ethernet frame.
///
/// # Errors
/// [`TxError`]; `buf` then holds a prefix of the chain.
pub fn read_chain(
    mem: &GuestMemoryMmap,
    table: DescTable,
    head: u16,
    descs: &mut Vec<Descriptor>,
    buf: &mut Vec<u8>,
) -> Result<(), TxError> {
    buf.clear();
    walk_chain(mem, table, head, descs)?;
    let limit = HDR_LEN + FRAME_LEN_MAX;
    for desc in descs.iter() {
        if desc.is_write_only() {
            return Err(TxError::Writable);
        }
        let len = usize::try_from(desc.len()).map_err(|_| TxError::TooLong)?;
        let start = buf.len();
        let end = start.checked_add(len).ok_or(TxError::TooLong)?;
        if end > limit {
            return Err(TxError::TooLong);
        }
        buf.resize(end, 0);
        mem.read_slice(&mut buf[start..end], desc.addr())
            .map_err(|_| TxError::OutsideMemory)?;
    }
    if buf.len() < HDR_LEN + ETH_HDR_LEN {
        return Err(TxError::Runt);
    }
    let mut hdr = [0u8; HDR_LEN];
    hdr.copy_from_slice(&buf[..HDR_LEN]);
    check_tx_hdr(&hdr)?;
    Ok(())
}

/// The net header and the Ethernet header of a transmitted frame.
pub const PREFIX_LEN: usize = HDR_LEN + ETH_HDR_LEN;

/// [`read_chain`] without copying the frame: the same checks (every descriptor readable
/// and inside guest memory, the length bounds, the net header), the chain's descriptors
/// left in `descs` and its first [`PREFIX_LEN`] bytes (net header, Ethernet header) copied
/// into `prefix`. Returns the frame's length (net header excluded). The frame's bytes are
/// copied later, straight into a receive queue ([`crate::rx::FrameSrc::Guest`]). `table`: the
/// queue's descriptor table, translated once for a burst of chains; `cache`: the memory
/// with its last used region, for the same burst.
///
/// # Errors
/// [`TxError`].
pub fn scan_chain(
    cache: &RegionCache<'_>,
    table: &TableView<'_>,
    head: u16,
    descs: &mut Vec<Descriptor>,
    prefix: &mut [u8; PREFIX_LEN],
) -> Result<usize, TxError> {
    let mem = cache.mem();
    walk_chain_in(mem, table, head, descs)?;
    let limit = HDR_LEN + FRAME_LEN_MAX;
    let mut total = 0usize;
    for desc in descs.iter() {
        if desc.is_write_only() {
            return Err(TxError::Writable);
        }
        let len = usize::try_from(desc.len()).map_err(|_| TxError::TooLong)?;
        let end = total.checked_add(len).ok_or(TxError::TooLong)?;
        if end > limit {
            return Err(TxError::TooLong);
        }
        let n = len.min(PREFIX_LEN.saturating_sub(total));
        // One region lookup for a descriptor inside one region (the usual case); a
        // descriptor spanning regions is checked piece by piece.
        if let Some(slice) = cache.get_slice(desc.addr(), len) {
            if n > 0 {
                slice.copy_to(&mut prefix[total..total + n]);
            }
        } else {
            if !mem.check_range(desc.addr(), len) {
                return Err(TxError::OutsideMemory);
            }
            if n > 0 {
                mem.read_slice(&mut prefix[total..total + n], desc.addr())
                    .map_err(|_| TxError::OutsideMemory)?;
            }
        }
        total = end;
    }
    if total < PREFIX_LEN {
        return Err(TxError::Runt);
    }
    let mut hdr = [0u8; HDR_LEN];
    hdr.copy_from_slice(&prefix[..HDR_LEN]);
    check_tx_hdr(&hdr)?;
    Ok(total - HDR_LEN)
}

/// Copy the frame of a chain [`scan_chain`] accepted into `buf` (net header excluded).
///
/// # Errors
/// The memory no longer holds a descriptor.
pub fn gather_frame(
    mem: &GuestMemoryMmap,
    descs: &[Descriptor],
    buf: &mut Vec<u8>,
) -> Result<(), TxError> {
    buf.clear();
    for desc in descs {
        let len = usize::try_from(desc.len()).map_err(|_| TxError::TooLong)?;
        let start = buf.len();
        buf.resize(start + len, 0);
        mem.read_slice(&mut buf[start..], desc.addr())
            .map_err(|_| TxError::OutsideMemory)?;
    }
    buf.drain(..HDR_LEN.min(buf.len()));
    Ok(())
}
