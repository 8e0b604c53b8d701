//! Turning raw samples into report numbers: per-run metrics (IOPS, latency percentiles,
//! notifications, wakeups and CPU per I/O) and the spread over repetitions (median, min, max).

use crate::client::Sample;
use serde::{Deserialize, Serialize};

/// Latency summary in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest seen.
    pub max: u64,
}

/// The numbers of one run (one repetition of one cell).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Metrics {
    /// Completed requests per second.
    pub iops: f64,
    /// Payload MiB per second.
    pub mib_s: f64,
    /// Completed requests in the window.
    pub ios: u64,
    /// Latency, submit to completion seen by the client.
    pub lat_ns: Latency,
    /// Completion-eventfd signals per request (0 in poll mode).
    pub notifications_per_io: f64,
    /// Times the client blocked and was woken, per request.
    pub wakeups_per_io: f64,
    /// Client plus backend CPU time per request, nanoseconds.
    pub cpu_ns_per_io: f64,
    /// Client thread CPU time per request, nanoseconds.
    pub client_cpu_ns_per_io: f64,
    /// Backend process CPU time per request, nanoseconds (absent for bare).
    pub backend_cpu_ns_per_io: Option<f64>,
    /// Whole-machine busy CPU during the window, percent of all CPUs (bench included).
    pub machine_busy_pct: Option<f64>,
    /// Busy CPU of everything except client and backend, percent of all CPUs: other load.
    pub others_busy_pct: Option<f64>,
    /// Hypervisor steal time, percent of all CPUs.
    pub steal_pct: Option<f64>,
    /// The backend's own counters per request (vmirq serve only; whole connection).
    pub backend_per_io: Option<crate::target::BackendPerIo>,
}

/// Convert a count to f64 for ratios; report values are far below 2^53.
#[allow(
    clippy::cast_precision_loss,
    reason = "report statistics, values far below 2^53"
)]
#[must_use]
pub fn as_f64(x: u64) -> f64 {
    x as f64
}

impl Metrics {
    /// The metrics of one sample.
    #[must_use]
    pub fn from_sample(s: &Sample) -> Self {
        let ios = as_f64(s.ios.max(1));
        let secs = as_f64(s.elapsed_ns.max(1)) / 1e9;
        let backend = s.backend_cpu_ns.map(|b| as_f64(b) / ios);
        let client = as_f64(s.client_cpu_ns) / ios;
        let h = &s.latency;
        let lat_ns = if h.is_empty() {
            Latency::default()
        } else {
            Latency {
                mean: h.mean(),
                p50: h.value_at_quantile(0.50),
                p99: h.value_at_quantile(0.99),
                p999: h.value_at_quantile(0.999),
                max: h.max(),
            }
        };
        let ticks = s.system.filter(|t| t.total > 0);
        let pct = |x: u64| ticks.map(|t| 100.0 * as_f64(x) / as_f64(t.total));
        let machine_busy_pct = ticks.and_then(|t| pct(t.busy));
        // The bench's own share of all CPUs over the window.
        let cpus = as_f64(crate::cpu::online_cpus() as u64);
        let own_pct = 100.0 * (as_f64(s.client_cpu_ns) + as_f64(s.backend_cpu_ns.unwrap_or(0)))
            / (as_f64(s.elapsed_ns.max(1)) * cpus);
        Self {
            machine_busy_pct,
            others_busy_pct: machine_busy_pct.map(|m| (m - own_pct).max(0.0)),
            steal_pct: ticks.and_then(|t| pct(t.steal)),
            backend_per_io: s.backend_counters.and_then(|c| c.per_request()),
            iops: as_f64(s.ios) / secs,
            mib_s: as_f64(s.bytes) / secs / (1024.0 * 1024.0),
            ios: s.ios,
            lat_ns,
            notifications_per_io: as_f64(s.notifications) / ios,
            wakeups_per_io: as_f64(s.wakeups) / ios,
            cpu_ns_per_io: client + backend.unwrap_or(0.0),
            client_cpu_ns_per_io: client,
            backend_cpu_ns_per_io: backend,
        }
    }
}

/// Median, minimum and maximum of a set of repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Spread {
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (all zero for an empty set; NaNs are ignored).
    #[must_use]
    pub fn of(values: &[f64]) -> Self {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    /// The spread of `f` over `items`.
    #[must_use]
    pub fn over<T>(items: &[T], f: impl Fn(&T) -> f64) -> Self {
        Self::of(&items.iter().map(f).collect::<Vec<_>>())
    }

    /// Relative half-width of the range, `(max - min) / (2 * median)`: a noise indicator.
    #[must_use]
    pub fn relative_range(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / (2.0 * self.median.abs())
        }
    }
}

/// `a / b`, or NaN when `b` is zero (serialised as null by the report).
#[must_use]
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::NAN
    } else {
        a / b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;

    fn sample(lat: &[u64], notifications: u64) -> Sample {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("hist");
        for l in lat {
            h.record(*l).expect("record");
        }
        Sample {
            ios: lat.len() as u64,
            bytes: lat.len() as u64 * 4096,
            elapsed_ns: 1_000_000_000,
            latency: h,
            notifications,
            wakeups: notifications / 2,
            client_cpu_ns: 1_000_000,
            backend_cpu_ns: Some(3_000_000),
            system: Some(crate::cpu::SystemTicks {
                busy: 50,
                steal: 10,
                total: 200,
            }),
            backend_counters: Some(crate::target::BackendCounters {
                requests: 1000,
                kicks: 250,
                ..Default::default()
            }),
            trace: Vec::new(),
        }
    }

    #[test]
    fn metrics_per_io_and_percentiles() {
        let lat: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let m = Metrics::from_sample(&sample(&lat, 500));
        assert!((m.iops - 1000.0).abs() < 1e-9);
        assert!((m.notifications_per_io - 0.5).abs() < 1e-12);
        assert!((m.wakeups_per_io - 0.25).abs() < 1e-12);
        assert!((m.cpu_ns_per_io - 4000.0).abs() < 1e-9);
        assert_eq!(m.backend_cpu_ns_per_io, Some(3000.0));
        assert_eq!(m.machine_busy_pct, Some(25.0));
        assert_eq!(m.backend_per_io.map(|b| b.kicks), Some(0.25));
        assert_eq!(m.steal_pct, Some(5.0));
        let own = 100.0 * 4e6 / (1e9 * crate::cpu::online_cpus() as f64);
        assert!((m.others_busy_pct.unwrap_or(-1.0) - (25.0 - own)).abs() < 1e-9);
        // hdrhistogram keeps 3 significant digits.
        assert!(
            (m.lat_ns.p50 as f64 - 500_000.0).abs() / 500_000.0 < 0.002,
            "{:?}",
            m.lat_ns
        );
        assert!((m.lat_ns.p99 as f64 - 990_000.0).abs() / 990_000.0 < 0.002);
        assert!(m.lat_ns.p999 >= m.lat_ns.p99 && m.lat_ns.max >= m.lat_ns.p999);
        assert!((m.lat_ns.mean - 500_500.0).abs() < 1000.0);
        assert!((m.mib_s - 1000.0 * 4096.0 / 1048576.0).abs() < 1e-9);
    }

    #[test]
    fn empty_sample_has_zero_latency_not_garbage() {
        let m = Metrics::from_sample(&sample(&[], 0));
        assert_eq!(m.lat_ns, Latency::default());
        assert_eq!(m.iops, 0.0);
    }

    #[test]
    fn spread_median_min_max() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let e = Spread::of(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!(e.median, 2.5);
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(Spread::of(&[f64::NAN, 5.0]).median, 5.0);
        assert!((Spread::of(&[90.0, 100.0, 110.0]).relative_range() - 0.1).abs() < 1e-12);
        assert!(ratio(1.0, 0.0).is_nan());
        assert_eq!(ratio(3.0, 2.0), 1.5);
    }
}
