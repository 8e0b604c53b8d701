//! A one-entry cache of the guest memory region last used to translate a buffer address,
//! for a burst of frames: a frame's buffers usually lie in the region of the one before, so
//! the translation costs an offset check against that region's host slice instead of a
//! region search (vm-memory's `get_slice`, the same answer). Made per burst or per run,
//! while the caller holds the memory snapshot the regions belong to.

use std::cell::Cell;
use vm_memory::VolatileSlice;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// One frontend's memory with its last used region (see the module docs).
#[derive(Debug)]
pub struct RegionCache<'m> {
    mem: &'m GuestMemoryMmap,
    /// Guest start address and host slice of the whole region last used.
    last: Cell<Option<(u64, VolatileSlice<'m>)>>,
}

impl<'m> RegionCache<'m> {
    /// A cache over `mem`, empty.
    #[must_use]
    pub fn new(mem: &'m GuestMemoryMmap) -> Self {
        Self {
            mem,
            last: Cell::new(None),
        }
    }

    /// The memory.
    #[must_use]
    pub fn mem(&self) -> &'m GuestMemoryMmap {
        self.mem
    }

    /// Where guest address `addr` lies in host memory when it is inside the region last
    /// used (no region search, no length): a hint for a prefetch only, which reads nothing.
    #[must_use]
    #[inline(always)]
    pub fn host_hint(&self, addr: GuestAddress) -> Option<*const u8> {
        let (start, region) = self.last.get()?;
        let off = usize::try_from(addr.0.checked_sub(start)?).ok()?;
        (off < region.len()).then(|| region.ptr_guard().as_ptr().wrapping_add(off))
    }

    /// The host slice of `len` bytes at `addr`, when they lie inside one region (as
    /// `GuestMemoryBackend::get_slice`); `None` otherwise (outside memory, or across a
    /// region boundary: the caller takes the piecewise path).
    #[must_use]
    #[inline(always)]
    pub fn get_slice(&self, addr: GuestAddress, len: usize) -> Option<VolatileSlice<'m>> {
        if let Some((start, region)) = self.last.get() {
            let hit = addr
                .0
                .checked_sub(start)
                .and_then(|off| usize::try_from(off).ok())
                // `addr` itself inside the region, as a region search demands.
                .filter(|&off| off < region.len())
                .and_then(|off| region.subslice(off, len).ok());
            if hit.is_some() {
                return hit;
            }
        }
        let r = self.mem.find_region(addr)?;
        let whole = r.as_volatile_slice().ok()?;
        let start = r.start_addr().0;
        self.last.set(Some((start, whole)));
        let off = usize::try_from(addr.0.checked_sub(start)?).ok()?;
        whole.subslice(off, len).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_answers_as_get_slice_does() {
        let mem = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 0x1000),
            (GuestAddress(0x1000), 0x1000),
            (GuestAddress(0x4000), 0x1000),
        ])
        .expect("memory");
        let cache = RegionCache::new(&mem);
        let cases = [
            (0x10, 64),
            (0x20, 64),
            (0xFC0, 64), // ends at the region's end
            (0xFC1, 64), // crosses into the next region
            (0x1000, 0), // empty, at a region start
            (0x1800, 0x800),
            (0x1801, 0x800), // one past the region
            (0x2000, 1),     // a hole
            (0x4FFF, 1),
            (0x5000, 1), // past the end
            (0x10, usize::MAX),
            (u64::MAX, 1),
        ];
        for _ in 0..2 {
            for &(addr, len) in &cases {
                let got = cache.get_slice(GuestAddress(addr), len);
                let want = mem.get_slice(GuestAddress(addr), len).ok();
                assert_eq!(
                    got.map(|s| (s.ptr_guard().as_ptr(), s.len())),
                    want.map(|s| (s.ptr_guard().as_ptr(), s.len())),
                    "{addr:#x}+{len}"
                );
                // The hint names the same place for an address in the region just used.
                if let (Some(hint), Some(s)) = (cache.host_hint(GuestAddress(addr)), got) {
                    assert_eq!(hint, s.ptr_guard().as_ptr(), "{addr:#x}");
                }
            }
        }
    }

    #[test]
    fn the_hint_stays_inside_the_region_last_used() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0x1000), 0x1000)]).expect("memory");
        let cache = RegionCache::new(&mem);
        assert_eq!(
            cache.host_hint(GuestAddress(0x1000)),
            None,
            "no region used yet"
        );
        let s = cache.get_slice(GuestAddress(0x1800), 8).expect("slice");
        let base = s.ptr_guard().as_ptr();
        assert_eq!(cache.host_hint(GuestAddress(0x1800)), Some(base));
        assert_eq!(
            cache.host_hint(GuestAddress(0x1FFF)),
            Some(base.wrapping_add(0x7FF))
        );
        assert_eq!(
            cache.host_hint(GuestAddress(0x2000)),
            None,
            "past the region"
        );
        assert_eq!(cache.host_hint(GuestAddress(0xFFF)), None, "before it");
    }
}
