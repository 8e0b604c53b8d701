//! The null disk: writes are dropped, reads return zeroes, nothing is stored.

use super::{Disk, Immediate, Io, IoKind, Perform, QueueIo, Result, StorageError};

/// A disk of a given size that stores nothing.
#[derive(Debug)]
pub struct NullDisk {
    capacity: u64,
}

impl NullDisk {
    /// A null disk of `bytes` (rounded down to whole sectors).
    ///
    /// # Errors
    /// [`StorageError::Empty`] when smaller than one sector.
    pub fn new(bytes: u64) -> Result<Self> {
        let capacity = super::whole_sectors(bytes);
        if capacity == 0 {
            return Err(StorageError::Empty);
        }
        Ok(Self { capacity })
    }
}

impl Disk for NullDisk {
    fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
    fn supports_discard(&self) -> bool {
        true
    }
    fn open_queue(&self, depth: u32) -> Result<Box<dyn QueueIo>> {
        Ok(Box::new(Immediate::new(Zeroes, depth)))
    }
    fn describe(&self) -> String {
        "null".to_owned()
    }
}

/// The null disk's operations: reads fill the buffers with zeroes, everything succeeds.
struct Zeroes;

impl Perform for Zeroes {
    fn perform(&mut self, io: &Io) -> bool {
        if io.kind == IoKind::Read {
            for v in &io.iov {
                // SAFETY: the caller guarantees every iovec points into mapped guest memory of
                // at least `iov_len` bytes (built by guest_io::iovecs from ranges checked
                // against guest memory) that stays mapped until the operation is reaped.
                unsafe { std::ptr::write_bytes(v.iov_base.cast::<u8>(), 0, v.iov_len) };
            }
        }
        true
    }
}
