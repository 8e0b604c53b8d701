//! Writing one frame into a receive queue (virtio 1.2 §5.1.6.3-4): the net header with
//! `num_buffers`, then the frame, scattered over as many available chains as it needs with
//! MRG_RXBUF (one chain without). Every receive chain is checked (the shared walker's ring
//! rules, then device-writable descriptors only, room for something; writes outside guest
//! memory fail) before it is used.
//!
//! Outcomes: the frame is delivered; or there is not enough room yet (the chains taken are
//! put back, nothing is written: the caller waits for the driver to add buffers); or it can
//! never fit (larger than one buffer without MRG_RXBUF, or than the whole ring with it:
//! chains put back, frame dropped); or a chain is bad (every chain taken for the frame is
//! returned with length 0 and the frame dropped).

use crate::regions::RegionCache;
use crate::rings::AvailView;
use crate::virtio::{rx_hdr, HDR_LEN};
use std::sync::atomic::{fence, Ordering};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestMemoryMmap;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory, GuestMemoryBackend, VolatileMemory};
use vmirq_vhost::chain::{walk_chain_in, DescTable, TableView};

mod low_water;
mod parked;
mod refill;
pub use low_water::{buffers_left, LowWater};
pub use parked::Parked;
pub use refill::{arm_refill_kick, quiet_refill_kicks};

/// What happened to a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxOutcome {
    /// Written into this many buffers.
    Delivered(u16),
    /// Not enough buffers available now; nothing consumed.
    NoRoom,
    /// Larger than the receive buffers can ever hold; nothing consumed.
    TooBig,
    /// A receive chain is no place for a frame (a device-readable descriptor, no room, a
    /// buffer outside guest memory); the chains taken were returned unused (length 0).
    BadChain,
    /// The available ring cannot be read (index jump or outside memory), a receive chain
    /// breaks a ring rule, or the used ring cannot be written: the queue is broken (it
    /// stops until the driver resets it; nothing of the frame is published).
    Broken,
}

/// One writable piece of a receive chain.
#[derive(Debug, Clone, Copy)]
struct Seg {
    chain: usize,
    addr: GuestAddress,
    len: u32,
}

/// Reusable buffers of [`deliver`] (no allocation per frame once warm).
#[derive(Debug, Default)]
pub struct RxScratch {
    descs: Vec<Descriptor>,
    segs: Vec<Seg>,
    heads: Vec<u16>,
    used: Vec<u32>,
    bounce: Vec<u8>,
    /// [`deliver`]'s own batch of one frame's entries.
    pending: UsedBatch,
    /// The net header joined with a short frame (or routed Ethernet header).
    first: Vec<u8>,
}

/// Frames (or headers) up to this long are joined with the net header for one write.
const SMALL_LEN: usize = 256;

/// Where a frame's bytes come from.
#[derive(Debug, Clone, Copy)]
pub enum FrameSrc<'a, 'm> {
    /// Bytes of this process.
    Bytes(&'a [u8]),
    /// A transmit chain in another frontend's memory, copied from there straight into the
    /// receive buffers: `head` (the frame's first bytes, already copied out: the Ethernet
    /// header the switch routed on, or a short frame whole), then the chain's bytes from
    /// offset `skip` (its net header and `head`) on, `len` bytes in all. The descriptors were checked to lie inside `mem`
    /// ([`crate::tx::scan_chain`]); a copy that fails anyway (the memory changed) makes the
    /// receive chains go back unused.
    Guest {
        /// The source frontend's memory (with its last used region).
        mem: &'a RegionCache<'m>,
        /// The transmit chain's descriptors.
        descs: &'a [Descriptor],
        /// The frame's first bytes (at least its Ethernet header).
        head: &'a [u8],
        /// Bytes of the chain before the rest of the frame.
        skip: usize,
        /// Frame length (Ethernet header included).
        len: usize,
    },
}

impl FrameSrc<'_, '_> {
    fn len(&self) -> usize {
        match self {
            Self::Bytes(b) => b.len(),
            Self::Guest { len, .. } => *len,
        }
    }
}

/// Used entries written into a receive queue but not yet published (see [`stage`]).
#[derive(Debug, Default)]
pub struct UsedBatch {
    heads: Vec<u16>,
    lens: Vec<u32>,
}

impl UsedBatch {
    /// Entries waiting.
    #[must_use]
    pub fn len(&self) -> usize {
        self.heads.len()
    }

    /// No entry waiting.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// Move every entry of `other` to the end of this batch.
    pub fn append(&mut self, other: &mut UsedBatch) {
        self.heads.append(&mut other.heads);
        self.lens.append(&mut other.lens);
    }

    /// Forget every waiting entry.
    pub fn clear(&mut self) {
        self.heads.clear();
        self.lens.clear();
    }

    /// Publish every waiting entry with one index store ([`publish_used`]) and forget them.
    ///
    /// # Errors
    /// The used ring lies outside guest memory.
    pub fn publish(
        &mut self,
        q: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<(), vm_memory::GuestMemoryError> {
        let r = publish_used(q, mem, &self.heads, &self.lens);
        self.heads.clear();
        self.lens.clear();
        r
    }
}

/// Write `frame` into `q` and publish it. `mrg_rxbuf`: whether MRG_RXBUF was negotiated.
pub fn deliver(
    q: &mut Queue,
    mem: &GuestMemoryMmap,
    frame: &[u8],
    mrg_rxbuf: bool,
    s: &mut RxScratch,
) -> RxOutcome {
    let out = deliver_unpublished(q, mem, frame, mrg_rxbuf, s);
    publish_pending(q, mem, s, out)
}

/// [`deliver`] without the publish: the frame's used entries (or a bad chain's, with
/// length 0) wait in `s` until [`publish_pending`] publishes them, or they move elsewhere
/// through [`RxScratch::pending_mut`] ([`Parked::park`]).
pub fn deliver_unpublished(
    q: &mut Queue,
    mem: &GuestMemoryMmap,
    frame: &[u8],
    mrg_rxbuf: bool,
    s: &mut RxScratch,
) -> RxOutcome {
    let mut used = std::mem::take(&mut s.pending);
    let table = rx_rings(q, mem);
    let out = stage(
        q,
        mem,
        &table,
        FrameSrc::Bytes(frame),
        mrg_rxbuf,
        s,
        &mut used,
    );
    s.pending = used;
    out
}

/// Publish the entries [`deliver_unpublished`] left in `s` (if any); `out` is its outcome,
/// returned unless the used ring cannot be written (then [`RxOutcome::Broken`]).
pub fn publish_pending(
    q: &mut Queue,
    mem: &GuestMemoryMmap,
    s: &mut RxScratch,
    out: RxOutcome,
) -> RxOutcome {
    if s.pending.is_empty() || s.pending.publish(q, mem).is_ok() {
        out
    } else {
        RxOutcome::Broken
    }
}

impl RxScratch {
    /// The entries [`deliver_unpublished`] left unpublished.
    pub fn pending_mut(&mut self) -> &mut UsedBatch {
        &mut self.pending
    }
}

/// A receive queue's descriptor table and available ring translated into host memory
/// once for many frames ([`rx_rings`], [`stage`]; valid while the caller holds the
/// queue's vring lock).
pub struct RxRings<'a> {
    table: TableView<'a>,
    avail: AvailView<'a>,
    /// The memory with its last used region (receive buffers).
    to: RegionCache<'a>,
}

impl RxRings<'_> {
    /// Prefetch the descriptors of up to `limit` receive chains after `q`'s next one that
    /// were already copied out of its available ring ([`crate::prefetch::descs`]).
    #[inline]
    pub fn prefetch_descs(&self, q: &Queue, limit: usize) {
        crate::prefetch::descs(&self.avail, q, &self.table, limit);
    }
}

/// Translate `q`'s rings (see [`RxRings`]).
#[must_use]
pub fn rx_rings<'a>(q: &Queue, mem: &'a GuestMemoryMmap) -> RxRings<'a> {
    RxRings {
        table: TableView::new(mem, desc_table(q)),
        avail: AvailView::new(q, mem),
        to: RegionCache::new(mem),
    }
}

fn desc_table(q: &Queue) -> DescTable {
    DescTable {
        addr: GuestAddress(q.desc_table()),
        size: q.size(),
        indirect: false,
    }
}

/// Write a frame into `q`'s receive buffers and add their used entries to `used` (the
/// caller publishes them, several frames' worth at once, with [`UsedBatch::publish`]: a
/// merged frame is never visible in part). Chains of a bad receive chain go into `used`
/// with length 0. `rings`: [`rx_rings`] of `q`, made once for many frames (one made for
/// other rings is not used).
#[inline]
pub fn stage<'a>(
    q: &mut Queue,
    mem: &'a GuestMemoryMmap,
    rings: &RxRings<'a>,
    frame: FrameSrc<'_, '_>,
    mrg_rxbuf: bool,
    s: &mut RxScratch,
    used: &mut UsedBatch,
) -> RxOutcome {
    // Inlined into the caller's loop with `stage_one`; the general path stays out of line.
    if rings.table.table() == desc_table(q) && rings.avail.is_for(q) {
        let whole = match frame {
            FrameSrc::Bytes(b) => Some(b),
            FrameSrc::Guest { head, len, .. } => (head.len() == len).then_some(head),
        };
        let RxRings { table, avail, to } = rings;
        if let Some(out) = whole.and_then(|f| stage_one(q, mem, table, avail, to, f, used)) {
            return out;
        }
        return stage_general(q, mem, rings, frame, mrg_rxbuf, s, used);
    }
    stage_general(q, mem, &rx_rings(q, mem), frame, mrg_rxbuf, s, used)
}

/// [`stage`] for every shape of frame and receive chains, `rings` made for `q`.
#[inline(never)]
fn stage_general<'a>(
    q: &mut Queue,
    mem: &'a GuestMemoryMmap,
    rings: &RxRings<'a>,
    frame: FrameSrc<'_, '_>,
    mrg_rxbuf: bool,
    s: &mut RxScratch,
    used: &mut UsedBatch,
) -> RxOutcome {
    s.segs.clear();
    s.heads.clear();
    let RxRings { table, avail, to } = rings;
    let need = u64::try_from(HDR_LEN + frame.len()).unwrap_or(u64::MAX);
    let start = q.next_avail();
    let mut room = 0u64;
    let max_chains = usize::from(q.size()).min(usize::from(u16::MAX));
    while room < need {
        if (!mrg_rxbuf && !s.heads.is_empty()) || s.heads.len() >= max_chains {
            q.set_next_avail(start);
            return RxOutcome::TooBig;
        }
        let head = match avail.pop(q, mem) {
            Ok(Some(head)) => head,
            Ok(None) => {
                q.set_next_avail(start);
                return RxOutcome::NoRoom;
            }
            Err(_) => return RxOutcome::Broken,
        };
        let index = s.heads.len();
        s.heads.push(head);
        let mut chain_room = 0u64;
        if walk_chain_in(mem, table, head, &mut s.descs).is_err() {
            // A ring rule broken (`vmirq_vhost::chain::Violation`: a head outside the
            // table, a loop, an unreadable table...): such a chain cannot be returned (its
            // head may name no descriptor at all), so the queue stops until the driver
            // resets it, as QEMU's virtio_error does.
            return RxOutcome::Broken;
        }
        let mut bad = false;
        for d in &s.descs {
            if !d.is_write_only() {
                bad = true;
                break;
            }
            if d.len() > 0 {
                s.segs.push(Seg {
                    chain: index,
                    addr: d.addr(),
                    len: d.len(),
                });
                chain_room += u64::from(d.len());
            }
        }
        if bad || chain_room == 0 || (index == 0 && chain_room < HDR_LEN as u64) {
            return_unused(&s.heads, used);
            return RxOutcome::BadChain;
        }
        room += chain_room;
    }
    let n = u16::try_from(s.heads.len()).unwrap_or(u16::MAX);
    let hdr = rx_hdr(n);
    s.used.clear();
    s.used.resize(s.heads.len(), 0);
    // The net header and what follows it from this process go out in one guest write when
    // short (each guest access costs a region lookup, far more than copying 64 bytes here).
    let local = match frame {
        FrameSrc::Bytes(b) => b,
        FrameSrc::Guest { head, .. } => head,
    };
    s.first.clear();
    let parts: [&[u8]; 3] = if local.len() <= SMALL_LEN {
        s.first.extend_from_slice(&hdr);
        s.first.extend_from_slice(local);
        [&s.first[..], &[], &[]]
    } else {
        [&hdr[..], local, &[]]
    };
    let written = match frame {
        FrameSrc::Bytes(_) => write_local(to, &s.segs, parts, &mut s.used),
        FrameSrc::Guest {
            mem: from,
            descs,
            head,
            skip,
            len,
        } => write_local(to, &s.segs, parts, &mut s.used).and_then(|at| {
            let rest = len.saturating_sub(head.len());
            copy_guest(
                from,
                descs,
                skip,
                rest,
                to,
                &s.segs,
                at,
                &mut s.used,
                &mut s.bounce,
            )
        }),
    };
    if written.is_none() {
        return_unused(&s.heads, used);
        return RxOutcome::BadChain;
    }
    used.heads.extend_from_slice(&s.heads);
    used.lens.extend_from_slice(&s.used);
    RxOutcome::Delivered(n)
}

/// [`stage`] for the usual shape, without its segment lists: a frame held whole in this
/// process going into the next available chain when that chain is one device-writable
/// descriptor ([`TableView::single`]: the head inside the table, neither NEXT nor
/// INDIRECT) with room for the net header and the frame, inside one memory region. The
/// net header goes out with one 12-byte store, the frame with one copy; the header says
/// one buffer, as [`stage`] writes for a frame in one chain, with or without MRG_RXBUF.
/// `None` when the frame or the chain has another shape, with nothing taken
/// (`next_avail` where it was): [`stage`] then takes it with every check.
#[inline]
fn stage_one(
    q: &mut Queue,
    mem: &GuestMemoryMmap,
    table: &TableView<'_>,
    avail: &AvailView<'_>,
    to: &RegionCache<'_>,
    frame: &[u8],
    used: &mut UsedBatch,
) -> Option<RxOutcome> {
    let total = HDR_LEN.checked_add(frame.len())?;
    let start = q.next_avail();
    let head = match avail.pop(q, mem) {
        Ok(Some(head)) => head,
        Ok(None) => return Some(RxOutcome::NoRoom),
        Err(_) => return Some(RxOutcome::Broken),
    };
    let slice = table
        .single(head)
        .filter(|d| d.is_write_only() && d.len() as usize >= total)
        .and_then(|d| to.get_slice(d.addr(), total));
    let Some(slice) = slice else {
        q.set_next_avail(start);
        return None;
    };
    // The header with one volatile store of its 12 bytes, the frame after it with one
    // copy; both inside `slice` (checked again by `get_ref` and `subslice`).
    let (Ok(hdr), Ok(rest)) = (
        slice.get_ref::<[u8; HDR_LEN]>(0),
        slice.subslice(HDR_LEN, frame.len()),
    ) else {
        q.set_next_avail(start);
        return None;
    };
    hdr.store(rx_hdr(1));
    rest.copy_from(frame);
    used.heads.push(head);
    // `total` <= the descriptor's u32 length.
    used.lens.push(u32::try_from(total).unwrap_or(u32::MAX));
    Some(RxOutcome::Delivered(1))
}

/// A position in a frame's receive segments: segment index and offset in it.
#[derive(Debug, Clone, Copy, Default)]
struct SegPos {
    seg: usize,
    off: usize,
}

/// Write `parts` (in order) into `segs` from their start; returns where they ended, `None`
/// when a write fails. `used` gets each chain's bytes.
fn write_local(
    mem: &RegionCache<'_>,
    segs: &[Seg],
    parts: [&[u8]; 3],
    used: &mut [u32],
) -> Option<SegPos> {
    let mut src = Cursor {
        parts,
        part: 0,
        off: 0,
    };
    let mut pos = SegPos::default();
    while let Some(seg) = segs.get(pos.seg) {
        let left = seg.len as usize - pos.off;
        if left == 0 {
            pos = SegPos {
                seg: pos.seg + 1,
                off: 0,
            };
            continue;
        }
        let Some(piece) = src.next_piece(left) else {
            break;
        };
        let at = seg.addr.checked_add(pos.off as u64)?;
        match mem.get_slice(at, piece.len()) {
            Some(slice) => slice.copy_from(piece),
            None => mem.mem().write_slice(piece, at).ok()?,
        }
        pos.off += piece.len();
        used[seg.chain] += u32::try_from(piece.len()).unwrap_or(u32::MAX);
    }
    Some(pos)
}

/// Copy `len` bytes of the chain `descs` in `from`, starting `skip` bytes into it, into
/// `segs` of `to` from `pos` on: guest memory to guest memory without a bounce buffer when
/// both ranges lie in one mapped region each (a bounce through `bounce` otherwise). `None`
/// when a range is outside memory or the segments are too short.
#[allow(clippy::too_many_arguments)]
fn copy_guest(
    from: &RegionCache<'_>,
    descs: &[Descriptor],
    mut skip: usize,
    mut len: usize,
    to: &RegionCache<'_>,
    segs: &[Seg],
    mut pos: SegPos,
    used: &mut [u32],
    bounce: &mut Vec<u8>,
) -> Option<SegPos> {
    for d in descs {
        let dlen = d.len() as usize;
        if skip >= dlen {
            skip -= dlen;
            continue;
        }
        let mut src_off = skip;
        skip = 0;
        while src_off < dlen && len > 0 {
            let seg = segs.get(pos.seg)?;
            let room = seg.len as usize - pos.off;
            if room == 0 {
                pos = SegPos {
                    seg: pos.seg + 1,
                    off: 0,
                };
                continue;
            }
            let n = room.min(dlen - src_off).min(len);
            let src_at = d.addr().checked_add(src_off as u64)?;
            let dst_at = seg.addr.checked_add(pos.off as u64)?;
            copy_piece(from, src_at, to, dst_at, n, bounce)?;
            src_off += n;
            pos.off += n;
            len -= n;
            used[seg.chain] += u32::try_from(n).unwrap_or(u32::MAX);
        }
        if len == 0 {
            break;
        }
    }
    (len == 0).then_some(pos)
}

/// Copy `n` bytes between two guests' memories (bounds checked by vm-memory either way).
fn copy_piece(
    from: &RegionCache<'_>,
    src: GuestAddress,
    to: &RegionCache<'_>,
    dst: GuestAddress,
    n: usize,
    bounce: &mut Vec<u8>,
) -> Option<()> {
    if let (Some(s), Some(d)) = (from.get_slice(src, n), to.get_slice(dst, n)) {
        s.copy_to_volatile_slice(d);
        return Some(());
    }
    bounce.resize(n, 0);
    from.mem().read_slice(bounce, src).ok()?;
    to.mem().write_slice(bounce, dst).ok()
}

/// Put `heads` (with `lens`) in the used ring and publish them with one index store, so
/// that the driver never sees the first buffer of a merged packet without the rest
/// (virtio-queue's `add_used` publishes each entry on its own). Notification decisions for
/// a queue filled this way use [`UsedWindow`], not the queue's own `needs_notification`.
/// The ring (index and `size` entries) is translated once when it lies inside one region
/// (each entry then an offset into that host slice), else written entry by entry.
///
/// # Errors
/// The used ring lies outside guest memory.
pub fn publish_used(
    q: &mut Queue,
    mem: &GuestMemoryMmap,
    heads: &[u16],
    lens: &[u32],
) -> Result<(), vm_memory::GuestMemoryError> {
    let size = q.size().max(1);
    let ring = GuestAddress(q.used_ring());
    let bad = || vm_memory::GuestMemoryError::InvalidGuestAddress(ring);
    let whole = USED_HDR_LEN + USED_ELEM_LEN * usize::from(q.size());
    let mapped = mem.get_slice(ring, whole).ok();
    let mut next = q.next_used();
    for (&head, &len) in heads.iter().zip(lens) {
        let slot = usize::from(next % size);
        let mut elem = [0u8; USED_ELEM_LEN];
        elem[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        elem[4..].copy_from_slice(&len.to_le_bytes());
        let off = USED_HDR_LEN + USED_ELEM_LEN * slot;
        match mapped {
            // One volatile store of the entry's 8 bytes (any alignment), bounds checked
            // against the ring: cheaper than a generic copy or two atomic stores.
            Some(slice) => slice.get_ref::<[u8; USED_ELEM_LEN]>(off)?.store(elem),
            None => {
                let at = ring.checked_add(off as u64).ok_or_else(bad)?;
                mem.write_slice(&elem, at)?;
            }
        }
        next = next.wrapping_add(1);
    }
    q.set_next_used(next);
    // The entries above are ordinary (volatile) stores; the release store of the index
    // orders them before it, as the driver's acquire load of the index expects.
    match mapped {
        Some(slice) => Ok(slice.store(next.to_le(), 2, Ordering::Release)?),
        None => {
            let idx = ring.checked_add(2).ok_or_else(bad)?;
            mem.store(next.to_le(), idx, Ordering::Release)
        }
    }
}

/// Bytes before the first used ring entry (flags, idx).
const USED_HDR_LEN: usize = 4;
/// Bytes of one used ring entry (id, len).
const USED_ELEM_LEN: usize = 8;

/// When the driver wants a used-buffer notification for a queue filled by
/// [`publish_used`] (virtio 1.2 §2.7.7.2, §2.7.10): with EVENT_IDX, when `used_event` lies
/// in the window of entries published since the last decision; without, unless the
/// driver set VIRTQ_AVAIL_F_NO_INTERRUPT.
#[derive(Debug, Default)]
pub struct UsedWindow {
    /// `next_used` at the last decision.
    old: u16,
    /// A decision was made since the window was created.
    decided: bool,
    /// The frontend set the rings up again ([`UsedWindow::restart`]): `old` may not be
    /// where the next publishes start, so the next decision notifies.
    restarted: bool,
}

impl UsedWindow {
    /// Decide for the entries published since the last call.
    ///
    /// # Errors
    /// The available ring lies outside guest memory.
    pub fn needs_notification<M: GuestMemory>(
        &mut self,
        q: &Queue,
        mem: &M,
    ) -> Result<bool, vm_memory::GuestMemoryError> {
        let new = q.next_used();
        let old = std::mem::replace(&mut self.old, new);
        self.decided = true;
        if std::mem::take(&mut self.restarted) {
            // Where the entries since the restart begin is not known here (the frontend
            // chose the ring's used index anew): one notification too many, never one
            // too few.
            return Ok(true);
        }
        if new == old {
            return Ok(false);
        }
        fence(Ordering::SeqCst);
        let avail = GuestAddress(q.avail_ring());
        let bad = vm_memory::GuestMemoryError::InvalidGuestAddress(avail);
        if q.event_idx_enabled() {
            let at = avail.checked_add(4 + 2 * u64::from(q.size())).ok_or(bad)?;
            let used_event: u16 = u16::from_le(mem.load(at, Ordering::Acquire)?);
            Ok(new.wrapping_sub(used_event).wrapping_sub(1) < new.wrapping_sub(old))
        } else {
            let flags: u16 = u16::from_le(mem.load(avail, Ordering::Acquire)?);
            Ok(flags & 1 == 0)
        }
    }

    /// Forget the window (the queue was reset).
    pub fn reset(&mut self, next_used: u16) {
        self.old = next_used;
        self.restarted = false;
    }

    /// The frontend sets the device up again within the connection (SET_FEATURES after a
    /// driver reset, then the rings with used indices of its choosing): the next decision
    /// notifies. Nothing changes before the first decision (a fresh window starts at 0,
    /// where a fresh ring starts).
    pub fn restart(&mut self) {
        self.restarted = self.decided;
    }
}

/// Complete every chain in `heads` with length 0 (with the next publish).
fn return_unused(heads: &[u16], used: &mut UsedBatch) {
    used.heads.extend_from_slice(heads);
    used.lens.resize(used.heads.len(), 0);
}

/// The net header followed by the frame, handed out in pieces.
struct Cursor<'a> {
    parts: [&'a [u8]; 3],
    part: usize,
    off: usize,
}

impl<'a> Cursor<'a> {
    fn next_piece(&mut self, max: usize) -> Option<&'a [u8]> {
        while self.part < self.parts.len() {
            let p = self.parts[self.part];
            if self.off < p.len() {
                let end = p.len().min(self.off + max);
                let piece = &p[self.off..end];
                self.off = end;
                return Some(piece);
            }
            self.part += 1;
            self.off = 0;
        }
        None
    }
}

#[cfg(test)]
mod tests;
