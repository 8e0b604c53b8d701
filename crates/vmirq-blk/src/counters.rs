//! Per-queue counters of the block device: the generic queue counters of
//! [`vmirq_vhost::counters`] plus what only a block device counts (requests and bytes).
//! Prometheus names are `vmirq_blk_<name>_total` (and `vmirq_queue_broken_total`).

use vmirq_vhost::counters as shared;

pub use vmirq_vhost::counters::{CounterFields, CounterSet, QueueCounters};

vmirq_vhost::counter_set! {
    /// Counters only the block device has.
    pub struct BlkCounters / BlkSnapshot {
        /// Requests completed (any type, including rejected ones).
        requests,
        /// Payload bytes read by the guest.
        read_bytes,
        /// Payload bytes written by the guest.
        write_bytes,
    }
}

/// Every counter of one queue.
pub type BlkQueueCounters = shared::Counters<BlkCounters>;

/// A plain copy of [`BlkQueueCounters`]: `.device` (requests, bytes) and `.queue` (kicks,
/// notifications, polls, ...).
pub type CounterSnapshot = shared::Snapshot<BlkSnapshot>;

/// Prefix of the block device's Prometheus metric names.
pub const METRIC_PREFIX: &str = "vmirq_blk";

/// Render snapshots as a human-readable table, one line per queue.
#[must_use]
pub fn summary(queues: &[CounterSnapshot]) -> String {
    shared::summary(queues)
}

/// Render snapshots in the Prometheus text exposition format.
#[must_use]
pub fn prometheus(queues: &[CounterSnapshot]) -> String {
    shared::prometheus(METRIC_PREFIX, queues)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_and_order_are_those_of_the_block_device() {
        let a = BlkQueueCounters::default();
        QueueCounters::add(&a.queue.notifications, 7);
        QueueCounters::add(&a.device.requests, 2);
        QueueCounters::add(&a.queue.broken, 1);
        let text = prometheus(&[a.snapshot()]);
        assert!(text.contains("vmirq_blk_notifications_total{queue=\"0\"} 7\n"));
        assert!(text.contains("vmirq_blk_requests_total{queue=\"0\"} 2\n"));
        assert!(text.contains("vmirq_queue_broken_total{queue=\"0\"} 1\n"));
        let line = summary(&[a.snapshot()]);
        assert!(
            line.starts_with(
                "queue 0: requests=2 read_bytes=0 write_bytes=0 kicks=0 notifications=7"
            ),
            "{line}"
        );
    }
}
