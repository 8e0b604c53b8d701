//! Storage backends: where the virtio-blk data lives.
//!
//! A [`Disk`] is shared by all queues; each queue opens its own [`QueueIo`] (for the file
//! backend that is one io_uring per queue, sized to the queue). The queue engine starts each
//! request's [`Io`] with a tag of its own, hands the started operations to the kernel with
//! [`QueueIo::submit`], and collects finished ones with [`QueueIo::reap`], without waiting:
//! the file backend completes asynchronously (its [`QueueIo::completion_fd`] becomes
//! readable, and the worker's epoll wakes the engine), the RAM and null disks complete
//! inside `start`. Data buffers are `iovec`s that point into guest memory; the engine keeps
//! that memory mapped until the operation is reaped.

mod bounce;
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

/// One storage operation.
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
}

// SAFETY: the iovec pointers refer to guest memory, a shared mapping that any thread may
// access; an `Io` is only used by the queue engine that owns it (and by the kernel while it
// is in flight), and the engine keeps the mapping alive until the operation is reaped.
unsafe impl Send for Io {}

impl Io {
    /// An operation without data buffers.
    #[must_use]
    pub fn new(kind: IoKind, offset: u64, len: u64) -> Self {
        Self {
            kind,
            offset,
            len,
            iov: Vec::new(),
        }
    }
}

/// A disk shared by all queues.
pub trait Disk: Send + Sync {
    /// Capacity in bytes (a multiple of [`Disk::block_size`]).
    fn capacity_bytes(&self) -> u64;
    /// Logical block size in bytes: every request's offset and length must be a multiple of
    /// it (512, or 4096 for a 4Kn device opened with O_DIRECT). Advertised as `blk_size`.
    fn block_size(&self) -> u32 {
        512
    }
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

/// A finished operation: the tag it was started with and whether it succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// The caller's tag from [`QueueIo::start`].
    pub tag: u32,
    /// The operation succeeded (whole length transferred, or flush/discard done).
    pub ok: bool,
}

/// Per-queue I/O context.
///
/// Contract: the caller starts at most [`QueueIo::capacity`] operations that have not been
/// reaped yet, with distinct tags below the capacity, and keeps every iovec's guest memory
/// mapped until the operation comes back from [`QueueIo::reap`] or [`QueueIo::wait`].
/// (Not `unsafe`: callers only build iovecs through `guest_io::iovecs` from a memory
/// snapshot they hold until then.)
pub trait QueueIo: Send {
    /// Most operations in flight at once.
    fn capacity(&self) -> usize;
    /// Start `io` under `tag`. Synchronous backends perform it here; its result is returned
    /// by the next [`QueueIo::reap`]. A `Flush` covers every write that finished before it
    /// was started and every write started before it on this queue.
    fn start(&mut self, tag: u32, io: Io);
    /// Hand every started operation to the kernel, without waiting for any.
    fn submit(&mut self);
    /// Append every finished operation to `done`, without blocking.
    fn reap(&mut self, done: &mut Vec<Done>);
    /// Operations started and not yet reaped.
    fn in_flight(&self) -> usize;
    /// An fd that becomes readable when operations finish (level-triggered; [`QueueIo::reap`]
    /// consumes it). `None` for backends that finish everything inside `start`.
    fn completion_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Block until every operation in flight has finished or `timeout_ms` has passed,
    /// appending the finished ones to `done` (used before guest memory may go away).
    fn wait(&mut self, done: &mut Vec<Done>, timeout_ms: u32) {
        let _ = timeout_ms;
        self.reap(done);
    }
}

/// How a backend that finishes every operation inside `start` performs one.
pub(crate) trait Perform: Send {
    /// Do `io`; `true` when it succeeded.
    fn perform(&mut self, io: &Io) -> bool;
}

/// The queue context of a backend that finishes every operation inside `start` (RAM and
/// null disks): results wait in a list until reaped.
pub(crate) struct Immediate<P> {
    perform: P,
    depth: usize,
    finished: Finished,
}

impl<P: Perform> Immediate<P> {
    /// A context of `depth` operations (at least 1) over `perform`.
    pub(crate) fn new(perform: P, depth: u32) -> Self {
        Self {
            perform,
            depth: depth.max(1) as usize,
            finished: Finished::default(),
        }
    }
}

impl<P: Perform> QueueIo for Immediate<P> {
    fn capacity(&self) -> usize {
        self.depth
    }
    fn start(&mut self, tag: u32, io: Io) {
        let ok = self.perform.perform(&io);
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

/// Finished operations of a backend that completes inside `start`.
#[derive(Debug, Default)]
pub(crate) struct Finished(Vec<Done>);

impl Finished {
    /// Record a finished operation.
    pub(crate) fn push(&mut self, tag: u32, ok: bool) {
        self.0.push(Done { tag, ok });
    }
    /// Move every recorded operation to `done`.
    pub(crate) fn drain_into(&mut self, done: &mut Vec<Done>) {
        done.append(&mut self.0);
    }
    /// Recorded and not yet drained.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Round a byte size down to whole sectors.
#[must_use]
pub fn whole_sectors(bytes: u64) -> u64 {
    bytes & !(crate::virtio::SECTOR_SIZE - 1)
}
