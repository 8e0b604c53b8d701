//! A measurement session: connect to a backend (or start testpmd's vhost PMD as the peer),
//! run a workload in each mode, repeated and interleaved (interrupt, poll, interrupt, ...)
//! so that the machine's noise hits every mode alike, and summarise each metric as median,
//! min and max with the interrupt/poll ratio of the medians.

use crate::frame::{Encap, Pattern};
use crate::peer::{self, PeerError, TestPmd, TestPmdConfig};
use crate::port::{connect_all, PortConfig, PortError};
use crate::run::{self, Mode, Report, RunConfig, RunError};
use crate::workload::{Workload, WorkloadError};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;
use vmirq_report::table::short_number as num;

/// Errors of a session.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Starting or stopping testpmd.
    #[error("testpmd peer")]
    Peer(#[from] PeerError),
    /// Connecting a port.
    #[error("connecting")]
    Port(#[from] PortError),
    /// A run.
    #[error("{mode} run {repeat}")]
    Run {
        /// Mode of the failed run.
        mode: &'static str,
        /// Repeat index.
        repeat: usize,
        /// The run error.
        #[source]
        source: RunError,
    },
    /// The workload does not suit the run's encapsulation (checked before anything starts).
    #[error("workload")]
    Workload(#[from] WorkloadError),
    /// A temporary directory for testpmd's sockets.
    #[error("temporary directory")]
    TempDir(#[source] std::io::Error),
    /// testpmd's vhost PMD cannot connect these ports.
    #[error(
        "testpmd forwards fixed pairs (0 <-> 1, 2 <-> 3): {0} ports leave one without a \
         partner; the 3-port mix needs a switch that learns addresses (--peer vmirq)"
    )]
    TestpmdPorts(usize),
}

/// Check that testpmd's vhost PMD, which forwards fixed pairs (`io` mode: 0 <-> 1,
/// 2 <-> 3), can be the peer of `ports` ports: an even number.
///
/// # Errors
/// [`BenchError::TestpmdPorts`].
pub const fn check_testpmd_ports(ports: usize) -> Result<(), BenchError> {
    if ports % 2 == 0 {
        Ok(())
    } else {
        Err(BenchError::TestpmdPorts(ports))
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// vhost-user-net sockets to connect to; empty: start testpmd's vhost PMD as the peer.
    pub sockets: Vec<PathBuf>,
    /// Ports of the testpmd peer when `sockets` is empty (2; 4 puts a mix's messages on
    /// their own queues; testpmd refuses 3, see [`check_testpmd_ports`]).
    pub testpmd_ports: usize,
    /// Traffic.
    pub workload: Workload,
    /// Modes, interleaved in this order in every repeat.
    pub modes: Vec<Mode>,
    /// Repeats of each mode.
    pub repeat: usize,
    /// Per-run timing and options (its `mode` and `workload` are overridden).
    pub run: RunConfig,
    /// Port setup (its `tx_frame_max` is raised to the workload's largest frame).
    pub port: PortConfig,
}

/// Median, min and max of one metric over the repeats of one mode.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Median, min and max of `v` (`None` when empty).
    #[must_use]
    pub fn of(mut v: Vec<f64>) -> Option<Self> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// A metric of the summary table.
struct Metric {
    name: &'static str,
    unit: &'static str,
    get: fn(&Report) -> Option<f64>,
}

const METRICS: &[Metric] = &[
    Metric {
        name: "packets/s",
        unit: "",
        get: |r| Some(r.pps),
    },
    Metric {
        name: "Gbit/s",
        unit: "",
        get: |r| Some(r.gbit_s),
    },
    Metric {
        name: "transactions/s",
        unit: "",
        get: |r| r.rr.map(|t| t.per_s),
    },
    Metric {
        name: "RTT p50",
        unit: "(us)",
        get: |r| r.rr.map(|t| t.rtt.p50_ns as f64 / 1e3),
    },
    Metric {
        name: "RTT p99",
        unit: "(us)",
        get: |r| r.rr.map(|t| t.rtt.p99_ns as f64 / 1e3),
    },
    Metric {
        name: "request half p50",
        unit: "(us)",
        get: |r| r.rr.and_then(|t| t.out).map(|l| l.p50_ns as f64 / 1e3),
    },
    Metric {
        name: "request half p99",
        unit: "(us)",
        get: |r| r.rr.and_then(|t| t.out).map(|l| l.p99_ns as f64 / 1e3),
    },
    Metric {
        name: "response half p50",
        unit: "(us)",
        get: |r| r.rr.and_then(|t| t.back).map(|l| l.p50_ns as f64 / 1e3),
    },
    Metric {
        name: "response half p99",
        unit: "(us)",
        get: |r| r.rr.and_then(|t| t.back).map(|l| l.p99_ns as f64 / 1e3),
    },
    Metric {
        name: "frames ahead of msg p50",
        unit: "",
        get: |r| r.rr.and_then(|t| t.frames_ahead_p50).map(|n| n as f64),
    },
    Metric {
        name: "frames during msg p50",
        unit: "",
        get: |r| r.rr.and_then(|t| t.frames_in_flight_p50).map(|n| n as f64),
    },
    Metric {
        name: "wakeup to msg p50",
        unit: "(us)",
        get: |r| r.rr.map(|t| t.wake_to_read.p50_ns as f64 / 1e3),
    },
    Metric {
        name: "interrupts/packet",
        unit: "",
        get: |r| Some(r.interrupts_per_packet),
    },
    Metric {
        name: "bulk interrupts/packet",
        unit: "",
        get: |r| r.bulk.and_then(|b| b.interrupts_per_packet),
    },
    Metric {
        name: "msg interrupts/packet",
        unit: "",
        get: |r| r.rr.and_then(|t| t.interrupts_per_packet),
    },
    Metric {
        name: "wakeups/packet",
        unit: "",
        get: |r| Some(r.wakeups_per_packet),
    },
    Metric {
        name: "client CPU/packet",
        unit: "(ns)",
        get: |r| Some(r.cpu_ns_per_packet),
    },
    Metric {
        name: "backend CPU/packet",
        unit: "(ns)",
        get: |r| r.backend_cpu_ns_per_packet,
    },
    Metric {
        name: "machine busy",
        unit: "(%)",
        get: |r| r.machine_busy.map(|b| b * 100.0),
    },
    Metric {
        name: "lost frames",
        unit: "",
        get: |r| Some(r.lost() as f64),
    },
];

/// Everything a session measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// The peer: testpmd's command line, or the sockets connected to.
    pub peer: String,
    /// The workload.
    pub workload: Workload,
    /// Encapsulation of the frames sent.
    pub frames: Encap,
    /// Every run, in the order run.
    pub runs: Vec<Report>,
}

impl BenchResult {
    fn spread(&self, mode: Mode, get: fn(&Report) -> Option<f64>) -> Option<Spread> {
        Spread::of(
            self.runs
                .iter()
                .filter(|r| r.mode == mode)
                .filter_map(get)
                .collect(),
        )
    }

    /// Median, min and max of one metric for one mode.
    #[must_use]
    pub fn metric(&self, mode: Mode, name: &str) -> Option<Spread> {
        let m = METRICS.iter().find(|m| m.name == name)?;
        self.spread(mode, m.get)
    }

    /// The summary table: one row per metric, one column per mode (median [min..max]),
    /// and interrupt/poll as a ratio of medians when both ran.
    #[must_use]
    pub fn table(&self) -> String {
        let modes: Vec<Mode> = [Mode::Interrupt, Mode::Poll]
            .into_iter()
            .filter(|m| self.runs.iter().any(|r| r.mode == *m))
            .collect();
        let mut s = String::new();
        let mut title = self.workload.to_string();
        if self.frames != Encap::Raw {
            let _ = write!(title, " ({} frames)", self.frames.as_str());
        }
        let _ = write!(s, "{title:<24}");
        for m in &modes {
            let _ = write!(s, " {:>34}", m.as_str());
        }
        if modes.len() == 2 {
            let _ = write!(s, " {:>16}", "interrupt/poll");
        }
        s.push('\n');
        for metric in METRICS {
            let cells: Vec<Option<Spread>> =
                modes.iter().map(|m| self.spread(*m, metric.get)).collect();
            if cells.iter().all(Option::is_none) {
                continue;
            }
            let label = format!("{} {}", metric.name, metric.unit);
            let _ = write!(s, "{:<24}", label.trim_end());
            for c in &cells {
                let text = c.map_or_else(String::new, |c| {
                    format!("{} [{}..{}]", num(c.median), num(c.min), num(c.max))
                });
                let _ = write!(s, " {text:>34}");
            }
            if let [Some(a), Some(b)] = cells.as_slice() {
                let ratio = if b.median == 0.0 {
                    "-".to_string()
                } else {
                    format!("{:.3}x", a.median / b.median)
                };
                let _ = write!(s, " {ratio:>16}");
            }
            s.push('\n');
        }
        s
    }
}

/// Run the session; `progress` sees each report as it completes.
///
/// # Errors
/// [`BenchError`].
pub fn bench(
    cfg: &BenchConfig,
    mut progress: impl FnMut(&Report),
) -> Result<BenchResult, BenchError> {
    cfg.workload.validate()?;
    cfg.workload.check_encap(cfg.run.frames)?;
    let ports_needed = cfg.testpmd_ports;
    let ports = if cfg.sockets.is_empty() {
        ports_needed
    } else {
        cfg.sockets.len()
    };
    cfg.workload
        .check_ports(ports, cfg.run.wire_sender.is_some())?;
    let dir;
    let mut pmd = None;
    let sockets = if cfg.sockets.is_empty() {
        check_testpmd_ports(ports_needed)?;
        dir = tempfile_dir()?;
        let sockets: Vec<PathBuf> = (0..ports_needed)
            .map(|i| peer::socket_path(&dir.0, i))
            .collect();
        let p = TestPmd::start(&TestPmdConfig::vhost_peer(
            sockets.clone(),
            dir.0.join("testpmd.log"),
        ))?;
        pmd = Some(p);
        sockets
    } else {
        cfg.sockets.clone()
    };
    let peer = pmd.as_ref().map_or_else(
        || format!("sockets {sockets:?}"),
        |p| p.cmdline().to_string(),
    );
    let port_cfg = PortConfig {
        tx_frame_max: cfg.port.tx_frame_max.max(cfg.workload.max_frame_len()),
        ..cfg.port
    };
    let pattern = Pattern::new();
    let mut runs = Vec::new();
    for repeat in 0..cfg.repeat.max(1) {
        for &mode in &cfg.modes {
            // A fresh connection per run: every run starts from the same state.
            let mut ports = connect_all(&sockets, port_cfg, &pattern)?;
            let run_cfg = RunConfig {
                workload: cfg.workload,
                mode,
                backend_pid: cfg.run.backend_pid.or(pmd.as_ref().and_then(TestPmd::pid)),
                ..cfg.run.clone()
            };
            let report = run::run(&mut ports, &run_cfg).map_err(|source| BenchError::Run {
                mode: mode.as_str(),
                repeat,
                source,
            })?;
            for p in ports {
                p.close()?;
            }
            progress(&report);
            runs.push(report);
        }
    }
    if let Some(p) = pmd {
        p.stop()?;
    }
    Ok(BenchResult {
        peer,
        workload: cfg.workload,
        frames: cfg.run.frames,
        runs,
    })
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempfile_dir() -> Result<TempDir, BenchError> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("vmirq-netload-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(BenchError::TempDir)?;
    Ok(TempDir(dir))
}

/// Default run timing for sessions: 0.5 s warm-up, `measure` measured.
#[must_use]
pub fn run_config(measure: Duration) -> RunConfig {
    let mut r = RunConfig::new(
        Workload::Stream {
            frame_len: 64,
            rate_pps: None,
        },
        Mode::Interrupt,
    );
    r.measure = measure;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testpmd_refuses_three_ports_before_it_starts() {
        assert!(check_testpmd_ports(2).is_ok() && check_testpmd_ports(4).is_ok());
        let e = check_testpmd_ports(3).expect_err("port 2 has no partner");
        assert!(e.to_string().contains("--peer vmirq"), "{e}");
        // A session refuses before it starts testpmd (which would fail anyway here when
        // dpdk-testpmd is not installed: the error says which check refused).
        let mix: Workload = "mix:1514@812744+96/200".parse().expect("valid");
        let mut run = run_config(Duration::from_millis(10));
        run.wire_sender = Some(None);
        let cfg = BenchConfig {
            sockets: Vec::new(),
            testpmd_ports: 3,
            workload: mix,
            modes: vec![Mode::Interrupt],
            repeat: 1,
            run,
            port: PortConfig::default(),
        };
        let e = bench(&cfg, |_| {}).expect_err("refused");
        assert!(matches!(e, BenchError::TestpmdPorts(3)), "{e:?}");
        // Without the wire sender the workload refuses first, whatever the peer.
        let client = BenchConfig {
            run: RunConfig {
                wire_sender: None,
                ..cfg.run.clone()
            },
            ..cfg.clone()
        };
        let e = bench(&client, |_| {}).expect_err("refused");
        assert!(
            matches!(e, BenchError::Workload(WorkloadError::ThreePortsNeedWire)),
            "{e:?}"
        );
    }

    #[test]
    fn spread_is_median_min_max() {
        let s = Spread::of(vec![3.0, 1.0, 2.0]).expect("some");
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(vec![4.0, 1.0, 2.0, 3.0]).expect("some");
        assert_eq!(s.median, 2.5);
        assert!(Spread::of(Vec::new()).is_none());
    }
}
