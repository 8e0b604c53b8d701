//! Reading one transmitted descriptor chain (the trust boundary of the transmit queue):
//! every descriptor device-readable and inside guest memory, the total bounded by
//! [`FRAME_LEN_MAX`] plus the net header, the net header free of offloads not offered, and
//! at least an Ethernet header after it. A chain that fails these checks is completed with
//! length 0 and its frame dropped and counted; the queue carries on.
//!
//! The chain's shape is checked first by the shared walker (`vmirq_vhost::chain`: index
//! ranges, loops, chain length, indirect-table rules); virtio-queue's own iterator would end
//! such a chain silently. A chain that breaks one of those ring rules ([`TxError::Ring`]) is
//! not completed (its head may name no descriptor): the queue stops until the driver resets
//! it, as in vmirq-blk and as QEMU's virtio_error does.

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
    /// The chain breaks a ring rule: the queue stops (the chain is not completed).
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

/// Bytes of a transmitted chain [`scan_chain`] copies out: the net header and the first
/// 128 bytes of the frame. A short frame (a 64-byte one, a TCP ACK) is then wholly in
/// this process, and goes into its receive buffers in one write with the receive net
/// header, without a second read of the source's memory.
pub const COPY_LEN: usize = HDR_LEN + 128;

/// [`read_chain`] without copying the whole frame: the same checks (every descriptor
/// readable and inside guest memory, the length bounds, the net header), the chain's
/// descriptors left in `descs` and its first bytes (net header, Ethernet header, and up to
/// [`COPY_LEN`] in all: `min(COPY_LEN, HDR_LEN + frame length)`) copied into `prefix`.
/// Returns the frame's length (net header excluded). The rest of a longer frame is copied
/// later, straight into a receive queue ([`crate::rx::FrameSrc::Guest`]). `table`: the
/// queue's descriptor table, translated once for a burst of chains; `cache`: the memory
/// with its last used region, for the same burst.
///
/// # Errors
/// [`TxError`].
#[inline]
pub fn scan_chain(
    cache: &RegionCache<'_>,
    table: &TableView<'_>,
    head: u16,
    descs: &mut Vec<Descriptor>,
    prefix: &mut [u8; COPY_LEN],
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
        let n = len.min(COPY_LEN.saturating_sub(total));
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

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_queue::desc::RawDescriptor;
    use vm_memory::GuestAddress;

    const F_NEXT: u16 = 1;
    const TABLE: DescTable = DescTable {
        addr: GuestAddress(0),
        size: 8,
        indirect: false,
    };

    /// A chain of the net header (one descriptor) and a `len`-byte frame (one more, or
    /// two when `split`); returns the memory and the chain's bytes.
    fn chain(len: usize, split: bool) -> (GuestMemoryMmap, Vec<u8>) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 16)]).expect("memory");
        let mut bytes = vec![0u8; HDR_LEN];
        bytes.extend((0..len).map(|i| u8::try_from(i % 251).unwrap_or(0)));
        mem.write_slice(&bytes, GuestAddress(0x1000))
            .expect("write");
        let put = |i: u64, addr: usize, len: usize, next: Option<u16>| {
            let d = Descriptor::new(
                0x1000 + addr as u64,
                u32::try_from(len).expect("len"),
                if next.is_some() { F_NEXT } else { 0 },
                next.unwrap_or(0),
            );
            mem.write_obj(RawDescriptor::from(d), GuestAddress(16 * i))
                .expect("descriptor");
        };
        put(0, 0, HDR_LEN, Some(1));
        if split {
            put(1, HDR_LEN, 20, Some(2));
            put(2, HDR_LEN + 20, len - 20, None);
        } else {
            put(1, HDR_LEN, len, None);
        }
        (mem, bytes)
    }

    fn scan(mem: &GuestMemoryMmap) -> ([u8; COPY_LEN], usize) {
        let cache = RegionCache::new(mem);
        let table = TableView::new(mem, TABLE);
        let mut descs = Vec::new();
        let mut prefix = [0u8; COPY_LEN];
        let len = scan_chain(&cache, &table, 0, &mut descs, &mut prefix).expect("scan");
        (prefix, len)
    }

    #[test]
    fn a_short_frame_is_copied_out_whole_a_long_one_up_to_copy_len() {
        for split in [false, true] {
            let (mem, bytes) = chain(64, split);
            let (prefix, len) = scan(&mem);
            assert_eq!(len, 64);
            assert_eq!(&prefix[..HDR_LEN + 64], &bytes[..]);
            let (mem, bytes) = chain(1500, split);
            let (prefix, len) = scan(&mem);
            assert_eq!(len, 1500);
            assert_eq!(&prefix[..], &bytes[..COPY_LEN]);
        }
    }
}
