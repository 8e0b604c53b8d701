//! Software prefetch of guest memory the forwarding thread reads soon: the descriptors of
//! a burst's chains and the first bytes (net and Ethernet headers) of the next chain's
//! frame, lines the driver's CPU wrote and that this CPU misses. A prefetch starts the
//! line's transfer and lets the thread go on with the chain before it, so a burst's misses
//! overlap instead of coming one after another, without the loads (and the stalls on
//! them) of netloop2's reverted "warm pass". DPDK's vhost PMD prefetches its ring entry
//! and each buffer the same way (`rte_prefetch0`).
//!
//! A prefetch is a hint: it reads nothing into the program, changes no state a program
//! can see, and does not fault, whatever the address. On other targets it does nothing.

use crate::rings::AvailView;
use virtio_queue::Queue;
use vmirq_vhost::chain::TableView;

/// Prefetch the descriptors of the chains after `q`'s next one that `avail` already copied
/// out of its ring (at most `limit`).
#[inline]
pub fn descs(avail: &AvailView<'_>, q: &Queue, table: &TableView<'_>, limit: usize) {
    let limit = u16::try_from(limit).unwrap_or(u16::MAX);
    for k in 0..limit {
        let Some(head) = avail.copied_ahead(q, k) else {
            break;
        };
        if let Some(p) = table.entry_hint(head) {
            at(p);
        }
    }
}

/// Bring the cache lines holding the `len` bytes from `p` on (any address: see the module
/// docs).
#[inline(always)]
pub fn lines(p: *const u8, len: usize) {
    let mut off = 0;
    while off < len {
        at(p.wrapping_add(off));
        // The start of the next line.
        off += LINE - ((p as usize).wrapping_add(off) % LINE);
    }
}

/// Cache line size of the CPUs this runs on.
const LINE: usize = 64;

/// Bring the cache line holding `p` (any address: see the module docs).
#[inline(always)]
pub fn at(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `prefetcht0` is a hint that never dereferences `p` for the program: it
        // cannot fault (an address that is not mapped is ignored), loads no value, and
        // writes nothing, so any pointer value is sound here; SSE, which it needs, is part
        // of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

    #[test]
    fn a_prefetch_changes_nothing_anywhere_in_a_region() {
        let mem: GuestMemoryMmap =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x1000)]).expect("memory");
        let whole = mem.get_slice(GuestAddress(0), 0x1000).expect("slice");
        whole.write_slice(&[7u8; 0x1000], 0).expect("fill");
        for (off, len) in [(0, 1), (60, 140), (0xFC0, 64), (0xFFF, 1), (0x800, 0)] {
            let s = whole.subslice(off, len).expect("subslice");
            at(s.ptr_guard().as_ptr());
            lines(s.ptr_guard().as_ptr(), len);
            lines(s.ptr_guard().as_ptr(), 4096);
        }
        let mut back = [0u8; 0x1000];
        whole.read_slice(&mut back, 0).expect("read");
        assert!(back.iter().all(|&b| b == 7));
    }
}
