//! The inflight area: shared memory in which the device records which descriptor heads it has
//! taken from the available ring and not yet put in the used ring, so that a new backend
//! process can resubmit them after a crash (vhost-user "Inflight I/O tracking", split rings).
//!
//! Layout (native byte order; the frontend stores the bytes and never interprets them): one
//! region per queue, each [`queue_stride`] bytes, made of a 16-byte header
//! (`features: u64`, `version: u16`, `desc_num: u16`, `last_batch_head: u16`, `used_idx: u16`)
//! and then `desc_num` 16-byte descriptor states (`inflight: u8`, 5 bytes of padding,
//! `next: u16`, `counter: u64`).
//!
//! The frontend can write this memory at any time, so nothing read from it is trusted: indices
//! are bounded by the ring size, and a value that makes no sense only misleads the recovery of
//! the frontend's own requests. The file must be sealed against shrinking (every area this
//! device hands out is), so the frontend cannot turn an access into a SIGBUS.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use vhost::vhost_user::message::VhostUserInflight;
use vm_memory::mmap::MmapRegionError;
use vm_memory::{FileOffset, MmapRegion, VolatileMemory};

/// Region format version this device writes and understands (0 means "not initialized").
pub const VERSION: u16 = 1;
/// Bytes of a queue region's header.
pub const HEADER_BYTES: usize = 16;
/// Bytes of one descriptor state.
pub const DESC_BYTES: usize = 16;
/// Queue regions start on cache-line boundaries.
pub const REGION_ALIGN: usize = 64;

const OFF_VERSION: usize = 8;
const OFF_DESC_NUM: usize = 10;
const OFF_LAST_BATCH_HEAD: usize = 12;
const OFF_USED_IDX: usize = 14;
const DESC_OFF_INFLIGHT: usize = 0;
const DESC_OFF_NEXT: usize = 6;
const DESC_OFF_COUNTER: usize = 8;

/// Why an inflight area could not be created or mapped.
#[derive(Debug, thiserror::Error)]
pub enum AreaError {
    /// Queue count or size is zero or above what this device serves.
    #[error("{num_queues} queues of {queue_size} entries: not what this device serves (at most {max_queues} queues of {max_queue_size})")]
    Geometry {
        /// Queues in the message.
        num_queues: u16,
        /// Queue size in the message.
        queue_size: u16,
        /// Queues of this device.
        max_queues: u16,
        /// Largest queue size of this device.
        max_queue_size: u16,
    },
    /// `mmap_size` is smaller than the regions of the queues.
    #[error("mmap_size {mmap_size} is smaller than the {need} bytes the queues need")]
    TooSmall {
        /// Size in the message.
        mmap_size: u64,
        /// Bytes needed.
        need: u64,
    },
    /// `mmap_offset` is not a multiple of the page size.
    #[error("mmap_offset {0:#x} is not page aligned")]
    Unaligned(u64),
    /// The mapping would reach past the end of the file.
    #[error("mapping ends at {end:#x}, past the end of the file ({file_len:#x} bytes)")]
    PastEnd {
        /// End of the requested mapping (`None`: it overflows).
        end: u64,
        /// File length.
        file_len: u64,
    },
    /// The fd is not a regular file (a memfd).
    #[error("the inflight fd is not a regular file")]
    NotRegular,
    /// The file can shrink under the mapping (not a memfd sealed with F_SEAL_SHRINK).
    #[error("the inflight fd is not sealed against shrinking")]
    NotSealed,
    /// A system call failed.
    #[error("system call failed")]
    Io(#[from] std::io::Error),
    /// The mapping failed.
    #[error("cannot map the inflight area")]
    Map(#[from] MmapRegionError),
}

/// Bytes of one queue's region for a queue of `queue_size` entries.
#[must_use]
pub fn queue_stride(queue_size: u16) -> usize {
    (HEADER_BYTES + DESC_BYTES * usize::from(queue_size)).next_multiple_of(REGION_ALIGN)
}

/// Create a zeroed, sealed memfd for `num_queues` regions of `queue_size` entries (the answer
/// to GET_INFLIGHT_FD). Returns the file and its size.
///
/// # Errors
/// When the memfd cannot be created, sized or sealed.
pub fn create(num_queues: u16, queue_size: u16) -> Result<(File, u64), AreaError> {
    let len = (queue_stride(queue_size) * usize::from(num_queues)) as u64;
    // SAFETY: the name is a NUL-terminated string literal; the flags are valid memfd flags.
    let fd = unsafe {
        libc::memfd_create(
            c"vmirq-inflight".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len)?;
    let seals = libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: F_ADD_SEALS takes an int argument; `file` is a live memfd.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok((file, len))
}

/// A mapped inflight area (all queues).
#[derive(Debug)]
pub struct InflightArea {
    map: MmapRegion<()>,
    queues: u16,
    queue_size: u16,
}

/// The limits a SET_INFLIGHT_FD message is checked against.
#[derive(Debug, Clone, Copy)]
pub struct AreaLimits {
    /// Queues of the device (regions past these are not mapped).
    pub max_queues: u16,
    /// Largest queue size of the device.
    pub max_queue_size: u16,
}

impl InflightArea {
    /// Map the area the frontend handed over with SET_INFLIGHT_FD, after checking the
    /// message against the device and the file.
    ///
    /// # Errors
    /// See [`AreaError`].
    pub fn map(
        file: File,
        msg: &VhostUserInflight,
        limits: AreaLimits,
    ) -> Result<Arc<Self>, AreaError> {
        let (num_queues, queue_size) = (msg.num_queues, msg.queue_size);
        if num_queues == 0 || queue_size == 0 || queue_size > limits.max_queue_size {
            return Err(AreaError::Geometry {
                num_queues,
                queue_size,
                max_queues: limits.max_queues,
                max_queue_size: limits.max_queue_size,
            });
        }
        // Regions of queues this device does not have are the frontend's business.
        let queues = num_queues.min(limits.max_queues);
        let len = queue_stride(queue_size) * usize::from(queues);
        let need = len as u64;
        if msg.mmap_size < need {
            return Err(AreaError::TooSmall {
                mmap_size: msg.mmap_size,
                need,
            });
        }
        check_file(&file, msg.mmap_offset, need)?;
        let map = MmapRegion::from_file(FileOffset::new(file, msg.mmap_offset), len)?;
        Ok(Arc::new(Self {
            map,
            queues,
            queue_size,
        }))
    }

    /// Queues with a region in this area.
    #[must_use]
    pub fn queues(&self) -> u16 {
        self.queues
    }

    /// The log of queue `q` (`None` past the mapped queues). Writes `desc_num` as the queue
    /// size of the message, as the frontend expects of a backend.
    #[must_use]
    pub fn queue(self: &Arc<Self>, q: u16) -> Option<QueueLog> {
        if q >= self.queues {
            return None;
        }
        let log = QueueLog {
            area: Arc::clone(self),
            base: usize::from(q) * queue_stride(self.queue_size),
            slots: self.queue_size,
        };
        log.store16(OFF_DESC_NUM, self.queue_size);
        Some(log)
    }

    fn atomic<T: vm_memory::AtomicInteger>(&self, offset: usize) -> Option<&T> {
        self.map.get_atomic_ref::<T>(offset).ok()
    }
}

/// Page alignment, file type, seals and size of the frontend's file.
fn check_file(file: &File, offset: u64, len: u64) -> Result<(), AreaError> {
    // SAFETY: sysconf has no side effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = u64::try_from(page).unwrap_or(4096).max(1);
    if offset % page != 0 {
        return Err(AreaError::Unaligned(offset));
    }
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(AreaError::NotRegular);
    }
    // SAFETY: F_GET_SEALS takes no argument; `file` is a live descriptor.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(AreaError::NotSealed);
    }
    match offset.checked_add(len) {
        Some(end) if end <= meta.len() => Ok(()),
        end => Err(AreaError::PastEnd {
            end: end.unwrap_or(u64::MAX),
            file_len: meta.len(),
        }),
    }
}

/// One queue's region: what the engine marks when it pops a chain and clears when it puts
/// the chain in the used ring.
#[derive(Debug, Clone)]
pub struct QueueLog {
    area: Arc<InflightArea>,
    base: usize,
    slots: u16,
}

/// What a queue's region says when its ring starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// The region was new (version 0) or of an unknown version: it is initialized now and
    /// nothing is resubmitted; the ring position is the frontend's.
    Fresh,
    /// The region was in use: `heads` (oldest first) were taken and never completed.
    Resume {
        /// Heads to resubmit, in the order they were first taken.
        heads: Vec<u16>,
        /// Counter value for the next chain taken.
        next_counter: u64,
        /// The last completion's flag had not been cleared yet: it was cleared now.
        fixed_last_batch: bool,
    },
}

impl QueueLog {
    /// Descriptor states in this region (the queue size of the SET_INFLIGHT_FD message).
    #[must_use]
    pub fn slots(&self) -> u16 {
        self.slots
    }

    fn desc(&self, head: u16, field: usize) -> usize {
        self.base + HEADER_BYTES + usize::from(head) * DESC_BYTES + field
    }

    // The offsets below are inside the mapping and naturally aligned by construction (page
    // aligned mapping, 64-byte aligned regions, heads below `slots`), so the accessors cannot
    // fail; if one did, the access is skipped rather than panicking.
    fn store16(&self, field: usize, v: u16) {
        if let Some(a) = self.area.atomic::<AtomicU16>(self.base + field) {
            a.store(v, Ordering::Release);
        }
    }
    fn load16(&self, field: usize) -> u16 {
        self.area
            .atomic::<AtomicU16>(self.base + field)
            .map_or(0, |a| a.load(Ordering::Acquire))
    }
    fn set_inflight(&self, head: u16, v: u8) {
        if let Some(a) = self
            .area
            .atomic::<AtomicU8>(self.desc(head, DESC_OFF_INFLIGHT))
        {
            a.store(v, Ordering::Release);
        }
    }
    fn inflight(&self, head: u16) -> u8 {
        self.area
            .atomic::<AtomicU8>(self.desc(head, DESC_OFF_INFLIGHT))
            .map_or(0, |a| a.load(Ordering::Acquire))
    }
    fn next(&self, head: u16) -> u16 {
        self.area
            .atomic::<AtomicU16>(self.desc(head, DESC_OFF_NEXT))
            .map_or(u16::MAX, |a| a.load(Ordering::Acquire))
    }
    fn counter(&self, head: u16) -> u64 {
        self.area
            .atomic::<AtomicU64>(self.desc(head, DESC_OFF_COUNTER))
            .map_or(0, |a| a.load(Ordering::Acquire))
    }

    /// A chain with head `head` was taken from the available ring: record its counter, then
    /// mark it in flight (in that order: a marked entry always has its counter).
    pub fn mark(&self, head: u16, counter: u64) {
        if head >= self.slots {
            return;
        }
        if let Some(a) = self
            .area
            .atomic::<AtomicU64>(self.desc(head, DESC_OFF_COUNTER))
        {
            a.store(counter, Ordering::Relaxed);
        }
        self.set_inflight(head, 1);
    }

    /// Before `head` goes in the used ring: it becomes the (one-entry) last batch, so a crash
    /// between the used-ring update and [`QueueLog::after_used`] is recognized at recovery.
    pub fn before_used(&self, head: u16) {
        if head >= self.slots {
            return;
        }
        let previous = self.load16(OFF_LAST_BATCH_HEAD);
        if let Some(a) = self
            .area
            .atomic::<AtomicU16>(self.desc(head, DESC_OFF_NEXT))
        {
            a.store(previous, Ordering::Relaxed);
        }
        self.store16(OFF_LAST_BATCH_HEAD, head);
    }

    /// After `head` went in the used ring and the used index became `used_idx`: clear its
    /// mark, then record the used index.
    pub fn after_used(&self, head: u16, used_idx: u16) {
        if head < self.slots {
            self.set_inflight(head, 0);
        }
        self.store16(OFF_USED_IDX, used_idx);
    }

    /// Heads currently marked in flight among the first `ring_size` entries (diagnostics and
    /// tests; a frontend looking at its copy of the area).
    #[must_use]
    pub fn marked(&self, ring_size: u16) -> Vec<u16> {
        (0..ring_size.min(self.slots))
            .filter(|&h| self.inflight(h) != 0)
            .collect()
    }

    /// The ring of `ring_size` entries (at most [`QueueLog::slots`]) starts with the used
    /// index at `used_idx`: follow the spec's reconnect steps. If the last completion's
    /// used-ring update happened but its mark was not cleared (the logged used index lags the
    /// ring's), clear the marks of that batch; then list the marked heads by counter.
    #[must_use]
    pub fn recover(&self, ring_size: u16, used_idx: u16) -> Recovery {
        let n = ring_size.min(self.slots);
        let version = self.load16(OFF_VERSION);
        if version != VERSION {
            if version != 0 {
                tracing::warn!(
                    version,
                    "inflight region of an unknown version; starting it afresh"
                );
            }
            for head in 0..self.slots {
                self.set_inflight(head, 0);
            }
            self.store16(OFF_LAST_BATCH_HEAD, 0);
            self.store16(OFF_USED_IDX, used_idx);
            self.store16(OFF_VERSION, VERSION);
            return Recovery::Fresh;
        }
        let logged = self.load16(OFF_USED_IDX);
        let fixed_last_batch = logged != used_idx;
        if fixed_last_batch {
            let batch = used_idx.wrapping_sub(logged).min(n);
            let mut head = self.load16(OFF_LAST_BATCH_HEAD);
            for _ in 0..batch {
                if head >= n {
                    break;
                }
                self.set_inflight(head, 0);
                head = self.next(head);
            }
            self.store16(OFF_USED_IDX, used_idx);
        }
        let mut marked: Vec<(u64, u16)> = (0..n)
            .filter(|&h| self.inflight(h) != 0)
            .map(|h| (self.counter(h), h))
            .collect();
        marked.sort_unstable();
        let next_counter = marked
            .iter()
            .map(|&(c, _)| c)
            .max()
            .map_or(0, |c| c.wrapping_add(1));
        Recovery::Resume {
            heads: marked.into_iter().map(|(_, h)| h).collect(),
            next_counter,
            fixed_last_batch,
        }
    }

    /// Raw state of `head` as `(inflight, next, counter)` (tests and diagnostics).
    #[must_use]
    pub fn raw(&self, head: u16) -> Option<(u8, u16, u64)> {
        (head < self.slots).then(|| (self.inflight(head), self.next(head), self.counter(head)))
    }

    /// Raw header as `(version, desc_num, last_batch_head, used_idx)` (tests and diagnostics).
    #[must_use]
    pub fn header(&self) -> (u16, u16, u16, u16) {
        (
            self.load16(OFF_VERSION),
            self.load16(OFF_DESC_NUM),
            self.load16(OFF_LAST_BATCH_HEAD),
            self.load16(OFF_USED_IDX),
        )
    }

    /// Write a descriptor state as a (possibly hostile) frontend could (tests).
    #[cfg(feature = "test-utils")]
    pub fn poke(&self, head: u16, inflight: u8, next: u16, counter: u64) {
        if head >= self.slots {
            return;
        }
        self.set_inflight(head, inflight);
        if let Some(a) = self
            .area
            .atomic::<AtomicU16>(self.desc(head, DESC_OFF_NEXT))
        {
            a.store(next, Ordering::Relaxed);
        }
        if let Some(a) = self
            .area
            .atomic::<AtomicU64>(self.desc(head, DESC_OFF_COUNTER))
        {
            a.store(counter, Ordering::Relaxed);
        }
    }

    /// Write the header as a (possibly hostile) frontend could (tests).
    #[cfg(feature = "test-utils")]
    pub fn poke_header(&self, version: u16, last_batch_head: u16, used_idx: u16) {
        self.store16(OFF_VERSION, version);
        self.store16(OFF_LAST_BATCH_HEAD, last_batch_head);
        self.store16(OFF_USED_IDX, used_idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: AreaLimits = AreaLimits {
        max_queues: 2,
        max_queue_size: 256,
    };

    fn msg(
        mmap_size: u64,
        mmap_offset: u64,
        num_queues: u16,
        queue_size: u16,
    ) -> VhostUserInflight {
        VhostUserInflight::new(mmap_size, mmap_offset, num_queues, queue_size)
    }

    fn area(queues: u16, size: u16) -> Arc<InflightArea> {
        let (file, len) = create(queues, size).expect("memfd");
        InflightArea::map(file, &msg(len, 0, queues, size), LIMITS).expect("map")
    }

    #[test]
    fn stride_covers_header_and_states_on_cache_lines() {
        assert_eq!(queue_stride(1), 64);
        assert_eq!(queue_stride(3), 64);
        assert_eq!(queue_stride(4), 128);
        assert_eq!(queue_stride(128), 16 + 128 * 16 + 48);
        for size in [1u16, 2, 3, 5, 64, 255, 256, 1024, u16::MAX] {
            let s = queue_stride(size);
            assert!(s >= HEADER_BYTES + DESC_BYTES * usize::from(size));
            assert_eq!(s % REGION_ALIGN, 0);
        }
    }

    #[test]
    fn created_area_is_zeroed_sealed_and_maps() {
        let (file, len) = create(2, 128).expect("memfd");
        assert_eq!(len, 2 * queue_stride(128) as u64);
        assert!(file.set_len(len / 2).is_err(), "shrink must be sealed");
        assert!(file.set_len(len * 2).is_err(), "grow must be sealed");
        let a = InflightArea::map(file, &msg(len, 0, 2, 128), LIMITS).expect("map");
        let q1 = a.queue(1).expect("queue 1");
        assert_eq!(q1.header(), (0, 128, 0, 0));
        assert!(q1.marked(128).is_empty());
        assert!(a.queue(2).is_none());
    }

    #[test]
    fn frontend_messages_are_checked_against_device_and_file() {
        let (file, len) = create(1, 64).expect("memfd");
        let cases = [
            msg(len, 0, 0, 64),
            msg(len, 0, 1, 0),
            msg(len, 0, 1, 512),
            msg(len - 1, 0, 1, 64),
            msg(len, 1, 1, 64),
            msg(len, 4096, 1, 64),
            msg(len, u64::MAX - 4095, 1, 64),
        ];
        for m in cases {
            let f = file.try_clone().expect("dup");
            let (size, offset, nq, qs) = (m.mmap_size, m.mmap_offset, m.num_queues, m.queue_size);
            assert!(
                InflightArea::map(f, &m, LIMITS).is_err(),
                "size {size} offset {offset} queues {nq} queue size {qs} accepted"
            );
        }
        // Regions for more queues than the device has are allowed; only the device's are mapped.
        let (big, big_len) = create(4, 64).expect("memfd");
        let a = InflightArea::map(big, &msg(big_len, 0, 4, 64), LIMITS).expect("map");
        assert_eq!(a.queues(), 2);
    }

    #[test]
    fn unsealed_or_non_regular_files_are_refused() {
        let tmp = tempfile::tempfile().expect("tempfile");
        tmp.set_len(4096).expect("len");
        let e = InflightArea::map(tmp, &msg(4096, 0, 1, 64), LIMITS).expect_err("unsealed");
        assert!(matches!(e, AreaError::NotSealed), "{e}");
        let null = File::open("/dev/null").expect("/dev/null");
        let e = InflightArea::map(null, &msg(4096, 0, 1, 64), LIMITS).expect_err("char dev");
        assert!(matches!(e, AreaError::NotRegular), "{e}");
    }

    #[test]
    fn marks_follow_the_spec_order_and_recovery_lists_them_by_counter() {
        let a = area(1, 8);
        let log = a.queue(0).expect("queue");
        assert_eq!(log.recover(8, 0), Recovery::Fresh);
        assert_eq!(log.header().0, VERSION);
        log.mark(5, 10);
        log.mark(2, 11);
        log.mark(7, 12);
        // 2 completes.
        log.before_used(2);
        log.after_used(2, 1);
        assert_eq!(log.marked(8), vec![5, 7]);
        assert_eq!(
            log.recover(8, 1),
            Recovery::Resume {
                heads: vec![5, 7],
                next_counter: 13,
                fixed_last_batch: false
            }
        );
    }

    #[test]
    fn crash_between_used_ring_update_and_clear_is_recovered() {
        let a = area(1, 8);
        let log = a.queue(0).expect("queue");
        let _ = log.recover(8, 0);
        log.mark(3, 0);
        log.mark(4, 1);
        // 3 is put in the used ring (index 0 -> 1) but the process dies before after_used.
        log.before_used(3);
        assert_eq!(
            log.recover(8, 1),
            Recovery::Resume {
                heads: vec![4],
                next_counter: 2,
                fixed_last_batch: true
            }
        );
        assert_eq!(log.header().3, 1, "used_idx caught up");
    }

    #[test]
    fn garbage_from_the_frontend_stays_in_bounds() {
        let a = area(1, 8);
        let log = a.queue(0).expect("queue");
        let _ = log.recover(8, 0);
        for h in 0..8 {
            log.poke(h, 0xff, u16::MAX, u64::MAX - u64::from(h));
        }
        log.poke_header(VERSION, 0xffff, 0x1234);
        // Ring smaller than the region: only its entries count.
        match log.recover(4, 0x1236) {
            Recovery::Resume {
                heads,
                next_counter,
                fixed_last_batch,
            } => {
                assert!(fixed_last_batch);
                assert_eq!(heads, vec![3, 2, 1, 0]);
                assert_eq!(next_counter, 0, "counter wraps instead of overflowing");
            }
            r => panic!("{r:?}"),
        }
        // A last-batch list that loops is walked at most ring-size steps.
        let _ = log.recover(8, 0x1236);
        log.poke(1, 1, 1, 5);
        log.poke_header(VERSION, 1, 0);
        assert!(matches!(log.recover(8, 0xfff0), Recovery::Resume { .. }));
        // Unknown versions start afresh with nothing marked.
        log.poke(2, 1, 0, 1);
        log.poke_header(7, 0, 0);
        assert_eq!(log.recover(8, 9), Recovery::Fresh);
        assert!(log.marked(8).is_empty());
        assert_eq!(log.header(), (VERSION, 8, 0, 9));
    }
}
