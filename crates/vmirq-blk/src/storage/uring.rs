//! io_uring queue context for the image-file backend.
//!
//! One ring per virtio queue, with as many entries as the queue. A batch of reads, writes
//! and flushes is pushed as one submission and reaped before `execute` returns, so up to a
//! queue's worth of requests is in flight in the kernel at once. A flush carries
//! `IOSQE_IO_DRAIN`, so it starts only after every earlier entry of the batch completed,
//! then issues `fdatasync` semantics (`IORING_FSYNC_DATASYNC`). DISCARD and WRITE_ZEROES are
//! done with `fallocate` synchronously before the ring batch (requests in flight together
//! have no ordering in virtio).

use super::fd::run_sync;
use super::{Io, IoKind, QueueIo, Result};
use io_uring::{opcode, squeue, types, IoUring};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Ring context of one queue.
pub struct UringQueue {
    file: Arc<File>,
    ring: IoUring,
    depth: usize,
}

impl UringQueue {
    /// A ring of `depth` entries (at least 1) on `file`.
    ///
    /// # Errors
    /// When the kernel refuses to create the ring.
    pub fn new(file: Arc<File>, depth: u32) -> Result<Self> {
        let depth = depth.clamp(1, 4096);
        let ring = IoUring::new(depth)?;
        Ok(Self {
            file,
            ring,
            depth: depth as usize,
        })
    }

    /// Submit `chunk` (at most `depth` entries; indices are into `batch`) and reap it.
    fn run_chunk(&mut self, batch: &mut [Io], chunk: &[usize]) {
        let fd = types::Fd(self.file.as_raw_fd());
        let mut pushed = 0usize;
        for &i in chunk {
            let io = &batch[i];
            let Ok(iov_len) = u32::try_from(io.iov.len()) else {
                continue; // ok stays false
            };
            let entry = match io.kind {
                IoKind::Read => opcode::Readv::new(fd, io.iov.as_ptr(), iov_len)
                    .offset(io.offset)
                    .build(),
                IoKind::Write => opcode::Writev::new(fd, io.iov.as_ptr(), iov_len)
                    .offset(io.offset)
                    .build(),
                IoKind::Flush => opcode::Fsync::new(fd)
                    .flags(types::FsyncFlags::DATASYNC)
                    .build()
                    .flags(squeue::Flags::IO_DRAIN),
                IoKind::Discard | IoKind::WriteZeroes => continue,
            };
            // SAFETY: the iovec array lives in `batch[i].iov`, which is not touched until the
            // completion for this entry is reaped below (we wait for all pushed entries), and
            // the buffers it points to are guest memory the caller keeps mapped (QueueIo
            // contract). The user data is the batch index.
            let pushed_ok = unsafe { self.ring.submission().push(&entry.user_data(i as u64)) };
            if pushed_ok.is_ok() {
                pushed += 1;
            }
        }
        self.reap(batch, pushed);
    }

    /// Wait for `pushed` completions and record their results.
    fn reap(&mut self, batch: &mut [Io], pushed: usize) {
        let mut seen = 0usize;
        // Bounded: each round either reaps at least one completion or fails and stops.
        for _ in 0..=pushed {
            if seen == pushed {
                return;
            }
            if let Err(e) = self.ring.submit_and_wait(pushed - seen) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "io_uring submit failed");
                    break;
                }
            }
            for cqe in self.ring.completion() {
                seen += 1;
                let Ok(i) = usize::try_from(cqe.user_data()) else {
                    continue;
                };
                let Some(io) = batch.get_mut(i) else { continue };
                let res = cqe.result();
                io.ok = match io.kind {
                    IoKind::Read | IoKind::Write => u64::try_from(res).ok() == Some(io.len),
                    _ => res >= 0,
                };
                if !io.ok {
                    tracing::warn!(kind = ?io.kind, offset = io.offset, len = io.len, res, "io_uring operation failed or was short");
                }
                // A short transfer (rare on regular files) is finished synchronously.
                if !io.ok && res >= 0 {
                    io.ok = run_sync(self.file.as_raw_fd(), io).is_ok();
                }
            }
        }
        if seen != pushed {
            // The ring is in an unknown state: drain what is left so no entry refers to a
            // finished batch. submit_and_wait errors above are exceptional (ENOMEM, EFAULT).
            let _ = self.ring.submit_and_wait(pushed - seen);
        }
    }
}

impl QueueIo for UringQueue {
    fn execute(&mut self, batch: &mut [Io]) {
        let fd = self.file.as_raw_fd();
        let mut ring_ops = Vec::with_capacity(batch.len());
        for (i, io) in batch.iter_mut().enumerate() {
            match io.kind {
                IoKind::Discard | IoKind::WriteZeroes => io.ok = run_sync(fd, io).is_ok(),
                _ => ring_ops.push(i),
            }
        }
        let depth = self.depth;
        for chunk in ring_ops.chunks(depth) {
            self.run_chunk(batch, chunk);
        }
    }
}
