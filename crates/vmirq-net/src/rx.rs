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

use crate::virtio::{rx_hdr, HDR_LEN};
use std::sync::atomic::{fence, Ordering};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::GuestMemoryMmap;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory};
use vmirq_vhost::chain::{walk_chain, DescTable};

/// What happened to a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxOutcome {
    /// Written into this many buffers.
    Delivered(u16),
    /// Not enough buffers available now; nothing consumed.
    NoRoom,
    /// Larger than the receive buffers can ever hold; nothing consumed.
    TooBig,
    /// A receive chain broke a rule; the chains taken were returned unused.
    BadChain,
    /// The available ring cannot be read (index jump or outside memory): the queue is broken.
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
}

/// Write `frame` into `q`. `mrg_rxbuf`: whether MRG_RXBUF was negotiated.
pub fn deliver(
    q: &mut Queue,
    mem: &GuestMemoryMmap,
    frame: &[u8],
    mrg_rxbuf: bool,
    s: &mut RxScratch,
) -> RxOutcome {
    s.segs.clear();
    s.heads.clear();
    let need = u64::try_from(HDR_LEN + frame.len()).unwrap_or(u64::MAX);
    let start = q.next_avail();
    let mut room = 0u64;
    let max_chains = usize::from(q.size()).min(usize::from(u16::MAX));
    while room < need {
        if (!mrg_rxbuf && !s.heads.is_empty()) || s.heads.len() >= max_chains {
            q.set_next_avail(start);
            return RxOutcome::TooBig;
        }
        let chain = match q.iter(mem) {
            Ok(mut it) => it.next(),
            Err(_) => return RxOutcome::Broken,
        };
        let Some(chain) = chain else {
            q.set_next_avail(start);
            return RxOutcome::NoRoom;
        };
        let index = s.heads.len();
        let head = chain.head_index();
        s.heads.push(head);
        let mut chain_room = 0u64;
        let table = DescTable {
            addr: GuestAddress(q.desc_table()),
            size: q.size(),
            indirect: false,
        };
        let mut bad = walk_chain(mem, table, head, &mut s.descs).is_err();
        for d in &s.descs {
            if bad || !d.is_write_only() {
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
            return_unused(q, mem, &s.heads);
            return RxOutcome::BadChain;
        }
        room += chain_room;
    }
    let n = u16::try_from(s.heads.len()).unwrap_or(u16::MAX);
    let hdr = rx_hdr(n);
    s.used.clear();
    s.used.resize(s.heads.len(), 0);
    let mut src = Cursor {
        parts: [&hdr[..], frame],
        part: 0,
        off: 0,
    };
    for seg in &s.segs {
        let mut at = seg.addr;
        let mut left = seg.len as usize;
        while left > 0 {
            let Some(piece) = src.next_piece(left) else {
                break;
            };
            if mem.write_slice(piece, at).is_err() {
                return_unused(q, mem, &s.heads);
                return RxOutcome::BadChain;
            }
            at = at.unchecked_add(piece.len() as u64);
            left -= piece.len();
            s.used[seg.chain] += u32::try_from(piece.len()).unwrap_or(u32::MAX);
        }
    }
    if publish_used(q, mem, &s.heads, &s.used).is_err() {
        return RxOutcome::Broken;
    }
    RxOutcome::Delivered(n)
}

/// Put `heads` (with `lens`) in the used ring and publish them with one index store, so
/// that the driver never sees the first buffer of a merged packet without the rest
/// (virtio-queue's `add_used` publishes each entry on its own). Notification decisions for
/// a queue filled this way use [`UsedWindow`], not the queue's own `needs_notification`.
///
/// # Errors
/// The used ring lies outside guest memory.
pub fn publish_used<M: GuestMemory>(
    q: &mut Queue,
    mem: &M,
    heads: &[u16],
    lens: &[u32],
) -> Result<(), vm_memory::GuestMemoryError> {
    let size = q.size().max(1);
    let ring = GuestAddress(q.used_ring());
    let mut next = q.next_used();
    for (&head, &len) in heads.iter().zip(lens) {
        let slot = u64::from(next % size);
        let mut elem = [0u8; 8];
        elem[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        elem[4..].copy_from_slice(&len.to_le_bytes());
        let at = ring
            .checked_add(4 + slot * 8)
            .ok_or(vm_memory::GuestMemoryError::InvalidGuestAddress(ring))?;
        mem.write_slice(&elem, at)?;
        next = next.wrapping_add(1);
    }
    q.set_next_used(next);
    let idx = ring
        .checked_add(2)
        .ok_or(vm_memory::GuestMemoryError::InvalidGuestAddress(ring))?;
    mem.store(next.to_le(), idx, Ordering::Release)
}

/// Ask the driver to kick when it adds receive buffers beyond those available now (the
/// device waits for room). With EVENT_IDX `avail_event` is set to the current available
/// index: the queue's own `enable_notification` sets it to `next_avail`, which lies behind
/// buffers that are available but too few, so the driver's next refill would not kick
/// (§2.7.10: it kicks only when its new index passes `avail_event`). Without EVENT_IDX the
/// device never sets VIRTQ_USED_F_NO_NOTIFY on a receive queue, so the driver always kicks.
/// Returns true when buffers were added while arming (look again instead of waiting).
///
/// # Errors
/// The rings lie outside guest memory.
pub fn arm_refill_kick<M: GuestMemory>(
    q: &Queue,
    mem: &M,
) -> Result<bool, vm_memory::GuestMemoryError> {
    if !q.event_idx_enabled() {
        return Ok(false);
    }
    let avail = GuestAddress(q.avail_ring());
    let used = GuestAddress(q.used_ring());
    let bad = vm_memory::GuestMemoryError::InvalidGuestAddress(used);
    let idx_at = avail.checked_add(2).ok_or(bad)?;
    let event_at = used
        .checked_add(4 + 8 * u64::from(q.size()))
        .ok_or(vm_memory::GuestMemoryError::InvalidGuestAddress(used))?;
    let now: u16 = u16::from_le(mem.load(idx_at, Ordering::Acquire)?);
    mem.store(now.to_le(), event_at, Ordering::Release)?;
    fence(Ordering::SeqCst);
    let again: u16 = u16::from_le(mem.load(idx_at, Ordering::Acquire)?);
    Ok(again != now)
}

/// When the driver wants a used-buffer notification for a queue filled by
/// [`publish_used`] (virtio 1.2 §2.7.7.2, §2.7.10): with EVENT_IDX, when `used_event` lies
/// in the window of entries published since the last decision; without, unless the
/// driver set VIRTQ_AVAIL_F_NO_INTERRUPT.
#[derive(Debug, Default)]
pub struct UsedWindow {
    /// `next_used` at the last decision.
    old: u16,
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
    }
}

/// Complete every chain in `heads` with length 0.
fn return_unused<M: GuestMemory>(q: &mut Queue, mem: &M, heads: &[u16]) {
    let zeros = vec![0u32; heads.len()];
    let _ = publish_used(q, mem, heads, &zeros);
}

/// The net header followed by the frame, handed out in pieces.
struct Cursor<'a> {
    parts: [&'a [u8]; 2],
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
