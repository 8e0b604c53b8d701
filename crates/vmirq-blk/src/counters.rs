//! Per-queue counters, shared between the queue workers (writers) and reporters (the exit
//! summary, SIGUSR1, the Prometheus endpoint). Relaxed atomics: each value is exact, a
//! snapshot across values is not atomic.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Counters of one queue.
        #[derive(Debug, Default)]
        pub struct QueueCounters {
            $( $(#[$doc])* pub $name: AtomicU64, )*
        }

        /// A plain copy of [`QueueCounters`].
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct CounterSnapshot {
            $( $(#[$doc])* pub $name: u64, )*
        }

        impl QueueCounters {
            /// Copy every value.
            #[must_use]
            pub fn snapshot(&self) -> CounterSnapshot {
                CounterSnapshot { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }
        }

        impl CounterSnapshot {
            /// `(name, value)` pairs in declaration order.
            #[must_use]
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($name), self.$name), )* ]
            }
        }
    };
}

counters! {
    /// Requests completed (any type, including rejected ones).
    requests,
    /// Payload bytes read by the guest.
    read_bytes,
    /// Payload bytes written by the guest.
    write_bytes,
    /// Kicks received (kick eventfd wakeups).
    kicks,
    /// Notifications sent: writes to the call eventfd.
    notifications,
    /// Notification checks the policy asked for that EVENT_IDX (or NO_INTERRUPT) refused. The
    /// first `Notify` of a batch is checked at once, the batch's later ones together at its end.
    suppressed,
    /// Completions that the policy held back (answered `Hold`).
    held,
    /// Hold timer expiries.
    timer_fires,
    /// Kick waits that ended while polling (new requests found without a kick).
    poll_hits,
    /// Kick waits where polling found nothing and the worker went to sleep.
    poll_misses,
    /// Kick polls the contention gate refused or cut short (a neighbour wanted the CPU).
    poll_contended,
    /// Requests completed with an error status, and queue-level errors.
    errors,
    /// Times the queue stopped because the driver broke a ring rule (a chain that cannot be
    /// completed, a bad ring index); exported as `vmirq_queue_broken_total`.
    broken,
}

impl QueueCounters {
    /// Add `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Render snapshots as a human-readable table, one line per queue.
#[must_use]
pub fn summary(queues: &[CounterSnapshot]) -> String {
    let mut out = String::new();
    for (q, s) in queues.iter().enumerate() {
        let _ = write!(out, "queue {q}:");
        for (name, v) in s.fields() {
            let _ = write!(out, " {name}={v}");
        }
        out.push('\n');
    }
    out
}

/// The Prometheus metric name of a counter: `vmirq_blk_<name>_total`, except the queue
/// state counter `broken`, which is `vmirq_queue_broken_total`.
#[must_use]
pub fn metric_name(counter: &str) -> String {
    match counter {
        "broken" => "vmirq_queue_broken_total".to_owned(),
        _ => format!("vmirq_blk_{counter}_total"),
    }
}

/// Render snapshots in the Prometheus text exposition format.
#[must_use]
pub fn prometheus(queues: &[CounterSnapshot]) -> String {
    let mut out = String::new();
    let names: Vec<&str> = CounterSnapshot::default()
        .fields()
        .iter()
        .map(|f| f.0)
        .collect();
    for (i, name) in names.iter().enumerate() {
        let metric = metric_name(name);
        let _ = writeln!(out, "# TYPE {metric} counter");
        for (q, s) in queues.iter().enumerate() {
            let v = s.fields()[i].1;
            let _ = writeln!(out, "{metric}{{queue=\"{q}\"}} {v}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_one_sample_per_queue_and_counter() {
        let a = QueueCounters::default();
        QueueCounters::add(&a.notifications, 7);
        let b = QueueCounters::default();
        QueueCounters::add(&b.kicks, 3);
        QueueCounters::add(&b.broken, 2);
        let text = prometheus(&[a.snapshot(), b.snapshot()]);
        assert!(text.contains("vmirq_blk_notifications_total{queue=\"0\"} 7\n"));
        assert!(text.contains("vmirq_blk_kicks_total{queue=\"1\"} 3\n"));
        assert!(text.contains("# TYPE vmirq_queue_broken_total counter\n"));
        assert!(text.contains("vmirq_queue_broken_total{queue=\"0\"} 0\n"));
        assert!(text.contains("vmirq_queue_broken_total{queue=\"1\"} 2\n"));
        assert!(summary(&[b.snapshot()]).contains(" broken=2"));
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(samples, 2 * CounterSnapshot::default().fields().len());
    }
}
