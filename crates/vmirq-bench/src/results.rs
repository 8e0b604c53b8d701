//! The result model: one [`CellResult`] per (target, workload, client mode), holding every
//! repetition and the summary numbers (medians, spreads, ratios to bare and to the peer).

use crate::stats::{ratio, Latency, Metrics, Spread};
use crate::target::{BackendPerIo, TargetSpec};
use crate::workload::{ClientMode, Workload};
use serde::{Deserialize, Serialize};

/// Added latency of a cell over the bare baseline (same workload, same repetition), medians.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AddedLatency {
    /// Mean latency minus bare mean latency, nanoseconds.
    pub mean: f64,
    /// p50 minus bare p50, nanoseconds.
    pub p50: f64,
}

/// Ratios of a cell to the peer (qemu-storage-daemon) in the same repetition, medians.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VsPeer {
    /// IOPS / peer IOPS (above 1 is better).
    #[serde(deserialize_with = "nan_if_null")]
    pub iops: f64,
    /// p50 latency / peer p50 (below 1 is better; absent in reports written before it was).
    #[serde(default)]
    pub p50: Option<f64>,
    /// p99 latency / peer p99 (below 1 is better).
    #[serde(deserialize_with = "nan_if_null")]
    pub p99: f64,
    /// CPU per I/O / peer CPU per I/O (below 1 is better).
    #[serde(deserialize_with = "nan_if_null")]
    pub cpu_ns_per_io: f64,
}

/// Read a ratio back: JSON has no NaN, so an undefined ratio (a zero denominator, see
/// [`ratio`]) was written as `null`.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Spreads over repetitions of the headline numbers.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CellSpread {
    /// IOPS.
    pub iops: Spread,
    /// p99 latency, nanoseconds.
    pub p99_ns: Spread,
    /// CPU per I/O, nanoseconds.
    pub cpu_ns_per_io: Spread,
}

/// One cell: its identity, every run, and the summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    /// Target label, e.g. `vmirq:vic`, `qemu-storage-daemon`, `bare`.
    pub target: String,
    /// Workload name, e.g. `randread-4k`.
    pub workload: String,
    /// Maximum outstanding requests.
    pub queue_depth: u32,
    /// `interrupt` or `poll`.
    pub client_mode: ClientMode,
    /// Bytes per request.
    pub block_size: u32,
    /// Successful repetitions.
    pub repetitions: usize,
    /// Median IOPS.
    pub iops: f64,
    /// Median MiB/s.
    pub mib_s: f64,
    /// Median of each latency statistic over repetitions, nanoseconds.
    pub lat_ns: Latency,
    /// Median notifications per I/O.
    pub notifications_per_io: f64,
    /// Median client wakeups per I/O.
    pub wakeups_per_io: f64,
    /// Median CPU ns per I/O, client plus backend.
    pub cpu_ns_per_io: f64,
    /// Median client CPU ns per I/O.
    pub client_cpu_ns_per_io: f64,
    /// Median backend CPU ns per I/O (absent for bare).
    pub backend_cpu_ns_per_io: Option<f64>,
    /// Median CPU use of everything else on the machine during the runs, percent of all CPUs
    /// (a noise indicator: other load competes with client and backend).
    pub others_busy_pct: Option<f64>,
    /// Median hypervisor steal time during the runs, percent of all CPUs.
    pub steal_pct: Option<f64>,
    /// Median backend counters per request (vmirq serve only).
    pub backend_per_io: Option<BackendPerIo>,
    /// Spread of the headline numbers.
    pub spread: CellSpread,
    /// Added latency over bare, if bare ran this workload.
    pub added_latency_ns: Option<AddedLatency>,
    /// Ratios to the peer, if the peer ran this workload.
    pub vs_peer: Option<VsPeer>,
    /// Every repetition, in run order (`None` where the run failed).
    pub runs: Vec<Option<Metrics>>,
    /// Errors of failed repetitions.
    pub errors: Vec<String>,
}

impl CellResult {
    /// An empty cell for `target` × `workload` × `mode` with room for `reps` runs.
    #[must_use]
    pub fn new(target: &TargetSpec, workload: &Workload, mode: ClientMode, reps: usize) -> Self {
        Self {
            target: target.to_string(),
            workload: workload.name.to_owned(),
            queue_depth: workload.queue_depth(),
            client_mode: mode,
            block_size: workload.block_size,
            repetitions: 0,
            iops: 0.0,
            mib_s: 0.0,
            lat_ns: Latency::default(),
            notifications_per_io: 0.0,
            wakeups_per_io: 0.0,
            cpu_ns_per_io: 0.0,
            client_cpu_ns_per_io: 0.0,
            backend_cpu_ns_per_io: None,
            others_busy_pct: None,
            steal_pct: None,
            backend_per_io: None,
            spread: CellSpread::default(),
            added_latency_ns: None,
            vs_peer: None,
            runs: vec![None; reps],
            errors: Vec::new(),
        }
    }

    /// Whether `other` is the same workload and mode (possibly another target).
    #[must_use]
    pub fn same_job(&self, other: &Self) -> bool {
        self.workload == other.workload
            && self.queue_depth == other.queue_depth
            && self.client_mode == other.client_mode
    }

    fn ok_runs(&self) -> Vec<Metrics> {
        self.runs.iter().flatten().copied().collect()
    }

    /// Fill the medians and spreads from `runs`.
    pub fn summarize(&mut self) {
        let runs = self.ok_runs();
        self.repetitions = runs.len();
        let med = |f: &dyn Fn(&Metrics) -> f64| Spread::over(&runs, f).median;
        self.iops = med(&|m| m.iops);
        self.mib_s = med(&|m| m.mib_s);
        self.lat_ns = Latency {
            mean: med(&|m| m.lat_ns.mean),
            p50: round(med(&|m| crate::stats::as_f64(m.lat_ns.p50))),
            p99: round(med(&|m| crate::stats::as_f64(m.lat_ns.p99))),
            p999: round(med(&|m| crate::stats::as_f64(m.lat_ns.p999))),
            max: round(med(&|m| crate::stats::as_f64(m.lat_ns.max))),
        };
        self.notifications_per_io = med(&|m| m.notifications_per_io);
        self.wakeups_per_io = med(&|m| m.wakeups_per_io);
        self.cpu_ns_per_io = med(&|m| m.cpu_ns_per_io);
        self.client_cpu_ns_per_io = med(&|m| m.client_cpu_ns_per_io);
        let backend: Vec<f64> = runs
            .iter()
            .filter_map(|m| m.backend_cpu_ns_per_io)
            .collect();
        self.backend_cpu_ns_per_io = (!backend.is_empty()).then(|| Spread::of(&backend).median);
        let median_of = |f: &dyn Fn(&Metrics) -> Option<f64>| {
            let v: Vec<f64> = runs.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| Spread::of(&v).median)
        };
        self.others_busy_pct = median_of(&|m| m.others_busy_pct);
        self.steal_pct = median_of(&|m| m.steal_pct);
        let b: Vec<BackendPerIo> = runs.iter().filter_map(|m| m.backend_per_io).collect();
        self.backend_per_io = (!b.is_empty()).then(|| BackendPerIo {
            kicks: Spread::over(&b, |x| x.kicks).median,
            notifications: Spread::over(&b, |x| x.notifications).median,
            suppressed: Spread::over(&b, |x| x.suppressed).median,
            held: Spread::over(&b, |x| x.held).median,
            timer_fires: Spread::over(&b, |x| x.timer_fires).median,
            poll_hits: Spread::over(&b, |x| x.poll_hits).median,
            poll_misses: Spread::over(&b, |x| x.poll_misses).median,
            poll_contended: Spread::over(&b, |x| x.poll_contended).median,
        });
        self.spread = CellSpread {
            iops: Spread::over(&runs, |m| m.iops),
            p99_ns: Spread::over(&runs, |m| crate::stats::as_f64(m.lat_ns.p99)),
            cpu_ns_per_io: Spread::over(&runs, |m| m.cpu_ns_per_io),
        };
    }

    /// Compare with `bare` repetition by repetition.
    pub fn compare_bare(&mut self, bare: &Self) {
        let pairs = paired(&self.runs, &bare.runs);
        if pairs.is_empty() {
            return;
        }
        self.added_latency_ns = Some(AddedLatency {
            mean: Spread::over(&pairs, |(c, b)| c.lat_ns.mean - b.lat_ns.mean).median,
            p50: Spread::over(&pairs, |(c, b)| {
                crate::stats::as_f64(c.lat_ns.p50) - crate::stats::as_f64(b.lat_ns.p50)
            })
            .median,
        });
    }

    /// Compare with `peer` repetition by repetition.
    pub fn compare_peer(&mut self, peer: &Self) {
        let pairs = paired(&self.runs, &peer.runs);
        if pairs.is_empty() {
            return;
        }
        let f = crate::stats::as_f64;
        self.vs_peer = Some(VsPeer {
            iops: Spread::over(&pairs, |(c, p)| ratio(c.iops, p.iops)).median,
            p50: Some(
                Spread::over(&pairs, |(c, p)| ratio(f(c.lat_ns.p50), f(p.lat_ns.p50))).median,
            ),
            p99: Spread::over(&pairs, |(c, p)| ratio(f(c.lat_ns.p99), f(p.lat_ns.p99))).median,
            cpu_ns_per_io: Spread::over(&pairs, |(c, p)| ratio(c.cpu_ns_per_io, p.cpu_ns_per_io))
                .median,
        });
    }
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "rounded, non-negative, far below 2^63"
)]
fn round(x: f64) -> u64 {
    x.max(0.0).round() as u64
}

/// Runs of two cells from the same repetition where both succeeded.
fn paired(a: &[Option<Metrics>], b: &[Option<Metrics>]) -> Vec<(Metrics, Metrics)> {
    a.iter()
        .zip(b)
        .filter_map(|(x, y)| Some(((*x)?, (*y)?)))
        .collect()
}

/// Fill summaries, bare comparisons and peer comparisons of every cell.
pub fn finalize(cells: &mut [CellResult]) {
    for c in cells.iter_mut() {
        c.summarize();
    }
    let snapshot = cells.to_vec();
    for c in cells.iter_mut() {
        if let Some(bare) = snapshot
            .iter()
            .find(|o| o.target == "bare" && o.same_job(c))
        {
            if c.target != "bare" {
                c.compare_bare(bare);
            }
        }
        let peer = TargetSpec::Qsd.to_string();
        if let Some(p) = snapshot.iter().find(|o| o.target == peer && o.same_job(c)) {
            if c.target != peer {
                c.compare_peer(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(iops: f64, p99: u64, mean: f64) -> Metrics {
        Metrics {
            iops,
            lat_ns: Latency {
                mean,
                p50: p99 / 2,
                p99,
                p999: p99,
                max: p99,
            },
            cpu_ns_per_io: 1000.0,
            ..Metrics::default()
        }
    }

    fn cell(target: TargetSpec, runs: Vec<Option<Metrics>>) -> CellResult {
        let mut c = CellResult::new(&target, &Workload::randread(1), ClientMode::Interrupt, 3);
        c.runs = runs;
        c
    }

    #[test]
    fn ratios_pair_runs_of_the_same_repetition() {
        let vm: TargetSpec = "vmirq:none".parse().expect("spec");
        let mut cells = vec![
            cell(TargetSpec::Bare, vec![Some(metrics(200.0, 50, 40.0)); 3]),
            cell(
                TargetSpec::Qsd,
                vec![
                    Some(metrics(100.0, 200, 100.0)),
                    None,
                    Some(metrics(50.0, 400, 100.0)),
                ],
            ),
            cell(
                vm,
                vec![
                    Some(metrics(150.0, 100, 60.0)),
                    Some(metrics(1.0, 1, 1.0)),
                    Some(metrics(100.0, 100, 80.0)),
                ],
            ),
        ];
        finalize(&mut cells);
        let v = &cells[2];
        assert_eq!(v.repetitions, 3);
        assert_eq!(v.iops, 100.0);
        // Pairs (rep 0 and rep 2 only): iops ratios 1.5 and 2.0, p99 ratios 0.5 and 0.25.
        let peer = v.vs_peer.expect("peer");
        assert!((peer.iops - 1.75).abs() < 1e-12);
        assert!((peer.p99 - 0.375).abs() < 1e-12);
        assert!((peer.p50.expect("p50") - 0.375).abs() < 1e-12);
        let added = v.added_latency_ns.expect("bare");
        assert!((added.mean - 20.0).abs() < 1e-12, "{added:?}");
        assert!(cells[0].added_latency_ns.is_none() && cells[1].vs_peer.is_none());
        assert_eq!(cells[1].repetitions, 2);
    }
}
