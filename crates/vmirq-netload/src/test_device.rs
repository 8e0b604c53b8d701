//! The device side of a ring for unit tests: rust-vmm's `virtio_queue::Queue` (an
//! implementation this crate did not write) on a second mapping of the driver's memfd.

use crate::memory::GuestMemory;
use crate::ring::RingLayout;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap};

/// One available buffer as the device sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avail {
    /// Head descriptor id.
    pub head: u16,
    /// Guest address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Device-writable.
    pub writable: bool,
}

pub struct TestDevice {
    pub gm: GuestMemoryMmap,
    pub q: Queue,
}

impl TestDevice {
    pub fn new(mem: &GuestMemory, layout: RingLayout, event_idx: bool) -> Self {
        let file = mem.try_clone_file().expect("dup memfd");
        let len = usize::try_from(mem.len()).expect("fits");
        let gm = GuestMemoryMmap::from_ranges_with_files([(
            GuestAddress(0),
            len,
            Some(FileOffset::new(file, 0)),
        )])
        .expect("device view");
        let mut q = Queue::new(layout.size).expect("queue");
        q.set_size(layout.size);
        q.try_set_desc_table_address(GuestAddress(layout.desc))
            .expect("desc");
        q.try_set_avail_ring_address(GuestAddress(layout.avail))
            .expect("avail");
        q.try_set_used_ring_address(GuestAddress(layout.used))
            .expect("used");
        q.set_event_idx(event_idx);
        q.set_ready(true);
        assert!(q.is_valid(&gm));
        Self { gm, q }
    }

    /// Pop every available chain (each must be one descriptor).
    pub fn take_all(&mut self) -> Vec<(u16, u64, u32, bool)> {
        self.take()
            .into_iter()
            .map(|a| (a.head, a.addr, a.len, a.writable))
            .collect()
    }

    /// Pop every available chain (each must be one descriptor).
    pub fn take(&mut self) -> Vec<Avail> {
        let mut out = Vec::new();
        let mut iter = self.q.iter(&self.gm).expect("avail iter");
        for chain in iter.by_ref() {
            let head = chain.head_index();
            let descs: Vec<_> = chain.collect();
            assert_eq!(descs.len(), 1, "one descriptor per buffer");
            let d = descs[0];
            out.push(Avail {
                head,
                addr: d.addr().0,
                len: d.len(),
                writable: d.is_write_only(),
            });
        }
        out
    }

    /// Put `head` in the used ring with `len`; true if the driver wants a notification.
    pub fn complete(&mut self, head: u16, len: u32) -> bool {
        self.q.add_used(&self.gm, head, len).expect("add_used");
        self.q
            .needs_notification(&self.gm)
            .expect("needs_notification")
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        self.gm
            .write_slice(data, GuestAddress(addr))
            .expect("in memory");
    }

    pub fn read(&self, addr: u64, len: u32) -> Vec<u8> {
        let mut v = vec![0u8; len as usize];
        self.gm
            .read_slice(&mut v, GuestAddress(addr))
            .expect("in memory");
        v
    }
}
