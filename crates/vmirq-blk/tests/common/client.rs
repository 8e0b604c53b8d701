//! A libblkio client (driver `virtio-blk-vhost-user`) in interrupt mode, for end-to-end
//! tests. It waits on the queue's completion fd itself and sums the eventfd counter values
//! it reads, so `notifications` is exactly the number of call-eventfd writes the backend
//! made while this client was attached.

use blkio::{Blkio, Blkioq, Completion, MemoryRegion, ReqFlags};
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::path::Path;

/// Longest a test waits for one completion before failing (a hang is a test failure).
const WAIT_TIMEOUT_MS: i32 = 10_000;

pub struct Client {
    blkio: Blkio,
    queues: Vec<Blkioq>,
    region: MemoryRegion,
    /// Call-eventfd writes observed, per queue.
    pub notifications: Vec<u64>,
    /// Requests submitted and not yet reaped, per queue.
    in_flight: Vec<usize>,
}

impl Client {
    /// Attach to `socket` with `queues` queues and a buffer region of `buf_len` bytes.
    pub fn connect(socket: &Path, queues: usize, buf_len: usize) -> blkio::Result<Self> {
        Self::connect_with(socket, queues, buf_len, false)
    }

    /// Like [`Client::connect`]; `read_only` opens the device read-only (libblkio refuses
    /// a read-only device otherwise).
    pub fn connect_with(
        socket: &Path,
        queues: usize,
        buf_len: usize,
        read_only: bool,
    ) -> blkio::Result<Self> {
        let mut blkio = Blkio::new("virtio-blk-vhost-user")?;
        blkio.set_str("path", &socket.display().to_string())?;
        blkio.set_bool("read-only", read_only)?;
        // The socket file appears at bind(), a moment before listen(): a connect in between
        // is refused. Retry that case briefly (bounded).
        let mut tries = 0;
        while let Err(e) = blkio.connect() {
            tries += 1;
            if e.errno() != blkio::Errno::CONNREFUSED || tries > 200 {
                return Err(e);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        blkio.set_i32("num-queues", i32::try_from(queues).unwrap_or(1))?;
        let outcome = blkio.start()?;
        let region = blkio.alloc_mem_region(buf_len)?;
        blkio.map_mem_region(&region)?;
        let mut queues = outcome.queues;
        for q in &mut queues {
            q.set_completion_fd_enabled(true);
        }
        let n = queues.len();
        Ok(Self {
            blkio,
            queues,
            region,
            notifications: vec![0; n],
            in_flight: vec![0; n],
        })
    }

    pub fn capacity(&self) -> u64 {
        self.blkio.get_u64("capacity").unwrap_or(0)
    }

    /// libblkio's `request-alignment` (from the device's `blk_size`).
    pub fn request_alignment(&self) -> i32 {
        self.blkio.get_i32("request-alignment").unwrap_or(0)
    }

    pub fn read_only(&self) -> bool {
        self.blkio.get_bool("read-only").unwrap_or(false)
    }

    /// The buffer region as a byte slice.
    pub fn buf(&mut self) -> &mut [u8] {
        // SAFETY: the region is a live mapping of `len` bytes owned by this client (unmapped
        // only when `blkio` is dropped, after this borrow ends); the device writes it only
        // while a read is in flight, and tests only look at it after reaping.
        unsafe { std::slice::from_raw_parts_mut(self.region.addr as *mut u8, self.region.len) }
    }

    fn ptr(&self, buf_off: usize, len: usize) -> *mut u8 {
        assert!(
            buf_off + len <= self.region.len,
            "buffer slice outside the region"
        );
        (self.region.addr + buf_off) as *mut u8
    }

    pub fn read(&mut self, q: usize, disk_off: u64, buf_off: usize, len: usize, tag: usize) {
        let p = self.ptr(buf_off, len);
        self.queues[q].read(disk_off, p, len, tag, ReqFlags::empty());
        self.in_flight[q] += 1;
    }

    pub fn write(&mut self, q: usize, disk_off: u64, buf_off: usize, len: usize, tag: usize) {
        let p = self.ptr(buf_off, len);
        self.queues[q].write(disk_off, p, len, tag, ReqFlags::empty());
        self.in_flight[q] += 1;
    }

    pub fn flush(&mut self, q: usize, tag: usize) {
        self.queues[q].flush(tag, ReqFlags::empty());
        self.in_flight[q] += 1;
    }

    pub fn discard(&mut self, q: usize, disk_off: u64, len: u64, tag: usize) {
        self.queues[q].discard(disk_off, len, tag, ReqFlags::empty());
        self.in_flight[q] += 1;
    }

    pub fn write_zeroes(&mut self, q: usize, disk_off: u64, len: u64, tag: usize) {
        self.queues[q].write_zeroes(disk_off, len, tag, ReqFlags::empty());
        self.in_flight[q] += 1;
    }

    /// Submit what is queued and wait (sleeping on the completion fd) for at least `min`
    /// completions. Returns `(tag, ret)` pairs.
    pub fn wait(&mut self, q: usize, min: usize) -> Vec<(usize, i32)> {
        let mut done = Vec::new();
        let mut slots: Vec<MaybeUninit<Completion>> =
            (0..256).map(|_| MaybeUninit::uninit()).collect();
        loop {
            let n = self.queues[q]
                .do_io(&mut slots, 0, None, None)
                .expect("do_io");
            for c in &slots[..n] {
                // SAFETY: do_io initialised the first `n` completions.
                let c = unsafe { c.assume_init_ref() };
                done.push((c.user_data, c.ret));
            }
            self.in_flight[q] -= n;
            if done.len() >= min {
                return done;
            }
            let fd = self.queues[q]
                .get_completion_fd()
                .expect("interrupt-mode queue has a completion fd");
            self.notifications[q] += wait_eventfd(fd);
        }
    }

    /// Collect notifications that arrived after their completions were already reaped: read
    /// every completion fd until it stays quiet for `quiet_ms`.
    pub fn settle(&mut self, quiet_ms: i32) {
        for q in 0..self.queues.len() {
            let Some(fd) = self.queues[q].get_completion_fd() else {
                continue;
            };
            loop {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                if unsafe { libc::poll(&mut pfd, 1, quiet_ms) } <= 0 {
                    break;
                }
                self.notifications[q] += wait_eventfd(fd);
            }
        }
    }

    /// Submit and wait for everything in flight on `q`.
    pub fn drain(&mut self, q: usize) -> Vec<(usize, i32)> {
        let n = self.in_flight[q];
        self.wait(q, n)
    }
}

/// Block until the eventfd is readable, read and return its counter.
fn wait_eventfd(fd: RawFd) -> u64 {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, WAIT_TIMEOUT_MS) };
    assert!(
        n > 0,
        "no completion notification within {WAIT_TIMEOUT_MS} ms (lost interrupt?)"
    );
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into `v`; libblkio's completion fd is a non-blocking eventfd.
    let r = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if r == 8 {
        v
    } else {
        0
    }
}
