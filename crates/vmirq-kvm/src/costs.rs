//! The costs file written by `vmirq kvm exits` and read by `vmirq sim --costs FILE`.
//!
//! Format `vmirq-costs-v1`:
//! `{"format":"vmirq-costs-v1","source":"<command, host, date>","costs_ns":{...}}` where
//! `costs_ns` holds any subset of the keys below, each an integer median in nanoseconds:
//!
//! | key | what `vmirq kvm exits` measures |
//! |---|---|
//! | `pio_exit_to_user` | `out` to a port without in-kernel handler, VMM re-enters at once |
//! | `ioeventfd_exit` | `out` to a port with an ioeventfd (handled in the kernel) |
//! | `mmio_exit_to_user` | store to unbacked guest-physical memory, VMM re-enters at once |
//! | `cpuid_exit` | `cpuid` leaf 0 (handled in the kernel) |
//! | `hypercall_exit` | `vmcall` with an unknown number (handled in the kernel) |
//! | `hlt_wakeup_sleeping` | irqfd MSI to a halted vCPU that sleeps (halt polling off) |
//! | `hlt_wakeup_polling` | irqfd MSI to a halted vCPU caught by KVM halt polling |
//! | `irq_inject` | irqfd MSI to a running vCPU, to its handler's first instruction |
//! | `ipi_send` | x2APIC ICR write (self IPI, in-kernel LAPIC) |
//! | `ipi_send_other_polled` | the same ICR write to the other vCPU, halted, KVM polling it |
//! | `ipi_send_other_sleeping` | the same ICR write to the other vCPU, halted, asleep |
//!
//! Exit costs are per operation with the measurement loop's own cost (a `nop` loop)
//! subtracted: since the paired loops, the p50 of per-pair differences against a `nop` span
//! alternating with the operation in the same loop (`vmirq kvm exits`' `paired`), where that
//! pair ran; wake costs are latencies from the host's TSC before the eventfd write to the
//! guest handler's first `rdtsc`.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The format tag.
pub const FORMAT: &str = "vmirq-costs-v1";

/// Measured costs (medians, ns); absent keys were not measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    /// `out` to userspace and back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pio_exit_to_user: Option<u64>,
    /// `out` handled in the kernel by an ioeventfd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ioeventfd_exit: Option<u64>,
    /// MMIO store to userspace and back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mmio_exit_to_user: Option<u64>,
    /// `cpuid` exit handled in the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuid_exit: Option<u64>,
    /// Hypercall exit handled in the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypercall_exit: Option<u64>,
    /// Wake latency of a halted vCPU that slept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hlt_wakeup_sleeping: Option<u64>,
    /// Wake latency of a halted vCPU caught by halt polling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hlt_wakeup_polling: Option<u64>,
    /// Interrupt delivery to a running vCPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq_inject: Option<u64>,
    /// Sending an IPI (ICR write exit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipi_send: Option<u64>,
    /// Sending an IPI to another vCPU that is halted, KVM halt polling it (the sender's ICR
    /// write; `vmirq kvm exits`' `ipi_other`, polled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipi_send_other_polled: Option<u64>,
    /// Sending an IPI to another vCPU that is halted and asleep (halt polling off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipi_send_other_sleeping: Option<u64>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostsFile {
    /// Always [`FORMAT`].
    pub format: String,
    /// Free text: command, host, date.
    pub source: String,
    /// The costs.
    pub costs_ns: Costs,
}

impl CostsFile {
    /// A file with the right format tag.
    #[must_use]
    pub fn new(source: String, costs_ns: Costs) -> Self {
        Self {
            format: FORMAT.into(),
            source,
            costs_ns,
        }
    }

    /// Parse and validate (format tag, known keys only).
    ///
    /// # Errors
    /// [`Error::Config`] if the JSON is malformed or the format is not [`FORMAT`].
    pub fn parse(json: &str) -> Result<Self> {
        let f: Self =
            serde_json::from_str(json).map_err(|e| Error::Config(format!("costs file: {e}")))?;
        if f.format != FORMAT {
            return Err(Error::Config(format!(
                "costs file format {:?}, expected {FORMAT}",
                f.format
            )));
        }
        Ok(f)
    }

    /// Pretty JSON.
    ///
    /// # Errors
    /// Never in practice ([`Error::Config`] if serde fails).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|e| Error::Config(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_omits_unmeasured_keys() {
        let f = CostsFile::new(
            "test".into(),
            Costs {
                cpuid_exit: Some(900),
                ipi_send: Some(1200),
                ..Costs::default()
            },
        );
        let json = f.to_json().expect("serialises");
        assert!(json.contains("\"cpuid_exit\": 900"));
        assert!(!json.contains("pio_exit_to_user"));
        assert_eq!(CostsFile::parse(&json).expect("parses"), f);
    }

    #[test]
    fn rejects_other_formats_and_unknown_keys() {
        assert!(CostsFile::parse(r#"{"format":"v0","source":"","costs_ns":{}}"#).is_err());
        let unknown = r#"{"format":"vmirq-costs-v1","source":"","costs_ns":{"x":1}}"#;
        assert!(CostsFile::parse(unknown).is_err());
    }
}
