//! The JSON report. Contract for scripts: a top-level object with `revision`, `machine` and
//! `cells`; each cell has at least `target`, `workload`, `queue_depth`, `client_mode`,
//! `iops`, `lat_ns` (with `p50`, `p99`), `notifications_per_io` and `cpu_ns_per_io`;
//! `defaults_vs_peer` (null without both): `vmirq serve` with no policy flags against
//! qemu-storage-daemon with no options, per job (`iops_ratio`, `p50_ratio`, `p99_ratio`,
//! `cpu_ratio`, notifications per I/O of both) with `iops_ratio_geomean`, `iops_ratio_min` and
//! `cpu_ratio_median`; and
//! `net` (null for a block run; `vmirq bench --net`): `cells`, each with `target`, `job`,
//! `client_mode`, `frame_len`, `pps`, `gbit_s`, `interrupts_per_packet`,
//! `cpu_ns_per_packet` (each `{median, min, max}`), `rtt_p50_ns`/`rtt_p99_ns` (ping-pong
//! jobs), `lost`, and `vs_peer` (ratios to testpmd's cell of the same job: `pps`,
//! `rtt_p50`, `rtt_p99`, `interrupts_per_packet`, `cpu_ns_per_packet`, each `{median, min,
//! max}` or null where undefined), and `versus` (per target over every job: `pps_geomean`,
//! `pps` spread, `cpu_median`); and
//! `kvm`, an object with `status` (`ran`, `skipped`, `failed`), `reason` when not run, and
//! `wake`, the `vmirq kvm wake --json` object, when run.

use crate::cpu::Placement;
use crate::knob::KnobSeries;
use crate::machine::Machine;
use crate::results::CellResult;
use serde::{Deserialize, Serialize};

/// How the run was configured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    /// Preset name (`quick`, `default`, `full`, `tiny`) or `custom`.
    pub preset: String,
    /// The command line that produced the report.
    pub command: String,
    /// Repetitions per cell.
    pub repetitions: u32,
    /// Warm-up per run in milliseconds.
    pub warmup_ms: u64,
    /// Measured window per run in milliseconds.
    pub measure_ms: u64,
    /// Client/backend CPU placement.
    pub placement: Placement,
    /// Seed of offsets and burst phases.
    pub seed: u64,
    /// Every target, in plan order.
    pub targets: Vec<String>,
    /// Wall-clock seconds the whole bench took.
    pub wall_s: f64,
    /// Seconds since the Unix epoch when the run finished.
    pub finished_unix_s: u64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document {
    /// Git revision of the tree that was measured.
    pub revision: String,
    /// Where it was measured.
    pub machine: Machine,
    /// How it was run.
    pub run: RunInfo,
    /// Every cell.
    pub cells: Vec<CellResult>,
    /// Policy knob time series replayed from the bursty workload.
    pub knob_series: Vec<KnobSeries>,
    /// Skipped targets and failed runs.
    pub notices: Vec<String>,
    /// Wake latency and halt polling on the host's real KVM, or why not (reports saved
    /// before the section existed read back as skipped).
    #[serde(default)]
    pub kvm: crate::kvm::KvmSection,
    /// Network workloads (`vmirq bench --net`): serve-net against testpmd's vhost PMD and
    /// Open vSwitch; absent for a block run.
    #[serde(default)]
    pub net: Option<crate::net::NetSection>,
}

/// What is written: the document plus the headline derived from its cells.
#[derive(Serialize)]
struct Written<'a> {
    #[serde(flatten)]
    doc: &'a Document,
    /// `vmirq` (defaults) against qemu-storage-daemon (defaults), job by job.
    defaults_vs_peer: Option<super::summary::Headline>,
}

impl Document {
    /// Pretty-printed JSON, with `defaults_vs_peer` ([`super::summary::headline`]) added.
    ///
    /// # Errors
    /// Serialisation failure (not expected for this data).
    pub fn to_json(&self) -> crate::Result<String> {
        Ok(serde_json::to_string_pretty(&Written {
            doc: self,
            defaults_vs_peer: super::summary::headline(&self.cells),
        })?)
    }

    /// Read back a report written by [`Document::to_json`] (to render it again).
    ///
    /// # Errors
    /// The text is not such a report.
    pub fn from_json(text: &str) -> crate::Result<Self> {
        serde_json::from_str(text).map_err(crate::BenchError::ReadJson)
    }
}
