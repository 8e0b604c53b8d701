//! Bounce buffers for O_DIRECT images: the kernel refuses direct I/O whose buffers are not
//! aligned to the device's memory alignment (EINVAL), but a guest may hand any buffer
//! address and any split of a request across buffers. Such requests go through an aligned
//! host buffer: writes are copied into it before the I/O, reads copied out after it.
//!
//! The logical block size and the memory alignment are probed once when the image is opened,
//! with direct reads (one routine, [`direct_read`]): a block at a one-block offset, then a
//! block into a buffer that is 512-aligned but not 4096-aligned.

use std::io;
use std::os::fd::RawFd;

/// Block sizes and alignments tried by the probes, smallest first.
const CANDIDATES: [usize; 2] = [512, 4096];

/// A zeroed host buffer of `len` bytes starting at an `align`-aligned address.
pub struct Bounce {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl Bounce {
    /// A buffer of `len` bytes aligned to `align` (a power of two).
    #[must_use]
    pub fn new(len: usize, align: usize) -> Self {
        let storage = vec![0u8; len + align];
        let addr = storage.as_ptr() as usize;
        let start = (align - addr % align) % align;
        Self {
            storage,
            start,
            len,
        }
    }

    /// The buffer as one iovec for readv/writev.
    #[must_use]
    pub fn iovec(&mut self) -> libc::iovec {
        libc::iovec {
            iov_base: self.storage[self.start..].as_mut_ptr().cast(),
            iov_len: self.len,
        }
    }

    /// Copy the guest buffers `iov` into this buffer (before a write).
    pub fn fill_from(&mut self, iov: &[libc::iovec]) {
        self.transfer(iov, false);
    }

    /// Copy this buffer out to the guest buffers `iov` (after a read).
    pub fn copy_to(&mut self, iov: &[libc::iovec]) {
        self.transfer(iov, true);
    }

    /// Copy between this buffer and `iov`, in order, up to this buffer's length.
    fn transfer(&mut self, iov: &[libc::iovec], into_guest: bool) {
        let mut at = self.start;
        let end = self.start + self.len;
        for v in iov {
            let n = v.iov_len.min(end - at);
            let host = self.storage[at..].as_mut_ptr();
            let guest = v.iov_base.cast::<u8>();
            let (src, dst) = if into_guest {
                (host.cast_const(), guest)
            } else {
                (guest.cast_const(), host)
            };
            // SAFETY: `v` points into guest memory of at least `iov_len` bytes that the
            // engine keeps mapped while the operation exists (QueueIo contract); the host side
            // `storage[at..at + n]` is inside this buffer (n <= end - at). Guest memory is
            // never part of `storage`, so the two do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
            at += n;
        }
    }
}

/// Whether direct I/O on `iov` needs a bounce buffer for memory alignment `align`.
#[must_use]
pub fn needs_bounce(iov: &[libc::iovec], align: usize) -> bool {
    iov.iter()
        .any(|v| (v.iov_base as usize) % align != 0 || v.iov_len % align != 0)
}

/// One direct read of `len` bytes at `file_offset` into a buffer that starts `mem_offset`
/// bytes past a 4096-aligned address.
fn direct_read(fd: RawFd, mem_offset: usize, len: usize, file_offset: u64) -> io::Result<()> {
    let at = libc::off_t::try_from(file_offset)
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = Bounce::new(mem_offset + len, 4096);
    let base = buf.iovec().iov_base.cast::<u8>();
    // SAFETY: the bounce buffer holds `mem_offset + len` bytes at `base`, so `base +
    // mem_offset .. + len` lies inside it; pread writes at most `len` bytes there.
    let n = unsafe { libc::pread(fd, base.add(mem_offset).cast(), len, at) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The first of [`CANDIDATES`] for which `works` succeeds, or the last failure.
fn first_working(mut works: impl FnMut(usize) -> io::Result<()>) -> io::Result<usize> {
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for c in CANDIDATES {
        match works(c) {
            Ok(()) => return Ok(c),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The smallest logical block size at which direct reads of `fd` work (512 or 4096): a read
/// of one block at offset one block (at offset 0 when the disk holds fewer than two), into a
/// buffer aligned for any device. A 4Kn block device (or a file on one) refuses 512-byte
/// offsets and lengths under O_DIRECT with EINVAL.
///
/// # Errors
/// When a direct read fails at every candidate size; the error is the last read's.
pub fn probe_block_size(fd: RawFd, capacity: u64) -> io::Result<usize> {
    first_working(|size| {
        let len = size as u64;
        if capacity < len {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let offset = if capacity >= 2 * len { len } else { 0 };
        direct_read(fd, 0, size, offset)
    })
}

/// The smallest buffer alignment at which a direct read of one block (`block` bytes, the
/// probed logical block size) works (512 or 4096): a buffer that is 512-aligned but
/// deliberately not 4096-aligned, then a 4096-aligned one.
///
/// # Errors
/// When a direct read fails at every candidate alignment (the file is not readable with
/// O_DIRECT at all); the error is the last read's.
pub fn probe_memory_alignment(fd: RawFd, block: usize) -> io::Result<usize> {
    first_working(|align| direct_read(fd, align % 4096, block, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `buf` as two iovecs, split at `at`.
    fn split(buf: &mut [u8], at: usize) -> [libc::iovec; 2] {
        let (a, b) = buf.split_at_mut(at);
        [a, b].map(|part| libc::iovec {
            iov_base: part.as_mut_ptr().cast(),
            iov_len: part.len(),
        })
    }

    #[test]
    fn buffers_are_aligned_and_round_trip_split_iovecs() {
        for align in [512, 4096] {
            let mut b = Bounce::new(1024, align);
            assert_eq!(b.iovec().iov_base as usize % align, 0);
            assert_eq!(b.iovec().iov_len, 1024);
            let mut src = vec![0u8; 1024];
            for (i, x) in src.iter_mut().enumerate() {
                *x = u8::try_from(i % 251).unwrap_or(0);
            }
            b.fill_from(&split(&mut src, 100));
            let mut dst = vec![0u8; 1024];
            b.copy_to(&split(&mut dst, 700));
            assert_eq!(dst, src);
        }
    }

    #[test]
    fn alignment_check_looks_at_every_base_and_length() {
        let mut buf = Bounce::new(8192, 4096);
        let base = buf.iovec().iov_base;
        let at = |off: usize, len: usize| libc::iovec {
            // SAFETY: off + len stays inside the 8192-byte buffer in every case below.
            iov_base: unsafe { base.cast::<u8>().add(off) }.cast(),
            iov_len: len,
        };
        assert!(!needs_bounce(&[at(0, 4096), at(4096, 512)], 512));
        assert!(needs_bounce(&[at(0, 4096), at(4096, 512)], 4096));
        assert!(needs_bounce(&[at(1, 512)], 512));
        assert!(needs_bounce(&[at(0, 100), at(512, 412)], 512));
    }
}
