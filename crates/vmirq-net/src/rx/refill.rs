//! Whether a receive queue's driver kicks when it adds buffers (virtio 1.2 §2.7.7.1,
//! §2.7.10). The device needs those kicks only while a source waits for room in the queue
//! (the fabric's `blocked` sets); otherwise each one costs the driver a notification (an
//! eventfd write for virtio-user, a VM exit for a guest) and the device a worker wakeup for
//! nothing. [`arm_refill_kick`] asks for the next one; [`quiet_refill_kicks`] says none is
//! needed.
//!
//! With EVENT_IDX the kicks are quiet by themselves: `avail_event` stays where the last arm
//! left it, so the driver kicks once more when its index passes that value and then not
//! for another 2^16 buffers. Without EVENT_IDX the driver kicks on every refill unless the
//! used ring's flags say VIRTQ_USED_F_NO_NOTIFY, which DPDK's virtio PMD (virtio-user) reads
//! before every kick.

use std::sync::atomic::{fence, Ordering};
use virtio_queue::{Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory, GuestMemoryError};

/// VIRTQ_USED_F_NO_NOTIFY (virtio 1.2 §2.7.8).
const USED_F_NO_NOTIFY: u16 = 1;

/// Ask the driver to kick when it adds receive buffers beyond those available now (the
/// device waits for room). With EVENT_IDX `avail_event` is set to the current available
/// index: the queue's own `enable_notification` sets it to `next_avail`, which lies behind
/// buffers that are available but too few, so the driver's next refill would not kick
/// (§2.7.10: it kicks only when its new index passes `avail_event`). Without EVENT_IDX
/// VIRTQ_USED_F_NO_NOTIFY is cleared (both data paths set it after delivering into a queue
/// no source waits on). Returns true when buffers were added while arming (look again instead
/// of waiting).
///
/// # Errors
/// The rings lie outside guest memory.
pub fn arm_refill_kick<M: GuestMemory>(q: &Queue, mem: &M) -> Result<bool, GuestMemoryError> {
    let avail = GuestAddress(q.avail_ring());
    let used = GuestAddress(q.used_ring());
    let bad = GuestMemoryError::InvalidGuestAddress(used);
    let idx_at = avail.checked_add(2).ok_or(bad)?;
    let now: u16 = u16::from_le(mem.load(idx_at, Ordering::Acquire)?);
    if q.event_idx_enabled() {
        let event_at = used
            .checked_add(4 + 8 * u64::from(q.size()))
            .ok_or(GuestMemoryError::InvalidGuestAddress(used))?;
        mem.store(now.to_le(), event_at, Ordering::Release)?;
    } else {
        mem.store(0u16.to_le(), used, Ordering::Release)?;
    }
    // The driver writes its index, then reads our field; we write our field, then read its
    // index: with a full fence on both sides one of us sees the other.
    fence(Ordering::SeqCst);
    let again: u16 = u16::from_le(mem.load(idx_at, Ordering::Acquire)?);
    Ok(again != now)
}

/// Tell the driver of a receive queue that no source waits for room in it: without
/// EVENT_IDX set VIRTQ_USED_F_NO_NOTIFY (written only when it is not set yet); with it do
/// nothing (see the module docs). The caller holds the queue's vring lock and has checked
/// that no source is blocked on it, so no [`arm_refill_kick`] can be undone.
///
/// # Errors
/// The used ring lies outside guest memory.
pub fn quiet_refill_kicks<M: GuestMemory>(q: &Queue, mem: &M) -> Result<(), GuestMemoryError> {
    if q.event_idx_enabled() {
        return Ok(());
    }
    let used = GuestAddress(q.used_ring());
    let flags: u16 = u16::from_le(mem.load(used, Ordering::Relaxed)?);
    if flags & USED_F_NO_NOTIFY == 0 {
        mem.store((flags | USED_F_NO_NOTIFY).to_le(), used, Ordering::Relaxed)?;
    }
    Ok(())
}
