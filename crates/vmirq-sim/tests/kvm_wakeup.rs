//! Reproduction test for scenarios/kvm_wakeup.toml (KVM Forum 2015 message passing).

mod common;
use common::{check, run_scenario, value};

#[test]
fn kvm_wakeup_reproduces_the_published_latencies() {
    let r = run_scenario("kvm_wakeup", &["duration_us=60000"]);
    for name in [
        "IPI wakeup, halted vCPU scheduled out (p50)",
        "IPI wakeup, vCPU never schedules (polls) (p50)",
    ] {
        let c = check(&r, name);
        assert_eq!(c.status, "reproduced", "{name}: {c:?}");
    }
    // Inputs (consistency): within 25% as well.
    for name in [
        "IPI wakeup, bare metal (p50)",
        "TCP_RR round trip, bare metal",
    ] {
        assert!(check(&r, name).off_pct <= 25.0, "{name}");
    }
}

#[test]
fn kvm_wakeup_message_passing_direction_and_size() {
    let r = run_scenario("kvm_wakeup", &["duration_us=60000"]);
    // Reproduced only with sandybridge-2015's indirect exit cost (SplitX's upper bound,
    // `vmirq_sim::era`); without it the ratio was 2.1x and the slowdown 13.7 us.
    for name in [
        "TCP_RR VM / bare metal, no polling",
        "TCP_RR VM slowdown, no polling",
    ] {
        assert_eq!(check(&r, name).status, "reproduced", "{name}");
    }
    let ratio = check(&r, "TCP_RR VM / bare metal, no polling").simulated;
    assert!((2.5..3.5).contains(&ratio), "VM/bare ratio {ratio}");
    // Reproduced since a polled resume skips the vCPU reload (sandybridge-2015 era, README
    // "Fifth session"): two polled wakes per round trip, each saving kick + scheduler +
    // reload; 7.46 us (a miss) with the full VM entry on a polled resume.
    let c = check(&r, "host halt polling saving per TCP_RR round trip");
    assert_eq!(c.status, "reproduced", "{c:?}");
    assert!(
        (7.5..10.0).contains(&c.simulated),
        "polling saving {} us",
        c.simulated
    );
    // Polling costs CPU: the idle vCPU's pCPU is busy while polling.
    assert!(
        value(&r, "kvm-poll", "cpu.poll_pct")
            > 10.0 * value(&r, "kvm-sleep", "cpu.poll_pct").max(0.1)
    );
    // memcached-like loopback server: halt polling lowers latency (published 1.5x).
    let mc = check(&r, "memcached-like latency, no polling / halt polling").simulated;
    assert!((1.13..1.6).contains(&mc), "memcached-like ratio {mc}");
    // External client over virtio-net: polling helps, bare metal is fastest.
    let (bare, poll, sleep) = (
        value(&r, "ext-bare", "ping_rtt_ns.mean"),
        value(&r, "ext-kvm-poll", "ping_rtt_ns.mean"),
        value(&r, "ext-kvm-sleep", "ping_rtt_ns.mean"),
    );
    assert!(
        bare < poll && poll < sleep,
        "bare {bare} poll {poll} sleep {sleep}"
    );
    // Guest haltpoll elides reschedule IPIs entirely.
    assert!(value(&r, "rr-guest-haltpoll", "ipis_elided") > 0.0);
}
