//! Which network cells `vmirq bench --net` measures: the jobs (a vmirq-netload workload in
//! interrupt or poll mode), the targets, repetitions and run timing of each preset.
//!
//! The default preset answers issue 15's bench goal: poll-mode streams at 64, 1514 and 9014
//! bytes (1500 and 9000-byte MTUs; the 9014-byte frames span five 2 KiB receive buffers with
//! MRG_RXBUF at every device), an interrupt-driven request/response ping-pong (p50/p99), and
//! an interrupt-driven 1514-byte stream (interrupts and CPU per packet), against testpmd's
//! vhost PMD, Open vSwitch with DPDK where it runs, serve-net's defaults, serve-net `dim` and
//! serve-net's polling data path (`+pmd`, default preset only).

use super::target::NetTarget;
use std::time::Duration;
use vmirq_netload::run::Mode;
use vmirq_netload::workload::Workload;

/// One workload in one client mode; run against every target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetJob {
    /// The traffic.
    pub workload: Workload,
    /// How the client learns of received frames.
    pub mode: Mode,
}

impl NetJob {
    /// A short stable name, e.g. `stream-64/poll`, `rr-64/interrupt`.
    #[must_use]
    pub fn name(&self) -> String {
        let len = self.workload.max_frame_len();
        format!("{}-{len}/{}", self.workload.name(), self.mode.as_str())
    }
}

/// Network presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetPreset {
    /// Seconds: one poll stream and the ping-pong, for the end-to-end test.
    Tiny,
    /// About a minute.
    Quick,
    /// Every job of issue 15's bench goal, three repetitions: a few minutes.
    Default,
}

/// Everything a network bench does.
#[derive(Debug, Clone)]
pub struct NetPlan {
    /// Devices, the peer (testpmd) first.
    pub targets: Vec<NetTarget>,
    /// Workload/mode combinations.
    pub jobs: Vec<NetJob>,
    /// Repetitions; in each, every target runs every job (targets interleaved).
    pub repetitions: u32,
    /// Unmeasured warm-up per run.
    pub warmup: Duration,
    /// Measured window per run.
    pub measure: Duration,
}

fn stream(frame_len: u32, mode: Mode) -> NetJob {
    NetJob {
        workload: Workload::Stream {
            frame_len,
            rate_pps: None,
        },
        mode,
    }
}

fn rr(frame_len: u32) -> NetJob {
    NetJob {
        workload: Workload::Rr {
            frame_len,
            depth: 1,
        },
        mode: Mode::Interrupt,
    }
}

fn vmirq(moderation: Option<&str>, pmd: bool) -> NetTarget {
    NetTarget::Vmirq {
        moderation: moderation.and_then(|m| m.parse().ok()),
        pmd,
    }
}

impl NetPlan {
    /// The plan of `preset`; `ovs` adds Open vSwitch as a second peer.
    #[must_use]
    pub fn preset(preset: NetPreset, ovs: bool) -> Self {
        let mut targets = vec![NetTarget::Testpmd];
        if ovs {
            targets.push(NetTarget::Ovs);
        }
        targets.push(vmirq(None, false));
        if preset != NetPreset::Tiny {
            targets.push(vmirq(Some("dim"), false));
        }
        if preset == NetPreset::Default {
            // serve-net's polling data path, the counterpart of the peers' polling cores.
            targets.push(vmirq(None, true));
        }
        let jobs = match preset {
            NetPreset::Tiny => vec![stream(64, Mode::Poll), rr(64)],
            NetPreset::Quick | NetPreset::Default => vec![
                stream(64, Mode::Poll),
                stream(1514, Mode::Poll),
                stream(9014, Mode::Poll),
                rr(64),
                stream(1514, Mode::Interrupt),
            ],
        };
        let (repetitions, warmup_ms, measure_ms) = match preset {
            NetPreset::Tiny => (2, 100, 300),
            NetPreset::Quick => (2, 200, 500),
            NetPreset::Default => (3, 300, 1000),
        };
        Self {
            targets,
            jobs,
            repetitions,
            warmup: Duration::from_millis(warmup_ms),
            measure: Duration::from_millis(measure_ms),
        }
    }

    /// Number of runs.
    #[must_use]
    pub fn runs(&self) -> u64 {
        (self.targets.len() * self.jobs.len()) as u64 * u64::from(self.repetitions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_covers_the_issue_goal() {
        let plan = NetPlan::preset(NetPreset::Default, true);
        let names: Vec<String> = plan.jobs.iter().map(NetJob::name).collect();
        for want in [
            "stream-64/poll",
            "stream-1514/poll",
            "stream-9014/poll",
            "rr-64/interrupt",
            "stream-1514/interrupt",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        let labels: Vec<String> = plan.targets.iter().map(ToString::to_string).collect();
        assert_eq!(
            labels,
            ["testpmd", "ovs-dpdk", "vmirq", "vmirq:dim", "vmirq+pmd"]
        );
        assert_eq!(NetPlan::preset(NetPreset::Tiny, false).targets.len(), 2);
        for j in &plan.jobs {
            assert!(j.workload.validate().is_ok());
        }
    }
}
