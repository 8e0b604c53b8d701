//! The raw image file disk, and the blocking file operations the storage backends share
//! (positional reads and writes with short-transfer retries, flush, discard, write-zeroes).
//!
//! Every queue reads and writes the image concurrently through its own io_uring (see
//! `uring.rs`); the kernel does the locking.

use super::uring::UringQueue;
use super::{Disk, Io, IoKind, QueueIo, Result, StorageError};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

/// Bound on retries of a short `preadv`/`pwritev` (each retry must make progress anyway).
const MAX_SHORT_RETRIES: usize = 64;

/// A raw image file.
#[derive(Debug)]
pub struct FileDisk {
    file: Arc<File>,
    capacity: u64,
    path: String,
}

impl FileDisk {
    /// Open `path` (read-only if `read_only`; with O_DIRECT if `direct`). The capacity is the
    /// file size rounded down to whole sectors.
    ///
    /// # Errors
    /// When the file cannot be opened or is smaller than one sector.
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
        let len = file
            .metadata()
            .map_err(|source| StorageError::Open {
                path: shown.clone(),
                source,
            })?
            .len();
        let capacity = super::whole_sectors(len);
        if capacity == 0 {
            return Err(StorageError::Empty);
        }
        Ok(Self {
            file: Arc::new(file),
            capacity,
            path: shown,
        })
    }
}

impl Disk for FileDisk {
    fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
    fn supports_discard(&self) -> bool {
        true
    }
    fn open_queue(&self, depth: u32) -> Result<Box<dyn QueueIo>> {
        Ok(Box::new(UringQueue::new(Arc::clone(&self.file), depth)?))
    }
    fn describe(&self) -> String {
        format!("file:{}", self.path)
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
