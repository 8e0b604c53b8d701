//! Per-queue counters, shared between the queue workers (writers) and reporters (the exit
//! summary, SIGUSR1, the Prometheus endpoint). Relaxed atomics: each value is exact, a
//! snapshot across values is not atomic.
//!
//! [`QueueCounters`] are the counters every device has (kicks, notifications, polls,
//! broken queues); a device declares its own with [`counter_set!`](crate::counter_set) and
//! keeps both in one [`Counters`]. Reports list the device's counters first.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// A set of atomic counters that can be copied into a plain snapshot.
pub trait CounterSet: Default + Send + Sync {
    /// The plain copy.
    type Snapshot: CounterFields;
    /// Copy every value.
    fn snapshot(&self) -> Self::Snapshot;
}

/// A snapshot's values by name.
pub trait CounterFields: Default + Clone + Copy + std::fmt::Debug {
    /// `(name, value)` pairs in declaration order.
    fn fields(&self) -> Vec<(&'static str, u64)>;
}

/// Declare a set of per-queue counters: an atomic struct implementing [`CounterSet`] and its
/// plain snapshot implementing [`CounterFields`].
///
/// ```
/// vmirq_vhost::counter_set! {
///     /// Counters of a hypothetical device.
///     pub struct DevCounters / DevSnapshot {
///         /// Frames switched.
///         frames,
///     }
/// }
/// ```
#[macro_export]
macro_rules! counter_set {
    (
        $(#[$sdoc:meta])*
        pub struct $name:ident / $snap:ident {
            $( $(#[$doc:meta])* $field:ident ),* $(,)?
        }
    ) => {
        $(#[$sdoc])*
        #[derive(Debug, Default)]
        pub struct $name {
            $( $(#[$doc])* pub $field: ::std::sync::atomic::AtomicU64, )*
        }

        #[doc = concat!("A plain copy of [`", stringify!($name), "`].")]
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct $snap {
            $( $(#[$doc])* pub $field: u64, )*
        }

        impl $crate::counters::CounterSet for $name {
            type Snapshot = $snap;
            fn snapshot(&self) -> $snap {
                $snap { $( $field: self.$field.load(::std::sync::atomic::Ordering::Relaxed), )* }
            }
        }

        impl $crate::counters::CounterFields for $snap {
            fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($field), self.$field), )* ]
            }
        }
    };
}

counter_set! {
    /// The counters every queue has, whatever the device.
    pub struct QueueCounters / QueueSnapshot {
        /// Kicks received (kick eventfd wakeups).
        kicks,
        /// Notifications sent: writes to the call eventfd.
        notifications,
        /// Notification checks the policy asked for that EVENT_IDX (or NO_INTERRUPT) refused.
        /// The first `Notify` of a batch is checked at once, the batch's later ones together
        /// at its end.
        suppressed,
        /// Completions that the policy held back (answered `Hold`).
        held,
        /// Hold timer expiries.
        timer_fires,
        /// Wakeups of a periodic control loop inside the policy (`dim-loop`: one per
        /// `period_ms`, delivered by the hold timer, so also counted in `timer_fires` when
        /// the timer fired for them); 0 for the other policies.
        loop_wakeups,
        /// Kick waits that ended while polling (new requests found without a kick).
        poll_hits,
        /// Kick waits where polling found nothing and the worker went to sleep.
        poll_misses,
        /// Kick polls the contention gate refused or cut short (a neighbour wanted the CPU).
        poll_contended,
        /// Requests completed with an error status, and queue-level errors.
        errors,
        /// Times the queue stopped because the driver broke a ring rule (a chain that cannot
        /// be completed, a bad ring index); exported as `vmirq_queue_broken_total`.
        broken,
    }
}

impl QueueCounters {
    /// Add `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The counters of one queue of a device: the device's own (`D`) and the generic ones.
#[derive(Debug, Default)]
pub struct Counters<D> {
    /// Device-specific counters.
    pub device: D,
    /// Generic counters.
    pub queue: QueueCounters,
}

impl<D: CounterSet> Counters<D> {
    /// Copy every value (also available through [`CounterSet`]).
    #[must_use]
    pub fn snapshot(&self) -> Snapshot<D::Snapshot> {
        CounterSet::snapshot(self)
    }
}

impl<D: CounterSet> CounterSet for Counters<D> {
    type Snapshot = Snapshot<D::Snapshot>;
    fn snapshot(&self) -> Self::Snapshot {
        Snapshot {
            device: self.device.snapshot(),
            queue: self.queue.snapshot(),
        }
    }
}

impl<D> AsRef<QueueCounters> for Counters<D> {
    fn as_ref(&self) -> &QueueCounters {
        &self.queue
    }
}

impl AsRef<QueueCounters> for QueueCounters {
    fn as_ref(&self) -> &QueueCounters {
        self
    }
}

/// The generic counters of a queue, whatever the device's own are (what [`crate::notify`]
/// and [`crate::poll`] write to).
pub type SharedQueueCounters = std::sync::Arc<dyn AsRef<QueueCounters> + Send + Sync>;

/// A plain copy of [`Counters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot<S> {
    /// Device-specific values.
    pub device: S,
    /// Generic values.
    pub queue: QueueSnapshot,
}

impl<S: CounterFields> CounterFields for Snapshot<S> {
    fn fields(&self) -> Vec<(&'static str, u64)> {
        let mut f = self.device.fields();
        f.extend(self.queue.fields());
        f
    }
}

/// Render snapshots as a human-readable table, one line per queue.
#[must_use]
pub fn summary<S: CounterFields>(queues: &[S]) -> String {
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

/// The Prometheus metric name of a counter: `<prefix>_<name>_total`, except the queue state
/// counter `broken`, which is `vmirq_queue_broken_total` for every device.
#[must_use]
pub fn metric_name(prefix: &str, counter: &str) -> String {
    match counter {
        "broken" => "vmirq_queue_broken_total".to_owned(),
        _ => format!("{prefix}_{counter}_total"),
    }
}

/// Render snapshots in the Prometheus text exposition format, metric names starting with
/// `prefix` (e.g. `vmirq_blk`).
#[must_use]
pub fn prometheus<S: CounterFields>(prefix: &str, queues: &[S]) -> String {
    let mut out = String::new();
    let names: Vec<&str> = S::default().fields().iter().map(|f| f.0).collect();
    let values: Vec<Vec<(&'static str, u64)>> = queues.iter().map(CounterFields::fields).collect();
    for (i, name) in names.iter().enumerate() {
        let metric = metric_name(prefix, name);
        let _ = writeln!(out, "# TYPE {metric} counter");
        for (q, fields) in values.iter().enumerate() {
            let v = fields[i].1;
            let _ = writeln!(out, "{metric}{{queue=\"{q}\"}} {v}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    counter_set! {
        /// A device's own counters, for the tests.
        pub struct DevCounters / DevSnapshot {
            /// Frames.
            frames,
        }
    }

    #[test]
    fn prometheus_text_has_one_sample_per_queue_and_counter() {
        let a = Counters::<DevCounters>::default();
        QueueCounters::add(&a.queue.notifications, 7);
        QueueCounters::add(&a.device.frames, 5);
        let b = Counters::<DevCounters>::default();
        QueueCounters::add(&b.queue.kicks, 3);
        QueueCounters::add(&b.queue.broken, 2);
        let text = prometheus("vmirq_dev", &[a.snapshot(), b.snapshot()]);
        assert!(text.contains("vmirq_dev_notifications_total{queue=\"0\"} 7\n"));
        assert!(text.contains("vmirq_dev_frames_total{queue=\"0\"} 5\n"));
        assert!(text.contains("vmirq_dev_kicks_total{queue=\"1\"} 3\n"));
        assert!(text.contains("# TYPE vmirq_queue_broken_total counter\n"));
        assert!(text.contains("vmirq_queue_broken_total{queue=\"0\"} 0\n"));
        assert!(text.contains("vmirq_queue_broken_total{queue=\"1\"} 2\n"));
        assert!(summary(&[b.snapshot()]).contains(" broken=2"));
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(samples, 2 * (1 + QueueSnapshot::default().fields().len()));
    }

    #[test]
    fn device_counters_come_first_in_reports() {
        let a = Counters::<DevCounters>::default();
        QueueCounters::add(&a.device.frames, 1);
        let line = summary(&[a.snapshot()]);
        assert!(
            line.starts_with("queue 0: frames=1 kicks=0 notifications=0"),
            "{line}"
        );
    }
}
