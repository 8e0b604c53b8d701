//! Storage backends: where the virtio-blk data lives.
//!
//! A [`Disk`] is shared by all queues; each queue opens its own [`QueueIo`] (for the file
//! backend that is one io_uring per queue, sized to the queue). The queue engine hands a
//! whole batch of [`Io`] operations to [`QueueIo::execute`] at once, which performs them
//! (in parallel where the backend can) and fills in each result before returning. Data
//! buffers are `iovec`s that point into guest memory; the caller keeps that memory mapped
//! for the duration of the call.

mod fd;
mod null;
mod uring;

pub use fd::{FileDisk, RamDisk};
pub use null::NullDisk;

use std::io;

/// Errors from opening or driving a storage backend.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Opening or creating the backing file failed.
    #[error("cannot open disk image {path}")]
    Open {
        /// Path of the image.
        path: String,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A system call on the backing store failed.
    #[error("storage system call failed")]
    Io(#[from] io::Error),
    /// The disk is smaller than one sector.
    #[error("disk is empty or smaller than one sector")]
    Empty,
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, StorageError>;

/// Kind of storage operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// Read `len` bytes at `offset` into the iovecs.
    Read,
    /// Write `len` bytes at `offset` from the iovecs.
    Write,
    /// Make every completed write durable (fdatasync).
    Flush,
    /// Deallocate `len` bytes at `offset`; later reads return zeroes.
    Discard,
    /// Make `len` bytes at `offset` read back as zeroes.
    WriteZeroes,
}

/// One storage operation of a batch.
#[derive(Debug)]
pub struct Io {
    /// What to do.
    pub kind: IoKind,
    /// Byte offset on the disk (checked by the request parser to be inside the disk).
    pub offset: u64,
    /// Byte length (the sum of the iovec lengths for reads and writes).
    pub len: u64,
    /// Data buffers in guest memory for reads and writes.
    pub iov: Vec<libc::iovec>,
    /// Filled by the backend: `true` when the operation succeeded.
    pub ok: bool,
}

impl Io {
    /// An operation without data buffers.
    #[must_use]
    pub fn new(kind: IoKind, offset: u64, len: u64) -> Self {
        Self {
            kind,
            offset,
            len,
            iov: Vec::new(),
            ok: false,
        }
    }
}

/// A disk shared by all queues.
pub trait Disk: Send + Sync {
    /// Capacity in bytes (a multiple of 512).
    fn capacity_bytes(&self) -> u64;
    /// DISCARD and WRITE_ZEROES are supported.
    fn supports_discard(&self) -> bool;
    /// Open the per-queue I/O context for a queue of `depth` entries.
    ///
    /// # Errors
    /// When the backend cannot set up its per-queue resources (e.g. io_uring setup).
    fn open_queue(&self, depth: u32) -> Result<Box<dyn QueueIo>>;
    /// Short description for logs and counters (`ram`, `null`, `file:PATH`).
    fn describe(&self) -> String;
}

/// Per-queue I/O context.
pub trait QueueIo: Send {
    /// Perform every operation of `batch`, setting each `ok`. Operations of one batch may run
    /// in parallel and complete in any order, except that a `Flush` covers every write that
    /// completed before the batch started and every write earlier in the same batch.
    ///
    /// # Safety contract (not `unsafe` because callers only build iovecs through
    /// `guest_io::iovecs`): every iovec points into guest memory that stays mapped until this
    /// returns.
    fn execute(&mut self, batch: &mut [Io]);
}

/// Round a byte size down to whole sectors.
#[must_use]
pub fn whole_sectors(bytes: u64) -> u64 {
    bytes & !(crate::virtio::SECTOR_SIZE - 1)
}
