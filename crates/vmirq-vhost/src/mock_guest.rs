//! A driver-side mock guest for tests, fuzzing and benches (feature `test-utils`).
//!
//! It owns real guest memory with a split virtqueue, writes descriptor tables and the
//! available ring the way a driver does (including hostile shapes: loops, bad indices, wrong
//! directions, addresses outside memory), and reads the used ring back. A device's queue
//! (e.g. vmirq-blk's `QueueEngine`, which adds its request layout) is driven against it
//! directly, without vhost-user, so every check runs in microseconds.

use crate::Ring;
use std::cell::Cell;
use std::io;
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::{Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

/// Every moderation policy, as a spec with small parameters: the one list the tests run their
/// policy matrices over.
pub const EVERY_MODERATION: &[&str] = &[
    "none",
    "count:usecs=50,frames=32",
    "vic",
    "ipi-gap:gap_us=100",
    "dim",
    "spdk",
    "budget:us=20",
];

/// `VRING_DESC_F_NEXT`.
pub const F_NEXT: u16 = 1;
/// `VRING_DESC_F_WRITE`.
pub const F_WRITE: u16 = 2;
/// `VRING_DESC_F_INDIRECT`.
pub const F_INDIRECT: u16 = 4;

/// Size of the first memory region (rings and data).
pub const REGION0_LEN: u64 = 8 << 20;
/// Start of the second region; the 64 KiB between the regions is a hole.
pub const REGION1_START: u64 = REGION0_LEN + (64 << 10);
/// Size of the second region.
pub const REGION1_LEN: u64 = 1 << 20;
/// Where data buffers are allocated from.
const DATA_START: u64 = 1 << 20;

/// The ring half the engine sees: the queue and a signal counter.
pub struct MockRing {
    /// The device-side queue state.
    pub queue: Queue,
    /// Call-eventfd writes the engine made.
    pub signals: Cell<u64>,
}

impl Ring for MockRing {
    fn queue_mut(&mut self) -> &mut Queue {
        &mut self.queue
    }
    fn signal(&self) -> io::Result<()> {
        self.signals.set(self.signals.get() + 1);
        Ok(())
    }
}

/// One descriptor as a test writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desc {
    /// Buffer address.
    pub addr: u64,
    /// Buffer length.
    pub len: u32,
    /// Device-writable.
    pub write: bool,
}

/// A request submitted by [`MockGuest::submit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// Head descriptor index.
    pub head: u16,
    /// Address of the status byte.
    pub status: GuestAddress,
    /// Data buffers.
    pub data: Vec<Desc>,
}

/// The mock guest.
pub struct MockGuest {
    /// Guest memory (shared, as the engine keeps it alive for requests in flight).
    pub mem: std::sync::Arc<GuestMemoryMmap>,
    /// The ring half handed to the engine.
    pub ring: MockRing,
    desc_table: GuestAddress,
    avail: GuestAddress,
    used: GuestAddress,
    size: u16,
    next_desc: u16,
    avail_idx: u16,
    used_seen: u16,
    data_start: u64,
    data_end: u64,
    data_next: u64,
    /// Highest address any data buffer reached.
    data_high: u64,
}

/// Where a [`MockGuest`] puts its rings and data buffers in region 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Guest address of the descriptor table (the rings follow it).
    pub ring_base: u64,
    /// Data buffers are allocated from `[data_start, data_end)`.
    pub data_start: u64,
    /// End of the data area.
    pub data_end: u64,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            ring_base: 0,
            data_start: DATA_START,
            data_end: REGION0_LEN,
        }
    }
}

/// Bytes past the last allocated buffer (and at the start of region 1) that a [`Canary`]
/// fills with a pattern and checks.
const CANARY_SLACK: u64 = 64 << 10;

/// A copy of the guest memory the device may not write, taken before requests are handed
/// over: the descriptor table and available ring, every data buffer allocated so far plus
/// [`CANARY_SLACK`] bytes after them, and the start of region 1.
#[derive(Debug, Clone)]
pub struct Canary {
    rings: Vec<u8>,
    data: Vec<u8>,
    region1: Vec<u8>,
}

impl MockGuest {
    /// A guest with one queue of `size` entries (a power of two). `event_idx` negotiates
    /// VIRTIO_F_EVENT_IDX on the queue.
    ///
    /// # Panics
    /// If guest memory or the queue cannot be set up (test setup failure).
    #[must_use]
    pub fn new(size: u16, event_idx: bool) -> Self {
        let mem = GuestMemoryMmap::from_ranges(&[
            (
                GuestAddress(0),
                usize::try_from(REGION0_LEN).expect("64-bit host"),
            ),
            (
                GuestAddress(REGION1_START),
                usize::try_from(REGION1_LEN).expect("64-bit host"),
            ),
        ])
        .expect("guest memory");
        Self::on_memory(std::sync::Arc::new(mem), size, event_idx, Layout::default())
    }

    /// A guest whose queue lives in `mem` (which must contain region 0 as [`MockGuest::new`]
    /// lays it out) at `layout`: several guests can share one memory, e.g. one per queue of
    /// a device reached over vhost-user.
    ///
    /// # Panics
    /// If the rings cannot be written or the queue set up (test setup failure).
    #[must_use]
    pub fn on_memory(
        mem: std::sync::Arc<GuestMemoryMmap>,
        size: u16,
        event_idx: bool,
        layout: Layout,
    ) -> Self {
        // Ring layout: descriptor table at the ring base, available ring right after it, used
        // ring after the available ring (4-byte aligned). virtio-queue's MockSplitQueue is not
        // used for the layout: its `SplitQueueRing::end()` adds the element count instead of
        // the byte size, so its used ring overlaps the upper half of the available ring (found
        // by tests/random_chains.rs).
        let desc_table = GuestAddress(layout.ring_base);
        let avail = GuestAddress(layout.ring_base + 16 * u64::from(size));
        let used = GuestAddress((avail.0 + 6 + 2 * u64::from(size)).next_multiple_of(4));
        let ring_bytes = used.0 + 6 + 8 * u64::from(size) - layout.ring_base;
        let zeros = vec![0u8; usize::try_from(ring_bytes).expect("ring size")];
        mem.write_slice(&zeros, desc_table).expect("zero rings");
        let mut queue = Queue::new(size).expect("queue");
        queue.set_size(size);
        queue
            .try_set_desc_table_address(desc_table)
            .expect("desc table address");
        queue
            .try_set_avail_ring_address(avail)
            .expect("avail ring address");
        queue
            .try_set_used_ring_address(used)
            .expect("used ring address");
        queue.set_ready(true);
        queue.set_event_idx(event_idx);
        let ring = MockRing {
            queue,
            signals: Cell::new(0),
        };
        Self {
            mem,
            ring,
            desc_table,
            avail,
            used,
            size,
            next_desc: 0,
            avail_idx: 0,
            used_seen: 0,
            data_start: layout.data_start,
            data_end: layout.data_end,
            data_next: layout.data_start,
            data_high: layout.data_start,
        }
    }

    /// Guest addresses of the descriptor table, available ring and used ring.
    #[must_use]
    pub fn ring_addresses(&self) -> [u64; 3] {
        [self.desc_table.0, self.avail.0, self.used.0]
    }

    /// The available index the driver published last.
    #[must_use]
    pub fn avail_idx(&self) -> u16 {
        self.avail_idx
    }

    /// The used index in guest memory (what the device published).
    #[must_use]
    pub fn used_idx(&self) -> u16 {
        self.mem
            .read_obj(self.used.unchecked_add(2))
            .map(u16::from_le)
            .unwrap_or(0)
    }

    /// Replace the device side of the queue as a new backend would set it up after a
    /// restart: same addresses, next available index `next_avail` (the vhost-user
    /// SET_VRING_BASE value), next used index read from the used ring. The driver side
    /// (rings in guest memory, what the driver has seen) is unchanged.
    ///
    /// # Panics
    /// If the queue cannot be set up (test setup).
    pub fn restart_device_side(&mut self, next_avail: u16) {
        let mut queue = Queue::new(self.size).expect("queue");
        queue.set_size(self.size);
        queue
            .try_set_desc_table_address(self.desc_table)
            .expect("desc table address");
        queue
            .try_set_avail_ring_address(self.avail)
            .expect("avail ring address");
        queue
            .try_set_used_ring_address(self.used)
            .expect("used ring address");
        queue.set_event_idx(self.ring.queue.event_idx_enabled());
        queue.set_next_avail(next_avail);
        queue.set_next_used(self.used_idx());
        queue.set_ready(true);
        self.ring.queue = queue;
    }

    /// Queue size.
    #[must_use]
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Allocate `len` bytes of zeroed data buffer in region 0 (wraps around when full).
    pub fn alloc(&mut self, len: u32) -> u64 {
        let len = u64::from(len).max(1).next_multiple_of(64);
        if self.data_next + len > self.data_end {
            self.data_next = self.data_start;
        }
        let addr = self.data_next;
        self.data_next += len;
        self.data_high = self.data_high.max(self.data_next);
        let zeros = vec![0u8; usize::try_from(len).unwrap_or(0)];
        self.mem
            .write_slice(&zeros, GuestAddress(addr))
            .expect("zero buffer");
        addr
    }

    /// Write descriptor `index` of the table as given (no checks: hostile shapes allowed).
    pub fn write_desc(&self, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = self.desc_table.unchecked_add(u64::from(index) * 16);
        let d = RawDescriptor::from(SplitDescriptor::new(addr, len, flags, next));
        self.mem.write_obj(d, at).expect("descriptor write");
    }

    /// Write descriptor `index` of an indirect table at `table`.
    pub fn write_indirect(
        &self,
        table: u64,
        index: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    ) {
        let d = RawDescriptor::from(SplitDescriptor::new(addr, len, flags, next));
        self.mem
            .write_obj(d, GuestAddress(table + u64::from(index) * 16))
            .expect("indirect descriptor write");
    }

    /// Offer `head` in the available ring (any value: hostile heads allowed).
    pub fn publish(&mut self, head: u16) {
        let slot = u64::from(self.avail_idx % self.size);
        self.mem
            .write_obj(head.to_le(), self.avail.unchecked_add(4 + 2 * slot))
            .expect("avail ring write");
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.mem
            .write_obj(self.avail_idx.to_le(), self.avail.unchecked_add(2))
            .expect("avail idx write");
    }

    /// Set the available ring's `flags` (bit 0: VRING_AVAIL_F_NO_INTERRUPT).
    pub fn set_avail_flags(&self, flags: u16) {
        self.mem
            .write_obj(flags.to_le(), self.avail)
            .expect("avail flags write");
    }

    /// Overwrite the available ring's `idx` (a hostile driver may write anything there).
    pub fn set_avail_idx(&mut self, idx: u16) {
        self.avail_idx = idx;
        self.mem
            .write_obj(idx.to_le(), self.avail.unchecked_add(2))
            .expect("avail idx write");
    }

    /// Write `descs` as one chain at consecutive table entries and publish it.
    pub fn push_chain(&mut self, descs: &[Desc]) -> u16 {
        let head = self.next_desc;
        for (i, d) in descs.iter().enumerate() {
            let index = (head + u16::try_from(i).unwrap_or(0)) % self.size;
            let last = i + 1 == descs.len();
            let flags = if d.write { F_WRITE } else { 0 } | if last { 0 } else { F_NEXT };
            self.write_desc(index, d.addr, d.len, flags, (index + 1) % self.size);
        }
        let n = u16::try_from(descs.len()).unwrap_or(0);
        self.next_desc = (head + n) % self.size;
        self.publish(head);
        head
    }

    /// New used-ring entries since the last call: `(id, len)`.
    pub fn take_used(&mut self) -> Vec<(u32, u32)> {
        let idx: u16 = self
            .mem
            .read_obj(self.used.unchecked_add(2))
            .map(u16::from_le)
            .unwrap_or(0);
        let mut out = Vec::new();
        while self.used_seen != idx {
            let slot = u64::from(self.used_seen % self.size);
            let at = self.used.unchecked_add(4 + 8 * slot);
            let id: u32 = self.mem.read_obj(at).map(u32::from_le).unwrap_or(u32::MAX);
            let len: u32 = self
                .mem
                .read_obj(at.unchecked_add(4))
                .map(u32::from_le)
                .unwrap_or(u32::MAX);
            out.push((id, len));
            self.used_seen = self.used_seen.wrapping_add(1);
        }
        out
    }

    /// Used-ring entries read back so far (the driver's last seen used index).
    #[must_use]
    pub fn used_seen(&self) -> u16 {
        self.used_seen
    }

    /// Set `used_event` (the driver's EVENT_IDX threshold: notify when the used index passes it).
    pub fn set_used_event(&self, v: u16) {
        let at = self.avail.unchecked_add(4 + 2 * u64::from(self.size));
        self.mem.write_obj(v.to_le(), at).expect("used_event write");
    }

    /// Allocate a one-byte status buffer poisoned with 0xFF.
    pub fn alloc_status(&mut self) -> u64 {
        let st = self.alloc(1);
        self.mem
            .write_obj(0xFFu8, GuestAddress(st))
            .expect("status poison");
        st
    }

    /// Offer a command chain: `bytes` in a new device-readable buffer, then a one-byte
    /// device-writable status buffer poisoned with 0xFF (a virtio-net control command and
    /// its ack, for example). Returns the status byte's address.
    pub fn push_command(&mut self, bytes: &[u8]) -> u64 {
        let len = u32::try_from(bytes.len()).expect("a command fits a descriptor");
        let addr = self.alloc(len);
        self.mem_write(addr, bytes);
        let status = self.alloc_status();
        self.push_chain(&[
            Desc {
                addr,
                len,
                write: false,
            },
            Desc {
                addr: status,
                len: 1,
                write: true,
            },
        ]);
        status
    }

    /// Read the byte at `addr`.
    #[must_use]
    pub fn byte_at(&self, addr: u64) -> u8 {
        self.mem.read_obj(GuestAddress(addr)).unwrap_or(0xFF)
    }

    /// Write `descs` (addr, len, flags without NEXT) as a chain starting at table index
    /// `base`, linking each to the next index, and publish it. For hand-built hostile chains.
    pub fn push_raw(&mut self, base: u16, descs: &[(u64, u32, u16)]) {
        for (i, &(addr, len, flags)) in descs.iter().enumerate() {
            let index = base + u16::try_from(i).unwrap_or(0);
            let next = if i + 1 < descs.len() { F_NEXT } else { 0 };
            self.write_desc(index, addr, len, flags | next, index + 1);
        }
        self.publish(base);
    }

    /// Read the status byte of a request.
    #[must_use]
    pub fn status(&self, s: &Submitted) -> u8 {
        self.mem.read_obj(s.status).unwrap_or(0xFF)
    }

    /// Write raw bytes at `addr`.
    pub fn mem_write(&self, addr: u64, bytes: &[u8]) {
        self.mem
            .write_slice(bytes, GuestAddress(addr))
            .expect("write");
    }

    /// Fill a buffer with bytes.
    pub fn fill(&self, d: &Desc, byte: u8) {
        let buf = vec![byte; usize::try_from(d.len).unwrap_or(0)];
        self.mem
            .write_slice(&buf, GuestAddress(d.addr))
            .expect("fill");
    }

    /// Fill the bytes after the allocated buffers (and the start of region 1) with a
    /// pattern and copy everything the device may not write. Allocate every buffer of the
    /// requests to check before this call.
    #[must_use]
    pub fn canary(&self) -> Canary {
        let slack_end = (self.data_high + CANARY_SLACK).min(self.data_end);
        let pattern =
            |len: u64| -> Vec<u8> { (0..len).map(|i| 0x5A ^ i.to_le_bytes()[0]).collect() };
        self.mem_write(self.data_high, &pattern(slack_end - self.data_high));
        self.mem_write(REGION1_START, &pattern(CANARY_SLACK));
        Canary {
            rings: self.read_range(self.desc_table.0, self.used.0),
            data: self.read_range(self.data_start, slack_end),
            region1: self.read_range(REGION1_START, REGION1_START + CANARY_SLACK),
        }
    }

    /// Panic if a byte covered by `c` changed outside the `allowed` ranges (`[start, end)`:
    /// the device-writable buffers handed over).
    pub fn assert_canary(&self, c: &Canary, allowed: &[(u64, u64)]) {
        let check = |start: u64, before: &[u8], what: &str| {
            let now = self.read_range(start, start + before.len() as u64);
            for (i, (a, b)) in before.iter().zip(&now).enumerate() {
                let addr = start + i as u64;
                if a != b && !allowed.iter().any(|&(s, e)| addr >= s && addr < e) {
                    panic!("{what} byte at {addr:#x} changed from {a:#x} to {b:#x}");
                }
            }
        };
        check(
            self.desc_table.0,
            &c.rings,
            "descriptor table / available ring",
        );
        check(self.data_start, &c.data, "guest memory");
        check(REGION1_START, &c.region1, "region 1");
    }

    fn read_range(&self, start: u64, end: u64) -> Vec<u8> {
        let mut buf = vec![0u8; usize::try_from(end - start).expect("range")];
        self.mem
            .read_slice(&mut buf, GuestAddress(start))
            .expect("read range");
        buf
    }

    /// Read a buffer.
    #[must_use]
    pub fn read(&self, d: &Desc) -> Vec<u8> {
        let mut buf = vec![0u8; usize::try_from(d.len).unwrap_or(0)];
        self.mem
            .read_slice(&mut buf, GuestAddress(d.addr))
            .expect("read");
        buf
    }
}

/// A worker thread's CPU as the contention gate would see it: runnable all the time (it
/// polls), waiting `waited_pct` percent of it, by the wall clock.
#[derive(Debug)]
pub struct SimulatedCpu {
    start: vmirq_policy::Nanos,
    waited_pct: u64,
}

impl SimulatedCpu {
    /// Waiting `waited_pct` percent (at most 100) of the time from now on.
    #[must_use]
    pub fn new(waited_pct: u64) -> Self {
        Self {
            start: crate::clock::now_ns(),
            waited_pct: waited_pct.min(100),
        }
    }
}

impl crate::cpustat::CpuSource for SimulatedCpu {
    fn read(&mut self) -> Option<crate::cpustat::CpuTotals> {
        let t = crate::clock::now_ns().saturating_sub(self.start);
        let waited = t / 100 * self.waited_pct;
        Some(crate::cpustat::CpuTotals {
            ran_ns: t - waited,
            waited_ns: waited,
            process_ns: t - waited,
        })
    }
}
