//! Per-pair differences of interleaved samples: the net cost of an operation measured
//! against a reference (the `nop` baseline, or another operation) run alternately in the
//! same loop of the same VM.
//!
//! Subtracting one loop's p50 from another's, measured in separate phases (the old
//! `net_p50_ns`), carries every drift between the two phases into the difference: on this
//! project's nested host the `nop` baseline alone measured 4.9-6.7 µs (raw p50) over six
//! back-to-back quiet runs, and the net costs moved with it. Here sample `i` of the operation
//! and sample `i` of the reference were taken one iteration apart, so whatever both share
//! (the host's state during that iteration) cancels in their difference, and the p50 of the
//! differences is the net cost. Differences are signed: an operation that costs no more than
//! the reference (an instruction emulated inline, say) gives differences around 0, not a
//! clamped 0.

use serde::{Deserialize, Serialize};
use vmirq_report::stats::nearest_rank;

/// Why a set of pairs could not be summarised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The two sample vectors do not pair up one to one.
    #[error("{op} operation samples against {reference} reference samples")]
    Unequal {
        /// Samples of the operation.
        op: usize,
        /// Samples of the reference.
        reference: usize,
    },
    /// There is nothing to summarise.
    #[error("no pairs")]
    Empty,
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Summary of signed per-pair differences, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffSummary {
    /// Number of pairs.
    pub n: u64,
    /// Smallest difference.
    pub min: i64,
    /// 10th percentile (nearest rank).
    pub p10: i64,
    /// Median: the net cost.
    pub p50: i64,
    /// 90th percentile.
    pub p90: i64,
    /// Largest difference.
    pub max: i64,
    /// Arithmetic mean (rounded towards zero).
    pub mean: i64,
}

/// `op[i] - reference[i]` for every `i`, saturating at the ends of `i64`.
///
/// # Errors
/// [`Error::Unequal`] if the vectors differ in length, [`Error::Empty`] if both are empty.
pub fn differences(op: &[u64], reference: &[u64]) -> Result<Vec<i64>> {
    if op.len() != reference.len() {
        return Err(Error::Unequal {
            op: op.len(),
            reference: reference.len(),
        });
    }
    if op.is_empty() {
        return Err(Error::Empty);
    }
    Ok(op
        .iter()
        .zip(reference)
        .map(|(&a, &b)| saturate(i128::from(a) - i128::from(b)))
        .collect())
}

/// Summary of the per-pair differences of `op` against `reference` (see [`differences`]).
///
/// # Errors
/// As [`differences`].
pub fn paired(op: &[u64], reference: &[u64]) -> Result<DiffSummary> {
    let mut d = differences(op, reference)?;
    DiffSummary::of(&mut d)
}

impl DiffSummary {
    /// Summarise `diffs` (sorts them), with the same nearest-rank percentiles as
    /// [`crate::dist::Summary`].
    ///
    /// # Errors
    /// [`Error::Empty`] for no differences.
    pub fn of(diffs: &mut [i64]) -> Result<Self> {
        if diffs.is_empty() {
            return Err(Error::Empty);
        }
        diffs.sort_unstable();
        // Percentiles through the unsigned nearest-rank helper, on an order-preserving map.
        let keys: Vec<u64> = diffs.iter().map(|&d| to_key(d)).collect();
        let pct = |p| from_key(nearest_rank(&keys, p));
        let sum: i128 = diffs.iter().map(|&d| i128::from(d)).sum();
        let n = diffs.len();
        Ok(Self {
            n: n as u64,
            min: diffs[0],
            p10: pct(10),
            p50: pct(50),
            p90: pct(90),
            max: diffs[n - 1],
            mean: saturate(sum / n as i128),
        })
    }
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Flipping the sign bit of the two's-complement bits maps `i64` order onto `u64` order.
const SIGN: u64 = 1 << 63;

fn to_key(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes()) ^ SIGN
}

fn from_key(k: u64) -> i64 {
    i64::from_ne_bytes((k ^ SIGN).to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drift_shared_by_both_halves_of_each_pair_cancels() {
        // The reference drifts from 5 000 to 6 700 ns over the run (as the baseline did
        // between runs); the operation costs 1 000 ns more at every iteration, plus noise
        // of -20..+20 ns.
        let reference: Vec<u64> = (0..100).map(|i| 5_000 + 17 * i).collect();
        let op: Vec<u64> = reference
            .iter()
            .enumerate()
            .map(|(i, &r)| r + 1_000 + (i as u64 % 5) * 10 - 20)
            .collect();
        let s = paired(&op, &reference).expect("pairs");
        assert_eq!(s.n, 100);
        assert_eq!((s.min, s.max), (980, 1_020));
        assert_eq!((s.p10, s.p50, s.p90), (980, 1_000, 1_020));
        assert_eq!(s.mean, 1_000);
        // A step shared by both halves of each pair (the host slows down by 3 us for the
        // second half of the run) changes no difference.
        let shifted: Vec<u64> = reference
            .iter()
            .enumerate()
            .map(|(i, &r)| if i < 50 { r } else { r + 3_000 })
            .collect();
        let op2: Vec<u64> = op
            .iter()
            .enumerate()
            .map(|(i, &o)| if i < 50 { o } else { o + 3_000 })
            .collect();
        assert_eq!(paired(&op2, &shifted).expect("pairs"), s);
    }

    #[test]
    fn differences_are_signed_and_percentiles_are_nearest_rank() {
        // Differences -50..=49 (op cheaper than the reference in half the pairs).
        let reference: Vec<u64> = (0..100).map(|_| 1_000).collect();
        let op: Vec<u64> = (0..100).rev().map(|i| 950 + i).collect();
        let d = differences(&op, &reference).expect("pairs");
        assert_eq!(d[0], 49);
        assert_eq!(d[99], -50);
        let s = paired(&op, &reference).expect("pairs");
        assert_eq!((s.min, s.p10, s.p50, s.p90, s.max), (-50, -41, -1, 39, 49));
        assert_eq!(s.mean, 0, "-0.5 rounds towards zero");
        let one = paired(&[3], &[10]).expect("one pair");
        assert_eq!(
            (one.min, one.p10, one.p50, one.p90, one.max),
            (-7, -7, -7, -7, -7)
        );
    }

    #[test]
    fn pairs_of_different_lengths_or_none_are_refused() {
        assert_eq!(
            paired(&[1, 2, 3], &[1, 2]),
            Err(Error::Unequal {
                op: 3,
                reference: 2
            })
        );
        assert_eq!(paired(&[], &[]), Err(Error::Empty));
        assert_eq!(DiffSummary::of(&mut []), Err(Error::Empty));
    }

    #[test]
    fn extreme_samples_saturate_instead_of_wrapping() {
        let s = paired(&[u64::MAX, 0], &[0, u64::MAX]).expect("pairs");
        assert_eq!((s.min, s.max), (i64::MIN, i64::MAX));
        assert_eq!(
            (to_key(i64::MIN), to_key(-1), to_key(0), to_key(i64::MAX)),
            (0, SIGN - 1, SIGN, u64::MAX)
        );
        for v in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(from_key(to_key(v)), v);
        }
    }
}
