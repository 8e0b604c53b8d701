//! Summary statistics of per-completion added delay.

use serde::Serialize;

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

/// The nearest-rank percentile `pct` of sorted `values` (0 for an empty slice).
#[must_use]
pub fn percentile(sorted: &[u64], pct: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let n = sorted.len() as u64;
    let rank = (pct * n).div_ceil(100).clamp(1, n);
    let index = usize::try_from(rank - 1).unwrap_or(0);
    sorted[index.min(sorted.len() - 1)]
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
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[1, 2], 50), 1);
    }
}
