//! Turn validated guest buffers into host `iovec`s for the storage backends.

use crate::request::Segment;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap};

/// Host iovecs covering `segments` in `mem`, in order. `None` when a segment is not fully
/// backed by host memory (cannot happen for segments checked by the parser against the same
/// memory, but memory can be replaced between parse and use, so it is checked again).
///
/// The pointers stay valid while `mem` (the borrowed memory snapshot) is alive.
#[must_use]
pub fn iovecs(mem: &GuestMemoryMmap, segments: &[Segment]) -> Option<Vec<libc::iovec>> {
    let mut out = Vec::with_capacity(segments.len());
    for seg in segments {
        let len = usize::try_from(seg.len).ok()?;
        let mut covered = 0usize;
        for slice in mem.get_slices(seg.addr, len) {
            let slice = slice.ok()?;
            covered += slice.len();
            out.push(libc::iovec {
                iov_base: slice.ptr_guard_mut().as_ptr().cast(),
                iov_len: slice.len(),
            });
        }
        if covered != len {
            return None;
        }
    }
    Some(out)
}
