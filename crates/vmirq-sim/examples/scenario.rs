//! Run a scenario without the `vmirq` CLI (handy while other crates are being edited):
//! `cargo run --release -p vmirq-sim --example scenario -- scenarios/X.toml [key=value...]`.
//! Prints the published-vs-simulated table and, with `METRICS=a,b`, those metrics per run.

use vmirq_sim::report::Report;
use vmirq_sim::scenario::{parse_set, Scenario};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: scenario FILE [key=value...]")?;
    let text = std::fs::read_to_string(path)?;
    let sets = args.map(|s| parse_set(&s)).collect::<Result<Vec<_>, _>>()?;
    let sc = Scenario::parse(&text, &sets)?;
    let runs = sc.run(None, 0)?;
    let r = Report::new(&sc, runs);
    println!("{}", r.text());
    if let Ok(keys) = std::env::var("METRICS") {
        for (label, run) in &r.runs {
            let vals: Vec<String> = keys
                .split(',')
                .map(|k| format!("{k}={:.1}", run.values.get(k).copied().unwrap_or(f64::NAN)))
                .collect();
            println!("{label:24} {}", vals.join(" "));
        }
    }
    Ok(())
}
