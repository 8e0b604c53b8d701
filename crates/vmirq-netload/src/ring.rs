//! The driver's half of a virtio split virtqueue (virtio 1.x §2.7): it owns the descriptor
//! table and the available ring, reads the used ring the device writes, and decides kicks and
//! interrupt suppression the way Linux's `virtio_ring.c` does (`kick_prepare`,
//! `enable_cb_prepare`, `enable_cb_delayed`, `disable_cb`).
//!
//! Every buffer is one descriptor (virtio 1.x lets a net header and its frame share one
//! buffer), so a descriptor id names a buffer. What the device writes is checked like a
//! careful guest would: a used index that runs ahead of what is in flight breaks the ring
//! (fatal); a used id outside the table or not in flight is a fault (counted, skipped). The
//! used length is returned with the descriptor's own length, for the caller to judge.

use crate::memory::{GuestMemory, MemoryError};
use std::sync::atomic::{fence, Ordering};

/// `VIRTQ_DESC_F_WRITE`: the device writes this buffer.
pub const DESC_F_WRITE: u16 = 2;
/// `VIRTQ_AVAIL_F_NO_INTERRUPT`: the driver asks for no used-buffer notifications.
pub const AVAIL_F_NO_INTERRUPT: u16 = 1;
/// `VIRTQ_USED_F_NO_NOTIFY`: the device asks for no available-buffer notifications.
pub const USED_F_NO_NOTIFY: u16 = 1;
/// Largest split queue (virtio 1.x §2.7).
pub const QUEUE_SIZE_MAX: u16 = 32768;

/// Errors of the ring: memory that does not hold it, or what the device did wrong.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The ring does not fit the memory (a bug of the caller's layout).
    #[error("ring memory")]
    Memory(#[from] MemoryError),
    /// The queue size is not a power of two in 1..=32768, or the base is not page-aligned.
    #[error("invalid ring layout: size {size}, base {base:#x}")]
    Layout {
        /// Requested queue size.
        size: u16,
        /// Requested base address.
        base: u64,
    },
    /// The device broke the ring protocol.
    #[error("device fault: {0}")]
    Fault(Fault),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, RingError>;

/// What a device did wrong in the used ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The used index moved past what the driver has in flight: the ring is unusable.
    #[error("used index {used_idx} is {pending} ahead of {last_used} with {in_flight} in flight")]
    UsedIdxJump {
        /// The driver's next used slot.
        last_used: u16,
        /// The device's used index.
        used_idx: u16,
        /// Entries the device claims.
        pending: u16,
        /// Descriptors actually in flight.
        in_flight: u16,
    },
    /// A used element names a descriptor id outside the table.
    #[error("used id {id} is outside the ring")]
    UsedIdOutOfRange {
        /// The id.
        id: u32,
    },
    /// A used element names a descriptor the driver had not made available.
    #[error("used id {id} is not in flight")]
    UsedIdNotInFlight {
        /// The id.
        id: u16,
    },
    /// An earlier fatal fault left the ring unusable.
    #[error("ring is broken")]
    Broken,
}

impl Fault {
    /// True when the ring cannot be used any more.
    #[must_use]
    pub const fn is_fatal(&self) -> bool {
        matches!(self, Self::UsedIdxJump { .. } | Self::Broken)
    }
}

/// Where a split ring's three parts are in guest memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    /// Queue size (a power of two).
    pub size: u16,
    /// GPA of the descriptor table (16 bytes per entry).
    pub desc: u64,
    /// GPA of the available ring (flags, idx, ring[size], used_event).
    pub avail: u64,
    /// GPA of the used ring (flags, idx, ring[size] of (id, len), avail_event).
    pub used: u64,
}

impl RingLayout {
    /// Lay a ring of `size` entries out from `base` (4 KiB-aligned); the used ring starts on
    /// its own page so that device writes and driver writes do not share cache lines.
    ///
    /// # Errors
    /// [`RingError::Layout`] for a size that is not a power of two in 1..=32768 or a base
    /// that is not 4 KiB-aligned.
    pub fn new(size: u16, base: u64) -> Result<Self> {
        if size == 0 || size > QUEUE_SIZE_MAX || !size.is_power_of_two() || base % 4096 != 0 {
            return Err(RingError::Layout { size, base });
        }
        let n = u64::from(size);
        let avail = base + 16 * n;
        let used = (avail + 6 + 2 * n).next_multiple_of(4096);
        Ok(Self {
            size,
            desc: base,
            avail,
            used,
        })
    }

    /// First byte after the ring, rounded up to a page.
    #[must_use]
    pub fn end(&self) -> u64 {
        (self.used + 6 + 8 * u64::from(self.size)).next_multiple_of(4096)
    }

    fn avail_idx(&self) -> u64 {
        self.avail + 2
    }

    fn avail_slot(&self, slot: u16) -> u64 {
        self.avail + 4 + 2 * u64::from(slot)
    }

    fn used_event(&self) -> u64 {
        self.avail + 4 + 2 * u64::from(self.size)
    }

    fn used_idx(&self) -> u64 {
        self.used + 2
    }

    fn used_slot(&self, slot: u16) -> u64 {
        self.used + 4 + 8 * u64::from(slot)
    }

    fn avail_event(&self) -> u64 {
        self.used + 4 + 8 * u64::from(self.size)
    }
}

/// `vring_need_event`: true if moving an index from `old` to `new` passes `event`
/// (virtio 1.x §2.7.7.2 / §2.7.10.2, in wrapping 16-bit arithmetic).
#[must_use]
pub const fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// One buffer the device has finished with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    /// Descriptor id.
    pub id: u16,
    /// Bytes the device says it wrote.
    pub len: u32,
    /// Length of the descriptor the driver made available.
    pub desc_len: u32,
}

/// Interrupt state the driver has asked the device for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Callbacks {
    Enabled,
    Disabled,
}

/// Driver-side state of one split ring.
#[derive(Debug)]
pub struct DriverRing {
    layout: RingLayout,
    event_idx: bool,
    free: Vec<u16>,
    /// Descriptor length of each in-flight id (`None` when free).
    in_flight: Vec<Option<u32>>,
    in_flight_count: u16,
    avail_idx: u16,
    kicked_idx: u16,
    last_used: u16,
    callbacks: Callbacks,
    broken: bool,
}

impl DriverRing {
    /// A ring at `layout` in `mem`, zeroed, with every descriptor free and callbacks enabled.
    ///
    /// # Errors
    /// [`RingError::Memory`] when the layout does not fit `mem`.
    pub fn new(mem: &GuestMemory, layout: RingLayout, event_idx: bool) -> Result<Self> {
        let bytes = layout.end() - layout.desc;
        let zeros = vec![0u8; usize::try_from(bytes).unwrap_or(usize::MAX)];
        mem.write(layout.desc, &zeros)?;
        let size = usize::from(layout.size);
        Ok(Self {
            layout,
            event_idx,
            free: (0..layout.size).rev().collect(),
            in_flight: vec![None; size],
            in_flight_count: 0,
            avail_idx: 0,
            kicked_idx: 0,
            last_used: 0,
            callbacks: Callbacks::Enabled,
            broken: false,
        })
    }

    /// The layout (for `SET_VRING_ADDR`).
    #[must_use]
    pub const fn layout(&self) -> RingLayout {
        self.layout
    }

    /// Descriptors free to add.
    #[must_use]
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Descriptors the device holds.
    #[must_use]
    pub const fn in_flight(&self) -> u16 {
        self.in_flight_count
    }

    /// The driver's next used slot (for tests and diagnostics).
    #[must_use]
    pub const fn last_used(&self) -> u16 {
        self.last_used
    }

    /// Make one buffer available: `fill(id)` prepares buffer `id` and returns its guest
    /// address and length. Not visible to the device until [`Self::publish`]. `None` when
    /// the ring is full.
    ///
    /// # Errors
    /// [`RingError::Memory`] when the descriptor does not fit (a layout bug), or an error of
    /// `fill`.
    pub fn add_with<E: From<RingError>>(
        &mut self,
        mem: &GuestMemory,
        writable: bool,
        fill: impl FnOnce(u16) -> std::result::Result<(u64, u32), E>,
    ) -> std::result::Result<Option<u16>, E> {
        let Some(id) = self.free.pop() else {
            return Ok(None);
        };
        let (addr, len) = match fill(id) {
            Ok(v) => v,
            Err(e) => {
                self.free.push(id);
                return Err(e);
            }
        };
        let mut desc = [0u8; 16];
        desc[0..8].copy_from_slice(&addr.to_le_bytes());
        desc[8..12].copy_from_slice(&len.to_le_bytes());
        let flags = if writable { DESC_F_WRITE } else { 0 };
        desc[12..14].copy_from_slice(&flags.to_le_bytes());
        let write = mem
            .write(self.layout.desc + 16 * u64::from(id), &desc)
            .and_then(|()| {
                let slot = self.avail_idx & (self.layout.size - 1);
                mem.atomic_u16(self.layout.avail_slot(slot))
                    .map(|a| a.store(id, Ordering::Relaxed))
            });
        if let Err(e) = write {
            self.free.push(id);
            return Err(RingError::from(e).into());
        }
        self.in_flight[usize::from(id)] = Some(len);
        self.in_flight_count += 1;
        self.avail_idx = self.avail_idx.wrapping_add(1);
        Ok(Some(id))
    }

    /// Publish everything added so far (release-store of the available index) and say
    /// whether the device wants a kick for it (`virtqueue_kick_prepare`).
    ///
    /// # Errors
    /// [`RingError::Memory`] (a layout bug).
    pub fn publish(&mut self, mem: &GuestMemory) -> Result<bool> {
        if self.avail_idx == self.kicked_idx {
            return Ok(false);
        }
        mem.atomic_u16(self.layout.avail_idx())?
            .store(self.avail_idx, Ordering::Release);
        // The device reads our index, then its suppression field; we write our index, then
        // read its field. A full fence on both sides means one of us sees the other.
        fence(Ordering::SeqCst);
        let old = self.kicked_idx;
        self.kicked_idx = self.avail_idx;
        if self.event_idx {
            let event = mem
                .atomic_u16(self.layout.avail_event())?
                .load(Ordering::Relaxed);
            Ok(need_event(event, self.avail_idx, old))
        } else {
            let flags = mem.atomic_u16(self.layout.used)?.load(Ordering::Relaxed);
            Ok(flags & USED_F_NO_NOTIFY == 0)
        }
    }

    /// Take the next used element, if the device published one.
    ///
    /// # Errors
    /// [`RingError::Fault`]: fatal ones ([`Fault::is_fatal`]) break the ring; after others
    /// the entry is skipped and the next call continues.
    pub fn pop_used(&mut self, mem: &GuestMemory) -> Result<Option<Used>> {
        if self.broken {
            return Err(RingError::Fault(Fault::Broken));
        }
        let used_idx = mem
            .atomic_u16(self.layout.used_idx())?
            .load(Ordering::Acquire);
        let pending = used_idx.wrapping_sub(self.last_used);
        if pending == 0 {
            return Ok(None);
        }
        if pending > self.in_flight_count {
            self.broken = true;
            return Err(RingError::Fault(Fault::UsedIdxJump {
                last_used: self.last_used,
                used_idx,
                pending,
                in_flight: self.in_flight_count,
            }));
        }
        let at = self
            .layout
            .used_slot(self.last_used & (self.layout.size - 1));
        let raw_id = mem.atomic_u32(at)?.load(Ordering::Relaxed);
        let len = mem.atomic_u32(at + 4)?.load(Ordering::Relaxed);
        self.last_used = self.last_used.wrapping_add(1);
        let id = match u16::try_from(raw_id) {
            Ok(id) if id < self.layout.size => id,
            _ => return Err(RingError::Fault(Fault::UsedIdOutOfRange { id: raw_id })),
        };
        let Some(desc_len) = self.in_flight[usize::from(id)].take() else {
            return Err(RingError::Fault(Fault::UsedIdNotInFlight { id }));
        };
        self.in_flight_count -= 1;
        self.free.push(id);
        Ok(Some(Used { id, len, desc_len }))
    }

    /// True if the device has published used elements not yet popped.
    ///
    /// # Errors
    /// [`RingError::Memory`] (a layout bug).
    pub fn has_used(&self, mem: &GuestMemory) -> Result<bool> {
        let used_idx = mem
            .atomic_u16(self.layout.used_idx())?
            .load(Ordering::Acquire);
        Ok(used_idx != self.last_used)
    }

    /// Ask the device for no used-buffer notifications (`virtqueue_disable_cb`). With
    /// EVENT_IDX the event index is moved one behind what was consumed, so the device would
    /// have to go all the way round the 16-bit index to pass it.
    ///
    /// # Errors
    /// [`RingError::Memory`] (a layout bug).
    pub fn disable_cb(&mut self, mem: &GuestMemory) -> Result<()> {
        if self.callbacks == Callbacks::Disabled {
            return Ok(());
        }
        self.callbacks = Callbacks::Disabled;
        if self.event_idx {
            mem.atomic_u16(self.layout.used_event())?
                .store(self.last_used.wrapping_sub(1), Ordering::Relaxed);
        } else {
            mem.atomic_u16(self.layout.avail)?
                .store(AVAIL_F_NO_INTERRUPT, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Ask for a notification on the next used element and return true if none is pending,
    /// i.e. the caller may sleep on the call eventfd without losing a wakeup
    /// (`virtqueue_enable_cb_prepare` + `virtqueue_poll`).
    ///
    /// # Errors
    /// [`RingError::Memory`] (a layout bug).
    pub fn enable_cb(&mut self, mem: &GuestMemory) -> Result<bool> {
        self.arm(mem, self.last_used)?;
        Ok(!self.has_used(mem)?)
    }

    /// Ask for a notification only once about three quarters of what is in flight has been
    /// used (`virtqueue_enable_cb_delayed`, for TX completions). Returns true if that point
    /// has not been passed yet (sleeping is safe).
    ///
    /// # Errors
    /// [`RingError::Memory`] (a layout bug).
    pub fn enable_cb_delayed(&mut self, mem: &GuestMemory) -> Result<bool> {
        let bufs = u16::try_from(u32::from(self.in_flight_count) * 3 / 4).unwrap_or(u16::MAX);
        self.arm(mem, self.last_used.wrapping_add(bufs))?;
        let used_idx = mem
            .atomic_u16(self.layout.used_idx())?
            .load(Ordering::Acquire);
        Ok(used_idx.wrapping_sub(self.last_used) <= bufs && !self.broken)
    }

    fn arm(&mut self, mem: &GuestMemory, event: u16) -> Result<()> {
        self.callbacks = Callbacks::Enabled;
        if self.event_idx {
            mem.atomic_u16(self.layout.used_event())?
                .store(event, Ordering::Relaxed);
        } else {
            mem.atomic_u16(self.layout.avail)?
                .store(0, Ordering::Relaxed);
        }
        // Our event write must be visible before we re-read the used index (the device
        // writes its index, fences, then reads our event).
        fence(Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
