//! Walk a split-virtqueue descriptor chain under the ring rules of virtio 1.2 §2.7.5
//! (descriptor table) and §2.7.5.3 (indirect descriptors), naming the rule a chain breaks.
//!
//! A chain that breaks one of these rules has no trustworthy shape: its end (and so where
//! its answer goes) is unknown, or the driver wrote descriptors it promised not to. Such a
//! chain is never completed; the device stops the queue until the frontend resets it (as
//! vmirq-blk's `engine::QueueEngine` does). virtio-queue's own chain iterator stops
//! silently on the same inputs, which cannot be told apart from a chain that really ended,
//! so the walk is done here instead, reading descriptors straight from guest memory.
//!
//! Rules (a chain is a run of descriptors from `head`, following NEXT):
//! - the head and every `next` index lie inside the table they index;
//! - a chain has no more descriptors than its table has entries (more means a loop), and in
//!   total no more than the queue size (at least [`CHAIN_MAX`]);
//! - INDIRECT is only used when VIRTIO_F_RING_INDIRECT_DESC was negotiated (§2.7.5.3.1: the
//!   driver MUST NOT set it otherwise);
//! - a descriptor with INDIRECT has no NEXT, a non-zero length that is a multiple of 16,
//!   at most queue-size entries, lies inside guest memory, and is not itself inside an
//!   indirect table (zero or more direct descriptors followed by one indirect one is allowed,
//!   as §2.7.5.3.2 requires of the device);
//! - only for [`walk`] (requests answered with a status byte: virtio-blk requests, virtio-net
//!   control commands' ack): the chain's last descriptor is device-writable, not empty, and
//!   its last byte (the status byte) lies inside guest memory. [`walk_chain`] checks the
//!   ring rules alone (e.g. virtio-net TX and RX chains, whose direction rules the device
//!   checks itself).

use std::sync::atomic::Ordering;
use virtio_queue::desc::split::Descriptor;
use vm_memory::{
    Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, VolatileMemory,
    VolatileSlice,
};

/// `VRING_DESC_F_NEXT`.
const F_NEXT: u16 = 1;
/// `VRING_DESC_F_INDIRECT`.
const F_INDIRECT: u16 = 4;
/// Size of one split descriptor in bytes.
const DESC_LEN: u32 = 16;

/// A ring rule a chain broke. The queue stops: such a chain cannot be completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// The available ring names a head outside the descriptor table.
    #[error("head index {head} is outside the {size}-entry descriptor table")]
    HeadOutOfRange {
        /// The head index.
        head: u16,
        /// Entries in the table.
        size: u16,
    },
    /// A descriptor of the queue's table cannot be read (the table is outside guest memory).
    #[error("descriptor table entry {index} is outside guest memory")]
    TableOutsideMemory {
        /// Index of the unreadable entry.
        index: u16,
    },
    /// A `next` index points outside the descriptor table.
    #[error("next index {next} is outside the {size}-entry descriptor table")]
    NextOutOfRange {
        /// The `next` value.
        next: u16,
        /// Entries in the table.
        size: u16,
    },
    /// A `next` index inside an indirect table points outside that table.
    #[error("next index {next} is outside the {entries}-entry indirect table")]
    IndirectNextOutOfRange {
        /// The `next` value.
        next: u16,
        /// Entries in the indirect table.
        entries: u32,
    },
    /// More descriptors than the table holds: the chain revisits one.
    #[error("descriptor loop: more than {entries} descriptors in a {entries}-entry table")]
    Loop {
        /// Entries in the table the loop is in.
        entries: u32,
    },
    /// Direct and indirect descriptors together exceed [`chain_limit`].
    #[error("chain longer than {limit} descriptors")]
    TooLong {
        /// The limit: the queue size, at least [`CHAIN_MAX`].
        limit: u32,
    },
    /// INDIRECT in a chain although VIRTIO_F_RING_INDIRECT_DESC was not negotiated.
    #[error("INDIRECT descriptor although VIRTIO_F_RING_INDIRECT_DESC was not negotiated")]
    IndirectNotNegotiated,
    /// INDIRECT and NEXT set in the same descriptor.
    #[error("descriptor has both INDIRECT and NEXT")]
    IndirectWithNext,
    /// INDIRECT inside an indirect table.
    #[error("nested indirect descriptor (INDIRECT inside an indirect table)")]
    NestedIndirect,
    /// An indirect table of length 0.
    #[error("indirect table of length 0")]
    IndirectEmpty,
    /// An indirect table whose length is not a whole number of descriptors.
    #[error("indirect table length {len} is not a multiple of 16")]
    IndirectLenUnaligned {
        /// The length in bytes.
        len: u32,
    },
    /// An indirect table with more entries than [`chain_limit`].
    #[error("indirect table of {entries} entries is longer than {limit} descriptors")]
    IndirectTooLong {
        /// Entries in the table.
        entries: u32,
        /// The limit: the queue size, at least [`CHAIN_MAX`].
        limit: u32,
    },
    /// An indirect table (partly) outside guest memory.
    #[error("indirect table at {addr:#x} ({len} bytes) is outside guest memory")]
    IndirectOutsideMemory {
        /// Table address.
        addr: u64,
        /// Table length in bytes.
        len: u32,
    },
    /// The last descriptor is device-readable.
    #[error("status byte in a device-readable descriptor")]
    StatusNotWritable,
    /// The last descriptor has length 0.
    #[error("status byte in a descriptor of length 0")]
    StatusEmpty,
    /// The status byte is outside guest memory.
    #[error("status byte at {addr:#x} is outside guest memory")]
    StatusOutsideMemory {
        /// Address of the status byte.
        addr: u64,
    },
}

/// The fewest descriptors a chain (direct and indirect together) may have before it is refused,
/// whatever the queue size: 1024, QEMU's and libvhost-user's `VIRTQUEUE_MAX_SIZE` (and
/// vmirq-blk's request parser's `MAX_DESCRIPTORS`).
///
/// The virtio spec bounds a chain by the queue size, but Linux's virtio_blk sizes requests by
/// the device's `seg_max`, not by the queue size the frontend chose: QEMU's vhost-user-blk-pci
/// sets up 128-entry queues by default while this device advertises `seg_max` from its own
/// queue size (254 for 256), so a Linux guest puts indirect tables of up to 256 entries on a
/// 128-entry queue (a 237-entry table was seen). Refusing those would break the queue of a
/// well-behaved guest; QEMU accepts them too.
pub const CHAIN_MAX: u32 = 1024;

/// Most descriptors a chain on a queue of `queue_size` entries may have: the queue size, at
/// least [`CHAIN_MAX`].
#[must_use]
pub fn chain_limit(queue_size: u16) -> u32 {
    u32::from(queue_size).max(CHAIN_MAX)
}

/// Where a queue's descriptor table is and how many entries it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescTable {
    /// Guest address of entry 0.
    pub addr: GuestAddress,
    /// Entries (the queue size).
    pub size: u16,
    /// VIRTIO_F_RING_INDIRECT_DESC was negotiated (INDIRECT descriptors are allowed).
    pub indirect: bool,
}

/// A queue's descriptor table translated to host memory once, for many walks (a burst of
/// chains under one vring lock, whose table cannot move meanwhile): each descriptor is then
/// read by index from one host slice (an offset bounds check) instead of through a guest
/// region lookup. A table that does not lie inside one mapped region keeps the per-descriptor
/// path, which names the entry outside memory. The reads stay volatile (the driver may write
/// the table concurrently; each descriptor is copied out once and only the copy is checked
/// and used).
#[derive(Clone, Copy)]
pub struct TableView<'a> {
    table: DescTable,
    slice: Option<VolatileSlice<'a>>,
}

impl<'a> TableView<'a> {
    /// Translate `table` in `mem`.
    #[must_use]
    pub fn new(mem: &'a GuestMemoryMmap, table: DescTable) -> Self {
        let len = usize::from(table.size) * DESC_LEN as usize;
        Self {
            table,
            slice: mem.get_slice(table.addr, len).ok(),
        }
    }

    /// The table viewed.
    #[must_use]
    pub fn table(&self) -> DescTable {
        self.table
    }

    /// Whether the table was translated (lies inside one region).
    #[must_use]
    pub fn is_mapped(&self) -> bool {
        self.slice.is_some()
    }

    /// Where descriptor `head` lies in host memory, when the table is translated and the
    /// head inside it: a hint for a prefetch only.
    #[inline]
    #[must_use]
    pub fn entry_hint(&self, head: u16) -> Option<*const u8> {
        if head >= self.table.size {
            return None;
        }
        let offset = usize::from(head) * DESC_LEN as usize;
        Some(self.slice?.ptr_guard().as_ptr().wrapping_add(offset))
    }

    /// The buffer address descriptor `head` names, read with no check of the descriptor
    /// (its flags, its length), when the table is translated, the head inside it and the
    /// entry 8-byte aligned: a hint for a prefetch only ([`TableView::single`] and the walk
    /// read and check the descriptor before anything uses it).
    #[inline]
    #[must_use]
    pub fn addr_hint(&self, head: u16) -> Option<u64> {
        if head >= self.table.size {
            return None;
        }
        let offset = usize::from(head) * DESC_LEN as usize;
        let addr = self.slice?.load::<u64>(offset, Ordering::Relaxed).ok()?;
        Some(u64::from_le(addr))
    }

    /// The chain at `head` when it is one direct descriptor (neither NEXT nor INDIRECT
    /// set) of a translated table: the usual shape of a network frame's buffer. It keeps
    /// every ring rule with no walk: the head lies inside the table (checked here), one
    /// descriptor is no loop and within any chain limit, and INDIRECT is not set. `None`
    /// for every other chain (and for a table not translated): the caller walks it in
    /// full, which reads the entry again and names any rule broken.
    #[must_use]
    #[inline]
    pub fn single(&self, head: u16) -> Option<Descriptor> {
        if head >= self.table.size {
            return None;
        }
        let offset = usize::from(head) * DESC_LEN as usize;
        let d = read_at(self.slice?, offset)?;
        (d.flags() & (F_NEXT | F_INDIRECT) == 0).then_some(d)
    }
}

/// The table the walk is currently in.
#[derive(Clone, Copy)]
struct Cursor<'a> {
    addr: GuestAddress,
    /// The table in host memory, when translated.
    slice: Option<VolatileSlice<'a>>,
    entries: u32,
    indirect: bool,
    /// Descriptors taken from this table so far.
    taken: u32,
}

/// Walk the chain starting at `head` into `out` (cleared first); indirect descriptors are
/// replaced by their table's chain. On success the chain is structurally valid and its last
/// descriptor holds a writable status byte, whose address is returned.
///
/// # Errors
/// The first [`Violation`] found.
pub fn walk(
    mem: &GuestMemoryMmap,
    table: DescTable,
    head: u16,
    out: &mut Vec<Descriptor>,
) -> Result<GuestAddress, Violation> {
    let last = walk_ring(mem, TableView { table, slice: None }, head, out)?;
    status_byte(mem, &last)
}

/// Walk the chain starting at `head` into `out` (cleared first) under the ring rules only;
/// indirect descriptors are replaced by their table's chain. On success the chain is
/// structurally valid and not empty.
///
/// # Errors
/// The first [`Violation`] found.
pub fn walk_chain(
    mem: &GuestMemoryMmap,
    table: DescTable,
    head: u16,
    out: &mut Vec<Descriptor>,
) -> Result<(), Violation> {
    walk_ring(mem, TableView { table, slice: None }, head, out).map(|_| ())
}

/// [`walk_chain`] over a table translated once ([`TableView`]); the same rules, the same
/// errors.
///
/// # Errors
/// The first [`Violation`] found.
#[inline]
pub fn walk_chain_in(
    mem: &GuestMemoryMmap,
    view: &TableView<'_>,
    head: u16,
    out: &mut Vec<Descriptor>,
) -> Result<(), Violation> {
    if let Some(d) = view.single(head) {
        out.clear();
        out.push(d);
        return Ok(());
    }
    walk_ring(mem, *view, head, out).map(|_| ())
}

/// The ring rules; returns the chain's last descriptor.
fn walk_ring(
    mem: &GuestMemoryMmap,
    view: TableView<'_>,
    head: u16,
    out: &mut Vec<Descriptor>,
) -> Result<Descriptor, Violation> {
    out.clear();
    let table = view.table;
    if head >= table.size {
        return Err(Violation::HeadOutOfRange {
            head,
            size: table.size,
        });
    }
    let mut at = Cursor {
        addr: table.addr,
        slice: view.slice,
        entries: u32::from(table.size),
        indirect: false,
        taken: 0,
    };
    let mut index = head;
    loop {
        let d = read(mem, at, index)?;
        if d.flags() & F_INDIRECT != 0 {
            if !table.indirect {
                return Err(Violation::IndirectNotNegotiated);
            }
            at = enter_indirect(mem, &d, at, table.size)?;
            index = 0;
            continue;
        }
        at.taken += 1;
        if at.taken > at.entries {
            return Err(Violation::Loop {
                entries: at.entries,
            });
        }
        out.push(d);
        let limit = chain_limit(table.size);
        if out.len() > limit as usize {
            return Err(Violation::TooLong { limit });
        }
        if !d.has_next() {
            return Ok(d);
        }
        index = d.next();
        if u32::from(index) >= at.entries {
            return Err(if at.indirect {
                Violation::IndirectNextOutOfRange {
                    next: index,
                    entries: at.entries,
                }
            } else {
                Violation::NextOutOfRange {
                    next: index,
                    size: table.size,
                }
            });
        }
    }
}

/// The descriptor at byte `offset` of a translated table: one volatile read of its 16
/// bytes (a copy; the driver may write the table meanwhile), bounds checked against the
/// slice; any alignment.
#[inline]
fn read_at(slice: VolatileSlice<'_>, offset: usize) -> Option<Descriptor> {
    slice.get_ref::<Descriptor>(offset).ok().map(|r| r.load())
}

/// Read entry `index` of the current table.
fn read(mem: &GuestMemoryMmap, at: Cursor<'_>, index: u16) -> Result<Descriptor, Violation> {
    let offset = u64::from(index) * u64::from(DESC_LEN);
    if let Some(slice) = at.slice {
        // `index` < the table's entries (checked by the caller), and the slice holds them
        // all; the bounds are checked again by `read_at`.
        return usize::try_from(offset)
            .ok()
            .and_then(|o| read_at(slice, o))
            .ok_or(Violation::TableOutsideMemory { index });
    }
    // Indirect tables were checked to lie in memory, so only the queue's table can fail.
    at.addr
        .checked_add(offset)
        .and_then(|a| mem.read_obj::<Descriptor>(a).ok())
        .ok_or(Violation::TableOutsideMemory { index })
}

/// Check an INDIRECT descriptor and return the cursor at the start of its table.
fn enter_indirect<'a>(
    mem: &'a GuestMemoryMmap,
    d: &Descriptor,
    at: Cursor<'a>,
    queue_size: u16,
) -> Result<Cursor<'a>, Violation> {
    if at.indirect {
        return Err(Violation::NestedIndirect);
    }
    if d.has_next() {
        return Err(Violation::IndirectWithNext);
    }
    let len = d.len();
    if len == 0 {
        return Err(Violation::IndirectEmpty);
    }
    if len % DESC_LEN != 0 {
        return Err(Violation::IndirectLenUnaligned { len });
    }
    let entries = len / DESC_LEN;
    let limit = chain_limit(queue_size);
    if entries > limit {
        return Err(Violation::IndirectTooLong { entries, limit });
    }
    // `len` fits in usize on every supported (64-bit) host; refuse rather than truncate.
    // One translation for a table inside one region (read by index then); a table spanning
    // regions is only checked here and read descriptor by descriptor.
    let n = usize::try_from(len).ok();
    let slice = n.and_then(|n| mem.get_slice(d.addr(), n).ok());
    let fits =
        slice.is_some() || n.is_some_and(|n| GuestMemoryBackend::check_range(mem, d.addr(), n));
    if !fits {
        return Err(Violation::IndirectOutsideMemory {
            addr: d.addr().raw_value(),
            len,
        });
    }
    Ok(Cursor {
        addr: d.addr(),
        slice,
        entries,
        indirect: true,
        taken: 0,
    })
}

/// The status byte is the last byte of the last descriptor, which must be device-writable.
fn status_byte(mem: &GuestMemoryMmap, last: &Descriptor) -> Result<GuestAddress, Violation> {
    if !last.is_write_only() {
        return Err(Violation::StatusNotWritable);
    }
    let len = last.len();
    if len == 0 {
        return Err(Violation::StatusEmpty);
    }
    let addr = last.addr().checked_add(u64::from(len - 1));
    match addr {
        Some(a) if GuestMemoryBackend::check_range(mem, a, 1) => Ok(a),
        _ => Err(Violation::StatusOutsideMemory {
            addr: last.addr().raw_value().wrapping_add(u64::from(len - 1)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_queue::desc::RawDescriptor;

    const F_WRITE: u16 = 2;
    const TABLE: DescTable = DescTable {
        addr: GuestAddress(0),
        size: 8,
        indirect: true,
    };

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 16)]).expect("memory")
    }

    fn put(mem: &GuestMemoryMmap, at: u64, addr: u64, len: u32, flags: u16, next: u16) {
        let d = RawDescriptor::from(Descriptor::new(addr, len, flags, next));
        mem.write_obj(d, GuestAddress(at)).expect("write");
    }

    fn walk_from(mem: &GuestMemoryMmap, head: u16) -> Result<usize, Violation> {
        let mut out = Vec::new();
        walk(mem, TABLE, head, &mut out).map(|_| out.len())
    }

    #[test]
    fn a_direct_chain_and_a_direct_then_indirect_chain_are_valid() {
        let m = mem();
        put(&m, 0, 0x1000, 16, F_NEXT, 1);
        put(&m, 16, 0x2000, 1, F_WRITE, 0);
        assert_eq!(walk_from(&m, 0), Ok(2));
        // Entry 2 (direct) -> entry 3 (INDIRECT) -> a 2-entry table at 0x3000.
        put(&m, 32, 0x1000, 16, F_NEXT, 3);
        put(&m, 48, 0x3000, 32, F_INDIRECT, 0);
        put(&m, 0x3000, 0x2000, 512, F_WRITE | F_NEXT, 1);
        put(&m, 0x3010, 0x2400, 1, F_WRITE, 0);
        let mut out = Vec::new();
        assert_eq!(walk(&m, TABLE, 2, &mut out), Ok(GuestAddress(0x2400)));
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn every_rule_is_named() {
        let m = mem();
        put(&m, 0, 0x1000, 16, F_NEXT, 0); // loops on itself
        assert_eq!(walk_from(&m, 0), Err(Violation::Loop { entries: 8 }));
        put(&m, 0, 0x1000, 16, F_NEXT, 8);
        assert_eq!(
            walk_from(&m, 0),
            Err(Violation::NextOutOfRange { next: 8, size: 8 })
        );
        assert_eq!(
            walk_from(&m, 9),
            Err(Violation::HeadOutOfRange { head: 9, size: 8 })
        );
        put(&m, 0, 0x3000, 32, F_INDIRECT | F_NEXT, 1);
        assert_eq!(walk_from(&m, 0), Err(Violation::IndirectWithNext));
        put(&m, 0, 0x3000, 0, F_INDIRECT, 0);
        assert_eq!(walk_from(&m, 0), Err(Violation::IndirectEmpty));
        put(&m, 0, 0x3000, 24, F_INDIRECT, 0);
        assert_eq!(
            walk_from(&m, 0),
            Err(Violation::IndirectLenUnaligned { len: 24 })
        );
        // Longer than the queue is allowed up to CHAIN_MAX (see there); one more is not.
        put(&m, 0, 0x3000, 16 * (CHAIN_MAX + 1), F_INDIRECT, 0);
        assert_eq!(
            walk_from(&m, 0),
            Err(Violation::IndirectTooLong {
                entries: CHAIN_MAX + 1,
                limit: CHAIN_MAX
            })
        );
        put(&m, 0, 0xFFF0, 32, F_INDIRECT, 0);
        assert_eq!(
            walk_from(&m, 0),
            Err(Violation::IndirectOutsideMemory {
                addr: 0xFFF0,
                len: 32
            })
        );
        put(&m, 0, 0x3000, 32, F_INDIRECT, 0);
        put(&m, 0x3000, 0x3000, 32, F_INDIRECT, 0);
        assert_eq!(walk_from(&m, 0), Err(Violation::NestedIndirect));
        put(&m, 0x3000, 0x1000, 16, F_NEXT, 2);
        assert_eq!(
            walk_from(&m, 0),
            Err(Violation::IndirectNextOutOfRange {
                next: 2,
                entries: 2
            })
        );
        put(&m, 0x3000, 0x1000, 16, F_NEXT, 1);
        put(&m, 0x3010, 0x1000, 16, F_NEXT, 0);
        assert_eq!(walk_from(&m, 0), Err(Violation::Loop { entries: 2 }));
        put(&m, 0, 0x1000, 16, 0, 0);
        assert_eq!(walk_from(&m, 0), Err(Violation::StatusNotWritable));
        put(&m, 0, 0x1000, 0, F_WRITE, 0);
        assert_eq!(walk_from(&m, 0), Err(Violation::StatusEmpty));
        put(&m, 0, 0x1_0000, 4, F_WRITE, 0);
        assert_eq!(
            walk_from(&m, 0),
            Err(Violation::StatusOutsideMemory { addr: 0x1_0003 })
        );
    }

    #[test]
    fn direct_and_indirect_descriptors_together_are_bounded_by_the_chain_limit() {
        let m = mem();
        // Entries 0..=3 direct, then an indirect table of CHAIN_MAX - 3 entries: one
        // descriptor more than the limit (the queue of 8 counts as CHAIN_MAX).
        let n = u16::try_from(CHAIN_MAX - 3).expect("fits");
        for i in 0..4u16 {
            put(&m, u64::from(i) * 16, 0x1000, 16, F_NEXT, i + 1);
        }
        put(&m, 64, 0x3000, u32::from(n) * 16, F_INDIRECT, 0);
        for i in 0..n {
            let flags = if i < n - 1 { F_NEXT | F_WRITE } else { F_WRITE };
            put(&m, 0x3000 + u64::from(i) * 16, 0x2000, 1, flags, i + 1);
        }
        assert_eq!(
            walk_from(&m, 0),
            Err(Violation::TooLong { limit: CHAIN_MAX })
        );
        // One descriptor less (an indirect table longer than the queue) is a valid chain.
        put(&m, 64, 0x3000, u32::from(n - 1) * 16, F_INDIRECT, 0);
        put(&m, 0x3000 + u64::from(n - 2) * 16, 0x2000, 1, F_WRITE, 0);
        assert_eq!(walk_from(&m, 0), Ok(usize::from(n) + 3));
    }

    #[test]
    fn walk_chain_checks_the_ring_rules_but_not_the_status_byte() {
        let m = mem();
        // A device-readable chain (a virtio-net TX frame): no status byte.
        put(&m, 0, 0x1000, 12, F_NEXT, 1);
        put(&m, 16, 0x2000, 64, 0, 0);
        let mut out = Vec::new();
        assert_eq!(walk_chain(&m, TABLE, 0, &mut out), Ok(()));
        assert_eq!(out.len(), 2);
        assert_eq!(walk_from(&m, 0), Err(Violation::StatusNotWritable));
        // The ring rules still hold.
        put(&m, 16, 0x2000, 64, F_NEXT, 0);
        assert_eq!(
            walk_chain(&m, TABLE, 0, &mut out),
            Err(Violation::Loop { entries: 8 })
        );
        assert_eq!(
            walk_chain(&m, TABLE, 8, &mut out),
            Err(Violation::HeadOutOfRange { head: 8, size: 8 })
        );
    }

    #[test]
    fn a_table_outside_memory_is_named() {
        let m = mem();
        let table = DescTable {
            addr: GuestAddress(0xFFF8),
            size: 8,
            indirect: true,
        };
        let mut out = Vec::new();
        assert_eq!(
            walk(&m, table, 0, &mut out),
            Err(Violation::TableOutsideMemory { index: 0 })
        );
    }

    /// Walk `head` both ways (per-descriptor reads and the translated view) and demand the
    /// same answer.
    fn both(m: &GuestMemoryMmap, table: DescTable, head: u16) -> Result<usize, Violation> {
        let mut a = Vec::new();
        let mut b = Vec::new();
        let slow = walk_chain(m, table, head, &mut a).map(|()| a.len());
        let view = TableView::new(m, table);
        let fast = walk_chain_in(m, &view, head, &mut b).map(|()| b.len());
        assert_eq!(slow, fast, "head {head}");
        let key = |d: &Descriptor| (d.addr().raw_value(), d.len(), d.flags(), d.next());
        assert!(a.iter().map(key).eq(b.iter().map(key)));
        fast
    }

    #[test]
    fn the_translated_table_keeps_every_rule() {
        let m = mem();
        assert!(TableView::new(&m, TABLE).is_mapped());
        put(&m, 0, 0x1000, 12, F_NEXT, 1);
        put(&m, 16, 0x2000, 64, 0, 0);
        assert_eq!(both(&m, TABLE, 0), Ok(2));
        assert_eq!(
            both(&m, TABLE, 8),
            Err(Violation::HeadOutOfRange { head: 8, size: 8 })
        );
        put(&m, 16, 0x2000, 64, F_NEXT, 0);
        assert_eq!(both(&m, TABLE, 0), Err(Violation::Loop { entries: 8 }));
        put(&m, 16, 0x2000, 64, F_NEXT, 9);
        assert_eq!(
            both(&m, TABLE, 0),
            Err(Violation::NextOutOfRange { next: 9, size: 8 })
        );
        // Direct, then an indirect table (translated too), then its rules.
        put(&m, 16, 0x3000, 32, F_INDIRECT, 0);
        put(&m, 0x3000, 0x2000, 512, F_WRITE | F_NEXT, 1);
        put(&m, 0x3010, 0x2400, 1, F_WRITE, 0);
        assert_eq!(both(&m, TABLE, 0), Ok(3));
        put(&m, 0x3010, 0x2400, 1, F_WRITE | F_NEXT, 2);
        assert_eq!(
            both(&m, TABLE, 0),
            Err(Violation::IndirectNextOutOfRange {
                next: 2,
                entries: 2
            })
        );
        put(&m, 16, 0xFFF0, 32, F_INDIRECT, 0);
        assert_eq!(
            both(&m, TABLE, 0),
            Err(Violation::IndirectOutsideMemory {
                addr: 0xFFF0,
                len: 32
            })
        );
        let no_indirect = DescTable {
            indirect: false,
            ..TABLE
        };
        assert_eq!(
            both(&m, no_indirect, 0),
            Err(Violation::IndirectNotNegotiated)
        );
    }

    #[test]
    fn a_table_across_regions_or_outside_memory_falls_back_to_per_descriptor_reads() {
        // Two adjacent regions; the table straddles their boundary.
        let m = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 0x1000),
            (GuestAddress(0x1000), 0x1000),
        ])
        .expect("memory");
        let table = DescTable {
            addr: GuestAddress(0xFF0),
            size: 4,
            indirect: false,
        };
        assert!(!TableView::new(&m, table).is_mapped());
        put(&m, 0xFF0, 0x100, 12, F_NEXT, 1);
        put(&m, 0x1000, 0x200, 64, 0, 0);
        assert_eq!(both(&m, table, 0), Ok(2));
        let outside = DescTable {
            addr: GuestAddress(0x1FF8),
            ..table
        };
        assert!(!TableView::new(&m, outside).is_mapped());
        assert_eq!(
            both(&m, outside, 0),
            Err(Violation::TableOutsideMemory { index: 0 })
        );
    }

    #[test]
    fn a_single_direct_descriptor_takes_the_short_path_every_other_chain_the_walk() {
        let m = mem();
        let view = TableView::new(&m, TABLE);
        // One readable, one writable descriptor: the short path, the walker's answer.
        put(&m, 0, 0x1000, 76, 0, 5);
        put(&m, 16, 0x2000, 1526, F_WRITE, 0);
        for head in [0, 1] {
            let d = view.single(head).expect("one direct descriptor");
            assert_eq!(d.addr(), GuestAddress(0x1000 + 0x1000 * u64::from(head)));
            assert_eq!(both(&m, TABLE, head), Ok(1));
        }
        // A chained head: the walk (and its rules).
        put(&m, 32, 0x1000, 12, F_NEXT, 3);
        put(&m, 48, 0x2000, 64, 0, 0);
        assert!(view.single(2).is_none());
        assert_eq!(both(&m, TABLE, 2), Ok(2));
        put(&m, 48, 0x2000, 64, F_NEXT, 2);
        assert_eq!(both(&m, TABLE, 2), Err(Violation::Loop { entries: 8 }));
        // An indirect head: the walk, with the INDIRECT rules.
        put(&m, 64, 0x3000, 16, F_INDIRECT, 0);
        put(&m, 0x3000, 0x2000, 64, 0, 0);
        assert!(view.single(4).is_none());
        assert_eq!(both(&m, TABLE, 4), Ok(1));
        let no_indirect = DescTable {
            indirect: false,
            ..TABLE
        };
        assert!(TableView::new(&m, no_indirect).single(4).is_none());
        assert_eq!(
            both(&m, no_indirect, 4),
            Err(Violation::IndirectNotNegotiated)
        );
        // An index outside the table: no short path, the walk names it.
        assert!(view.single(8).is_none());
        assert!(view.single(u16::MAX).is_none());
        assert_eq!(
            both(&m, TABLE, 8),
            Err(Violation::HeadOutOfRange { head: 8, size: 8 })
        );
    }

    #[test]
    fn a_table_not_translated_has_no_short_path() {
        let m = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 0x1000),
            (GuestAddress(0x1000), 0x1000),
        ])
        .expect("memory");
        let table = DescTable {
            addr: GuestAddress(0xFF0),
            size: 4,
            indirect: false,
        };
        put(&m, 0xFF0, 0x100, 76, 0, 0);
        let view = TableView::new(&m, table);
        assert!(!view.is_mapped());
        assert!(view.single(0).is_none());
        assert_eq!(both(&m, table, 0), Ok(1));
    }
}
