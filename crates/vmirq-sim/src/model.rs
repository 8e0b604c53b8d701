//! The validated model configuration of one run (the scenario's `[model]` table after
//! `--set` overrides), and building the host from it.

use crate::costs::Costs;
use crate::host::{Core, GuestConfig, Platform, Vcpu};
use crate::workload::WorkloadConfig;
use serde::{Deserialize, Serialize};
use vmirq_policy::moderation::Moderation;
use vmirq_policy::spec::{ModerationSpec, WaitSpec};

/// Errors in a model configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A policy spec did not parse.
    #[error("bad policy spec {spec:?} for {field}: {msg}")]
    Spec {
        /// Which field.
        field: &'static str,
        /// The text.
        spec: String,
        /// Parser message.
        msg: String,
    },
    /// A value is out of its allowed range.
    #[error("{0}")]
    Range(String),
}

/// Model configuration (scenario `[model]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Simulated duration in microseconds.
    pub duration_us: u64,
    /// Warm-up in microseconds: metrics and CPU accounting restart after it.
    #[serde(default)]
    pub warmup_us: u64,
    /// Seed (overridden by `--seed`).
    #[serde(default)]
    pub seed: u64,
    /// Virtualized or bare metal.
    #[serde(default)]
    pub platform: Platform,
    /// Physical CPUs.
    pub pcpus: usize,
    /// Host halt polling wait spec (`never`, `kvm`, `fixed:ns=...`, `histogram`, ...).
    #[serde(default = "default_halt_poll")]
    pub halt_poll: String,
    /// Completion moderation spec at the virtual device (`none`, `vic`, `dim`, `budget`, ...).
    #[serde(default = "default_moderation")]
    pub moderation: String,
    /// Guest haltpoll wait spec, or `off`.
    #[serde(default = "default_off")]
    pub guest_haltpoll: String,
    /// Posted interrupts (APICv) for the VM.
    #[serde(default)]
    pub posted_interrupts: bool,
    /// Tickless guest: APIC timer writes on idle entry.
    #[serde(default)]
    pub idle_entry_writes: u8,
    /// Tickless guest: APIC timer writes on idle exit.
    #[serde(default)]
    pub idle_exit_writes: u8,
    /// Start each pCPU's timeslices at a random phase (unsynchronized host schedulers).
    #[serde(default)]
    pub stagger_slices: bool,
    /// Hard bound on processed events.
    #[serde(default = "default_max_events")]
    pub max_events: u64,
    /// Host profile (`crate::profiles`): host idle states and governor. None: the host idles
    /// at no extra cost (the primitives include leaving the shallowest state).
    #[serde(default)]
    pub profile: Option<String>,
    /// Override of the profile's indirect exit cost (`crate::era`), e.g. 0 to switch it off.
    #[serde(default)]
    pub exit_refill_ns: Option<u64>,
    /// Override of the profile's EOI write exits (`crate::era`).
    #[serde(default)]
    pub eoi_exit: Option<bool>,
    /// Override of the profile's vCPU reload (`crate::era`), e.g. 0 to charge a polled
    /// resume the full `vm_entry_ns` again.
    #[serde(default)]
    pub vcpu_reload_ns: Option<u64>,
    /// Override of the profile's assigned-device IRQ thread (`crate::era`), e.g. false to
    /// inject from the hard handler.
    #[serde(default)]
    pub assigned_irq_thread: Option<bool>,
    /// Override of the profile's assigned-device IRQ on another host CPU (`crate::era`),
    /// e.g. false to take it on the vCPU's pCPU at no idle cost of its own.
    #[serde(default)]
    pub assigned_irq_remote: Option<bool>,
    /// Override of the profile's menu correction factor in the governor's fallback
    /// (`crate::era`), e.g. false for the bare next timer (before the eighth session).
    #[serde(default)]
    pub governor_correction: Option<bool>,
    /// The ping workload's echo request wakes no guest task (answered in the receive
    /// softirq), so its interrupt leaves the guest in its idle loop: no tick restart or stop
    /// writes (`crate::host::Vcpu::device_irq_stays_idle`). Default false.
    #[serde(default)]
    pub idle_softirq_echo: bool,
    /// Host kernel preemption model: `"voluntary"` (default: `CONFIG_PREEMPT_VOLUNTARY`, what
    /// distribution kernels ship; a vCPU thread inside an exit is preempted only at KVM's
    /// `need_resched()` check before the next VM entry) or `"full"` (`CONFIG_PREEMPT`:
    /// preempted anywhere, the model before 2026-11-25).
    #[serde(default = "default_host_preempt")]
    pub host_preempt: String,
    /// Host scheduler wakeups: `"cfs"` (default: a woken thread is placed at most
    /// `sleeper_credit_ns` behind the pCPU's min_vruntime and preempts the running thread
    /// only if it is more than `wakeup_granularity_ns` behind it; otherwise the running
    /// thread keeps the CPU until its slice or the next tick after it) or `"rr"` (every
    /// wakeup preempts at once, the model before 2026-11-25).
    #[serde(default = "default_host_sched")]
    pub host_sched: String,
    /// The host idle governor counts block-I/O waiters in its multiplier (menu's
    /// `10 * nr_iowait_cpu`; default true); false: multiplier 1, the model before the sixth
    /// session of issue 16.
    #[serde(default = "default_true")]
    pub governor_iowait: bool,
    /// Primitive cost overrides.
    #[serde(default)]
    pub costs: Costs,
    /// The workload.
    pub workload: WorkloadConfig,
}

fn default_halt_poll() -> String {
    "never".into()
}
fn default_moderation() -> String {
    "none".into()
}
fn default_off() -> String {
    "off".into()
}
fn default_host_sched() -> String {
    "cfs".into()
}
fn default_host_preempt() -> String {
    "voluntary".into()
}
fn default_true() -> bool {
    true
}
fn default_max_events() -> u64 {
    50_000_000
}

fn wait_spec(field: &'static str, s: &str) -> Result<WaitSpec, ConfigError> {
    s.parse::<WaitSpec>().map_err(|e| ConfigError::Spec {
        field,
        spec: s.to_string(),
        msg: e.to_string(),
    })
}

impl ModelConfig {
    /// The moderation policy the spec names.
    ///
    /// # Errors
    /// [`ConfigError::Spec`].
    pub fn moderation_policy(&self) -> Result<Moderation, ConfigError> {
        self.moderation
            .parse::<ModerationSpec>()
            .map(|m| m.build())
            .map_err(|e| ConfigError::Spec {
                field: "moderation",
                spec: self.moderation.clone(),
                msg: e.to_string(),
            })
    }

    /// Validate and build the host for `seed`, with `vcpus` vCPUs pinned round-robin.
    ///
    /// # Errors
    /// [`ConfigError`] for bad specs or ranges.
    pub fn build_core(&self, seed: u64, vcpus: usize) -> Result<Core, ConfigError> {
        if self.pcpus == 0 || self.pcpus > 4096 {
            return Err(ConfigError::Range(format!(
                "pcpus must be 1..=4096, got {}",
                self.pcpus
            )));
        }
        if self.duration_us == 0 || self.duration_us > 3_600_000_000 {
            return Err(ConfigError::Range("duration_us must be 1..=3.6e9".into()));
        }
        let host = wait_spec("halt_poll", &self.halt_poll)?.build();
        let haltpoll = match self.guest_haltpoll.as_str() {
            "off" | "" => None,
            s => Some(wait_spec("guest_haltpoll", s)?.build()),
        };
        let guest = GuestConfig {
            idle_entry_writes: self.idle_entry_writes,
            idle_exit_writes: self.idle_exit_writes,
            haltpoll,
            posted_interrupts: self.posted_interrupts,
        };
        let vs = (0..vcpus)
            .map(|i| Vcpu::new(i % self.pcpus, guest, host))
            .collect();
        let mut core = Core::new(self.costs, self.platform, self.pcpus, vs, seed);
        if vcpus > self.pcpus && self.platform == Platform::Bare {
            return Err(ConfigError::Range(format!(
                "bare metal needs one pCPU per CPU: {vcpus} CPUs on {} pCPUs",
                self.pcpus
            )));
        }
        if let Some(name) = &self.profile {
            let p = crate::profiles::profile(name).ok_or_else(|| {
                let names: Vec<&str> = crate::profiles::PROFILES.iter().map(|p| p.name).collect();
                ConfigError::Range(format!(
                    "unknown profile {name:?}; known: {}",
                    names.join(", ")
                ))
            })?;
            core.idle_states = p.cstates.into();
            core.next_timer_ns = p.next_timer_ns;
            let era = crate::era::era(name);
            core.exit_refill_ns = era.exit_refill_ns;
            core.eoi_exit = era.eoi_exit;
            core.vcpu_reload_ns = era.vcpu_reload_ns;
            core.assigned_irq_thread = era.assigned_irq_thread;
            core.assigned_irq_remote = era.assigned_irq_remote;
            core.governor_correction = era.menu_correction;
        }
        if let Some(ns) = self.exit_refill_ns {
            core.exit_refill_ns = ns;
        }
        if let Some(on) = self.eoi_exit {
            core.eoi_exit = on;
        }
        if let Some(ns) = self.vcpu_reload_ns {
            core.vcpu_reload_ns = ns;
        }
        if let Some(on) = self.assigned_irq_thread {
            core.assigned_irq_thread = on;
        }
        if let Some(on) = self.assigned_irq_remote {
            core.assigned_irq_remote = on;
        }
        if let Some(on) = self.governor_correction {
            core.governor_correction = on;
        }
        core.idle_softirq_echo = self.idle_softirq_echo;
        core.host_preempt_full = match self.host_preempt.as_str() {
            "voluntary" => false,
            "full" => true,
            other => {
                return Err(ConfigError::Range(format!(
                    "host_preempt must be \"voluntary\" or \"full\", got {other:?}"
                )))
            }
        };
        core.host_sched_cfs = match self.host_sched.as_str() {
            "cfs" => true,
            "rr" => false,
            other => {
                return Err(ConfigError::Range(format!(
                    "host_sched must be \"cfs\" or \"rr\", got {other:?}"
                )))
            }
        };
        core.governor_iowait = self.governor_iowait;
        core.place_threads();
        core.stagger_slices = self.stagger_slices;
        Ok(core)
    }
}
