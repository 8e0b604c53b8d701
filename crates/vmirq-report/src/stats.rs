//! Order statistics shared by every command's reports: the one nearest-rank percentile that
//! `vmirq kvm`, `vmirq replay` and `vmirq sim` summarise their samples with.

/// The nearest-rank `pct`th percentile of ascending `sorted`: the smallest value with at
/// least `pct` % of the samples at or below it (rank `ceil(pct * n / 100)`, at least 1).
/// 0 for an empty slice; `pct` above 100 gives the maximum.
#[must_use]
pub fn nearest_rank(sorted: &[u64], pct: u64) -> u64 {
    let Some(&max) = sorted.last() else {
        return 0;
    };
    let n = sorted.len() as u64;
    let rank = pct.saturating_mul(n).div_ceil(100).clamp(1, n);
    usize::try_from(rank - 1)
        .ok()
        .and_then(|i| sorted.get(i).copied())
        .unwrap_or(max)
}

#[cfg(test)]
mod tests {
    use super::nearest_rank;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 50), 50);
        assert_eq!(nearest_rank(&v, 90), 90);
        assert_eq!(nearest_rank(&v, 99), 99);
        assert_eq!(nearest_rank(&v, 100), 100);
        assert_eq!(nearest_rank(&v, 0), 1);
        assert_eq!(nearest_rank(&v, 250), 100);
        assert_eq!(nearest_rank(&[], 50), 0);
        assert_eq!(nearest_rank(&[7], 99), 7);
        assert_eq!(nearest_rank(&[1, 2], 50), 1);
        assert_eq!(nearest_rank(&[1, 2, 3], 50), 2);
    }
}
