//! The network result model: one [`NetMetrics`] per run (from vmirq-netload's report), one
//! [`NetCell`] per (target, job) holding every repetition, its medians with min and max, and
//! its ratios to testpmd's vhost PMD paired repetition by repetition.

use crate::stats::{as_f64, Spread};
use serde::{Deserialize, Serialize};
use vmirq_netload::run::Report;

/// The label of the peer every ratio is taken against.
pub const PEER: &str = "testpmd";

/// The numbers of one run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct NetMetrics {
    /// Frames received by the client's ports in the window.
    pub packets: u64,
    /// Their rate.
    pub pps: f64,
    /// Their bit rate (Ethernet frame bytes).
    pub gbit_s: f64,
    /// Request/response transactions per second (ping-pong jobs).
    pub transactions_per_s: Option<f64>,
    /// Round-trip time p50, nanoseconds (ping-pong jobs).
    pub rtt_p50_ns: Option<u64>,
    /// Round-trip time p99, nanoseconds (ping-pong jobs).
    pub rtt_p99_ns: Option<u64>,
    /// Device signals on the client's call eventfds per received packet.
    pub interrupts_per_packet: f64,
    /// Client sleeps ended by a call eventfd per received packet.
    pub wakeups_per_packet: f64,
    /// Client thread CPU per received packet, nanoseconds.
    pub client_cpu_ns_per_packet: f64,
    /// Backend process CPU (all threads) per received packet, nanoseconds.
    pub backend_cpu_ns_per_packet: Option<f64>,
    /// Client plus backend CPU per received packet, nanoseconds.
    pub cpu_ns_per_packet: f64,
    /// Whole-machine busy CPU in the window, percent of all CPUs (others' load included).
    pub machine_busy_pct: Option<f64>,
    /// Busy CPU of everything but the client thread and the backend process in the window,
    /// percent of all CPUs: other load competing with the run (noise).
    #[serde(default)]
    pub others_busy_pct: Option<f64>,
    /// Frames sent and never received over the whole run (a peer with no free receive
    /// buffer drops; serve-net holds frames in the sender's ring instead).
    pub lost: u64,
    /// Unusable frames (foreign, corrupt, misrouted) over the whole run.
    pub frame_errors: u64,
}

impl NetMetrics {
    /// The metrics of one vmirq-netload report.
    #[must_use]
    pub fn of(r: &Report) -> Self {
        let rr = r.rr.as_ref();
        Self {
            packets: r.packets,
            pps: r.pps,
            gbit_s: r.gbit_s,
            transactions_per_s: rr.map(|t| t.per_s),
            rtt_p50_ns: rr.map(|t| t.rtt.p50_ns),
            rtt_p99_ns: rr.map(|t| t.rtt.p99_ns),
            interrupts_per_packet: r.interrupts_per_packet,
            wakeups_per_packet: r.wakeups_per_packet,
            client_cpu_ns_per_packet: r.cpu_ns_per_packet,
            backend_cpu_ns_per_packet: r.backend_cpu_ns_per_packet,
            cpu_ns_per_packet: r.cpu_ns_per_packet + r.backend_cpu_ns_per_packet.unwrap_or(0.0),
            machine_busy_pct: r.machine_busy.map(|b| b * 100.0),
            others_busy_pct: others_busy_pct(r),
            lost: r.lost(),
            frame_errors: r.frame_errors.total(),
        }
    }
}

/// The machine's busy share minus the client's and the backend's, in percent of all CPUs.
fn others_busy_pct(r: &Report) -> Option<f64> {
    let busy = r.machine_busy?;
    let backend_ns = r.backend_cpu_ns_per_packet? * as_f64(r.packets);
    // SAFETY: sysconf has no preconditions; a negative result means unknown.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let cpus = u64::try_from(cpus).ok().filter(|c| *c > 0)?;
    let window_ns = as_f64(r.measured_ns) * as_f64(cpus);
    if window_ns <= 0.0 {
        return None;
    }
    let ours = (as_f64(r.client_cpu_ns) + backend_ns) / window_ns;
    Some(((busy - ours) * 100.0).max(0.0))
}

/// Ratios of a cell to the peer's cell of the same job, one per repetition where both ran,
/// as median [min..max]; a ratio is absent when the peer's value is zero in every pair (no
/// interrupts in poll mode) or the job does not have it (latency outside ping-pong).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct NetVsPeer {
    /// Repetitions compared.
    pub pairs: usize,
    /// Packets/s over the peer's (above 1: more).
    pub pps: Option<Spread>,
    /// RTT p50 over the peer's (below 1: faster).
    pub rtt_p50: Option<Spread>,
    /// RTT p99 over the peer's.
    pub rtt_p99: Option<Spread>,
    /// Interrupts per packet over the peer's.
    pub interrupts_per_packet: Option<Spread>,
    /// Client + backend CPU per packet over the peer's (below 1: cheaper).
    pub cpu_ns_per_packet: Option<Spread>,
}

/// One target running one job, every repetition and the summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NetCell {
    /// Target label: `testpmd`, `ovs-dpdk`, `vmirq`, `vmirq:dim`.
    pub target: String,
    /// Job name, e.g. `stream-64/poll`.
    pub job: String,
    /// The workload as vmirq-netload prints it, e.g. `stream 64B @max`.
    pub workload: String,
    /// Largest frame length, bytes.
    pub frame_len: u32,
    /// `interrupt` or `poll`.
    pub client_mode: String,
    /// Successful repetitions.
    pub repetitions: usize,
    /// Packets/s.
    pub pps: Spread,
    /// Gbit/s.
    pub gbit_s: Spread,
    /// RTT p50 in nanoseconds (ping-pong jobs).
    pub rtt_p50_ns: Option<Spread>,
    /// RTT p99 in nanoseconds (ping-pong jobs).
    pub rtt_p99_ns: Option<Spread>,
    /// Interrupts per packet.
    pub interrupts_per_packet: Spread,
    /// Client CPU per packet, nanoseconds.
    pub client_cpu_ns_per_packet: Spread,
    /// Backend CPU per packet, nanoseconds.
    pub backend_cpu_ns_per_packet: Option<Spread>,
    /// Client + backend CPU per packet, nanoseconds.
    pub cpu_ns_per_packet: Spread,
    /// Whole-machine busy share, percent (a noise indicator).
    pub machine_busy_pct: Option<Spread>,
    /// Lost frames summed over repetitions.
    pub lost: u64,
    /// Frame errors summed over repetitions.
    pub frame_errors: u64,
    /// Ratios to testpmd's cell of the same job (absent for testpmd itself).
    pub vs_peer: Option<NetVsPeer>,
    /// The device's command line or configuration (first repetition).
    pub describe: String,
    /// virtio features the client negotiated with the device (first successful run), e.g.
    /// `MRG_RXBUF` where the device merges receive buffers.
    #[serde(default)]
    pub features: Vec<String>,
    /// Every repetition, in run order (`None` where it failed).
    pub runs: Vec<Option<NetMetrics>>,
    /// Errors of failed repetitions.
    pub errors: Vec<String>,
}

fn spread_opt(v: &[f64]) -> Option<Spread> {
    (!v.is_empty()).then(|| Spread::of(v))
}

impl NetCell {
    /// An empty cell with room for `reps` runs.
    #[must_use]
    pub fn new(target: String, job: &super::plan::NetJob, reps: usize) -> Self {
        Self {
            target,
            job: job.name(),
            workload: job.workload.to_string(),
            frame_len: job.workload.max_frame_len(),
            client_mode: job.mode.as_str().to_owned(),
            repetitions: 0,
            pps: Spread::default(),
            gbit_s: Spread::default(),
            rtt_p50_ns: None,
            rtt_p99_ns: None,
            interrupts_per_packet: Spread::default(),
            client_cpu_ns_per_packet: Spread::default(),
            backend_cpu_ns_per_packet: None,
            cpu_ns_per_packet: Spread::default(),
            machine_busy_pct: None,
            lost: 0,
            frame_errors: 0,
            vs_peer: None,
            describe: String::new(),
            features: Vec::new(),
            runs: vec![None; reps],
            errors: Vec::new(),
        }
    }

    /// Fill the spreads from the runs.
    pub fn summarize(&mut self) {
        let runs: Vec<NetMetrics> = self.runs.iter().flatten().copied().collect();
        self.repetitions = runs.len();
        let opt = |f: &dyn Fn(&NetMetrics) -> Option<f64>| {
            spread_opt(&runs.iter().filter_map(f).collect::<Vec<_>>())
        };
        self.pps = Spread::over(&runs, |m| m.pps);
        self.gbit_s = Spread::over(&runs, |m| m.gbit_s);
        self.rtt_p50_ns = opt(&|m| m.rtt_p50_ns.map(as_f64));
        self.rtt_p99_ns = opt(&|m| m.rtt_p99_ns.map(as_f64));
        self.interrupts_per_packet = Spread::over(&runs, |m| m.interrupts_per_packet);
        self.client_cpu_ns_per_packet = Spread::over(&runs, |m| m.client_cpu_ns_per_packet);
        self.backend_cpu_ns_per_packet = opt(&|m| m.backend_cpu_ns_per_packet);
        self.cpu_ns_per_packet = Spread::over(&runs, |m| m.cpu_ns_per_packet);
        self.machine_busy_pct = opt(&|m| m.machine_busy_pct);
        self.lost = runs.iter().map(|m| m.lost).sum();
        self.frame_errors = runs.iter().map(|m| m.frame_errors).sum();
    }

    /// Compare with the peer's cell of the same job, repetition by repetition.
    pub fn compare_peer(&mut self, peer: &Self) {
        let pairs: Vec<(NetMetrics, NetMetrics)> = self
            .runs
            .iter()
            .zip(&peer.runs)
            .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
            .collect();
        if pairs.is_empty() {
            return;
        }
        let ratios = |f: &dyn Fn(&NetMetrics) -> Option<f64>| {
            let v: Vec<f64> = pairs
                .iter()
                .filter_map(|(a, b)| {
                    let (x, y) = (f(a)?, f(b)?);
                    (y > 0.0 && x.is_finite()).then(|| x / y)
                })
                .collect();
            spread_opt(&v)
        };
        self.vs_peer = Some(NetVsPeer {
            pairs: pairs.len(),
            pps: ratios(&|m| Some(m.pps)),
            rtt_p50: ratios(&|m| m.rtt_p50_ns.map(as_f64)),
            rtt_p99: ratios(&|m| m.rtt_p99_ns.map(as_f64)),
            // A polling client turns callbacks off: its few interrupts (path probes, the
            // first round) say nothing about the device, so poll jobs get no ratio.
            interrupts_per_packet: if self.client_mode == "poll" {
                None
            } else {
                ratios(&|m| Some(m.interrupts_per_packet))
            },
            cpu_ns_per_packet: ratios(&|m| Some(m.cpu_ns_per_packet)),
        });
    }
}

/// Fill every cell's summary and its ratios to the peer's cell of the same job.
pub fn finalize(cells: &mut [NetCell]) {
    for c in cells.iter_mut() {
        c.summarize();
    }
    let peers: Vec<NetCell> = cells.iter().filter(|c| c.target == PEER).cloned().collect();
    for c in cells.iter_mut().filter(|c| c.target != PEER) {
        if let Some(p) = peers.iter().find(|p| p.job == c.job) {
            c.compare_peer(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::plan::{NetPlan, NetPreset};

    fn m(pps: f64, p50: Option<u64>, irq: f64) -> Option<NetMetrics> {
        Some(NetMetrics {
            packets: 1000,
            pps,
            rtt_p50_ns: p50,
            rtt_p99_ns: p50.map(|p| p * 2),
            interrupts_per_packet: irq,
            cpu_ns_per_packet: 100.0,
            ..NetMetrics::default()
        })
    }

    #[test]
    fn ratios_pair_repetitions_and_skip_undefined_ones() {
        let plan = NetPlan::preset(NetPreset::Tiny, false);
        let job = plan.jobs[1];
        let mut peer = NetCell::new(PEER.into(), &job, 3);
        peer.runs = vec![m(100.0, Some(10), 0.0), None, m(200.0, Some(20), 0.0)];
        let mut vm = NetCell::new("vmirq".into(), &job, 3);
        vm.runs = vec![
            m(50.0, Some(20), 0.5),
            m(1.0, Some(1), 1.0),
            m(300.0, Some(10), 1.0),
        ];
        let mut cells = vec![peer, vm];
        finalize(&mut cells);
        assert!(cells[0].vs_peer.is_none());
        assert_eq!(cells[0].repetitions, 2);
        let v = cells[1].vs_peer.expect("compared");
        assert_eq!(v.pairs, 2);
        let pps = v.pps.expect("pps");
        assert_eq!((pps.min, pps.median, pps.max), (0.5, 1.0, 1.5));
        let p50 = v.rtt_p50.expect("p50");
        assert_eq!((p50.min, p50.max), (0.5, 2.0));
        // The peer took no interrupts: the ratio is undefined, not infinite.
        assert!(v.interrupts_per_packet.is_none());
        let all = versus(&cells, &[PEER.into(), "vmirq".into()]);
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].jobs, all[0].pps.median), (1, 1.0));
        assert!((all[0].pps_geomean - 1.0).abs() < 1e-12);
        assert_eq!(cells[1].pps.median, 50.0);
        assert_eq!(cells[1].rtt_p50_ns.expect("rr").median, 10.0);
    }
}

/// One target against the peer over every job both ran, as the block report's
/// [`crate::report::versus::Versus`]: the geometric mean and range of the packets/s ratios and
/// the median CPU-per-packet ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetVersus {
    /// Target label.
    pub target: String,
    /// Jobs with a ratio.
    pub jobs: usize,
    /// Geometric mean of the per-job median packets/s ratios.
    pub pps_geomean: f64,
    /// Their spread (min, median, max).
    pub pps: Spread,
    /// Median of the per-job median CPU-per-packet ratios.
    pub cpu_median: Option<f64>,
}

/// Every non-peer target against the peer, in the order of `targets`.
#[must_use]
pub fn versus(cells: &[NetCell], targets: &[String]) -> Vec<NetVersus> {
    targets
        .iter()
        .filter(|t| t.as_str() != PEER)
        .filter_map(|t| {
            let vs: Vec<NetVsPeer> = cells
                .iter()
                .filter(|c| &c.target == t)
                .filter_map(|c| c.vs_peer)
                .collect();
            let pps: Vec<f64> = vs.iter().filter_map(|v| v.pps).map(|s| s.median).collect();
            if pps.is_empty() {
                return None;
            }
            let cpu: Vec<f64> = vs
                .iter()
                .filter_map(|v| v.cpu_ns_per_packet)
                .map(|s| s.median)
                .collect();
            Some(NetVersus {
                target: t.clone(),
                jobs: pps.len(),
                pps_geomean: crate::report::versus::geomean(&pps),
                pps: Spread::of(&pps),
                cpu_median: spread_opt(&cpu).map(|s| s.median),
            })
        })
        .collect()
}
