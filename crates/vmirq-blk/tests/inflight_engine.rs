//! Restart without losing I/O, at the engine: a queue engine marks what it takes in an
//! inflight area; the "process" dies (the engine is leaked with its storage operations never
//! run, or dropped after storage finished but before completion); a new engine over the same
//! disk, guest memory and area resubmits what was marked. Every request must complete
//! exactly once with the right data, whatever ring position the frontend restarts from.
#![allow(missing_docs)]

use std::sync::Arc;
use vhost::vhost_user::message::VhostUserInflight;
use vmirq_blk::inflight::area::{self, AreaLimits, InflightArea, QueueLog};
use vmirq_blk::inflight::QueueSlot;
use vmirq_blk::manual_io::{manual_io_on, ManualIoHandle};
use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{DeviceOpts, MockGuest, Submitted, TestDevice, EVERY_MODERATION};
use vmirq_blk::storage::RamDisk;
use vmirq_blk::virtio::{req, status};

const SECTOR: u32 = 512;
const QUEUE: u16 = 64;

fn area(queue_size: u16) -> Arc<InflightArea> {
    let (file, len) = area::create(1, queue_size).expect("memfd");
    let msg = VhostUserInflight::new(len, 0, 1, queue_size);
    let limits = AreaLimits {
        max_queues: 1,
        max_queue_size: 1024,
    };
    InflightArea::map(file, &msg, limits).expect("map")
}

/// A backend "process": an engine over `disk` whose storage finishes only when told.
struct Backend {
    dev: TestDevice,
    io: ManualIoHandle,
    slot: Arc<QueueSlot>,
}

impl Backend {
    fn start(disk: &RamDisk, area: &Arc<InflightArea>, capacity: usize, moderation: &str) -> Self {
        let (io, handle) = manual_io_on(disk, capacity);
        let opts = DeviceOpts {
            queue_size: QUEUE,
            disk_bytes: 1 << 20,
            moderation: moderation.parse().expect("spec"),
            ..DeviceOpts::default()
        };
        let mut dev = TestDevice::with_io(opts, Box::new(io));
        let slot = Arc::new(QueueSlot::new());
        slot.install(area.queue(0));
        dev.engine.attach_inflight(Arc::clone(&slot));
        Self {
            dev,
            io: handle,
            slot,
        }
    }

    /// Take over the guest of a dead backend, restart the ring from `base` as the frontend
    /// does (SET_VRING_BASE), and start it (the relay's SET_VRING_KICK handling).
    fn adopt(&mut self, guest: MockGuest, base: u16) {
        self.dev.guest = guest;
        self.dev.guest.restart_device_side(base);
        self.slot.ring_started();
        self.dev.kick();
    }

    fn finish_all(&mut self) {
        while self.io.started() > 0 {
            let _ = self.io.finish(usize::MAX);
            self.dev.io_ready();
        }
    }

    /// The guest survives; the backend dies without completing anything it started.
    fn sigkill(mut self) -> MockGuest {
        let guest = std::mem::replace(&mut self.dev.guest, MockGuest::new(QUEUE, false));
        // A killed process runs no destructor: storage never finishes, nothing completes.
        std::mem::forget(self);
        guest
    }

    /// The backend goes away after storage finished, before the completions were published
    /// (the engine's teardown waits for storage and then forgets the requests).
    fn disconnect(mut self) -> MockGuest {
        std::mem::replace(&mut self.dev.guest, MockGuest::new(QUEUE, false))
    }
}

fn write(g: &mut MockGuest, sector: u64, byte: u8) -> Submitted {
    let s = g.submit(req::OUT, sector, &[SECTOR], false);
    g.fill(&s.data[0], byte);
    s
}

/// Read `n` sectors back through a fresh backend and return their first bytes.
fn read_back(disk: &RamDisk, n: u64) -> Vec<u8> {
    let mut b = Backend::start(disk, &area(QUEUE), 64, "none");
    let reads: Vec<Submitted> = (0..n)
        .map(|i| b.dev.guest.submit(req::IN, i, &[SECTOR], true))
        .collect();
    b.dev.kick();
    b.finish_all();
    assert_eq!(b.dev.guest.take_used().len() as u64, n);
    reads
        .iter()
        .map(|r| {
            assert_eq!(b.dev.guest.status(r), status::OK);
            let data = b.dev.guest.read(&r.data[0]);
            assert!(data.iter().all(|&x| x == data[0]), "torn sector");
            data[0]
        })
        .collect()
}

/// Every head in `heads` completed exactly once, with status OK.
fn assert_exactly_once(g: &MockGuest, used: &[(u32, u32)], reqs: &[Submitted]) {
    let mut ids: Vec<u32> = used.iter().map(|&(id, _)| id).collect();
    ids.sort_unstable();
    let mut want: Vec<u32> = reqs.iter().map(|s| u32::from(s.head)).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "completions are not exactly the submitted heads");
    for s in reqs {
        assert_eq!(g.status(s), status::OK, "head {}", s.head);
    }
}

/// Crash with marked requests (3 of 8 completed, 2 more published and never taken), restart
/// the ring from `base`, and check that all 10 complete once with their data on the disk.
fn crash_and_restart(base_of: impl Fn(&MockGuest) -> u16, kill: bool, moderation: &str) {
    let disk = RamDisk::new(1 << 20).expect("disk");
    let shared = area(QUEUE);
    let mut b1 = Backend::start(&disk, &shared, 64, moderation);
    b1.slot.ring_started();
    b1.dev.kick(); // the ring starts with a fresh area
    let mut reqs: Vec<Submitted> = (0u8..8)
        .map(|i| write(&mut b1.dev.guest, u64::from(i), 0x10 + i))
        .collect();
    b1.dev.kick();
    assert_eq!(b1.io.started(), 8);
    let _ = b1.io.finish(3);
    b1.dev.io_ready();
    let mut used = b1.dev.guest.take_used();
    assert_eq!(used.len(), 3);
    let log: QueueLog = shared.queue(0).expect("log");
    assert_eq!(log.marked(QUEUE).len(), 5, "taken and not completed");
    reqs.extend((8u8..10).map(|i| write(&mut b1.dev.guest, u64::from(i), 0x10 + i)));
    let guest = if kill { b1.sigkill() } else { b1.disconnect() };
    assert_eq!(log.marked(QUEUE).len(), 5);

    let mut b2 = Backend::start(&disk, &shared, 64, moderation);
    let base = base_of(&guest);
    b2.adopt(guest, base);
    b2.dev.kick(); // the guest's own kick for the two new requests (may find nothing)
    b2.finish_all();
    used.extend(b2.dev.guest.take_used());
    assert_exactly_once(&b2.dev.guest, &used, &reqs);
    assert!(
        log.marked(QUEUE).is_empty(),
        "marks left: {:?}",
        log.marked(QUEUE)
    );
    assert!(b2.dev.signals() >= 1, "no notification after the restart");
    drop(b2);
    let expect: Vec<u8> = (0..10).map(|i| 0x10 + i).collect();
    assert_eq!(read_back(&disk, 10), expect);
}

#[test]
fn sigkilled_backend_restarted_from_the_used_index_resubmits_exactly_once() {
    // QEMU after losing the backend: SET_VRING_BASE = used index.
    crash_and_restart(MockGuest::used_idx, true, "none");
}

#[test]
fn sigkilled_backend_restarted_from_the_avail_index_resubmits_exactly_once() {
    crash_and_restart(MockGuest::avail_idx, true, "none");
}

#[test]
fn backend_gone_after_storage_finished_resubmits_exactly_once() {
    crash_and_restart(MockGuest::used_idx, false, "none");
}

#[test]
fn restart_under_every_moderation_policy() {
    // `none` is the other tests' policy.
    for &m in EVERY_MODERATION.iter().filter(|m| **m != "none") {
        crash_and_restart(MockGuest::used_idx, true, m);
    }
}

#[test]
fn resubmission_waits_for_free_tags() {
    let disk = RamDisk::new(1 << 20).expect("disk");
    let shared = area(QUEUE);
    let mut b1 = Backend::start(&disk, &shared, 64, "none");
    b1.slot.ring_started();
    let reqs: Vec<Submitted> = (0u8..12)
        .map(|i| write(&mut b1.dev.guest, u64::from(i), 0x40 + i))
        .collect();
    b1.dev.kick();
    assert_eq!(b1.io.started(), 12);
    let guest = b1.sigkill();
    // The new backend has 4 tags for 12 resubmissions.
    let mut b2 = Backend::start(&disk, &shared, 4, "none");
    let base = guest.used_idx();
    b2.adopt(guest, base);
    assert_eq!(b2.io.started(), 4);
    assert_eq!(b2.dev.engine.resubmit_pending(), 8);
    b2.finish_all();
    let used = b2.dev.guest.take_used();
    assert_exactly_once(&b2.dev.guest, &used, &reqs);
    drop(b2);
    let expect: Vec<u8> = (0..12).map(|i| 0x40 + i).collect();
    assert_eq!(read_back(&disk, 12), expect);
}

#[test]
fn clean_stop_leaves_nothing_to_resubmit() {
    let disk = RamDisk::new(1 << 20).expect("disk");
    let shared = area(QUEUE);
    let mut b1 = Backend::start(&disk, &shared, 64, "vic");
    b1.slot.ring_started();
    let reqs: Vec<Submitted> = (0u8..6)
        .map(|i| write(&mut b1.dev.guest, u64::from(i), 0x70 + i))
        .collect();
    b1.dev.kick();
    b1.dev.stop(); // GET_VRING_BASE: storage finishes, every request completes
    let used = b1.dev.guest.take_used();
    assert_exactly_once(&b1.dev.guest, &used, &reqs);
    let log = shared.queue(0).expect("log");
    assert!(log.marked(QUEUE).is_empty());
    let next_avail = {
        use virtio_queue::QueueT;
        b1.dev.guest.ring.queue.next_avail()
    };
    let guest = b1.sigkill();
    let mut b2 = Backend::start(&disk, &shared, 64, "vic");
    b2.adopt(guest, next_avail);
    assert_eq!(b2.io.started(), 0, "nothing to resubmit");
    assert!(b2.dev.guest.take_used().is_empty());
    // And the ring goes on.
    let s = write(&mut b2.dev.guest, 20, 0x7f);
    b2.dev.kick();
    b2.finish_all();
    assert_eq!(b2.dev.guest.take_used().len(), 1);
    assert_eq!(b2.dev.guest.status(&s), status::OK);
}

#[test]
fn ring_larger_than_the_region_is_served_untracked() {
    let disk = RamDisk::new(1 << 20).expect("disk");
    let small = area(16);
    let mut b = Backend::start(&disk, &small, 64, "none");
    b.slot.ring_started();
    let s = write(&mut b.dev.guest, 1, 0x55);
    b.dev.kick();
    assert!(small.queue(0).expect("log").marked(16).is_empty());
    b.finish_all();
    assert_eq!(b.dev.guest.take_used().len(), 1);
    assert_eq!(b.dev.guest.status(&s), status::OK);
}

#[test]
fn garbage_in_the_area_only_affects_the_guests_own_requests() {
    let disk = RamDisk::new(1 << 20).expect("disk");
    let shared = area(QUEUE);
    let log = shared.queue(0).expect("log");
    let mut b1 = Backend::start(&disk, &shared, 64, "none");
    b1.slot.ring_started();
    b1.dev.kick();
    let s = write(&mut b1.dev.guest, 3, 0x33);
    b1.dev.kick();
    b1.finish_all();
    assert_eq!(b1.dev.guest.take_used().len(), 1);
    assert_eq!(b1.dev.guest.status(&s), status::OK);
    let guest = b1.sigkill();
    // A hostile frontend marks every entry (including never-used heads whose descriptors are
    // zero) with wild counters and a last-batch list that loops.
    for h in 0..QUEUE {
        log.poke(h, 0xff, h, u64::from(h).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    log.poke_header(1, 0xfff0, 0x1234);
    let mut b2 = Backend::start(&disk, &shared, 64, "none");
    b2.adopt(guest, 0);
    b2.finish_all();
    // Whatever the replayed stale chains yield, only heads of this ring complete, each once.
    let mut ids: Vec<u32> = b2.dev.guest.take_used().iter().map(|&(id, _)| id).collect();
    assert!(ids.iter().all(|&id| id < u32::from(QUEUE)), "{ids:?}");
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "a head completed twice");
}
