//! The block device's side of the test harness (feature `test-utils`): virtio-blk requests
//! written by vmirq-vhost's mock guest ([`BlkRequests`]), and [`TestDevice`], a queue engine
//! over a RAM disk wired to a mock guest. Reached as `vmirq_blk::mock_guest`, together with
//! the mock guest itself.

use crate::virtio::HEADER_LEN;
use vm_memory::{Bytes, GuestAddress};
use vmirq_vhost::mock_guest::{Desc, MockGuest, SimulatedCpu, Submitted};

/// virtio-blk requests written by the mock guest.
pub trait BlkRequests {
    /// Submit a virtio-blk request: header (type, sector), data buffers of the given lengths
    /// (device-writable if `write`), and a one-byte status.
    fn submit(&mut self, kind: u32, sector: u64, data_lens: &[u32], write: bool) -> Submitted;

    /// Write a request header at `addr`.
    fn write_header(&self, addr: u64, kind: u32, sector: u64);
}

impl BlkRequests for MockGuest {
    fn submit(&mut self, kind: u32, sector: u64, data_lens: &[u32], write: bool) -> Submitted {
        let hdr = self.alloc(HEADER_LEN);
        self.write_header(hdr, kind, sector);
        let data: Vec<Desc> = data_lens
            .iter()
            .map(|&len| Desc {
                addr: self.alloc(len),
                len,
                write,
            })
            .collect();
        let status = self.alloc_status();
        let mut chain = vec![Desc {
            addr: hdr,
            len: HEADER_LEN,
            write: false,
        }];
        chain.extend_from_slice(&data);
        chain.push(Desc {
            addr: status,
            len: 1,
            write: true,
        });
        let head = self.push_chain(&chain);
        Submitted {
            head,
            status: GuestAddress(status),
            data,
        }
    }

    fn write_header(&self, addr: u64, kind: u32, sector: u64) {
        let mut raw = [0u8; 16];
        raw[..4].copy_from_slice(&kind.to_le_bytes());
        raw[8..].copy_from_slice(&sector.to_le_bytes());
        self.mem
            .write_slice(&raw, GuestAddress(addr))
            .expect("header");
    }
}

/// Settings of a [`TestDevice`].
#[derive(Debug, Clone, Copy)]
pub struct DeviceOpts {
    /// Queue size.
    pub queue_size: u16,
    /// Negotiate EVENT_IDX.
    pub event_idx: bool,
    /// Negotiate VIRTIO_F_RING_INDIRECT_DESC.
    pub indirect_desc: bool,
    /// RAM disk size in bytes.
    pub disk_bytes: u64,
    /// Read-only disk.
    pub read_only: bool,
    /// Moderation policy.
    pub moderation: vmirq_policy::spec::ModerationSpec,
    /// Wait policy.
    pub poll: vmirq_policy::spec::WaitSpec,
    /// Contention gate (off by default, so that polling tests do not depend on the machine).
    pub contention: vmirq_policy::spec::ContentionSpec,
    /// Share of its runnable time the simulated worker thread waits for its CPU, in percent:
    /// what the contention gate sees instead of the real thread's schedstat.
    pub cpu_waited_pct: u64,
    /// Engine bound on batches per event (small values exercise the resume-by-timer path).
    pub max_batches_per_event: usize,
    /// Logical block size of the disk (512, or 4096 as for a 4Kn device).
    pub block_size: u64,
}

impl Default for DeviceOpts {
    fn default() -> Self {
        Self {
            queue_size: 64,
            event_idx: false,
            indirect_desc: true,
            disk_bytes: 1 << 20,
            read_only: false,
            moderation: vmirq_policy::spec::ModerationSpec::None,
            poll: vmirq_policy::spec::WaitSpec::Never,
            contention: vmirq_policy::spec::ContentionSpec::OFF,
            cpu_waited_pct: 0,
            max_batches_per_event: crate::engine::MAX_BATCHES_PER_EVENT,
            block_size: 512,
        }
    }
}

/// A queue engine over a RAM disk, wired to a mock guest.
pub struct TestDevice {
    /// The guest.
    pub guest: MockGuest,
    /// The device queue.
    pub engine: crate::engine::QueueEngine,
    /// Its counters.
    pub counters: std::sync::Arc<crate::counters::BlkQueueCounters>,
}

/// The GET_ID answer of a [`TestDevice`].
pub const TEST_SERIAL: &[u8; 20] = b"mock-serial-0123456\0";

impl TestDevice {
    /// Build a device.
    ///
    /// # Panics
    /// On setup failure (test setup, not guest input).
    #[must_use]
    pub fn new(o: DeviceOpts) -> Self {
        use crate::storage::Disk;
        let disk = crate::storage::RamDisk::new(o.disk_bytes).expect("ram disk");
        let io = disk.open_queue(u32::from(o.queue_size)).expect("queue io");
        Self::with_io(o, io)
    }

    /// Build a device over the storage context `io` (e.g. a [`crate::manual_io::ManualIo`]);
    /// the disk size comes from `o.disk_bytes`.
    ///
    /// # Panics
    /// On setup failure (test setup, not guest input).
    #[must_use]
    pub fn with_io(o: DeviceOpts, io: Box<dyn crate::storage::QueueIo>) -> Self {
        let counters = std::sync::Arc::new(crate::counters::BlkQueueCounters::default());
        let geometry = crate::request::DiskGeometry {
            capacity_bytes: crate::storage::whole_sectors(o.disk_bytes),
            read_only: o.read_only,
            discard: !o.read_only,
            write_zeroes: !o.read_only,
            max_data_bytes: crate::server::MAX_REQUEST_BYTES,
            block_size: o.block_size,
        };
        let parts = crate::engine::EngineParts {
            index: 0,
            io,
            geometry,
            device_id: *TEST_SERIAL,
            moderation: o.moderation.build(),
            waiter: o.poll.build(),
            contention: o.contention.build(),
            cpu: vmirq_vhost::cpustat::CpuSampler::new(Box::new(SimulatedCpu::new(
                o.cpu_waited_pct,
            ))),
            counters: std::sync::Arc::clone(&counters),
            max_batches_per_event: o.max_batches_per_event,
        };
        let mut engine = crate::engine::QueueEngine::new(parts).expect("engine");
        engine.set_indirect_desc(o.indirect_desc);
        Self {
            guest: MockGuest::new(o.queue_size, o.event_idx),
            engine,
            counters,
        }
    }

    /// The guest kicks the queue.
    pub fn kick(&mut self) {
        self.engine.on_kick(&mut self.guest.ring, &self.guest.mem);
    }

    /// The frontend stops the ring (vhost-user GET_VRING_BASE).
    pub fn stop(&mut self) {
        self.engine.on_stop(&mut self.guest.ring, &self.guest.mem);
    }

    /// The storage completion fd became readable.
    pub fn io_ready(&mut self) {
        self.engine.on_io(&mut self.guest.ring, &self.guest.mem);
    }

    /// The hold timer fd became readable (a no-op if it has not expired).
    pub fn timer(&mut self) {
        self.engine.on_timer(&mut self.guest.ring, &self.guest.mem);
    }

    /// Call-eventfd writes so far.
    #[must_use]
    pub fn signals(&self) -> u64 {
        self.guest.ring.signals.get()
    }
}
