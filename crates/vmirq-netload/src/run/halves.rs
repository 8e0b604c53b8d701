//! The two halves of a message's round trip when another thread answers it (the wire on two
//! ports, the responder on three): the far end stamps when it read each request and when
//! it queued the response, the client reads the stamps back when the response arrives, and
//! the round trip splits into *out* (request sent to read at the far end), *far* (read to
//! response queued: the far end's own time, including waits for transmit room) and *back*
//! (response queued to read by the client).
//!
//! Which half grows tells a device problem on the receive path of the responses (a held or
//! parked notification: *back*) from the request's path to another host (*out*), whose
//! receive queue carries nothing but requests. Both threads are in one process and read one
//! clock; the far end's stamps are ns since [`AnswerStamps::epoch`].

use hdrhistogram::{CreationError, Histogram};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Slots of the stamp table: requests in flight at once beyond this overwrite older stamps
/// (the mix keeps one in flight).
const SLOTS: usize = 64;

/// A slot's sequence before any request is stamped in it (no request has this number).
const EMPTY: u64 = u64::MAX;

/// One request's stamps.
#[derive(Debug)]
struct Slot {
    /// The request's sequence number, written last (release) and read first (acquire).
    seq: AtomicU64,
    /// When the far end read the request (ns since the epoch).
    read_ns: AtomicU64,
    /// When the far end queued the response (ns since the epoch).
    queued_ns: AtomicU64,
}

/// The far end's stamps, shared with the client thread (lock-free: one writer, one reader).
#[derive(Debug)]
pub struct AnswerStamps {
    /// The time base of the stamps.
    pub epoch: Instant,
    slots: [Slot; SLOTS],
}

impl Default for AnswerStamps {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            slots: std::array::from_fn(|_| Slot {
                seq: AtomicU64::new(EMPTY),
                read_ns: AtomicU64::new(0),
                queued_ns: AtomicU64::new(0),
            }),
        }
    }
}

impl AnswerStamps {
    /// Now, in ns since the epoch.
    #[must_use]
    pub fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The far end read request `seq` at `read_ns` and queued its response at `queued_ns`.
    pub fn stamp(&self, seq: u64, read_ns: u64, queued_ns: u64) {
        let slot = &self.slots[slot_of(seq)];
        // Invalidate first, so that a reader never pairs the new times with the old number.
        slot.seq.store(EMPTY, Ordering::Release);
        slot.read_ns.store(read_ns, Ordering::Relaxed);
        slot.queued_ns.store(queued_ns, Ordering::Relaxed);
        slot.seq.store(seq, Ordering::Release);
    }

    /// The stamps of request `seq`: (read, queued), ns since the epoch; `None` when its slot
    /// holds another request's (or is being rewritten).
    #[must_use]
    pub fn get(&self, seq: u64) -> Option<(u64, u64)> {
        let slot = &self.slots[slot_of(seq)];
        if slot.seq.load(Ordering::Acquire) != seq {
            return None;
        }
        let read = slot.read_ns.load(Ordering::Relaxed);
        let queued = slot.queued_ns.load(Ordering::Relaxed);
        // A rewrite that began after the first look changed the number first.
        (slot.seq.load(Ordering::Acquire) == seq).then_some((read, queued))
    }
}

fn slot_of(seq: u64) -> usize {
    // The remainder is below SLOTS, so it fits.
    usize::try_from(seq % SLOTS as u64).unwrap_or(0)
}

/// The three halves' histograms (ns), on the client's side.
#[derive(Debug, Clone)]
pub struct Halves {
    /// Request sent by the client to read by the far end.
    pub out: Histogram<u64>,
    /// Read by the far end to its response queued.
    pub far: Histogram<u64>,
    /// Response queued by the far end to read by the client.
    pub back: Histogram<u64>,
    /// Responses whose stamps were gone (overwritten) when they were read.
    pub unstamped: u64,
}

impl Halves {
    /// Empty histograms, 1 ns to 10 s.
    ///
    /// # Errors
    /// The histograms cannot be created (not with these constant bounds).
    pub fn new() -> Result<Self, CreationError> {
        let h = || Histogram::new_with_bounds(1, 10_000_000_000, 3);
        Ok(Self {
            out: h()?,
            far: h()?,
            back: h()?,
            unstamped: 0,
        })
    }

    /// The response to request `seq`, sent at `sent_ns` and read at `read_ns` (both ns since
    /// the epoch of `stamps`), was read.
    pub fn record(&mut self, stamps: &AnswerStamps, seq: u64, sent_ns: u64, read_ns: u64) {
        let Some((far_read, far_queued)) = stamps.get(seq) else {
            self.unstamped += 1;
            return;
        };
        let _ = self.out.record(far_read.saturating_sub(sent_ns).max(1));
        let _ = self.far.record(far_queued.saturating_sub(far_read).max(1));
        let _ = self.back.record(read_ns.saturating_sub(far_queued).max(1));
    }

    /// Whether any response was split.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::{AnswerStamps, Halves};

    #[test]
    fn a_round_trip_splits_at_the_far_ends_stamps() {
        let stamps = AnswerStamps::default();
        let mut h = Halves::new().expect("histograms");
        stamps.stamp(7, 30_000, 32_000);
        h.record(&stamps, 7, 10_000, 100_000);
        let p50 = |x: &hdrhistogram::Histogram<u64>, v| {
            x.value_at_quantile(0.5) == x.highest_equivalent(v)
        };
        assert!(p50(&h.out, 20_000));
        assert!(p50(&h.far, 2_000));
        assert!(p50(&h.back, 68_000));
        assert_eq!(h.unstamped, 0);
    }

    #[test]
    fn a_stamp_overwritten_by_a_later_request_is_not_paired_with_it() {
        let stamps = AnswerStamps::default();
        let mut h = Halves::new().expect("histograms");
        stamps.stamp(3, 1_000, 2_000);
        // 67 lands in request 3's slot (64 slots).
        stamps.stamp(67, 5_000, 6_000);
        h.record(&stamps, 3, 500, 9_000);
        assert_eq!(h.unstamped, 1);
        assert!(h.is_empty());
        assert_eq!(stamps.get(67), Some((5_000, 6_000)));
        assert_eq!(stamps.get(4), None);
    }
}
