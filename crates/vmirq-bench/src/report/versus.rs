//! One target against the peer over several jobs, computed in one place for the terminal
//! reading ([`super::summary`]), the JSON headline and the HTML headline
//! ([`super::headline`]): the geometric mean and range of the IOPS ratios and the medians of
//! the p99 and CPU-per-I/O ratios, over the cells that have a peer run to compare with.

use crate::results::CellResult;
use crate::stats::{as_f64, Spread};

/// A target against the peer over the jobs both ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Versus {
    /// Cells with a peer comparison.
    pub jobs: usize,
    /// Geometric mean of the IOPS ratios (above 1: the target ahead).
    pub iops_geomean: f64,
    /// The spread of the IOPS ratios (min, median, max).
    pub iops: Spread,
    /// Median of the p99 latency ratios (below 1: the target faster).
    pub p99_median: f64,
    /// Median of the CPU-per-I/O ratios (below 1: the target cheaper).
    pub cpu_median: f64,
}

impl Versus {
    /// The comparison over `cells` (one target's, or one chosen cell per job), or `None`
    /// when none of them has a peer run.
    #[must_use]
    pub fn over<'a>(cells: impl IntoIterator<Item = &'a CellResult>) -> Option<Self> {
        let vs: Vec<_> = cells.into_iter().filter_map(|c| c.vs_peer).collect();
        if vs.is_empty() {
            return None;
        }
        let iops: Vec<f64> = vs.iter().map(|p| p.iops).collect();
        Some(Self {
            jobs: vs.len(),
            iops_geomean: geomean(&iops),
            iops: Spread::of(&iops),
            p99_median: Spread::over(&vs, |p| p.p99).median,
            cpu_median: Spread::over(&vs, |p| p.cpu_ns_per_io).median,
        })
    }
}

/// Geometric mean of the finite, positive values (NaN if there are none).
#[must_use]
pub fn geomean(values: &[f64]) -> f64 {
    let logs: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(f64::ln)
        .collect();
    if logs.is_empty() {
        return f64::NAN;
    }
    (logs.iter().sum::<f64>() / as_f64(logs.len() as u64)).exp()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::VsPeer;
    use crate::target::TargetSpec;
    use crate::workload::{ClientMode, Workload};

    fn cell(vs: Option<(f64, f64, f64)>) -> CellResult {
        let mut c = CellResult::new(
            &TargetSpec::VmirqDefaults,
            &Workload::trickle(),
            ClientMode::Interrupt,
            1,
        );
        c.vs_peer = vs.map(|(iops, p99, cpu)| VsPeer {
            iops,
            p50: None,
            p99,
            cpu_ns_per_io: cpu,
        });
        c
    }

    #[test]
    fn aggregates_only_cells_with_a_peer_run() {
        let cells = [
            cell(Some((2.0, 0.5, 0.8))),
            cell(None),
            cell(Some((0.5, 1.5, 0.6))),
            cell(Some((1.0, 1.0, 1.0))),
        ];
        let v = Versus::over(&cells).expect("three comparisons");
        assert_eq!(v.jobs, 3);
        assert!((v.iops_geomean - 1.0).abs() < 1e-12);
        assert_eq!((v.iops.min, v.iops.max), (0.5, 2.0));
        assert_eq!(v.p99_median, 1.0);
        assert_eq!(v.cpu_median, 0.8);
        assert!(Versus::over(&[cell(None)]).is_none());
    }

    #[test]
    fn geomean_ignores_undefined_ratios() {
        assert!((geomean(&[4.0, 1.0, f64::NAN, 0.0]) - 2.0).abs() < 1e-12);
        assert!(geomean(&[f64::NAN]).is_nan());
    }
}
