//! Which cells a bench run measures: the presets (`--quick`, default, `--full`) and the
//! knobs that shape every run (repetitions, warm-up, window length, placement).

use crate::target::TargetSpec;
use crate::workload::{ClientMode, Workload};
use std::time::Duration;

/// One workload in one client mode; run against every target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// The workload.
    pub workload: Workload,
    /// Interrupt or poll mode.
    pub mode: ClientMode,
}

/// Everything a bench run will do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Devices under test (bare and the peer included).
    pub targets: Vec<TargetSpec>,
    /// Workload/mode combinations.
    pub jobs: Vec<Job>,
    /// Repetitions of each cell.
    pub repetitions: u32,
    /// Unmeasured warm-up per run.
    pub warmup: Duration,
    /// Measured window per run.
    pub measure: Duration,
    /// Seed for request offsets and burst phases.
    pub seed: u64,
}

/// Size presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Under a minute: a few cells, short windows.
    Quick,
    /// The README's first command: about two to three minutes.
    Default,
    /// Every workload, queue depth and policy.
    Full,
    /// A few seconds: for the end-to-end test.
    Tiny,
}

fn interrupt(workload: Workload) -> Job {
    Job {
        workload,
        mode: ClientMode::Interrupt,
    }
}

fn poll(workload: Workload) -> Job {
    Job {
        workload,
        mode: ClientMode::Poll,
    }
}

/// The vmirq targets of a preset besides `vmirq` itself (the defaults, in every preset):
/// moderation policies without kick polling (`+never`, the defaults before kick polling
/// was), and explicit polling configurations to compare the defaults with.
fn vmirq_targets(preset: Preset) -> Vec<&'static str> {
    match preset {
        Preset::Tiny => vec!["vmirq:none+never"],
        Preset::Quick => vec!["vmirq:none+never", "vmirq:vic+never"],
        Preset::Default => vec![
            "vmirq:none+never",
            "vmirq:vic+never",
            "vmirq:none",
            "vmirq:vic+histogram",
        ],
        Preset::Full => vec![
            "vmirq:none+never",
            "vmirq:count:usecs=50,frames=32+never",
            "vmirq:vic+never",
            "vmirq:ipi-gap:gap_us=100+never",
            "vmirq:dim+never",
            "vmirq:spdk+never",
            "vmirq:budget:us=20+never",
            "vmirq:none",
            "vmirq:vic+histogram",
        ],
    }
}

fn jobs(preset: Preset) -> Vec<Job> {
    match preset {
        Preset::Tiny => vec![
            interrupt(Workload::randread(1)),
            interrupt(Workload::randread(16)),
        ],
        Preset::Quick => vec![
            interrupt(Workload::randread(1)),
            interrupt(Workload::randread(32)),
            interrupt(Workload::bursty()),
            poll(Workload::pingpong()),
        ],
        Preset::Default => vec![
            interrupt(Workload::randread(1)),
            interrupt(Workload::randread(16)),
            interrupt(Workload::randread(128)),
            interrupt(Workload::randrw(32)),
            interrupt(Workload::seqread(4)),
            interrupt(Workload::pingpong()),
            interrupt(Workload::bursty()),
            interrupt(Workload::trickle()),
            poll(Workload::pingpong()),
        ],
        Preset::Full => {
            let mut v = Vec::new();
            for qd in [1, 4, 16, 32, 128] {
                v.push(interrupt(Workload::randread(qd)));
                v.push(interrupt(Workload::randwrite(qd)));
                v.push(interrupt(Workload::randrw(qd)));
            }
            v.extend([
                interrupt(Workload::seqread(4)),
                interrupt(Workload::seqwrite(4)),
                interrupt(Workload::pingpong()),
                interrupt(Workload::bursty()),
                interrupt(Workload::trickle()),
                poll(Workload::pingpong()),
                poll(Workload::randread(32)),
            ]);
            v
        }
    }
}

impl Plan {
    /// The plan of `preset`; `peer` adds qemu-storage-daemon. The first targets are the
    /// headline: the peer's defaults and vmirq's, then bare and the rest.
    #[must_use]
    pub fn preset(preset: Preset, peer: bool) -> Self {
        let mut targets = Vec::new();
        if peer {
            targets.push(TargetSpec::Qsd);
        }
        targets.extend([TargetSpec::VmirqDefaults, TargetSpec::Bare]);
        // Polling vmirq targets meet the peer's own polling mode too.
        if peer && matches!(preset, Preset::Default | Preset::Full) {
            targets.push(TargetSpec::QsdPoll);
        }
        targets.extend(
            vmirq_targets(preset)
                .into_iter()
                .filter_map(|t| t.parse::<TargetSpec>().ok()),
        );
        let (repetitions, warmup_ms, measure_ms) = match preset {
            Preset::Tiny => (2, 50, 250),
            Preset::Quick => (2, 100, 400),
            Preset::Default => (3, 100, 500),
            Preset::Full => (3, 150, 700),
        };
        Self {
            targets,
            jobs: jobs(preset),
            repetitions,
            warmup: Duration::from_millis(warmup_ms),
            measure: Duration::from_millis(measure_ms),
            seed: 0x7643_6972_7121,
        }
    }

    /// Number of runs (cells times repetitions).
    #[must_use]
    pub fn runs(&self) -> u64 {
        (self.targets.len() * self.jobs.len()) as u64 * u64::from(self.repetitions)
    }

    /// A rough duration estimate, assuming `start_overhead` per run for starting the target.
    #[must_use]
    pub fn estimate(&self, start_overhead: Duration) -> Duration {
        let per = self.warmup + self.measure + start_overhead;
        per * u32::try_from(self.runs()).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_policy_name_parses() {
        for p in [Preset::Tiny, Preset::Quick, Preset::Default, Preset::Full] {
            let plan = Plan::preset(p, true);
            let peers = if matches!(p, Preset::Default | Preset::Full) {
                2 // qemu-storage-daemon with and without its polling IOThread
            } else {
                1
            };
            assert_eq!(
                plan.targets.len(),
                2 + peers + vmirq_targets(p).len(),
                "{p:?}"
            );
            // The headline pair leads: the peer's defaults, then vmirq's.
            assert_eq!(
                plan.targets[..2],
                [TargetSpec::Qsd, TargetSpec::VmirqDefaults]
            );
            let without_peer = Plan::preset(p, false);
            assert_eq!(without_peer.targets[0], TargetSpec::VmirqDefaults);
        }
    }

    #[test]
    fn budgets_fit_the_promises() {
        let start = Duration::from_millis(120);
        assert!(Plan::preset(Preset::Quick, true).estimate(start) < Duration::from_secs(50));
        let default = Plan::preset(Preset::Default, true).estimate(start);
        assert!(default < Duration::from_secs(180), "{default:?}");
        assert!(Plan::preset(Preset::Tiny, true).estimate(start) < Duration::from_secs(10));
    }

    #[test]
    fn full_covers_all_depths_and_patterns() {
        let plan = Plan::preset(Preset::Full, false);
        for qd in [1, 4, 16, 32, 128] {
            for name in ["randread-4k", "randwrite-4k", "randrw70-4k"] {
                assert!(plan
                    .jobs
                    .iter()
                    .any(|j| j.workload.name == name && j.workload.queue_depth() == qd));
            }
        }
        assert!(plan.jobs.iter().any(|j| j.mode == ClientMode::Poll));
    }
}
