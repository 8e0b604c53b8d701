//! A hand-driven virtio-net frontend for the hostile-guest tests: guest memory, a
//! vhost-user session and two split rings (RX 0, TX 1) whose descriptors, available rings
//! and indices the test writes byte by byte (vmirq-netload's driver only writes valid ones).

use std::time::{Duration, Instant};
use vmirq_netload::memory::GuestMemory;
use vmirq_netload::ring::RingLayout;
use vmirq_netload::vhost::Session;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

pub const F_WRITE: u16 = 2;
pub const F_NEXT: u16 = 1;
/// Where the test's buffers start (after both rings).
pub const DATA: u64 = 64 * 1024;
pub const MEM_LEN: u64 = 1 << 20;
const QSIZE: u16 = 64;

pub struct RawPort {
    pub mem: GuestMemory,
    pub rings: [RingLayout; 2],
    pub avail_idx: [u16; 2],
    session: Session,
    kicks: [EventFd; 2],
    _calls: [EventFd; 2],
}

impl RawPort {
    /// Connect with `features` (besides VERSION_1) and start both rings.
    pub fn connect(path: &std::path::Path, features: u64) -> Self {
        let mem = GuestMemory::new(usize::try_from(MEM_LEN).expect("fits")).expect("memory");
        let rx = RingLayout::new(QSIZE, 0).expect("layout");
        let tx = RingLayout::new(QSIZE, rx.end()).expect("layout");
        assert!(tx.end() <= DATA);
        let mut session =
            Session::connect(path, features, 0, Duration::from_secs(5)).expect("session");
        session.set_memory(&mem).expect("memory table");
        let ev = || EventFd::new(EFD_NONBLOCK).expect("eventfd");
        let kicks = [ev(), ev()];
        let calls = [ev(), ev()];
        for q in 0..2 {
            let layout = [rx, tx][q];
            session
                .start_ring(q, layout, &mem, &kicks[q], &calls[q])
                .expect("ring starts");
        }
        Self {
            mem,
            rings: [rx, tx],
            avail_idx: [0, 0],
            session,
            kicks,
            _calls: calls,
        }
    }

    pub fn features(&self) -> u64 {
        self.session.features()
    }

    /// Write descriptor `i` of queue `q`.
    pub fn desc(&self, q: usize, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..14].copy_from_slice(&flags.to_le_bytes());
        d[14..16].copy_from_slice(&next.to_le_bytes());
        self.mem
            .write(self.rings[q].desc + 16 * u64::from(i), &d)
            .expect("desc");
    }

    /// Make `head` available on queue `q` and kick.
    pub fn offer(&mut self, q: usize, head: u16) {
        let r = self.rings[q];
        let slot = u64::from(self.avail_idx[q] % r.size);
        self.mem
            .write(r.avail + 4 + 2 * slot, &head.to_le_bytes())
            .expect("avail ring");
        self.avail_idx[q] = self.avail_idx[q].wrapping_add(1);
        self.set_avail_idx(q, self.avail_idx[q]);
    }

    /// Publish `idx` as queue `q`'s available index (any value: hostile tests lie) and kick.
    pub fn set_avail_idx(&self, q: usize, idx: u16) {
        self.mem
            .atomic_u16(self.rings[q].avail + 2)
            .expect("avail idx")
            .store(idx, std::sync::atomic::Ordering::Release);
        self.kicks[q].write(1).expect("kick");
    }

    pub fn used_idx(&self, q: usize) -> u16 {
        self.mem
            .atomic_u16(self.rings[q].used + 2)
            .expect("used idx")
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Used entry `n` of queue `q`: (id, len).
    pub fn used(&self, q: usize, n: u16) -> (u32, u32) {
        let r = self.rings[q];
        let mut e = [0u8; 8];
        self.mem
            .read(r.used + 4 + 8 * u64::from(n % r.size), &mut e)
            .expect("used entry");
        (
            u32::from_le_bytes(e[..4].try_into().expect("4")),
            u32::from_le_bytes(e[4..].try_into().expect("4")),
        )
    }

    /// Wait (bounded) until queue `q`'s used index reaches `idx`.
    pub fn wait_used(&self, q: usize, idx: u16) -> bool {
        let t = Instant::now();
        while self.used_idx(q) != idx {
            if t.elapsed() > Duration::from_secs(3) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem.read(addr, &mut v).expect("read");
        v
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        self.mem.write(addr, data).expect("write");
    }

    pub fn close(mut self) {
        for q in 0..2 {
            let _ = self.session.stop_ring(q);
        }
    }
}
