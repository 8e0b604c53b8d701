//! The descriptors of a chain given by its head index, for chains resubmitted from the
//! inflight area (they are not in the available ring any more, so virtio-queue's iterator,
//! which only starts from the available ring, cannot produce them).
//!
//! It yields exactly what virtio-queue's `DescriptorChain` yields for the same head (checked
//! by a test against it), so [`crate::request::parse`] judges a resubmitted chain as it judged
//! the chain the first time: the walk stops silently after `queue size` descriptors, at a
//! `next` index outside the table, at an unreadable descriptor, at a second level of
//! indirection, at an indirect table whose length is not a multiple of 16 or holds more
//! than 65535 entries, and when the chain's total length overflows 32 bits.

use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Bytes of one split descriptor.
const DESC_BYTES: u64 = 16;

/// Iterator over the descriptors of the chain starting at `head`.
#[derive(Debug, Clone)]
pub struct ChainAt<'a> {
    mem: &'a GuestMemoryMmap,
    table: GuestAddress,
    size: u16,
    next: u16,
    ttl: u16,
    indirect: bool,
    bytes: u32,
}

impl<'a> ChainAt<'a> {
    /// The chain at `head` of the descriptor table at `table` of a queue of `size` entries.
    #[must_use]
    pub fn new(mem: &'a GuestMemoryMmap, table: GuestAddress, size: u16, head: u16) -> Self {
        Self {
            mem,
            table,
            size,
            next: head,
            ttl: size,
            indirect: false,
            bytes: 0,
        }
    }

    /// Continue in the indirect table `desc` points to (`None` when that is not allowed).
    fn enter_indirect(&mut self, desc: &Descriptor) -> Option<()> {
        if self.indirect || u64::from(desc.len()) % DESC_BYTES != 0 {
            return None;
        }
        let entries = u16::try_from(u64::from(desc.len()) / DESC_BYTES).ok()?;
        self.table = desc.addr();
        self.size = entries;
        self.next = 0;
        self.ttl = entries;
        self.indirect = true;
        Some(())
    }
}

impl Iterator for ChainAt<'_> {
    type Item = Descriptor;

    fn next(&mut self) -> Option<Descriptor> {
        // At most two rounds: the head may switch to an indirect table once.
        for _ in 0..2 {
            if self.ttl == 0 || self.next >= self.size {
                return None;
            }
            let at = self
                .table
                .0
                .checked_add(u64::from(self.next) * DESC_BYTES)?;
            let desc: Descriptor = self.mem.read_obj(GuestAddress(at)).ok()?;
            if desc.refers_to_indirect_table() {
                self.enter_indirect(&desc)?;
                continue;
            }
            self.bytes = self.bytes.checked_add(desc.len())?;
            if desc.has_next() {
                self.next = desc.next();
                self.ttl -= 1;
            } else {
                self.ttl = 0;
            }
            return Some(desc);
        }
        None
    }
}

#[cfg(test)]
// Random test values are reduced modulo small bounds before the casts.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;
    use virtio_queue::{Queue, QueueOwnedT, QueueT};
    use vm_memory::GuestAddress;

    const SIZE: u16 = 16;
    const TABLE: u64 = 0x1000;
    const AVAIL: u64 = 0x2000;
    const USED: u64 = 0x3000;

    fn raw(mem: &GuestMemoryMmap, at: u64, d: (u64, u32, u16, u16)) {
        let desc = virtio_queue::desc::RawDescriptor::from(Descriptor::new(d.0, d.1, d.2, d.3));
        mem.write_obj(desc, GuestAddress(at)).expect("write");
    }

    /// Descriptors of the chain at `head` as virtio-queue's iterator yields them.
    fn reference(mem: &GuestMemoryMmap, head: u16) -> Vec<(u64, u32, u16, u16)> {
        let mut q = Queue::new(SIZE).expect("queue");
        q.try_set_desc_table_address(GuestAddress(TABLE))
            .expect("table");
        q.try_set_avail_ring_address(GuestAddress(AVAIL))
            .expect("avail");
        q.try_set_used_ring_address(GuestAddress(USED))
            .expect("used");
        q.set_ready(true);
        mem.write_obj(head.to_le(), GuestAddress(AVAIL + 4))
            .expect("ring");
        mem.write_obj(1u16.to_le(), GuestAddress(AVAIL + 2))
            .expect("idx");
        let mut it = q.iter(mem).expect("iter");
        let chain = it.next().expect("chain");
        chain
            .map(|d| (d.addr().0, d.len(), d.flags(), d.next()))
            .collect()
    }

    fn ours(mem: &GuestMemoryMmap, head: u16) -> Vec<(u64, u32, u16, u16)> {
        ChainAt::new(mem, GuestAddress(TABLE), SIZE, head)
            .map(|d| (d.addr().0, d.len(), d.flags(), d.next()))
            .collect()
    }

    /// A small xorshift generator (deterministic per seed).
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn yields_what_virtio_queue_yields_for_random_tables() {
        let mem =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("guest memory");
        for seed in 1..=3000u64 {
            let mut r = rng(seed);
            for i in 0..SIZE {
                let flags = (r() % 8) as u16; // NEXT, WRITE, INDIRECT in any combination
                let next = (r() % u64::from(SIZE + 2)) as u16;
                let (addr, len) = match r() % 4 {
                    // An indirect table inside memory, sometimes of a bad length.
                    0 => (
                        0x4000 + (r() % 4) * 0x100,
                        (r() % 6) as u32 * 16 + (r() % 2) as u32,
                    ),
                    1 => (u64::MAX - (r() % 64), (r() % 64) as u32),
                    2 => (r() % 0x10000, u32::MAX - (r() % 4) as u32),
                    _ => (r() % 0x10000, (r() % 0x1000) as u32),
                };
                raw(&mem, TABLE + u64::from(i) * 16, (addr, len, flags, next));
            }
            for i in 0..32u64 {
                let flags = (r() % 8) as u16;
                let next = (r() % 8) as u16;
                raw(
                    &mem,
                    0x4000 + i * 16,
                    (r() % 0x10000, (r() % 0x1000) as u32, flags, next),
                );
            }
            for head in 0..SIZE {
                assert_eq!(
                    ours(&mem, head),
                    reference(&mem, head),
                    "seed {seed} head {head}"
                );
            }
        }
    }
}
