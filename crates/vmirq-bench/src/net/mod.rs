//! # Network workloads: `vmirq bench --net`
//!
//! vmirq-netload's client (a virtio-net driver over vhost-user that polls or sleeps on its
//! call eventfds like a guest's NAPI) against `vmirq serve-net` and its peers, in one run:
//! DPDK testpmd's vhost PMD (every ratio is to it) and Open vSwitch with DPDK where it runs.
//! Each cell reports packets/s and Gbit/s, request/response RTT p50/p99, interrupts and
//! wakeups per packet, client and backend CPU per packet, and lost frames, as median
//! [min..max] over interleaved repetitions, with ratios to testpmd paired by repetition.
//!
//! Module map: [`plan`] says what runs, [`target`] and [`ovs`] start the devices, [`runner`]
//! runs the plan through vmirq-netload's session, [`results`] summarises, [`report`] renders
//! the terminal table and the HTML section; the cells go into the JSON document's `net`.

pub mod ovs;
pub mod plan;
pub mod report;
pub mod results;
pub mod runner;
pub mod target;

use crate::runner::Progress;
use plan::{NetPlan, NetPreset};
use results::NetCell;
use serde::{Deserialize, Serialize};
use target::{NetSetup, NetTarget};

/// Errors starting or stopping a network target.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// testpmd could not start or stop.
    #[error("testpmd")]
    Testpmd(#[from] vmirq_netload::peer::PeerError),
    /// A file or directory operation.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started.
    #[error("cannot start {program}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A target exited or made no sockets in time.
    #[error("{target} not ready: {reason}")]
    NotReady {
        /// Which target.
        target: String,
        /// What happened.
        reason: String,
    },
    /// A step of starting Open vSwitch failed.
    #[error("Open vSwitch: {step}: {reason}")]
    Ovs {
        /// The step.
        step: &'static str,
        /// Its error text.
        reason: String,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, NetError>;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct NetOptions {
    /// Size preset.
    pub preset: NetPreset,
    /// Replace the preset's targets (testpmd is added when missing, unless `no_peer`).
    pub targets: Option<Vec<NetTarget>>,
    /// Override repetitions.
    pub repetitions: Option<u32>,
    /// Override the measured window.
    pub measure: Option<std::time::Duration>,
    /// Leave out the peers (testpmd and OVS): no ratios.
    pub no_peer: bool,
}

/// The network section of the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NetSection {
    /// Preset name.
    pub preset: String,
    /// Repetitions per cell.
    pub repetitions: u32,
    /// Warm-up per run, milliseconds.
    pub warmup_ms: u64,
    /// Measured window per run, milliseconds.
    pub measure_ms: u64,
    /// Targets in plan order.
    pub targets: Vec<String>,
    /// Job names in plan order.
    pub jobs: Vec<String>,
    /// Every cell (job-major, then target).
    pub cells: Vec<NetCell>,
    /// Every vmirq target (and OVS) against testpmd over all jobs.
    #[serde(default)]
    pub versus: Vec<results::NetVersus>,
    /// Skipped targets and failed runs.
    pub notices: Vec<String>,
}

fn preset_name(p: NetPreset) -> &'static str {
    match p {
        NetPreset::Tiny => "net-tiny",
        NetPreset::Quick => "net-quick",
        NetPreset::Default => "net",
    }
}

/// The plan for `opts` and the notices about what was left out.
#[must_use]
pub fn plan_for(opts: &NetOptions) -> (NetPlan, Vec<String>) {
    let mut notices = Vec::new();
    let ovs_reason = runner::unavailable(&NetTarget::Ovs);
    let mut plan = NetPlan::preset(opts.preset, ovs_reason.is_none() && !opts.no_peer);
    if let Some(ts) = &opts.targets {
        plan.targets.clone_from(ts);
        if !opts.no_peer && !plan.targets.contains(&NetTarget::Testpmd) {
            plan.targets.insert(0, NetTarget::Testpmd);
        }
    }
    if opts.no_peer {
        plan.targets.retain(|t| !t.is_peer());
    }
    if let Some(reason) = ovs_reason {
        if opts.targets.is_none() && !opts.no_peer {
            notices.push(format!("ovs-dpdk left out: {reason}"));
        }
    }
    plan.targets.retain(|t| match runner::unavailable(t) {
        Some(reason) => {
            notices.push(format!("{t} left out: {reason}"));
            false
        }
        None => true,
    });
    if let Some(r) = opts.repetitions {
        plan.repetitions = r.max(1);
    }
    if let Some(m) = opts.measure {
        plan.measure = m;
    }
    (plan, notices)
}

/// Run the network bench.
#[must_use]
pub fn run(opts: &NetOptions, setup: &NetSetup, progress: &dyn Progress) -> NetSection {
    let (plan, mut notices) = plan_for(opts);
    for n in &notices {
        progress.notice(n);
    }
    let (cells, run_notices) = runner::run_plan(&plan, setup, progress);
    notices.extend(run_notices);
    let targets: Vec<String> = plan.targets.iter().map(ToString::to_string).collect();
    NetSection {
        versus: results::versus(&cells, &targets),
        preset: preset_name(opts.preset).to_owned(),
        repetitions: plan.repetitions,
        warmup_ms: u64::try_from(plan.warmup.as_millis()).unwrap_or(u64::MAX),
        measure_ms: u64::try_from(plan.measure.as_millis()).unwrap_or(u64::MAX),
        targets,
        jobs: plan.jobs.iter().map(plan::NetJob::name).collect(),
        cells,
        notices,
    }
}
