//! Guest memory the driver shares with the device: one memfd, mapped shared, sent to the
//! vhost-user backend in `SET_MEM_TABLE`. Guest physical address (GPA) 0 is the start of the
//! mapping. Every access is bounds-checked against the mapping; data moves with raw copies
//! (never Rust references into memory the device may write), ring indices through atomics.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32};

/// Errors creating or addressing guest memory.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// memfd_create, ftruncate or mmap failed.
    #[error("cannot create {len_bytes} bytes of shared guest memory")]
    Create {
        /// Requested size.
        len_bytes: usize,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An access outside the mapping (or misaligned for an atomic).
    #[error("guest access of {len} bytes at {gpa:#x} is outside {size:#x} bytes of memory or misaligned")]
    OutOfBounds {
        /// Guest physical address.
        gpa: u64,
        /// Length of the access.
        len: u64,
        /// Size of the memory.
        size: u64,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, MemoryError>;

/// A memfd-backed, shared mapping that is the guest's physical memory.
#[derive(Debug)]
pub struct GuestMemory {
    file: File,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value and unmapped only in Drop; all accesses go
// through raw pointers with explicit copies or atomics, so moving the owner to another thread
// is sound.
unsafe impl Send for GuestMemory {}
// SAFETY: shared access only reads/writes through raw copies and atomics (never `&mut`), the
// same discipline a second process (the device) already forces on us.
unsafe impl Sync for GuestMemory {}

impl GuestMemory {
    /// Create `len_bytes` (rounded up to 4 KiB) of zeroed shared memory.
    ///
    /// # Errors
    /// [`MemoryError::Create`] when the OS refuses.
    pub fn new(len_bytes: usize) -> Result<Self> {
        let len = len_bytes.div_ceil(4096).max(1) * 4096;
        let fail = |source| MemoryError::Create {
            len_bytes: len,
            source,
        };
        // SAFETY: the name is a valid NUL-terminated string; memfd_create has no other
        // preconditions.
        let fd = unsafe { libc::memfd_create(c"vmirq-netload".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64).map_err(fail)?;
        // SAFETY: mapping a file we own, of exactly `len` bytes, at an address the kernel picks;
        // no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(fail(std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| fail(std::io::Error::other("null mapping")))?;
        Ok(Self { file, ptr, len })
    }

    /// Size in bytes.
    #[must_use]
    pub const fn len(&self) -> u64 {
        self.len as u64
    }

    /// Always false: memory has at least one page.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, for `SET_MEM_TABLE`.
    #[must_use]
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// A second handle on the memfd (for a device-side view in tests, or a backend).
    ///
    /// # Errors
    /// The OS error of `dup`.
    pub fn try_clone_file(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }

    /// This process's address of GPA 0 (the region's `userspace_addr`).
    #[must_use]
    pub fn host_base(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Byte offset of `[gpa, gpa + len)` if it lies inside the memory and `gpa` is a multiple
    /// of `align`.
    fn offset(&self, gpa: u64, len: u64, align: u64) -> Result<usize> {
        let end = gpa.checked_add(len);
        match end {
            Some(end) if end <= self.len() && gpa % align == 0 => {
                usize::try_from(gpa).map_err(|_| self.oob(gpa, len))
            }
            _ => Err(self.oob(gpa, len)),
        }
    }

    const fn oob(&self, gpa: u64, len: u64) -> MemoryError {
        MemoryError::OutOfBounds {
            gpa,
            len,
            size: self.len as u64,
        }
    }

    /// Copy `data` into guest memory at `gpa`.
    ///
    /// # Errors
    /// [`MemoryError::OutOfBounds`].
    pub fn write(&self, gpa: u64, data: &[u8]) -> Result<()> {
        let off = self.offset(gpa, data.len() as u64, 1)?;
        // SAFETY: `off..off + data.len()` lies inside the mapping (checked above); `data` is a
        // distinct Rust slice, so the ranges cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len());
        }
        Ok(())
    }

    /// Copy guest memory at `gpa` into `out`.
    ///
    /// # Errors
    /// [`MemoryError::OutOfBounds`].
    pub fn read(&self, gpa: u64, out: &mut [u8]) -> Result<()> {
        let off = self.offset(gpa, out.len() as u64, 1)?;
        // SAFETY: the source range lies inside the mapping (checked above) and `out` is a
        // distinct Rust slice. The device may write concurrently only if it breaks the ring
        // protocol; the bytes are then garbage, which the caller validates, never UB in Rust
        // terms for plain `u8` data copied out.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len());
        }
        Ok(())
    }

    /// Append `len` bytes at `gpa` to `out`.
    ///
    /// # Errors
    /// [`MemoryError::OutOfBounds`] (then `out` is unchanged).
    pub fn read_append(&self, gpa: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        self.offset(gpa, len as u64, 1)?;
        let start = out.len();
        out.resize(start + len, 0);
        self.read(gpa, &mut out[start..])
    }

    /// A 16-bit guest field (ring index or flags), accessed atomically.
    ///
    /// # Errors
    /// [`MemoryError::OutOfBounds`] when outside or not 2-byte aligned.
    pub fn atomic_u16(&self, gpa: u64) -> Result<&AtomicU16> {
        let off = self.offset(gpa, 2, 2)?;
        // SAFETY: the 2 bytes lie inside the mapping, which lives as long as `self`; the page
        // base is 4 KiB-aligned and `gpa` is even, so the pointer is aligned for AtomicU16; the
        // memory is only ever accessed atomically or by raw copies.
        Ok(unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU16>() })
    }

    /// A 32-bit guest field (used element), accessed atomically.
    ///
    /// # Errors
    /// [`MemoryError::OutOfBounds`] when outside or not 4-byte aligned.
    pub fn atomic_u32(&self, gpa: u64) -> Result<&AtomicU32> {
        let off = self.offset(gpa, 4, 4)?;
        // SAFETY: as in `atomic_u16`, with 4-byte alignment checked.
        Ok(unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() })
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`; no references into it
        // outlive `self` (the atomics borrowed from it are tied to `&self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn reads_back_what_was_written_and_refuses_out_of_bounds() {
        let mem = GuestMemory::new(5000).expect("memfd");
        assert_eq!(mem.len(), 8192);
        mem.write(8190, &[1, 2]).expect("in bounds");
        let mut two = [0u8; 2];
        mem.read(8190, &mut two).expect("in bounds");
        assert_eq!(two, [1, 2]);
        assert!(mem.write(8191, &[1, 2]).is_err());
        assert!(mem.read(u64::MAX, &mut two).is_err());
        assert!(mem.atomic_u16(3).is_err(), "misaligned");
        assert!(mem.atomic_u32(8192).is_err());
        let mut v = vec![9];
        assert!(mem.read_append(8191, 2, &mut v).is_err());
        assert_eq!(v, vec![9], "unchanged on error");
        mem.read_append(8190, 2, &mut v).expect("in bounds");
        assert_eq!(v, vec![9, 1, 2]);
    }

    #[test]
    fn atomics_alias_the_bytes() {
        let mem = GuestMemory::new(4096).expect("memfd");
        mem.atomic_u16(10)
            .expect("ok")
            .store(0xBEEF, Ordering::Release);
        let mut b = [0u8; 2];
        mem.read(10, &mut b).expect("ok");
        assert_eq!(u16::from_le_bytes(b), 0xBEEF);
    }
}
