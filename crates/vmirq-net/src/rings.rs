//! A queue's available ring translated to host memory once for a burst of frames (the
//! caller holds the queue's vring lock, so the ring cannot move meanwhile): the available
//! index and each head are then read from one host slice by offset, with the bounds check
//! of a slice access instead of a guest region lookup each (vm-memory's generic accessors,
//! the largest per-frame cost of the pmd path).
//!
//! The rules are those of virtio-queue's own iterator, which this replaces on the hot path:
//! the queue must be ready; the driver's index may run ahead of the device's by at most the
//! queue size (virtio 1.2 §2.7.6; more is a broken ring, not a reason to read further); the
//! index is read with acquire ordering before any entry it covers. Reads stay volatile
//! (the driver writes the ring concurrently). A ring that does not lie inside one mapped
//! region takes virtio-queue's path.
//!
//! The entries are read in bulk: when the heads seen so far are used up, up to [`AHEAD`]
//! entries the index covers are copied out at once (one copy, two where they wrap around
//! the ring's end) and handed out from that copy. Entries the driver has made available
//! stay put until the device returns them, so a copy taken once serves the burst, and a
//! head put back (no room yet) comes again from it.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, VolatileSlice};

/// Bytes before the first entry of the available ring (flags, idx).
const AVAIL_HDR_LEN: usize = 4;
/// Most available-ring entries copied out at once (a burst's worth, [`crate::pmd::BURST`]).
pub const AHEAD: usize = 32;

/// Why no head could be taken: the queue is broken (or not running).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AvailError {
    /// The queue is not ready.
    #[error("queue not ready")]
    NotReady,
    /// The driver's index is more than a queue size ahead of the device's.
    #[error("available index jumped more than the queue size")]
    IndexJump,
    /// The ring cannot be read.
    #[error("available ring outside guest memory")]
    OutsideMemory,
}

/// One queue's available ring, translated once (see the module docs).
pub struct AvailView<'a> {
    ring: GuestAddress,
    size: u16,
    slice: Option<VolatileSlice<'a>>,
    /// The driver's index as last read: entries up to it are available without reading
    /// the index again (a driver never takes an entry back), so the index is read once
    /// per burst unless the burst drains what it saw.
    known: Cell<u16>,
    /// Ring position of `heads[0]`.
    base: Cell<u16>,
    /// Entries of `heads` copied out of the ring (from `base` on).
    count: Cell<u16>,
    /// Heads copied out of the ring.
    heads: [Cell<u16>; AHEAD],
}

impl<'a> AvailView<'a> {
    /// Translate `q`'s available ring (header and `size` entries) in `mem`.
    #[must_use]
    pub fn new(q: &Queue, mem: &'a GuestMemoryMmap) -> Self {
        let ring = GuestAddress(q.avail_ring());
        let size = q.size();
        let len = AVAIL_HDR_LEN + 2 * usize::from(size);
        Self {
            ring,
            size,
            slice: mem.get_slice(ring, len).ok(),
            known: Cell::new(q.next_avail()),
            base: Cell::new(0),
            count: Cell::new(0),
            heads: Default::default(),
        }
    }

    /// Whether this view was made for `q`'s current ring.
    #[must_use]
    pub fn is_for(&self, q: &Queue) -> bool {
        self.ring.0 == q.avail_ring() && self.size == q.size()
    }

    /// Whether the ring was translated (lies inside one region).
    #[must_use]
    pub fn is_mapped(&self) -> bool {
        self.slice.is_some()
    }

    /// Take the next available head of `q` (advancing its `next_avail`); `None` when the
    /// driver has made nothing more available. The head is not checked here (the chain
    /// walker checks it against the table).
    ///
    /// # Errors
    /// [`AvailError`]: the queue is broken.
    #[inline]
    pub fn pop(&self, q: &mut Queue, mem: &GuestMemoryMmap) -> Result<Option<u16>, AvailError> {
        if !q.ready() || q.avail_ring() == 0 {
            return Err(AvailError::NotReady);
        }
        let Some(slice) = self.slice.filter(|_| self.is_for(q)) else {
            return slow_pop(q, mem);
        };
        let next_avail = q.next_avail();
        let mut off = next_avail.wrapping_sub(self.base.get());
        if off >= self.count.get() {
            if !self.copy_ahead(slice, next_avail)? {
                return Ok(None);
            }
            off = 0;
        }
        let head = self.heads[usize::from(off)].get();
        q.set_next_avail(next_avail.wrapping_add(1));
        Ok(Some(head))
    }

    /// The head `k` entries after `q`'s next one, when it is already copied out of the ring
    /// (no ring access; for a prefetch hint: [`AvailView::pop`] still hands out and checks
    /// every head).
    #[inline]
    #[must_use]
    pub fn copied_ahead(&self, q: &Queue, k: u16) -> Option<u16> {
        let off = q.next_avail().wrapping_sub(self.base.get()).wrapping_add(k);
        (off < self.count.get()).then(|| self.heads[usize::from(off)].get())
    }

    /// Copy up to [`AHEAD`] available entries from ring position `next_avail` on into
    /// `heads` (reading the driver's index first when what was seen is used up); false when
    /// the driver has made nothing more available. Out of line: once per burst, and `pop`
    /// stays small.
    #[inline(never)]
    fn copy_ahead(&self, slice: VolatileSlice<'_>, next_avail: u16) -> Result<bool, AvailError> {
        let mut seen = self.known.get().wrapping_sub(next_avail);
        if seen == 0 || seen > self.size {
            // Drained what was seen (or `next_avail` moved past it): read the index.
            let idx = u16::from_le(
                slice
                    .load::<u16>(2, Ordering::Acquire)
                    .map_err(|_| AvailError::OutsideMemory)?,
            );
            let ahead = idx.wrapping_sub(next_avail);
            if ahead > self.size {
                return Err(AvailError::IndexJump);
            }
            if ahead == 0 {
                return Ok(false);
            }
            self.known.set(idx);
            seen = ahead;
        }
        // 0 < `seen` <= `size` here, so `size` > 0. The entries are read after the acquire
        // load of an index that covers them; the slots lie inside the slice (checked again
        // by `subslice`). At most two pieces: up to the ring's end, then from its start.
        let n = usize::from(seen).min(AHEAD);
        let size = usize::from(self.size);
        let slot = usize::from(next_avail % self.size);
        let first = n.min(size - slot);
        let mut raw = [0u8; 2 * AHEAD];
        let pieces = [(slot, 0..first), (0, first..n)];
        for (at, range) in pieces {
            if range.is_empty() {
                continue;
            }
            // A byte copy (one memcpy); a copy of u16 elements goes one by one.
            slice
                .subslice(AVAIL_HDR_LEN + 2 * at, 2 * range.len())
                .map_err(|_| AvailError::OutsideMemory)?
                .copy_to(&mut raw[2 * range.start..2 * range.end]);
        }
        for (cell, h) in self.heads.iter().zip(raw[..2 * n].chunks_exact(2)) {
            cell.set(u16::from_le_bytes([h[0], h[1]]));
        }
        self.base.set(next_avail);
        // `n` <= AHEAD, which fits a u16.
        self.count.set(u16::try_from(n).unwrap_or(0));
        Ok(n > 0)
    }
}

/// virtio-queue's iterator, for a ring that spans regions (or a view made for another ring).
fn slow_pop(q: &mut Queue, mem: &GuestMemoryMmap) -> Result<Option<u16>, AvailError> {
    let mut it = q.iter(mem).map_err(|e| match e {
        virtio_queue::Error::InvalidAvailRingIndex => AvailError::IndexJump,
        virtio_queue::Error::QueueNotReady => AvailError::NotReady,
        _ => AvailError::OutsideMemory,
    })?;
    Ok(it.next().map(|c| c.head_index()))
}

#[cfg(test)]
mod tests;
