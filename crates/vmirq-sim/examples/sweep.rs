//! `vmirq sim sweep` without the CLI: `cargo run --release -p vmirq-sim --example sweep --
//! FILE KEY=V1,V2,... OUT.html METRIC...`. Prints one line per point and run, writes the
//! HTML plots.

use vmirq_sim::scenario::{parse_set, sweep};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, grid, out, metrics @ ..] = args.as_slice() else {
        return Err("usage: sweep FILE KEY=V1,V2 OUT.html METRIC...".into());
    };
    let text = std::fs::read_to_string(file)?;
    let (k, vs) = grid.split_once('=').ok_or("grid: KEY=V1,V2")?;
    let vals = vs
        .split(',')
        .map(|v| parse_set(&format!("x={v}")).map(|p| p.1))
        .collect::<Result<Vec<_>, _>>()?;
    let points = sweep(&text, &[], &[(k.to_string(), vals)], None)?;
    for p in &points {
        let v: Vec<String> = metrics
            .iter()
            .map(|m| format!("{m}={:.1}", p.values.get(m).copied().unwrap_or(f64::NAN)))
            .collect();
        println!("{:<32} {:<18} {}", p.point.join(" "), p.run, v.join(" "));
    }
    std::fs::write(out, vmirq_sim::html::render_sweep(file, &points, metrics))?;
    Ok(())
}
