//! Model-level tests: determinism of whole scenarios, invariants, bounds, config validation.

use vmirq_sim::model::ModelConfig;
use vmirq_sim::scenario::{parse_set, Scenario};
use vmirq_sim::sim::{run, SimError};

fn load(name: &str, sets: &[&str]) -> Scenario {
    let path = format!("{}/../../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("readable");
    let sets: Vec<_> = sets.iter().map(|s| parse_set(s).expect("set")).collect();
    Scenario::parse(&text, &sets).expect("parses")
}

/// The bundled scenarios the model-wide tests run.
const BUNDLED: [&str; 5] = [
    "kvm_wakeup",
    "vic_storage",
    "ibm_polling",
    "dim_virtio_net",
    "shoot4u_tlb",
];

#[test]
fn same_seed_gives_bit_identical_results_and_other_seeds_differ() {
    for name in BUNDLED {
        let sc = load(name, &["duration_us=20000", "warmup_us=0"]);
        let a = sc.run(Some(5), 0).expect("run");
        let b = sc.run(Some(5), 0).expect("run");
        let c = sc.run(Some(6), 0).expect("run");
        for ((la, ra), (_, rb)) in a.iter().zip(&b) {
            let bits = |r: &vmirq_sim::sim::RunResult| {
                r.values
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_bits()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(ra), bits(rb), "{name}/{la} not deterministic");
            assert_eq!(ra.metrics, rb.metrics);
        }
        // ibm_polling has no random element (fixed costs, fixed device time).
        if name != "ibm_polling" {
            assert!(
                a.iter()
                    .zip(&c)
                    .any(|((_, x), (_, y))| x.metrics != y.metrics),
                "{name}: seed has no effect"
            );
        }
    }
}

#[test]
fn invariants_hold_throughout_every_bundled_run() {
    // check_every = 1: no vCPU on two pCPUs, every running vCPU is its pCPU's current
    // thread, and per-pCPU time categories add up to elapsed time, after every event.
    for name in BUNDLED {
        let sc = load(name, &["duration_us=3000", "warmup_us=0"]);
        sc.run(None, 1).expect("invariants hold");
    }
}

#[test]
fn event_budget_bounds_a_run() {
    let sc = load("kvm_wakeup", &["duration_us=100000", "max_events=500"]);
    let (_, cfg) = sc
        .runs
        .iter()
        .find(|(l, _)| l == "rr-kvm-sleep")
        .expect("run");
    assert!(matches!(run(cfg, 1, 0), Err(SimError::Engine(_))));
}

#[test]
fn bad_configs_are_rejected_at_the_boundary() {
    let base =
        "duration_us = 1000\npcpus = 2\n[workload]\nkind = \"ipi-micro\"\ninterval_us = 100\n";
    let ok: ModelConfig = toml::from_str(base).expect("valid");
    assert!(run(&ok, 1, 0).is_ok());
    let bad_spec: ModelConfig =
        toml::from_str(&format!("halt_poll = \"bogus\"\n{base}")).expect("shape ok");
    assert!(matches!(run(&bad_spec, 1, 0), Err(SimError::Config(_))));
    assert!(
        toml::from_str::<ModelConfig>(&format!("nonsense = 1\n{base}")).is_err(),
        "unknown keys rejected"
    );
    let zero: ModelConfig =
        toml::from_str(&base.replace("pcpus = 2", "pcpus = 0")).expect("shape ok");
    assert!(run(&zero, 1, 0).is_err());
}

#[test]
fn overrides_and_references_are_validated() {
    assert!(parse_set("noequals").is_err());
    assert!(parse_set("=3").is_err());
    let (k, v) = parse_set("workload.oio=8").expect("valid");
    assert_eq!((k.as_str(), v.as_integer()), ("workload.oio", Some(8)));
    let text = "name='x'\ntitle='t'\n[model]\nduration_us=10\npcpus=1\n[model.workload]\nkind='ipi-micro'\ninterval_us=1\n[[checks]]\nname='c'\npublished=1.0\nunit='us'\nrun='missing'\nmetric='m'\n";
    assert!(Scenario::parse(text, &[]).is_err());
}

/// A host profile's idle states cost what intel_idle declares, above the shallowest state
/// (which the measured primitives include): bare-metal IPI wakeups after ~100 us halts on a
/// Sandy Bridge with every state enabled pick C1E (target residency 20 us, exit 10 us), so
/// each pays 10 - 2 = 8 us more than the 1,200-cycle native wakeup; the C1-only 2015
/// profile pays nothing extra; an unknown profile is refused.
#[test]
fn host_idle_states_of_a_profile_add_their_exit_latency() {
    let p50 = |profile: &str| {
        let sc = load(
            "kvm_wakeup",
            &["duration_us=20000", &format!("profile=\"{profile}\"")],
        );
        let (_, cfg) = sc.runs.iter().find(|(l, _)| l == "bare").expect("bare run");
        let r = run(cfg, 3, 101).expect("runs");
        (
            r.values["wakeup_ns.p50"],
            r.values.get("host_idle_state1").copied(),
        )
    };
    let (snb, c1e_entries) = p50("sandybridge");
    assert_eq!(snb, 500.0 + 8_000.0);
    assert!(
        c1e_entries.unwrap_or(0.0) > 100.0,
        "C1E chosen on most halts"
    );
    assert_eq!(p50("sandybridge-2015").0, 500.0);
    let sc = load("kvm_wakeup", &["profile=\"pentium\""]);
    let (_, cfg) = &sc.runs[0];
    assert!(matches!(run(cfg, 1, 0), Err(SimError::Config(_))));
}
