//! Latency distributions: percentiles over a vector of samples.

use serde::{Deserialize, Serialize};
use vmirq_report::stats::nearest_rank as percentile;

/// Summary of a set of nanosecond samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: u64,
    /// Smallest sample.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest sample.
    pub max: u64,
    /// Arithmetic mean (rounded down).
    pub mean: u64,
}

impl Summary {
    /// Summarise `samples` (sorts them). Empty input gives all zeros.
    #[must_use]
    pub fn of(samples: &mut [u64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let n = samples.len();
        let sum: u128 = samples.iter().map(|&v| u128::from(v)).sum();
        let mean = u64::try_from(sum / n as u128).unwrap_or(u64::MAX);
        Self {
            n: n as u64,
            min: samples[0],
            p50: percentile(samples, 50),
            p90: percentile(samples, 90),
            p99: percentile(samples, 99),
            max: samples[n - 1],
            mean,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = Summary::of(&mut v);
        assert_eq!(
            (s.n, s.min, s.p50, s.p90, s.p99, s.max),
            (100, 1, 50, 90, 99, 100)
        );
        assert_eq!(s.mean, 50);
        assert_eq!(Summary::of(&mut []), Summary::default());
        assert_eq!(Summary::of(&mut [7]).p99, 7);
    }
}
