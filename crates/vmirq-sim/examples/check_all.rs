//! Re-run every published check of the bundled scenarios at the given seeds, one TSV row
//! per (scenario, seed, check), then the count of checks within tolerance in every seed:
//! `cargo run --release -p vmirq-sim --example check_all -- 7 11` (from the repository
//! root; `SCENARIOS=a,b` limits the scenario files, `SET=key=value;...` adds overrides).
//! This is how the per-mechanism tables of the crate README are produced.

use std::collections::BTreeMap;
use vmirq_sim::report::Report;
use vmirq_sim::scenario::{parse_set, Scenario};

const BUNDLED: &[&str] = &[
    "kvm_wakeup",
    "ibm_polling",
    "dim_virtio_net",
    "vic_storage",
    "shoot4u_tlb",
    "shoot4u_parsec",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seeds: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let seeds = if seeds.is_empty() { vec![7, 11] } else { seeds };
    let names: Vec<String> = std::env::var("SCENARIOS").map_or_else(
        |_| BUNDLED.iter().map(|s| (*s).to_string()).collect(),
        |v| v.split(',').map(str::to_string).collect(),
    );
    let sets = std::env::var("SET")
        .ok()
        .map(|v| {
            v.split(';')
                .filter(|s| !s.is_empty())
                .map(parse_set)
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?
        .unwrap_or_default();
    // (scenario, check) -> reproduced in every seed so far
    let mut every: BTreeMap<(String, String), bool> = BTreeMap::new();
    println!("scenario\tseed\tcheck\tpublished\tsimulated\tunit\toff_pct\tstatus");
    for name in &names {
        let text = std::fs::read_to_string(format!("scenarios/{name}.toml"))?;
        let sc = Scenario::parse(&text, &sets)?;
        for &seed in &seeds {
            let runs = sc.run(Some(seed), 0)?;
            let r = Report::new(&sc, runs);
            for c in &r.checks {
                if c.status == "input" {
                    continue;
                }
                let ok = c.status == "reproduced";
                let e = every.entry((name.clone(), c.name.clone())).or_insert(true);
                *e &= ok;
                println!(
                    "{name}\t{seed}\t{}\t{}\t{:.3}\t{}\t{:.1}\t{}",
                    c.name, c.published, c.simulated, c.unit, c.off_pct, c.status
                );
            }
        }
    }
    let within = every.values().filter(|&&ok| ok).count();
    println!(
        "# {within} of {} checks within tolerance in every seed {seeds:?}",
        every.len()
    );
    Ok(())
}
