//! Opening a block device through libblkio: the vhost-user-blk socket of a backend (the guest's
//! view of a virtio-blk device) or a file through libblkio's io_uring driver (the bare
//! baseline), with one queue and one mapped buffer region big enough for every slot.

use crate::error::{BenchError, Result};
use blkio::{Blkio, Blkioq, MemoryRegion};
use std::os::unix::io::RawFd;
use std::path::{Path, PathBuf};

/// How to reach the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A vhost-user-blk UNIX socket (libblkio driver `virtio-blk-vhost-user`).
    VhostUser(PathBuf),
    /// A file or block device opened with libblkio's `io_uring` driver (no virtio path).
    IoUring(PathBuf),
}

impl Endpoint {
    fn driver(&self) -> &'static str {
        match self {
            Self::VhostUser(_) => "virtio-blk-vhost-user",
            Self::IoUring(_) => "io_uring",
        }
    }

    fn path(&self) -> &Path {
        match self {
            Self::VhostUser(p) | Self::IoUring(p) => p,
        }
    }
}

/// A started libblkio instance with one queue and one mapped buffer region.
pub struct Device {
    /// The single queue all requests go through (dropped first: fields drop in order).
    pub queue: Blkioq,
    // Kept alive for the queue and the mapping; libblkio unmaps and frees on drop.
    _blkio: Blkio,
    region: MemoryRegion,
    /// Device size in bytes.
    pub capacity: u64,
}

impl Device {
    /// Connect to `endpoint`, start one queue and map `buf_bytes` of buffer memory.
    ///
    /// # Errors
    /// Any libblkio failure, with what was being done.
    pub fn open(endpoint: &Endpoint, buf_bytes: usize) -> Result<Self> {
        let mut blkio = Blkio::new(endpoint.driver())
            .map_err(|e| BenchError::blkio("instance creation", &e))?;
        let path = endpoint.path().to_string_lossy().into_owned();
        blkio
            .set_str("path", &path)
            .map_err(|e| BenchError::blkio("set path", &e))?;
        if matches!(endpoint, Endpoint::IoUring(_)) {
            blkio
                .set_bool("direct", false)
                .map_err(|e| BenchError::blkio("set direct", &e))?;
        }
        blkio
            .connect()
            .map_err(|e| BenchError::blkio("connect", &e))?;
        blkio
            .set_i32("num-queues", 1)
            .map_err(|e| BenchError::blkio("set num-queues", &e))?;
        let capacity = blkio
            .get_u64("capacity")
            .map_err(|e| BenchError::blkio("capacity", &e))?;
        let mut outcome = blkio.start().map_err(|e| BenchError::blkio("start", &e))?;
        let queue = outcome.queues.pop().ok_or_else(|| BenchError::NotReady {
            target: path.clone(),
            reason: "libblkio started no queue".into(),
        })?;
        let region = map_region(&mut blkio, buf_bytes)?;
        Ok(Self {
            queue,
            _blkio: blkio,
            region,
            capacity,
        })
    }

    /// Start of the buffer region (slot `i` uses `base + i * block_size`).
    #[must_use]
    pub fn buf_base(&self) -> *mut u8 {
        self.region.addr as *mut u8
    }

    /// Length of the buffer region in bytes.
    #[must_use]
    pub fn buf_len(&self) -> usize {
        self.region.len
    }

    /// The queue's completion eventfd (the guest's interrupt line), if it has one.
    #[must_use]
    pub fn completion_fd(&self) -> Option<RawFd> {
        self.queue.get_completion_fd()
    }
}

/// Allocate and map a region of at least `bytes`, rounded up to the driver's alignment and to
/// whole pages.
fn map_region(blkio: &mut Blkio, bytes: usize) -> Result<MemoryRegion> {
    let align = blkio
        .get_u64("mem-region-alignment")
        .map_err(|e| BenchError::blkio("mem-region-alignment", &e))?;
    let align = usize::try_from(align.max(4096)).unwrap_or(4096);
    let len = bytes.max(1).div_ceil(align) * align;
    let region = blkio
        .alloc_mem_region(len)
        .map_err(|e| BenchError::blkio("alloc memory", &e))?;
    blkio
        .map_mem_region(&region)
        .map_err(|e| BenchError::blkio("map memory", &e))?;
    Ok(region)
}
