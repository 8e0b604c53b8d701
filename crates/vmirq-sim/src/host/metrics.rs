//! Metrics of one run: named latency series, counters, and per-pCPU time accounting.
//! Names are `&'static str` in ordered maps, so iteration order is deterministic.

use crate::Nanos;
use serde::Serialize;
use std::collections::BTreeMap;

/// What a pCPU spent a stretch of time on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cat {
    /// Guest code (application, guest kernel, guest interrupt handlers).
    Guest,
    /// Hypervisor work for a vCPU: exits, emulation, entries, kicks.
    Exit,
    /// Polling (host halt polling, guest haltpoll, polling threads).
    Poll,
    /// Host scheduler: wakeups and context switches.
    Sched,
    /// Host device handling (interrupt handlers, backend threads).
    Host,
    /// Nothing to run.
    Idle,
}

/// Number of [`Cat`] values.
pub const N_CAT: usize = 6;

impl Cat {
    /// Work a vCPU thread does in host kernel code (exit handling, host interrupt handlers),
    /// where a non-preemptible host kernel does not preempt it.
    #[must_use]
    pub const fn in_host_kernel(self) -> bool {
        matches!(self, Cat::Exit | Cat::Host)
    }

    /// All categories, in index order.
    pub const ALL: [Cat; N_CAT] = [
        Cat::Guest,
        Cat::Exit,
        Cat::Poll,
        Cat::Sched,
        Cat::Host,
        Cat::Idle,
    ];

    /// Stable lowercase name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Cat::Guest => "guest",
            Cat::Exit => "exit",
            Cat::Poll => "poll",
            Cat::Sched => "sched",
            Cat::Host => "host",
            Cat::Idle => "idle",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Time accounting of one pCPU: every nanosecond is in exactly one category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTime {
    cat: Cat,
    since: Nanos,
    origin: Nanos,
    ns: [Nanos; N_CAT],
}

impl Default for CpuTime {
    fn default() -> Self {
        Self {
            cat: Cat::Idle,
            since: 0,
            origin: 0,
            ns: [0; N_CAT],
        }
    }
}

impl CpuTime {
    /// From `now` on, the pCPU spends its time on `cat`.
    pub fn set(&mut self, now: Nanos, cat: Cat) {
        self.ns[self.cat.index()] += now.saturating_sub(self.since);
        self.since = now;
        self.cat = cat;
    }

    /// Forget everything before `now` (end of warm-up); the current category continues.
    pub fn reset(&mut self, now: Nanos) {
        self.ns = [0; N_CAT];
        self.since = now;
        self.origin = now;
    }

    /// Start of the accounted interval.
    #[must_use]
    pub fn origin(&self) -> Nanos {
        self.origin
    }

    /// Close the accounting at `now` and return nanoseconds per category.
    #[must_use]
    pub fn totals(&self, now: Nanos) -> [Nanos; N_CAT] {
        let mut t = self.ns;
        t[self.cat.index()] += now.saturating_sub(self.since);
        t
    }

    /// Current category.
    #[must_use]
    pub fn current(&self) -> Cat {
        self.cat
    }
}

/// A named series of samples (latencies in ns, or any integer quantity).
pub type Series = Vec<u64>;

/// Latency series and counters of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Metrics {
    /// Sample series by name.
    pub series: BTreeMap<&'static str, Series>,
    /// Event counters by name.
    pub counters: BTreeMap<&'static str, u64>,
    /// Time series `(t_ns, value)` by name (e.g. the vIC ratio over time).
    pub timeline: BTreeMap<&'static str, Vec<(Nanos, i64)>>,
}

impl Metrics {
    /// Add one to counter `name`.
    pub fn count(&mut self, name: &'static str) {
        self.add(name, 1);
    }

    /// Add `n` to counter `name`.
    pub fn add(&mut self, name: &'static str, n: u64) {
        *self.counters.entry(name).or_insert(0) += n;
    }

    /// Record one sample.
    pub fn sample(&mut self, name: &'static str, v: u64) {
        self.series.entry(name).or_default().push(v);
    }

    /// Record a time-series point (bounded to 100,000 points per series).
    pub fn point(&mut self, name: &'static str, t: Nanos, v: i64) {
        let s = self.timeline.entry(name).or_default();
        if s.len() < 100_000 {
            s.push((t, v));
        }
    }

    /// Counter value (0 if never counted).
    #[must_use]
    pub fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }
}

/// Summary statistics of a series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

/// Summarize a series (nearest-rank percentiles).
#[must_use]
pub fn summarize(s: &[u64]) -> Summary {
    if s.is_empty() {
        return Summary::default();
    }
    let mut v = s.to_vec();
    v.sort_unstable();
    let pct = |p: u64| vmirq_report::stats::nearest_rank(&v, p);
    let sum: u128 = v.iter().map(|&x| u128::from(x)).sum();
    #[allow(clippy::cast_precision_loss, reason = "statistics output")]
    let mean = sum as f64 / v.len() as f64;
    Summary {
        n: v.len(),
        mean,
        p50: pct(50),
        p90: pct(90),
        p99: pct(99),
        max: v[v.len() - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_adds_up() {
        let mut t = CpuTime::default();
        t.set(10, Cat::Guest);
        t.set(25, Cat::Poll);
        t.set(25, Cat::Exit);
        let tot = t.totals(40);
        assert_eq!(tot.iter().sum::<u64>(), 40);
        assert_eq!(tot[0], 15);
        assert_eq!(tot[1], 15);
    }

    #[test]
    fn percentiles() {
        let s: Vec<u64> = (1..=100).collect();
        let m = summarize(&s);
        assert_eq!((m.p50, m.p90, m.p99, m.max), (50, 90, 99, 100));
    }
}
