//! Host scheduler tests: two vCPUs sharing one pCPU (run queue, wakeup preemption,
//! timeslices, halt polling that must yield), with invariants checked after every event.

use vmirq_sim::model::ModelConfig;
use vmirq_sim::sim::run;

fn cfg(extra: &str, workload: &str) -> ModelConfig {
    toml::from_str(&format!(
        "duration_us = 20000\npcpus = 1\n{extra}\n[workload]\n{workload}\n"
    ))
    .expect("valid config")
}

#[test]
fn halt_polling_never_succeeds_on_the_senders_core() {
    // kvm-host.md: with the injector on the same core, polling never succeeds.
    let c = cfg(
        "halt_poll = \"kvm\"",
        "kind = \"ipi-micro\"\ninterval_us = 100",
    );
    let r = run(&c, 1, 1).expect("invariants hold after every event");
    assert_eq!(r.metrics.counter("host_poll_hits"), 0);
    assert!(r.metrics.counter("wakeup_preemptions") > 50);
    let p50 = r.values["wakeup_ns.p50"];
    // The wakeup pays a context switch on top of the usual path, not a timeslice.
    assert!((4_000.0..20_000.0).contains(&p50), "p50 {p50}");
}

#[test]
fn guest_haltpoll_burns_the_shared_core() {
    // Guest polling does not know the host has other runnable work (guest-halt-polling.rst):
    // on a shared core it delays the partner until its window or timeslice ends.
    let shared_poll = run(
        &cfg(
            "guest_haltpoll = \"guest-haltpoll\"\nidle_entry_writes = 2\nidle_exit_writes = 2",
            "kind = \"tcp-rr\"\nwork_ns = 5600",
        ),
        1,
        1,
    )
    .expect("run");
    let shared_sleep = run(
        &cfg(
            "idle_entry_writes = 2\nidle_exit_writes = 2",
            "kind = \"tcp-rr\"\nwork_ns = 5600",
        ),
        1,
        1,
    )
    .expect("run");
    assert!(shared_poll.values["rtt_ns.mean"] > 2.0 * shared_sleep.values["rtt_ns.mean"]);
}

#[test]
fn cpu_time_adds_up_on_a_shared_core() {
    // Context switches, wakeup preemptions and idle time on one pCPU: every nanosecond is
    // accounted to exactly one category.
    let c = cfg(
        "halt_poll = \"never\"",
        "kind = \"ipi-micro\"\ninterval_us = 5000",
    );
    let r = run(&c, 3, 1).expect("run");
    let total: f64 = ["guest", "exit", "poll", "sched", "host", "idle"]
        .iter()
        .map(|k| r.values[&format!("cpu.{k}_pct")])
        .sum();
    assert!(
        (total - 100.0).abs() < 1e-6,
        "cpu categories add to {total}%"
    );
}
