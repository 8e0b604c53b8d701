//! Run workloads against DPDK testpmd's vhost PMD (started here, killed at the end) in
//! interrupt and poll mode, and print each run's summary (and JSON with `--json`).
//!
//! `cargo run --release -p vmirq-netload --example against_testpmd -- [--seconds S]
//!  [--modes interrupt,poll] [--cpu N] [--json] WORKLOAD...` (workloads as
//! `stream:64`, `stream:1514@200k`, `rr:64`, `mix:9014+64/100`; four ports for `mix4:...`).

use std::time::Duration;
use vmirq_netload::frame::Pattern;
use vmirq_netload::peer::{socket_path, TestPmd, TestPmdConfig};
use vmirq_netload::port::{connect_all, PortConfig};
use vmirq_netload::run::{run, Mode, RunConfig};
use vmirq_netload::workload::Workload;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut seconds = 2.0f64;
    let mut modes = vec![Mode::Interrupt, Mode::Poll];
    let mut cpu = Some(0);
    let mut json = false;
    let mut specs = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().ok_or("--seconds N")?.parse()?,
            "--modes" => {
                modes = args
                    .next()
                    .ok_or("--modes LIST")?
                    .split(',')
                    .map(|m| Mode::parse(m).ok_or("mode"))
                    .collect::<Result<_, _>>()?;
            }
            "--cpu" => cpu = Some(args.next().ok_or("--cpu N")?.parse()?),
            "--json" => json = true,
            _ => specs.push(a),
        }
    }
    let dir = std::env::temp_dir().join(format!("vmirq-netload-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let sockets: Vec<_> = (0..4).map(|i| socket_path(&dir, i)).collect();
    let pmd = TestPmd::start(&TestPmdConfig::vhost_peer(
        sockets.clone(),
        dir.join("peer.log"),
    ))?;
    eprintln!("peer: {}", pmd.cmdline());
    let pattern = Pattern::new();
    for spec in &specs {
        let (four, spec) = match spec.strip_prefix("mix4") {
            Some(rest) => (true, format!("mix{rest}")),
            None => (false, spec.clone()),
        };
        let workload: Workload = spec.parse()?;
        for &mode in &modes {
            let n = if four { 4 } else { 2 };
            let pc = PortConfig {
                tx_frame_max: workload.max_frame_len(),
                ..PortConfig::default()
            };
            let mut ports = connect_all(&sockets[..n], pc, &pattern)?;
            let mut cfg = RunConfig::new(workload, mode);
            cfg.measure = Duration::from_secs_f64(seconds);
            cfg.cpu = cpu;
            let report = run(&mut ports, &cfg)?;
            println!("{}", report.summary());
            if json {
                println!("{}", serde_json::to_string(&report)?);
            }
            for p in ports {
                p.close()?;
            }
        }
    }
    let log = pmd.stop()?;
    eprintln!(
        "peer forward stats: {:?}",
        vmirq_netload::peer::forward_stats(&log)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
