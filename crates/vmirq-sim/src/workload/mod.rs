//! Workloads: what the guests do. A workload starts work on vCPUs and reacts to hooks
//! (a work item it tagged finished, an interrupt reached a guest handler, its own timer).

mod msg;
mod net;
mod parsec;
pub mod profiles;
mod sidecore;
mod storage;
mod this_host;

pub use msg::{IpiMicro, TcpRr};
pub use net::{NetRx, NetRxConfig};
pub use parsec::{Parsec, ParsecConfig};
pub use sidecore::{PathMode, Ping, PingConfig, SyncWrite, SyncWriteConfig};
pub use storage::{Storage, StorageConfig};
pub use this_host::IrqfdMicro;

use crate::host::{Core, Hook, Result};
use serde::{Deserialize, Serialize};

/// Workload configuration (scenario `[workload]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WorkloadConfig {
    /// vCPU 1 sends an IPI to halted vCPU 0 every `interval_us` (±10%); latency from the
    /// send to vCPU 0's handler (the KVM Forum 2015 microbenchmark).
    IpiMicro {
        /// Mean gap between IPIs in microseconds.
        interval_us: u64,
    },
    /// A host thread signals halted vCPU 0's irqfd `interval_us` after each handled wake
    /// (`vmirq kvm wake --path irqfd`); latency from the signal to the handler.
    IrqfdMicro {
        /// Wait after each handled wake before the next signal, in microseconds.
        interval_us: u64,
    },
    /// 1-byte request/response ping-pong between a client on vCPU 0 and a server on
    /// vCPU 1 (loopback TCP_RR): each side spends `work_ns` per message, then wakes the other.
    TcpRr {
        /// Guest CPU time per message per side (stack + application), in ns.
        work_ns: u64,
        /// Extra server CPU per request (e.g. a memcached GET's lookup and reply), in ns.
        #[serde(default)]
        server_extra_ns: u64,
    },
    /// fio-like storage on vCPU 0 through a moderated virtual storage device.
    Storage(StorageConfig),
    /// External ping flood answered by vCPU 0.
    Ping(PingConfig),
    /// Synchronous writes from vCPU 0 through an exit-based or polling block path.
    SyncWrite(SyncWriteConfig),
    /// Network receive (bulk stream and/or short messages) on vCPU 0.
    NetRx(NetRxConfig),
    /// A PARSEC-like program (optionally next to a co-located CPU-bound VM).
    Parsec(ParsecConfig),
}

/// A running workload.
#[derive(Debug, Clone)]
pub enum Workload {
    /// See [`WorkloadConfig::IpiMicro`].
    IpiMicro(IpiMicro),
    /// See [`WorkloadConfig::IrqfdMicro`].
    IrqfdMicro(IrqfdMicro),
    /// See [`WorkloadConfig::TcpRr`].
    TcpRr(TcpRr),
    /// See [`WorkloadConfig::Storage`].
    Storage(Storage),
    /// See [`WorkloadConfig::Ping`].
    Ping(Ping),
    /// See [`WorkloadConfig::SyncWrite`].
    SyncWrite(SyncWrite),
    /// See [`WorkloadConfig::NetRx`].
    NetRx(NetRx),
    /// See [`WorkloadConfig::Parsec`].
    Parsec(Box<Parsec>),
}

impl Workload {
    /// Build from its configuration.
    #[must_use]
    pub fn new(cfg: &WorkloadConfig) -> Self {
        match *cfg {
            WorkloadConfig::IpiMicro { interval_us } => {
                Workload::IpiMicro(IpiMicro::new(interval_us * 1_000))
            }
            WorkloadConfig::IrqfdMicro { interval_us } => {
                Workload::IrqfdMicro(IrqfdMicro::new(interval_us * 1_000))
            }
            WorkloadConfig::TcpRr {
                work_ns,
                server_extra_ns,
            } => Workload::TcpRr(TcpRr::new(work_ns, server_extra_ns)),
            WorkloadConfig::Storage(ref c) => Workload::Storage(Storage::new(c.clone())),
            WorkloadConfig::Ping(ref c) => Workload::Ping(Ping::new(c.clone())),
            WorkloadConfig::SyncWrite(ref c) => Workload::SyncWrite(SyncWrite::new(c.clone())),
            WorkloadConfig::NetRx(ref c) => Workload::NetRx(NetRx::new(c.clone())),
            WorkloadConfig::Parsec(ref c) => Workload::Parsec(Box::new(Parsec::new(c.clone()))),
        }
    }

    /// Check the workload's parameters.
    ///
    /// # Errors
    /// [`crate::model::ConfigError::Range`].
    pub fn validate(&self) -> core::result::Result<(), crate::model::ConfigError> {
        match self {
            Workload::Parsec(w) => w.validate(),
            _ => Ok(()),
        }
    }

    /// vCPUs the workload needs.
    #[must_use]
    pub fn vcpus_needed(&self) -> usize {
        match self {
            Workload::Storage(_)
            | Workload::Ping(_)
            | Workload::NetRx(_)
            | Workload::IrqfdMicro(_) => 1,
            Workload::Parsec(w) => w.vcpus(),
            _ => 2,
        }
    }

    /// Start at time 0.
    ///
    /// # Errors
    /// Engine errors.
    pub fn start(&mut self, core: &mut Core) -> Result<()> {
        match self {
            Workload::IpiMicro(w) => w.start(core),
            Workload::IrqfdMicro(w) => w.start(core),
            Workload::TcpRr(w) => w.start(core),
            Workload::Storage(w) => w.start(core),
            Workload::Ping(w) => w.start(core),
            Workload::SyncWrite(w) => w.start(core),
            Workload::NetRx(w) => w.start(core),
            Workload::Parsec(w) => w.start(core),
        }
    }

    /// React to a hook.
    ///
    /// # Errors
    /// Engine errors.
    pub fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        match self {
            Workload::IpiMicro(w) => w.hook(core, hook),
            Workload::IrqfdMicro(w) => w.hook(core, hook),
            Workload::TcpRr(w) => w.hook(core, hook),
            Workload::Storage(w) => w.hook(core, hook),
            Workload::Ping(w) => w.hook(core, hook),
            Workload::SyncWrite(w) => w.hook(core, hook),
            Workload::NetRx(w) => w.hook(core, hook),
            Workload::Parsec(w) => w.hook(core, hook),
        }
    }

    /// A workload timer fired.
    ///
    /// # Errors
    /// Engine errors.
    pub fn timer(&mut self, core: &mut Core, tag: u32, data: u64) -> Result<()> {
        match self {
            Workload::Parsec(w) => w.timer(core, tag, data),
            Workload::Storage(w) => w.timer(core, tag),
            Workload::Ping(w) => w.timer(core, tag),
            Workload::SyncWrite(w) => w.timer(core, tag),
            Workload::NetRx(w) => w.timer(core, tag),
            Workload::IrqfdMicro(w) => w.timer(core, tag),
            _ => Ok(()),
        }
    }
}
