//! Era mechanisms of the host profiles, beyond their idle states (`crate::profiles`): what a
//! world switch costs the guest after the switch itself (the indirect cost: refilling the
//! caches and TLB its working set lost to the hypervisor), and which interrupt-path exits a
//! guest of that era takes (the EOI write). Keyed by profile name, so the idle-state
//! tables stay as they are; a profile without an entry here (e.g. one measured on a real
//! host, whose measured primitives already contain what it has) gets none of these costs.
//!
//! Every number has its source next to it. Where the source gives a bound rather than a
//! value, the doc says which end was taken and why; it was chosen before the checks were
//! re-run (see the crate README, "Which checks moved").

use crate::Nanos;

/// Era mechanisms of one host profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Era {
    /// Profile name (as in `crate::profiles::PROFILES`).
    pub profile: &'static str,
    /// Indirect cost of a world switch: extra guest time when guest code of the workload
    /// runs again after at least one exit (the guest's working set is refilled once,
    /// however many exits polluted it). 0: not modelled.
    pub exit_refill_ns: Nanos,
    /// The guest's EOI write exits: an x2APIC EOI MSR write per interrupt, as in KVM
    /// before posted interrupts / APICv and before paravirtual EOI.
    pub eoi_exit: bool,
    /// Part of `vm_entry_ns` that reloads a vCPU whose thread was scheduled out (KVM's
    /// `kvm_sched_in` preempt notifier -> `kvm_arch_vcpu_load`: VMCS load, per-CPU state).
    /// A vCPU resumed from host halt polling never left its CPU and does not pay it. 0: the
    /// profile's `vm_entry_ns` is charged on every resume.
    pub vcpu_reload_ns: Nanos,
    /// An assigned device's MSI is injected from a host IRQ thread (KVM device assignment
    /// before MSIs were injected from the hard handler: `kvm_assigned_dev_msix` returns
    /// `IRQ_WAKE_THREAD`, `kvm_assigned_dev_thread_msix` calls `kvm_set_irq`): one more host
    /// context switch before the injection.
    pub assigned_irq_thread: bool,
    /// An assigned device's MSI is taken (and its IRQ thread runs) on another host CPU
    /// than the vCPU's, which idles between interrupts in the state its own governor picks:
    /// with more than 8 CPUs Linux x86 of that era uses the `physflat` APIC driver, whose
    /// `physflat_cpu_mask_to_apicid_and` sends an IRQ to the first online CPU of its
    /// affinity mask (the default mask is every CPU, so CPU 0), and a threaded handler's
    /// thread follows its IRQ's affinity (`irq_thread_check_affinity`).
    pub assigned_irq_remote: bool,
    /// The host's menu governor predicts, without a typical interval, the next timer
    /// times its correction factor (Linux `drivers/cpuidle/governors/menu.c`,
    /// `correction_factor[bucket]`, updated in `menu_update`), not the bare next timer.
    /// A property of menu in every era; on for the named profiles, off for a `this-host`
    /// profile (its predictions were committed with the previous governor).
    pub menu_correction: bool,
    /// Where the numbers come from.
    pub about: &'static str,
}

/// SplitX (Landau, Ben-Yehuda, Gordon, WIOV 2011; wakeup.md §3.3), Xeon X5570 2.93 GHz
/// (Nehalem), KVM 2.6.34: the direct cost of an exit is about 2,000 cycles, and "the
/// indirect and synchronous cost can in certain cases be an order of magnitude higher".
/// That bound is the only published magnitude; this takes its upper end, 10 x 2,000 cycles
/// at 2.93 GHz, for the indirect part alone (the synchronous part, the handling, is already
/// in the primitive costs). So the refill is an upper bound, and the checks it moves show
/// how much of a miss indirect costs *can* explain, not that they do.
pub const SPLITX_REFILL_NS: Nanos = 6_826; // 20,000 cycles / 2.93 GHz

/// The vCPU reload on the KVM Forum 2015 machine (Sandy Bridge, 2.6 GHz; seeds.md §2), from
/// the talk's two medians of the same IPI benchmark. Scheduled out: 14,900 cycles, the sum of
/// WRMSR 400, kick 1,200, scheduler 8,500, VM entry 3,400 and handler 1,400. Polling (the
/// thread never schedules out): 4,300 cycles, which with the same WRMSR and handler leaves
/// 2,500 for the polled resume. The difference, 3,400 - 2,500 = 900 cycles, is what only a
/// scheduled-out vCPU pays: its reload (`kvm_arch_vcpu_load` from the `kvm_sched_in` preempt
/// notifier). A derivation from one machine's breakdown, so only the profiles whose
/// primitives are that breakdown get it.
pub const SNB_VCPU_RELOAD_NS: Nanos = crate::costs::snb_cycles(3_400 - (4_300 - 400 - 1_400));

/// The eras.
pub const ERAS: &[Era] = &[
    Era {
        profile: "westmere-2012",
        exit_refill_ns: SPLITX_REFILL_NS,
        eoi_exit: true,
        vcpu_reload_ns: 0,
        assigned_irq_thread: true,
        assigned_irq_remote: true,
        menu_correction: true,
        about: "refill: SplitX's bound, measured on Nehalem (Westmere is its 32 nm shrink, \
                same per-core caches); EOI exits: no APICv (Westmere has none) and no PV EOI \
                (guest side merged June 2012, Linux 3.6, commit ab9cf4996bb9 'KVM guest: \
                guest side for eoi avoidance', after FAST'12); ELI (ASPLOS 2012) removes \
                exactly this exit by letting the guest write the x2APIC EOI MSR directly; \
                assigned-device MSIs: virt/kvm/assigned-dev.c of that era injects them from \
                the IRQ thread (request_threaded_irq, hard handler returns IRQ_WAKE_THREAD), \
                on host CPU 0, not the vCPU's: arch/x86/kernel/apic/apic_flat_64.c physflat \
                (more than 8 CPUs) sends an IRQ to the first CPU of its default all-CPU mask; \
                governor: menu's correction factor (drivers/cpuidle/governors/menu.c)",
    },
    Era {
        profile: "sandybridge-2015",
        exit_refill_ns: SPLITX_REFILL_NS,
        eoi_exit: false,
        vcpu_reload_ns: SNB_VCPU_RELOAD_NS,
        assigned_irq_thread: false,
        assigned_irq_remote: false,
        menu_correction: true,
        about: "refill: SplitX's Nehalem bound, carried over unchanged (Sandy Bridge keeps \
                the per-core L1/L2 sizes; an extrapolation); EOI: a 2015 guest (Linux >= 3.6) \
                uses PV EOI, and the talk's per-transaction exit count (~9.6 MSR writes = \
                ICR + APIC timer writes) has no EOI writes in it; vCPU reload: the talk's \
                scheduled-out and polled medians (SNB_VCPU_RELOAD_NS)",
    },
    Era {
        profile: "sandybridge",
        exit_refill_ns: SPLITX_REFILL_NS,
        eoi_exit: false,
        vcpu_reload_ns: SNB_VCPU_RELOAD_NS,
        assigned_irq_thread: false,
        assigned_irq_remote: false,
        menu_correction: true,
        about: "as sandybridge-2015",
    },
    Era {
        profile: "haswell",
        exit_refill_ns: SPLITX_REFILL_NS,
        eoi_exit: false,
        vcpu_reload_ns: 0,
        assigned_irq_thread: false,
        assigned_irq_remote: false,
        menu_correction: true,
        about: "refill as sandybridge-2015 (an extrapolation); no EOI exit: Haswell-EP has \
                APICv (first shipped with Ivy Bridge-EP; from memory, not in the references)",
    },
];

/// The era mechanisms of profile `name` (none for a profile without an entry).
#[must_use]
pub fn era(name: &str) -> Era {
    ERAS.iter()
        .find(|e| e.profile == name)
        .copied()
        .unwrap_or(Era {
            profile: "",
            exit_refill_ns: 0,
            eoi_exit: false,
            vcpu_reload_ns: 0,
            assigned_irq_thread: false,
            assigned_irq_remote: false,
            menu_correction: false,
            about: "",
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_era_names_a_known_profile_and_unknown_ones_get_nothing() {
        for e in ERAS {
            assert!(
                crate::profiles::profile(e.profile).is_some(),
                "{}",
                e.profile
            );
            assert!(!e.about.is_empty());
        }
        let none = era("this-host");
        assert_eq!((none.exit_refill_ns, none.eoi_exit), (0, false));
        assert!(era("westmere-2012").eoi_exit);
        assert_eq!(SPLITX_REFILL_NS, (20_000u64 * 1_000).div_ceil(2_930));
        // 900 cycles at 2.6 GHz.
        assert_eq!(SNB_VCPU_RELOAD_NS, 346);
        assert_eq!(none.vcpu_reload_ns, 0);
        assert_eq!(era("westmere-2012").vcpu_reload_ns, 0);
        assert!(era("westmere-2012").assigned_irq_thread);
        assert!(!none.assigned_irq_thread);
        assert!(!era("sandybridge-2015").assigned_irq_thread);
        assert!(era("westmere-2012").assigned_irq_remote);
        assert!(!none.assigned_irq_remote);
        assert!(!era("haswell").assigned_irq_remote);
        assert!(ERAS.iter().all(|e| e.menu_correction));
        assert!(!none.menu_correction);
    }
}
