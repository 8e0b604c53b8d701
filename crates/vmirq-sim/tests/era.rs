//! The era mechanisms of the host profiles (`vmirq_sim::era`): the indirect exit cost
//! (working-set refill after a world switch) and EOI write exits.

mod common;
use common::{check, run_scenario, value};
use vmirq_sim::report::Report;

/// A counter of a run (0 when it never counted).
fn count(r: &Report, run: &str, key: &str) -> f64 {
    r.runs
        .get(run)
        .and_then(|x| x.values.get(key).copied())
        .unwrap_or(0.0)
}

#[test]
fn eoi_writes_exit_only_where_the_era_has_neither_apicv_nor_pv_eoi() {
    // westmere-2012 (FAST'12 host): one EOI exit per interrupt the guest handles.
    let r = run_scenario("ibm_polling", &["duration_us=20000"]);
    let eois = count(&r, "ping-vm-halt", "exits_eoi");
    let irqs = count(&r, "ping-vm-halt", "irqs_delivered");
    assert!(eois > 100.0, "eois {eois}");
    assert!((irqs - eois).abs() <= 2.0, "irqs {irqs} eois {eois}");
    assert_eq!(count(&r, "ping-bare-halt", "exits_eoi"), 0.0, "bare metal");
    let off = run_scenario("ibm_polling", &["duration_us=20000", "eoi_exit=false"]);
    assert_eq!(count(&off, "ping-vm-halt", "exits_eoi"), 0.0);
    // Each EOI exit is one light exit plus the MSR write on the ping's critical path.
    let extra = value(&r, "ping-vm-halt", "ping_rtt_ns.mean")
        - value(&off, "ping-vm-halt", "ping_rtt_ns.mean");
    assert!(
        (700.0..1_000.0).contains(&extra),
        "EOI exit adds {extra} ns"
    );
    // sandybridge-2015 (PV EOI): none.
    let k = run_scenario("kvm_wakeup", &["duration_us=20000"]);
    assert_eq!(count(&k, "kvm-sleep", "exits_eoi"), 0.0);
}

#[test]
fn working_set_refill_is_paid_once_per_return_to_workload_code() {
    let on = run_scenario("kvm_wakeup", &["duration_us=40000"]);
    let off = run_scenario("kvm_wakeup", &["duration_us=40000", "exit_refill_ns=0"]);
    // TCP_RR: client and server each wake once per round trip, so two refills each,
    // however many exits (ICR write, HLT, 4 timer writes) polluted the caches meanwhile.
    let per_rt =
        count(&on, "rr-kvm-sleep", "exit_refills") / count(&on, "rr-kvm-sleep", "transactions");
    assert!(
        (1.9..2.1).contains(&per_rt),
        "refills per round trip {per_rt}"
    );
    let extra =
        value(&on, "rr-kvm-sleep", "rtt_ns.mean") - value(&off, "rr-kvm-sleep", "rtt_ns.mean");
    let two = 2.0 * vmirq_sim::era::SPLITX_REFILL_NS as f64;
    assert!((extra - two).abs() < 0.05 * two, "extra {extra} ns");
    let name = "TCP_RR VM slowdown, no polling";
    assert_eq!(check(&on, name).status, "reproduced");
    assert_eq!(check(&off, name).status, "not reproduced");
    // Bare metal has no world switch, and an interrupt handler is not workload code: the
    // IPI wakeup latency (to the handler's first instruction) does not change.
    assert_eq!(count(&on, "rr-bare", "exit_refills"), 0.0);
    assert_eq!(
        value(&on, "kvm-sleep", "wakeup_ns.p50"),
        value(&off, "kvm-sleep", "wakeup_ns.p50")
    );
    // A profile without an era entry gets no refill (vic_storage has no profile).
    let v = run_scenario("vic_storage", &["duration_us=5000"]);
    for run in v.runs.keys() {
        assert_eq!(count(&v, run, "exit_refills"), 0.0, "{run}");
    }
}

#[test]
fn only_a_scheduled_out_vcpu_pays_the_reload() {
    // sandybridge-2015: the talk's two medians split its VM entry into a polled resume
    // (2,500 cycles) and the reload a scheduled-out vCPU adds (900 cycles = 346 ns).
    let on = run_scenario("kvm_wakeup", &["duration_us=20000"]);
    let off = run_scenario("kvm_wakeup", &["duration_us=20000", "vcpu_reload_ns=0"]);
    let polled = value(&off, "kvm-poll", "wakeup_ns.p50") - value(&on, "kvm-poll", "wakeup_ns.p50");
    assert!(
        (polled - 346.0).abs() <= 1.0,
        "polled wake cheaper by {polled} ns"
    );
    // A slept wake pays the whole entry either way.
    assert_eq!(
        value(&on, "kvm-sleep", "wakeup_ns.p50"),
        value(&off, "kvm-sleep", "wakeup_ns.p50")
    );
    // Profiles without the talk's breakdown (westmere-2012) and measured ones get none.
    let ibm = run_scenario("ibm_polling", &["duration_us=20000"]);
    let ibm_off = run_scenario("ibm_polling", &["duration_us=20000", "vcpu_reload_ns=0"]);
    assert_eq!(
        value(&ibm, "ping-vm-kvm-haltpoll", "ping_rtt_ns.mean"),
        value(&ibm_off, "ping-vm-kvm-haltpoll", "ping_rtt_ns.mean")
    );
}

#[test]
fn westmere_assigned_device_msis_go_through_the_host_irq_thread() {
    // FAST'12-era KVM device assignment injects an assigned NIC's MSI from the IRQ thread:
    // one more host context switch on the halt-idle guest's ping path. (With the IRQ on
    // the vCPU's own pCPU, so that the remote IRQ CPU's idle states do not couple in.)
    let r = run_scenario(
        "ibm_polling",
        &["duration_us=20000", "assigned_irq_remote=false"],
    );
    let off = run_scenario(
        "ibm_polling",
        &[
            "duration_us=20000",
            "assigned_irq_remote=false",
            "assigned_irq_thread=false",
        ],
    );
    let pings = value(&r, "ping-vm-halt", "ping_rtt_ns.n");
    let switches = count(&r, "ping-vm-halt", "assigned_irq_thread_switches");
    assert!(switches > 100.0, "switches {switches}");
    assert!(
        (switches - pings).abs() <= 2.0,
        "pings {pings} switches {switches}"
    );
    assert_eq!(
        count(&off, "ping-vm-halt", "assigned_irq_thread_switches"),
        0.0
    );
    let extra = value(&r, "ping-vm-halt", "ping_rtt_ns.mean")
        - value(&off, "ping-vm-halt", "ping_rtt_ns.mean");
    // context_switch_ns = 4,250 cycles at 2.6 GHz = 1,635 ns; the wakeup may shift a little.
    assert!(
        (1_400.0..1_900.0).contains(&extra),
        "IRQ thread adds {extra} ns"
    );
    // Not on bare metal, not on the polled NIC path, not in the 2015 era.
    assert_eq!(
        count(&r, "ping-bare-halt", "assigned_irq_thread_switches"),
        0.0
    );
    assert_eq!(
        count(&r, "ping-vm-poll", "assigned_irq_thread_switches"),
        0.0
    );
    let k = run_scenario("kvm_wakeup", &["duration_us=20000"]);
    for run in k.runs.keys() {
        assert_eq!(count(&k, run, "assigned_irq_thread_switches"), 0.0, "{run}");
    }
}

#[test]
fn westmere_assigned_device_msis_wake_a_host_cpu_of_their_own() {
    // physflat sends the VF's MSI to the first CPU of its default mask, not the vCPU's
    // core: a host CPU that idles between pings under its own governor.
    let r = run_scenario("ibm_polling", &["duration_us=20000"]);
    let pings = value(&r, "ping-vm-halt", "ping_rtt_ns.n");
    let entries: f64 = (0..5)
        .map(|i| count(&r, "ping-vm-halt", &format!("irq_cpu_idle_state{i}")))
        .sum();
    assert!(pings > 100.0, "pings {pings}");
    assert!(
        (entries - pings).abs() <= 2.0,
        "pings {pings} entries {entries}"
    );
    // Idles of a whole round trip (~50 us): past C1E's 20 us residency, short of C3's 80,
    // once menu's correction factor has come down from its start at 1.0.
    let c1e = count(&r, "ping-vm-halt", "irq_cpu_idle_state1");
    assert!(c1e > 0.9 * pings, "C1E {c1e} of {pings}");
    assert!(count(&r, "ping-vm-halt", "irq_cpu_idle_exit_ns") > 0.0);
    // Off: the previous path (the vCPU's own pCPU takes it), no IRQ CPU at all.
    let off = run_scenario(
        "ibm_polling",
        &["duration_us=20000", "assigned_irq_remote=false"],
    );
    assert_eq!(count(&off, "ping-vm-halt", "irq_cpu_idle_state1"), 0.0);
    let with = value(&r, "ping-vm-halt", "ping_rtt_ns.mean");
    let without = value(&off, "ping-vm-halt", "ping_rtt_ns.mean");
    assert!(with > without + 10_000.0, "{with} vs {without}");
    // Not on bare metal (the CPU that takes the IRQ answers the echo), not when the guest
    // polls its NIC, not in the 2015 era.
    for run in ["ping-bare-halt", "ping-vm-poll"] {
        assert_eq!(count(&r, run, "irq_cpu_idle_exit_ns"), 0.0, "{run}");
        assert_eq!(count(&r, run, "irq_cpu_idle_state1"), 0.0, "{run}");
    }
    let k = run_scenario("kvm_wakeup", &["duration_us=20000"]);
    for run in k.runs.keys() {
        assert_eq!(count(&k, run, "irq_cpu_idle_exit_ns"), 0.0, "{run}");
    }
}

#[test]
fn without_menus_correction_factor_the_two_cpus_spiral_into_deep_states() {
    // The governor's fallback before the eighth session (the bare next timer) sends both
    // CPUs of the remote-IRQ ping deep, each idling through the other's exit latency; with
    // menu's correction factor they settle in C1E.
    let r = run_scenario("ibm_polling", &["duration_us=20000"]);
    let bare = run_scenario(
        "ibm_polling",
        &["duration_us=20000", "governor_correction=false"],
    );
    let with = value(&r, "ping-vm-halt", "ping_rtt_ns.mean");
    let without = value(&bare, "ping-vm-halt", "ping_rtt_ns.mean");
    assert!(without > 3.0 * with, "{without} vs {with}");
    assert!(
        count(&bare, "ping-vm-halt", "irq_cpu_idle_state3")
            > count(&r, "ping-vm-halt", "irq_cpu_idle_state3")
    );
}
