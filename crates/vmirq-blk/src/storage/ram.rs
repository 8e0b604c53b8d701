//! The RAM disk: an anonymous memory file (memfd) mapped once into the process. Reads and
//! writes are memory copies between the mapping and guest buffers, done inside `start`
//! without a system call; DISCARD and WRITE_ZEROES punch holes in the memory file (the
//! pages are freed and read back as zeroes); FLUSH has nothing to make durable.
//!
//! Memory is only used for sectors that are written (the file is sparse).

use super::fd::{punch_hole, zero_range};
use super::{Disk, Done, Finished, Io, IoKind, QueueIo, Result, StorageError};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Arc;

/// A shared mapping of the whole memory file, unmapped when the last queue lets go.
#[derive(Debug)]
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory valid for the life of this value; queues on
// several threads copy to and from it concurrently, which has the same meaning as
// concurrent pread/pwrite on the file (no ordering between overlapping requests in flight,
// as virtio-blk allows). Nothing else is reachable through the pointer.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only exposes the pointer for copies through libc::memcpy.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; no copy is running (every queue,
        // which holds an Arc of this mapping, is gone).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// A RAM disk backed by an anonymous memory file.
#[derive(Debug)]
pub struct RamDisk {
    file: Arc<File>,
    map: Arc<Mapping>,
    capacity: u64,
}

impl RamDisk {
    /// A zero-filled RAM disk of `bytes` (rounded down to whole sectors). Memory is only
    /// used for sectors that are written.
    ///
    /// # Errors
    /// When the memory file cannot be created, sized or mapped, or the size is below one
    /// sector.
    pub fn new(bytes: u64) -> Result<Self> {
        let capacity = super::whole_sectors(bytes);
        if capacity == 0 {
            return Err(StorageError::Empty);
        }
        let len =
            usize::try_from(capacity).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: the name is a valid NUL-terminated string and the flags are valid; the
        // return value is checked before use.
        let fd = unsafe { libc::memfd_create(c"vmirq-ram".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: `fd` was just returned by memfd_create, is valid and owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(capacity)?;
        // SAFETY: a new shared read-write mapping of `len` bytes of our own memory file, at an
        // address the kernel chooses; the result is checked. The file is never shrunk (no one
        // else has its fd), so every byte of the mapping stays backed.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().into());
        }
        Ok(Self {
            file: Arc::new(file),
            map: Arc::new(Mapping {
                base: base.cast(),
                len,
            }),
            capacity,
        })
    }
}

impl Disk for RamDisk {
    fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
    fn supports_discard(&self) -> bool {
        true
    }
    fn open_queue(&self, depth: u32) -> Result<Box<dyn QueueIo>> {
        Ok(Box::new(RamQueue {
            file: Arc::clone(&self.file),
            map: Arc::clone(&self.map),
            depth: depth.max(1) as usize,
            finished: Finished::default(),
        }))
    }
    fn describe(&self) -> String {
        "ram".to_owned()
    }
}

/// Per-queue context of the RAM disk: every operation finishes inside `start`.
struct RamQueue {
    file: Arc<File>,
    map: Arc<Mapping>,
    depth: usize,
    finished: Finished,
}

impl RamQueue {
    /// Copy between the disk at `io.offset` and the iovecs. `false` when the range leaves
    /// the disk or the iovecs do not add up to `io.len` (never for parsed requests).
    fn copy(&self, io: &Io, write: bool) -> bool {
        let total: usize = io.iov.iter().map(|v| v.iov_len).sum();
        let (Ok(start), Ok(len)) = (usize::try_from(io.offset), usize::try_from(io.len)) else {
            return false;
        };
        if total != len || start.checked_add(len).is_none_or(|end| end > self.map.len) {
            return false;
        }
        let mut at = start;
        for v in &io.iov {
            // SAFETY: `at..at + iov_len` lies inside the mapping (checked above: the iovec
            // lengths add up to `len` and `start + len <= map.len`). The iovec points into
            // guest memory of at least `iov_len` bytes that the engine keeps mapped until the
            // operation is reaped (QueueIo contract). The two never overlap: guest memory
            // comes from the frontend's fds and the memory file is private to this process.
            // Both are shared memory that another party may write concurrently, so the copy
            // goes through libc's memcpy (no Rust reference to either region exists).
            unsafe {
                let disk = self.map.base.add(at).cast::<libc::c_void>();
                if write {
                    libc::memcpy(disk, v.iov_base, v.iov_len);
                } else {
                    libc::memcpy(v.iov_base, disk, v.iov_len);
                }
            }
            at += v.iov_len;
        }
        true
    }
}

impl QueueIo for RamQueue {
    fn capacity(&self) -> usize {
        self.depth
    }
    fn start(&mut self, tag: u32, io: Io) {
        let ok = match io.kind {
            IoKind::Read => self.copy(&io, false),
            IoKind::Write => self.copy(&io, true),
            IoKind::Flush => true,
            IoKind::Discard => punch_hole(self.file.as_raw_fd(), io.offset, io.len).is_ok(),
            IoKind::WriteZeroes => zero_range(self.file.as_raw_fd(), io.offset, io.len).is_ok(),
        };
        self.finished.push(tag, ok);
    }
    fn submit(&mut self) {}
    fn reap(&mut self, done: &mut Vec<Done>) {
        self.finished.drain_into(done);
    }
    fn in_flight(&self) -> usize {
        self.finished.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: IoKind, offset: u64, buf: &mut [u8]) -> Io {
        let mut io = Io::new(kind, offset, buf.len() as u64);
        io.iov = vec![libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        }];
        io
    }

    fn run(q: &mut Box<dyn QueueIo>, op: Io) -> bool {
        q.start(7, op);
        let mut done = Vec::new();
        q.reap(&mut done);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].tag, 7);
        done[0].ok
    }

    #[test]
    fn written_data_reads_back_across_queues_and_discard_zeroes_it() {
        let disk = RamDisk::new(1 << 20).expect("ram");
        let mut q0 = disk.open_queue(4).expect("q0");
        let mut q1 = disk.open_queue(4).expect("q1");
        let mut w = vec![0xabu8; 4096];
        assert!(run(&mut q0, io(IoKind::Write, 8192, &mut w)));
        let mut r = vec![0u8; 4096];
        assert!(run(&mut q1, io(IoKind::Read, 8192, &mut r)));
        assert_eq!(r, w);
        assert!(run(&mut q1, Io::new(IoKind::Flush, 0, 0)));
        assert!(run(&mut q0, Io::new(IoKind::Discard, 8192, 4096)));
        assert!(run(&mut q1, io(IoKind::Read, 8192, &mut r)));
        assert!(r.iter().all(|&b| b == 0));
    }

    #[test]
    fn ranges_outside_the_disk_or_mismatched_lengths_fail_without_copying() {
        let disk = RamDisk::new(8192).expect("ram");
        let mut q = disk.open_queue(1).expect("q");
        let mut b = vec![1u8; 4096];
        assert!(!run(&mut q, io(IoKind::Write, 8192, &mut b)));
        assert!(!run(&mut q, io(IoKind::Read, u64::MAX - 10, &mut b)));
        let mut short = io(IoKind::Read, 0, &mut b);
        short.len = 8192;
        assert!(!run(&mut q, short));
        assert!(b.iter().all(|&x| x == 1), "a refused read wrote the buffer");
    }
}
