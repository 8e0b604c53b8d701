//! Primitive costs of the host model, each named, in nanoseconds, with its source.
//!
//! Only primitive costs live here (one exit, one entry, one MSR emulation, one scheduler
//! wakeup, ...). Composite latencies such as "IPI to a halted vCPU" are never typed in:
//! they emerge from the model executing these primitives along the path it takes.
//! A costs file from `vmirq kvm exits` (`vmirq-costs-v1`) can override some of them.

use crate::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Clock of the machine the 2015 KVM breakdown was measured on (Sandy Bridge, 2.6 GHz).
pub const SNB_GHZ_X10: u64 = 26;

/// Cycles at 2.6 GHz to nanoseconds (rounded).
#[must_use]
pub const fn snb_cycles(c: u64) -> Nanos {
    (c * 10 + SNB_GHZ_X10 / 2) / SNB_GHZ_X10
}

/// The primitive costs. Field docs give the source of each default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Costs {
    /// Guest WRMSR that exits, up to the hypervisor acting on it (ICR / TSC-deadline write).
    /// seeds.md §2 breakdown: "WRMSR 400" cycles at 2.6 GHz.
    pub wrmsr_exit_ns: Nanos,
    /// The ICR write of an IPI to *another* vCPU, as its sender pays it, where it differs
    /// from [`Costs::wrmsr_exit_ns`] (a self-IPI's, or any local MSR write's): the LAPIC
    /// delivery into another vCPU's state and the kick path, with no thread woken. `None`
    /// (every era profile, `this-host` v1-v8): [`Costs::wrmsr_exit_ns`], see
    /// [`Costs::ipi_send_other`]. `this-host` profiles v9 on measure it (`vmirq kvm exits`'
    /// `ipi_other`, polled: vCPU 1's ICR write to halted vCPU 0 that KVM polls).
    pub ipi_send_other_ns: Option<Nanos>,
    /// Direct cost of one exit and re-entry (world switch out and back) for a light exit
    /// handled in the kernel. wakeup.md §3.3 (SplitX): ~2,000 cycles on a 2.93 GHz Xeon.
    pub exit_roundtrip_ns: Nanos,
    /// Waking a sleeping vCPU thread from another CPU (kvm_vcpu_kick / wake_up on the
    /// sender). seeds.md §2 breakdown: "kick 1,200" cycles.
    pub kick_ns: Nanos,
    /// Host scheduler bringing a woken thread onto its (idle) pCPU: reschedule IPI, idle
    /// exit, context switch. seeds.md §2 breakdown: "scheduler 8,500" cycles.
    pub sched_wakeup_ns: Nanos,
    /// Full VM entry after the vCPU thread was scheduled out or polled (vcpu_load, event
    /// injection, VMLAUNCH/VMRESUME). seeds.md §2 breakdown: "VM entry 3,400" cycles.
    pub vm_entry_ns: Nanos,
    /// Guest interrupt delivery through the IDT up to the handler's first instruction.
    /// seeds.md §2 breakdown: "interrupt handler 1,400" cycles.
    pub guest_irq_entry_ns: Nanos,
    /// Bare metal: IPI send to the handler's first instruction on a halted CPU.
    /// seeds.md §2: hardware median 1,200 cycles. This is an *input* for bare-metal runs,
    /// so the bare-metal wakeup check is a consistency check, not a prediction.
    pub native_ipi_wakeup_ns: Nanos,
    /// Bare metal: interrupt delivery through the IDT to a running (or polling) CPU.
    /// Assumption: ~300 cycles; not measured here.
    pub native_irq_entry_ns: Nanos,
    /// Bare metal: one local APIC timer (TSC deadline) MSR write. Assumption: ~100 cycles
    /// for a non-serializing-in-practice local WRMSR; not measured here.
    pub native_msr_ns: Nanos,
    /// A waker noticing a polling idle CPU through its polling flag (one cache line
    /// transfer between cores). Assumption: ~100 ns; not measured here.
    pub poll_notice_ns: Nanos,
    /// KVM's halt-poll loop (check, `cpu_relax()`, clock read) noticing an interrupt another
    /// CPU made pending, charged on every wake the host poll catches. 0 in the era profiles:
    /// the 2015 breakdown's "VM entry 3,400" cycles after a poll is all they charge, so it
    /// is folded in there. `this-host` profiles (v4 on) measure it (`primitives
    /// pollnotice`: a PAUSE-and-clock spinner seeing another CPU's store).
    pub halt_poll_notice_ns: Nanos,
    /// A host thread's irqfd `write()` up to the interrupt being pending in the vCPU's LAPIC
    /// (eventfd signal, KVM's irqfd wake-up callback, MSI routing, IRR set, a kick that wakes
    /// no thread), charged on every irqfd signal before it reaches the vCPU. 0 in the era
    /// profiles, whose breakdowns start at the kick. `this-host` profiles (v5 on) measure it
    /// (`vmirq kvm exits`, `irqfd_write`: the write from the other CPU into a vCPU outside
    /// guest mode); their `kick_ns` is then the rest of a write that wakes a thread.
    pub irqfd_inject_ns: Nanos,
    /// A storage guest's doorbell (the submission kick), exit to resume, when it is not a
    /// register exit. 0 in the era profiles: the kick is charged as a register exit
    /// (`exit_roundtrip_ns + wrmsr_exit_ns`). `this-host` profiles (v5 on) measure it:
    /// `vmirq kvm device`'s driver rings from guest ring 3 (an MMIO store to an ioeventfd, a
    /// real exit on a host that emulates only ring 0), `vmirq kvm exits`' `doorbell_user3`.
    pub doorbell_exit_ns: Nanos,
    /// A vCPU running guest code forced out to inject a (non-posted) interrupt, exit to
    /// re-entry. 0 in the era profiles: charged as `exit_roundtrip_ns`. `this-host` profiles
    /// (v5 on) measure a real exit from guest ring 3, where `vmirq kvm device`'s driver runs,
    /// while their `exit_roundtrip_ns` is one emulated ring-0 instruction: v5 the doorbell
    /// (`doorbell_user3`), v6 the forced interrupt itself (`vmirq kvm exits`' `forced_irq`:
    /// the spinning ring-3 loop's last TSC to the handler's first, minus the delivery).
    pub running_irq_exit_ns: Nanos,
    /// A storage guest's interrupt handler returning (`iretq`) to the code it interrupted,
    /// beyond the one guest instruction the workload's `isr_ns` counts for it. 0 in the era
    /// profiles. `this-host` profiles (v6 on) measure it (`vmirq kvm exits`' `forced_irq`:
    /// the handler's last TSC to the interrupted ring-3 loop's next one, minus one emulated
    /// instruction): on a host that emulates guest ring 0 the return to native ring 3 is a
    /// switch out of the emulator.
    pub irq_return_ns: Nanos,
    /// A polling device thread's own irqfd `write()` when the vCPU it signals runs guest
    /// code (not its interrupt path): KVM's kick sends an IPI to the vCPU's CPU inside the
    /// call, and on this nested host an IPI is itself an exit. The thread polls nothing
    /// meanwhile, so completions and submissions that fall inside the write are seen when
    /// it returns (a write into a vCPU already on its interrupt path costs
    /// `irqfd_inject_ns`). 0 in the era profiles and v1-v10: the device costs nothing.
    /// `this-host` profiles (v11 on) measure it (`vmirq kvm exits`' `forced_irq` `write_ns`:
    /// the writer's own time in `write()` into a vCPU spinning in guest ring 3).
    pub device_notify_ns: Nanos,
    /// A device interrupt already pending (held in the IRR while the masked handler ran)
    /// when the handler executes `iretq`: from the `iretq`, beyond its one instruction in the
    /// handler's cost, to the next handler's first instruction. It replaces, for that
    /// interrupt, the return to the interrupted code (`irq_return_ns`), the forced exit
    /// (`running_irq_exit_ns`) and the delivery (`guest_irq_entry_ns`): the guest never
    /// runs its interrupted code in between. 0 in the era profiles and v1-v11: the held
    /// interrupt takes that longer path. `this-host` profiles (v12 on) measure it (`vmirq
    /// kvm exits`' `chained_irq`: a second irqfd signal sent while the first handler runs,
    /// the first handler's TSC before `iretq` to the second's first TSC, less the three
    /// emulated instructions between them that are the probe's own).
    pub irq_chain_ns: Nanos,
    /// Per-event spread of the measured exit costs (`this-host` profile v7 on): for each of
    /// `doorbell_exit`, `running_irq_exit`, `irq_return` and `guest_irq_entry`, `_lo_ns` is
    /// the primitive's p50 minus its minimum and `_hi_ns` its p90 minus its p50 (`vmirq kvm
    /// exits` records min/p50/p90 of every loop). When either is non-zero, each charge of that
    /// cost is drawn per event ([`spread_draw`]) instead of charged at its p50. 0 (every
    /// era profile, v1-v6): the p50 every time, and no random number is drawn.
    pub doorbell_exit_lo_ns: Nanos,
    /// See [`Costs::doorbell_exit_lo_ns`].
    pub doorbell_exit_hi_ns: Nanos,
    /// See [`Costs::doorbell_exit_lo_ns`].
    pub running_irq_exit_lo_ns: Nanos,
    /// See [`Costs::doorbell_exit_lo_ns`].
    pub running_irq_exit_hi_ns: Nanos,
    /// See [`Costs::doorbell_exit_lo_ns`].
    pub irq_return_lo_ns: Nanos,
    /// See [`Costs::doorbell_exit_lo_ns`].
    pub irq_return_hi_ns: Nanos,
    /// See [`Costs::doorbell_exit_lo_ns`].
    pub guest_irq_entry_lo_ns: Nanos,
    /// See [`Costs::doorbell_exit_lo_ns`].
    pub guest_irq_entry_hi_ns: Nanos,
    /// Extra wake latency of a host pCPU that idled long enough for its idle governor to
    /// pick a deeper state than after a short idle: with a measured deep state, the host
    /// idles in two states ([`crate::profiles::measured_states`]) and the menu-like
    /// governor picks one. 0 in the era profiles (their idle states come from a named
    /// profile's intel_idle table). `this-host` profiles (v6 on) measure it: a plain
    /// thread's eventfd wake from the other CPU after idling 50 and 100 µs minus after
    /// 20 and 30 µs (`primitives wake`); on this nested host the L1 kernel's idle path
    /// and the outer hypervisor's handling of an idle vCPU both depend on the idle length.
    pub host_idle_deep_exit_ns: Nanos,
    /// Idle time the governor must predict before it picks the measured deep state (its
    /// target residency): the middle of the gap between the longest short-idle gap and
    /// the shortest long-idle gap of the same primitive. 0 with no deep state.
    pub host_idle_deep_residency_ns: Nanos,
    /// Host context switch between two runnable threads on a busy pCPU. Assumption: about
    /// half the scheduler wakeup cost (no idle exit, no IPI).
    pub context_switch_ns: Nanos,
    /// Host scheduler timeslice. wakeup.md §4.4 toy model: 3 ms.
    pub timeslice_ns: Nanos,
    /// Shortest run a thread gets after a directed yield handed it the pCPU before the
    /// scheduler reconsiders (CFS `sysctl_sched_min_granularity`: 0.75 ms x (1 + log2 8)
    /// on 8+ CPUs = 3 ms; an approximation of CFS's vruntime-based choice after a yield).
    pub min_granularity_ns: Nanos,
    /// CFS wakeup preemption (`host_sched = "cfs"`): a woken thread preempts the running one
    /// only if its vruntime is behind by more than this (`sysctl_sched_wakeup_granularity`:
    /// 1 ms x (1 + log2 8) on 8+ CPUs = 4 ms; Linux 3.16 kernel/sched/fair.c defaults).
    pub wakeup_granularity_ns: Nanos,
    /// CFS sleeper placement: a woken thread's vruntime is raised to at least the pCPU's
    /// min_vruntime minus this (`GENTLE_FAIR_SLEEPERS`: half of `sysctl_sched_latency`,
    /// 6 ms x (1 + log2 8) / 2 = 12 ms on 8+ CPUs).
    pub sleeper_credit_ns: Nanos,
    /// Host scheduler tick (CFS checks the running thread's slice at each tick). HZ=250,
    /// 4 ms: an assumption (distribution kernels ship 250 or 1000; the governor in
    /// `crate::profiles` assumes the same HZ).
    pub tick_ns: Nanos,
    /// Host interrupt handler of a physical device completion (MSI) before the backend acts.
    /// Assumption: same as the guest's interrupt entry (1,400 cycles).
    pub host_irq_ns: Nanos,
}

impl Costs {
    /// What a vCPU's ICR write of an IPI to another vCPU costs it:
    /// [`Costs::ipi_send_other_ns`] where the profile sets it, else
    /// [`Costs::wrmsr_exit_ns`].
    #[must_use]
    pub fn ipi_send_other(&self) -> Nanos {
        self.ipi_send_other_ns.unwrap_or(self.wrmsr_exit_ns)
    }
}

impl Default for Costs {
    fn default() -> Self {
        Self {
            wrmsr_exit_ns: snb_cycles(400),
            ipi_send_other_ns: None,
            exit_roundtrip_ns: 683, // 2,000 cycles at 2.93 GHz
            kick_ns: snb_cycles(1_200),
            sched_wakeup_ns: snb_cycles(8_500),
            vm_entry_ns: snb_cycles(3_400),
            guest_irq_entry_ns: snb_cycles(1_400),
            native_ipi_wakeup_ns: snb_cycles(1_200),
            native_irq_entry_ns: snb_cycles(300),
            native_msr_ns: snb_cycles(100),
            poll_notice_ns: 100,
            halt_poll_notice_ns: 0,
            irqfd_inject_ns: 0,
            doorbell_exit_ns: 0,
            running_irq_exit_ns: 0,
            irq_return_ns: 0,
            device_notify_ns: 0,
            irq_chain_ns: 0,
            doorbell_exit_lo_ns: 0,
            doorbell_exit_hi_ns: 0,
            running_irq_exit_lo_ns: 0,
            running_irq_exit_hi_ns: 0,
            irq_return_lo_ns: 0,
            irq_return_hi_ns: 0,
            guest_irq_entry_lo_ns: 0,
            guest_irq_entry_hi_ns: 0,
            host_idle_deep_exit_ns: 0,
            host_idle_deep_residency_ns: 0,
            context_switch_ns: snb_cycles(4_250),
            timeslice_ns: 3_000_000,
            host_irq_ns: snb_cycles(1_400),
            min_granularity_ns: 3_000_000,
            wakeup_granularity_ns: 4_000_000,
            sleeper_credit_ns: 12_000_000,
            tick_ns: 4_000_000,
        }
    }
}

/// One charge of a cost with a measured spread: `u` is uniform in `[0, 1000)` (per mille).
/// The inverse distribution is piecewise linear through the primitive's quantiles: `p50 -
/// lo` at 0 (its minimum), `p50` at 500, `p50 + hi` at 900 (its p90), continued with the
/// same slope to `p50 + 1.25 hi` at 1000 (the tail beyond p90, preemptions of the probe
/// included, is not modelled). Integer arithmetic only.
#[must_use]
pub fn spread_draw(p50: Nanos, lo: Nanos, hi: Nanos, u: u64) -> Nanos {
    if u < 500 {
        p50.saturating_sub(lo * (500 - u) / 500)
    } else {
        p50 + hi * (u - 500) / 400
    }
}

/// Errors reading a costs file.
#[derive(Debug, thiserror::Error)]
pub enum CostsError {
    /// The file is not valid JSON of the expected shape.
    #[error("costs file is not valid vmirq-costs-v1 JSON")]
    Json(#[from] serde_json::Error),
    /// The format tag is neither `vmirq-costs-v1` nor `vmirq-sim-costs-v1`.
    #[error(
        "unsupported costs format {0:?} (expected \"vmirq-costs-v1\" or \"vmirq-sim-costs-v1\")"
    )]
    Format(String),
    /// A `vmirq-sim-costs-v1` key that is not a [`Costs`] field.
    #[error("costs file key {0:?} is not a simulator cost")]
    Field(String),
}

/// Format of a host profile's costs (e.g. `crates/vmirq-sim/this-host/profile-*.json`):
/// `costs_ns` keys are [`Costs`] field names, each value already derived from primitive
/// measurements; other top-level keys (derivations, inputs) are documentation.
pub const SIM_FORMAT: &str = "vmirq-sim-costs-v1";

/// Every [`Costs`] field name (a `vmirq-sim-costs-v1` key must be one of these).
pub const FIELDS: [&str; 35] = [
    "wrmsr_exit_ns",
    "ipi_send_other_ns",
    "exit_roundtrip_ns",
    "kick_ns",
    "sched_wakeup_ns",
    "vm_entry_ns",
    "guest_irq_entry_ns",
    "native_ipi_wakeup_ns",
    "native_irq_entry_ns",
    "native_msr_ns",
    "poll_notice_ns",
    "halt_poll_notice_ns",
    "irqfd_inject_ns",
    "doorbell_exit_ns",
    "running_irq_exit_ns",
    "irq_return_ns",
    "device_notify_ns",
    "irq_chain_ns",
    "doorbell_exit_lo_ns",
    "doorbell_exit_hi_ns",
    "running_irq_exit_lo_ns",
    "running_irq_exit_hi_ns",
    "irq_return_lo_ns",
    "irq_return_hi_ns",
    "guest_irq_entry_lo_ns",
    "guest_irq_entry_hi_ns",
    "host_idle_deep_exit_ns",
    "host_idle_deep_residency_ns",
    "context_switch_ns",
    "timeslice_ns",
    "min_granularity_ns",
    "host_irq_ns",
    "wakeup_granularity_ns",
    "sleeper_credit_ns",
    "tick_ns",
];

/// The `vmirq kvm exits` costs file.
#[derive(Debug, Deserialize)]
struct CostsFile {
    format: String,
    #[serde(default)]
    source: String,
    costs_ns: BTreeMap<String, u64>,
}

/// `(field, ns)` overrides of [`Costs`] and the ignored keys of a costs file.
pub type CostOverrides = (Vec<(&'static str, u64)>, Vec<String>);

/// Parse a `vmirq-costs-v1` JSON document into `(field, ns)` overrides of [`Costs`] and the
/// keys that were ignored (the caller logs them). Mapping: `hypercall_exit` / `cpuid_exit`
/// (a light in-kernel exit round trip) -> `exit_roundtrip_ns`; `ipi_send` ->
/// `wrmsr_exit_ns`; `ipi_send_other_polled` -> `ipi_send_other_ns`; `irq_inject` ->
/// `guest_irq_entry_ns`. The composite wakeup latencies
/// (`hlt_wakeup_*`) are *results* of the model, so they are never inputs and are ignored.
/// A [`SIM_FORMAT`] document (a host profile) sets [`Costs`] fields by name instead.
///
/// # Errors
/// [`CostsError`] on malformed input.
pub fn file_overrides(json: &str) -> Result<CostOverrides, CostsError> {
    let f: CostsFile = serde_json::from_str(json)?;
    if f.format == SIM_FORMAT {
        tracing::info!(source = %f.source, "reading host profile costs");
        let mut set = Vec::new();
        for (k, v) in f.costs_ns {
            let name = FIELDS
                .iter()
                .find(|&&n| n == k)
                .ok_or(CostsError::Field(k))?;
            set.push((*name, v));
        }
        return Ok((set, Vec::new()));
    }
    if f.format != "vmirq-costs-v1" {
        return Err(CostsError::Format(f.format));
    }
    tracing::info!(source = %f.source, "reading costs file");
    let mut set = Vec::new();
    let mut ignored = Vec::new();
    for (k, v) in f.costs_ns {
        match k.as_str() {
            "hypercall_exit" | "cpuid_exit" => set.push(("exit_roundtrip_ns", v)),
            "ipi_send" => set.push(("wrmsr_exit_ns", v)),
            "ipi_send_other_polled" => set.push(("ipi_send_other_ns", v)),
            "irq_inject" => set.push(("guest_irq_entry_ns", v)),
            _ => ignored.push(k),
        }
    }
    Ok((set, ignored))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_draw_follows_the_quantiles() {
        assert_eq!(spread_draw(10_000, 2_000, 4_000, 0), 8_000);
        assert_eq!(spread_draw(10_000, 2_000, 4_000, 250), 9_000);
        assert_eq!(spread_draw(10_000, 2_000, 4_000, 500), 10_000);
        assert_eq!(spread_draw(10_000, 2_000, 4_000, 900), 14_000);
        assert_eq!(spread_draw(10_000, 2_000, 4_000, 999), 14_990);
        // A spread below the p50 never goes under 0.
        assert_eq!(spread_draw(1_000, 5_000, 0, 0), 0);
        // No spread: always the p50.
        assert!((0..1000).all(|u| spread_draw(7_000, 0, 0, u) == 7_000));
    }

    #[test]
    fn cycles_convert_at_2_6_ghz() {
        assert_eq!(snb_cycles(2_600), 1_000);
        assert_eq!(snb_cycles(8_500), 3_269);
    }

    #[test]
    fn costs_file_maps_known_keys_and_reports_others() {
        let (set, ign) = file_overrides(
            r#"{"format":"vmirq-costs-v1","source":"t","costs_ns":{"cpuid_exit":900,"hlt_wakeup_sleeping":30000,"ipi_send_other_polled":2400,"ipi_send_other_sleeping":8400,"pio_exit_to_user":8000}}"#,
        )
        .expect("valid");
        assert_eq!(
            set,
            vec![("exit_roundtrip_ns", 900), ("ipi_send_other_ns", 2400)]
        );
        assert_eq!(
            ign,
            vec![
                "hlt_wakeup_sleeping".to_string(),
                "ipi_send_other_sleeping".to_string(),
                "pio_exit_to_user".to_string()
            ]
        );
        assert!(file_overrides(r#"{"format":"x","costs_ns":{}}"#).is_err());
    }

    #[test]
    fn sim_costs_file_sets_fields_by_name_and_refuses_unknown_ones() {
        let (set, ign) = file_overrides(
            r#"{"format":"vmirq-sim-costs-v1","source":"t","derivation":{},"costs_ns":{"kick_ns":5000,"vm_entry_ns":700}}"#,
        )
        .expect("valid");
        assert_eq!(set, vec![("kick_ns", 5000), ("vm_entry_ns", 700)]);
        assert!(ign.is_empty());
        let e = file_overrides(r#"{"format":"vmirq-sim-costs-v1","costs_ns":{"kick":1}}"#);
        assert!(matches!(e, Err(CostsError::Field(k)) if k == "kick"));
    }

    #[test]
    fn the_ipi_to_another_vcpu_costs_the_wrmsr_unless_the_profile_sets_it() {
        let c = Costs {
            wrmsr_exit_ns: 1_900,
            ..Costs::default()
        };
        assert_eq!(c.ipi_send_other(), 1_900);
        let c = Costs {
            ipi_send_other_ns: Some(2_400),
            ..c
        };
        assert_eq!((c.ipi_send_other(), c.wrmsr_exit_ns), (2_400, 1_900));
        let (set, _) = file_overrides(
            r#"{"format":"vmirq-sim-costs-v1","costs_ns":{"ipi_send_other_ns":2400}}"#,
        )
        .expect("valid");
        assert_eq!(set, vec![("ipi_send_other_ns", 2_400)]);
    }

    #[test]
    fn field_list_matches_the_costs_struct() {
        let v = serde_json::to_value(Costs::default()).expect("serializes");
        let mut names: Vec<&str> = v
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        let mut fields = FIELDS.to_vec();
        fields.sort_unstable();
        assert_eq!(names, fields);
    }
}
