//! virtio `VIRTIO_F_EVENT_IDX` arithmetic (virtio 1.2, split virtqueues: §2.7.7 used buffer notification suppression, §2.7.10 available buffer notification suppression).
//!
//! With EVENT_IDX negotiated the driver writes `used_event` after its avail ring: the device
//! must notify when the used index it publishes moves past `used_event`, and should not
//! otherwise. All indices are free-running `u16` counters, so every comparison is wrap-safe.

/// Whether publishing used entries `old..new` (a half-open window of free-running indices)
/// crosses the driver's `event` index, i.e. whether the device must notify.
///
/// This is the `vring_need_event` rule: notify iff `event` lies in `[old, new)`.
#[must_use]
pub const fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// Where a driver that wants to be woken after `fraction_pct` percent of its outstanding
/// buffers are used should place `used_event` (Linux `virtqueue_enable_cb_delayed` uses 75%).
///
/// `last_used` is the driver's last seen used index, `avail` its current avail index.
#[must_use]
pub fn delayed_used_event(last_used: u16, avail: u16, fraction_pct: u8) -> u16 {
    let outstanding = u32::from(avail.wrapping_sub(last_used));
    let pct = u32::from(fraction_pct.min(100));
    // outstanding < 2^16 and pct <= 100, so the product fits in u32 and the quotient in u16.
    let step = u16::try_from(outstanding * pct / 100).unwrap_or(u16::MAX);
    last_used.wrapping_add(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec 2.7.7 (split ring, used buffer notification suppression): with used_event = 0
    /// the device notifies after the first buffer (used idx moves 0 -> 1).
    #[test]
    fn verify_spec_2_7_10_used_event_zero_notifies_after_first_buffer() {
        assert!(need_event(0, 1, 0));
        // ... and not again until the index wraps back past 0 (the 65536th buffer).
        for new in 2..=u16::MAX {
            assert!(!need_event(0, new, new - 1), "spurious notify at {new}");
        }
        assert!(need_event(0, 1, 0u16.wrapping_sub(0)));
        assert!(need_event(0, 0u16.wrapping_add(1), u16::MAX));
    }

    /// Spec 2.7.7: the device must notify when the index it writes equals used_event,
    /// even when several used entries are published in one batch.
    #[test]
    fn verify_spec_2_7_10_batch_crossing_event_notifies() {
        assert!(need_event(5, 8, 3)); // published 3,4,5,6,7: 5 is inside
        assert!(!need_event(9, 8, 3)); // 9 not yet reached
        assert!(!need_event(2, 8, 3)); // 2 was before this batch
        assert!(need_event(3, 8, 3)); // first index of the batch
        assert!(!need_event(8, 8, 3)); // new itself is not yet written
    }

    /// Spec 2.7.7: indices are free-running u16; the rule holds across the wrap.
    #[test]
    fn verify_spec_2_7_10_wraparound() {
        assert!(need_event(u16::MAX, 1, u16::MAX - 1));
        assert!(need_event(0, 2, u16::MAX));
        assert!(!need_event(5, 2, u16::MAX));
    }

    /// Spec 2.7.7: an empty batch never notifies.
    #[test]
    fn verify_spec_2_7_10_empty_batch_never_notifies() {
        for e in [0u16, 1, 100, u16::MAX] {
            assert!(!need_event(e, 7, 7));
        }
    }

    #[test]
    fn delayed_used_event_places_three_quarters() {
        assert_eq!(delayed_used_event(0, 100, 75), 75);
        assert_eq!(delayed_used_event(u16::MAX - 9, 30, 75), 20);
        assert_eq!(delayed_used_event(10, 10, 75), 10);
        assert_eq!(delayed_used_event(0, 100, 200), 100);
    }
}
