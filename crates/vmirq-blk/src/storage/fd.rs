//! File-descriptor disks: the RAM disk (a sealed-size memfd) and the raw image (a regular
//! file or a block device).
//!
//! Both keep their data behind a file descriptor, so every queue can read and write it
//! concurrently with positional system calls and the kernel does the locking. The RAM disk
//! uses plain `preadv`/`pwritev` (a memory copy, no waiting); the image file uses one
//! io_uring per queue (see `uring.rs`) so that a batch of requests is in flight at once.

use super::uring::UringQueue;
use super::{Disk, Immediate, Io, IoKind, Perform, QueueIo, Result, StorageError};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

/// Bound on retries of a short `preadv`/`pwritev` (each retry must make progress anyway).
const MAX_SHORT_RETRIES: usize = 64;

/// A RAM disk backed by an anonymous memory file.
#[derive(Debug)]
pub struct RamDisk {
    file: Arc<File>,
    capacity: u64,
}

impl RamDisk {
    /// A zero-filled RAM disk of `bytes` (rounded down to whole sectors). Memory is only
    /// used for sectors that are written.
    ///
    /// # Errors
    /// When the memory file cannot be created or sized, or the size is below one sector.
    pub fn new(bytes: u64) -> Result<Self> {
        let capacity = super::whole_sectors(bytes);
        if capacity == 0 {
            return Err(StorageError::Empty);
        }
        // SAFETY: the name is a valid NUL-terminated string and the flags are valid; the
        // return value is checked before use.
        let fd = unsafe { libc::memfd_create(c"vmirq-ram".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: `fd` was just returned by memfd_create, is valid and owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(capacity)?;
        Ok(Self {
            file: Arc::new(file),
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
        Ok(Box::new(Immediate::new(
            SyncFile(Arc::clone(&self.file)),
            depth,
        )))
    }
    fn describe(&self) -> String {
        "ram".to_owned()
    }
}

/// A raw image: a regular file or a block device.
#[derive(Debug)]
pub struct FileDisk {
    file: Arc<File>,
    capacity: u64,
    path: String,
    /// Buffer alignment direct I/O needs, when opened with O_DIRECT.
    mem_align: Option<usize>,
    /// Logical block size (4096 for a 4Kn device under O_DIRECT, else 512).
    block_size: u32,
}

impl FileDisk {
    /// Open `path` (read-only if `read_only`; with O_DIRECT if `direct`, probing the buffer
    /// alignment and the logical block size direct reads need). The capacity is the file's
    /// or device's size rounded down to whole blocks.
    ///
    /// # Errors
    /// When the file cannot be opened, is smaller than one sector, or (with `direct`) cannot
    /// be read with O_DIRECT.
    pub fn open(path: &std::path::Path, read_only: bool, direct: bool) -> Result<Self> {
        let shown = path.display().to_string();
        let mut opts = OpenOptions::new();
        opts.read(true).write(!read_only);
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = opts.open(path).map_err(|source| StorageError::Open {
            path: shown.clone(),
            source,
        })?;
        // The end offset, not the metadata length: a block device's metadata says 0.
        let len = (&file)
            .seek(SeekFrom::End(0))
            .map_err(|source| StorageError::Open {
                path: shown.clone(),
                source,
            })?;
        let mut capacity = super::whole_sectors(len);
        if capacity == 0 {
            return Err(StorageError::Empty);
        }
        // O_DIRECT: the logical block size (offsets and lengths), then the buffer alignment
        // a read of one block needs.
        let (block_size, mem_align) = if direct {
            let fd = file.as_raw_fd();
            let probed = super::bounce::probe_block_size(fd, capacity).and_then(|block| {
                super::bounce::probe_memory_alignment(fd, block).map(|align| (block, align))
            });
            let (block, align) = probed.map_err(|source| StorageError::Open {
                path: shown.clone(),
                source,
            })?;
            tracing::debug!(path = %shown, block, align, "O_DIRECT block size and buffer alignment");
            (u32::try_from(block).unwrap_or(512), Some(align))
        } else {
            (512, None)
        };
        capacity -= capacity % u64::from(block_size);
        if capacity == 0 {
            return Err(StorageError::Empty);
        }
        Ok(Self {
            file: Arc::new(file),
            capacity,
            path: shown,
            mem_align,
            block_size,
        })
    }
}

impl Disk for FileDisk {
    fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn supports_discard(&self) -> bool {
        true
    }
    fn open_queue(&self, depth: u32) -> Result<Box<dyn QueueIo>> {
        Ok(Box::new(UringQueue::new(
            Arc::clone(&self.file),
            depth,
            self.mem_align,
        )?))
    }
    fn describe(&self) -> String {
        format!("file:{}", self.path)
    }
}

/// Synchronous positional I/O on a shared file (the RAM disk's operations): a memory copy,
/// so every operation finishes inside `start`.
struct SyncFile(Arc<File>);

impl Perform for SyncFile {
    fn perform(&mut self, io: &Io) -> bool {
        run_sync(self.0.as_raw_fd(), io).is_ok()
    }
}

/// Perform one operation with blocking system calls.
pub(super) fn run_sync(fd: RawFd, io: &Io) -> io::Result<()> {
    match io.kind {
        IoKind::Read => rw_all(fd, &io.iov, io.offset, false),
        IoKind::Write => rw_all(fd, &io.iov, io.offset, true),
        // SAFETY: fdatasync on a valid fd has no memory effects.
        IoKind::Flush => check(unsafe { libc::fdatasync(fd) }),
        IoKind::Discard => punch_hole(fd, io.offset, io.len),
        IoKind::WriteZeroes => zero_range(fd, io.offset, io.len),
    }
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn to_off(v: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
}

/// Deallocate a range; reads of it return zeroes afterwards.
pub(super) fn punch_hole(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate on a valid fd with in-range arguments has no memory effects.
    check(unsafe { libc::fallocate(fd, mode, to_off(offset)?, to_off(len)?) })
}

/// Zero a range: ZERO_RANGE where the filesystem has it, else punch a hole (same result for
/// readers, possibly fewer allocated blocks).
pub(super) fn zero_range(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let mode = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate on a valid fd with in-range arguments has no memory effects.
    let ret = unsafe { libc::fallocate(fd, mode, to_off(offset)?, to_off(len)?) };
    match check(ret) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => punch_hole(fd, offset, len),
        other => other,
    }
}

/// `preadv`/`pwritev` the whole iovec list, retrying short transfers a bounded number of times.
fn rw_all(fd: RawFd, iov: &[libc::iovec], offset: u64, write: bool) -> io::Result<()> {
    let mut left: Vec<libc::iovec> = iov.iter().copied().filter(|v| v.iov_len > 0).collect();
    let mut pos = offset;
    for _ in 0..MAX_SHORT_RETRIES {
        if left.is_empty() {
            return Ok(());
        }
        let count = libc::c_int::try_from(left.len().min(1024))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `left` holds iovecs into guest memory that the caller keeps mapped (the
        // QueueIo contract); the kernel reads or writes at most `iov_len` bytes of each.
        let n = unsafe {
            if write {
                libc::pwritev(fd, left.as_ptr(), count, to_off(pos)?)
            } else {
                libc::preadv(fd, left.as_ptr(), count, to_off(pos)?)
            }
        };
        let done = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if done == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        pos += done as u64;
        advance(&mut left, done);
    }
    Err(io::Error::from(io::ErrorKind::WriteZero))
}

/// Drop `done` bytes from the front of an iovec list.
pub(super) fn advance(iov: &mut Vec<libc::iovec>, mut done: usize) {
    let mut skip = 0;
    for v in iov.iter_mut() {
        if done >= v.iov_len {
            done -= v.iov_len;
            skip += 1;
        } else {
            // SAFETY: `done < iov_len`, so the new base stays inside the same buffer.
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(done) }.cast();
            v.iov_len -= done;
            break;
        }
    }
    iov.drain(..skip);
}
