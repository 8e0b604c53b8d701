//! Bounce buffers for O_DIRECT images: the kernel refuses direct I/O whose buffers are not
//! aligned to the device's memory alignment (EINVAL), but a guest may hand any buffer
//! address and any split of a request across buffers. Such requests go through an aligned
//! host buffer: writes are copied into it before the I/O, reads copied out after it.
//!
//! The memory alignment is probed once when the image is opened (a direct read into a
//! buffer that is 512-aligned but not 4096-aligned).

use std::io;
use std::os::fd::RawFd;

/// Alignments tried by [`probe_memory_alignment`], smallest first.
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

/// The smallest logical block size at which direct reads of `fd` work (512 or 4096): a read
/// of one block at offset one block (at offset 0 when the disk holds fewer than two), into a
/// buffer aligned for any device. A 4Kn block device (or a file on one) refuses 512-byte
/// offsets and lengths under O_DIRECT with EINVAL.
///
/// # Errors
/// When a direct read fails at every candidate size; the error is the last read's.
pub fn probe_block_size(fd: RawFd, capacity: u64) -> io::Result<u32> {
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for size in CANDIDATES {
        let len = u64::try_from(size).unwrap_or(u64::MAX);
        if capacity < len {
            break;
        }
        let offset = if capacity >= 2 * len { len } else { 0 };
        let mut buf = Bounce::new(size, 4096);
        let base = buf.iovec().iov_base;
        let at = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: the bounce buffer holds `size` bytes at `base`; pread writes at most `size`.
        let n = unsafe { libc::pread(fd, base, size, at) };
        if n >= 0 {
            return u32::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
        }
        last = io::Error::last_os_error();
    }
    Err(last)
}

/// The smallest buffer alignment at which a direct read of `fd` works (512 or 4096).
///
/// # Errors
/// When a direct read fails at every candidate alignment (the file is not readable with
/// O_DIRECT at all); the error is the last read's.
pub fn probe_memory_alignment(fd: RawFd, capacity: u64) -> io::Result<usize> {
    let len = if capacity >= 4096 { 4096 } else { 512 };
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for align in CANDIDATES {
        // Aligned to `align` but, for 512, deliberately not to 4096.
        let mut buf = Bounce::new(len + 4096, 4096);
        let base = buf.iovec().iov_base.cast::<u8>();
        let offset = if align < 4096 { align } else { 0 };
        // SAFETY: `base + offset .. + len` lies inside the bounce buffer (it holds len + 4096
        // bytes and offset < 4096); pread writes at most `len` bytes there.
        let n = unsafe { libc::pread(fd, base.add(offset).cast(), len, 0) };
        if n >= 0 {
            return Ok(align);
        }
        last = io::Error::last_os_error();
    }
    Err(last)
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
