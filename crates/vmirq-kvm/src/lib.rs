//! vmirq-kvm: measure notification and wakeup costs on a real KVM hypervisor.
//!
//! A minimal VMM (kvm-ioctls) builds tiny 64-bit guests whose code is written with iced-x86's
//! code assembler ([`guest`]), sets up long mode itself ([`longmode`]), and runs them on one
//! or two vCPUs ([`vm`], [`runner`]). On top of it:
//! - [`wake`]: wake latency of a halted vCPU by irqfd/MSI or x2APIC IPI, swept over KVM's
//!   per-VM halt-poll window, with KVM's own statistics ([`stats`]).
//!
//! - [`gaps`]: the wake gap distributions (`const`, `exp`, `bimodal`) the senders draw from.
//! - [`exits`]: per-exit costs, written as a [`costs::CostsFile`] for the simulator; [`pairs`]:
//!   the per-pair differences of an operation run alternately with its reference.
//! - [`userhalt`]: vmirq wait policies on the userspace HLT path against KVM halt polling.
//! - [`device`]: a moderated virtual device (guest driver, VMM device thread, irqfd under a
//!   vmirq-policy completion policy).
//!
//! Every entry point returns [`Error::Unavailable`] when `/dev/kvm` cannot be used.

pub mod costs;
pub mod device;
pub mod dist;
pub mod error;
pub mod exits;
pub mod gaps;
pub mod guest;
pub mod host;
pub mod layout;
pub mod longmode;
pub mod memory;
pub mod pairs;
pub mod report;
pub mod runner;
pub mod stats;
pub mod userhalt;
pub mod vm;
pub mod wake;
pub mod watchdog;

pub use error::{Error, Result};
