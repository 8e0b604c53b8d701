//! Summary statistics of per-completion added delay.

use serde::Serialize;
use vmirq_report::stats::nearest_rank as percentile;

/// Mean, median, 99th percentile and maximum, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DelaySummary {
    /// Arithmetic mean (rounded down).
    pub mean: u64,
    /// Median (nearest rank).
    pub p50: u64,
    /// 99th percentile (nearest rank).
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

impl DelaySummary {
    /// Summarize `values` (sorted in place).
    #[must_use]
    pub fn of(values: &mut [u64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_unstable();
        let sum: u128 = values.iter().map(|v| u128::from(*v)).sum();
        let mean = u64::try_from(sum / values.len() as u128).unwrap_or(u64::MAX);
        Self {
            mean,
            p50: percentile(values, 50),
            p99: percentile(values, 99),
            max: values[values.len() - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = DelaySummary::of(&mut v);
        assert_eq!(
            s,
            DelaySummary {
                mean: 50,
                p50: 50,
                p99: 99,
                max: 100
            }
        );
        assert_eq!(DelaySummary::of(&mut []), DelaySummary::default());
    }
}
