//! `vmirq netload`: the interrupt-driven virtio-net client (vmirq-netload) against a
//! vhost-user-net backend, or against DPDK testpmd's vhost PMD started as the peer; each
//! mode repeated and interleaved, summarised as median [min..max].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use vmirq_netload::bench::{bench, run_config, BenchConfig};
use vmirq_netload::peer::loopback_reference;
use vmirq_netload::port::PortConfig;
use vmirq_netload::run::Mode;
use vmirq_netload::workload::Workload;

/// Arguments of `vmirq netload`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// vhost-user-net socket of a client port (repeat: 2 ports, or 4 for `mix` on separate
    /// queues). Without any, testpmd's vhost PMD is started as the peer.
    #[arg(long = "socket", value_name = "PATH")]
    sockets: Vec<PathBuf>,
    /// Ports of the testpmd peer when no --socket is given: 2, or 4 for `mix` with the
    /// messages on their own queues (ports 2 <-> 3).
    #[arg(long, default_value_t = 2)]
    ports: usize,
    /// Workload: stream[:LEN][@PPS], rr[:LEN][xDEPTH], mix[:LEN][@PPS][+MSGLEN][/US].
    #[arg(long, default_value = "stream:64", value_parser = parse_workload)]
    workload: Workload,
    /// Comma-separated modes: interrupt (sleep on the call eventfd, NAPI-like) and/or poll.
    #[arg(long, default_value = "interrupt,poll", value_delimiter = ',', value_parser = parse_mode)]
    mode: Vec<Mode>,
    /// Runs of each mode (interleaved).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Warm-up seconds per run.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// RX ring entries (QEMU's rx_queue_size).
    #[arg(long, default_value_t = 256)]
    rx_queue_size: u16,
    /// TX ring entries (QEMU's tx_queue_size).
    #[arg(long, default_value_t = 256)]
    tx_queue_size: u16,
    /// Bytes per receive buffer, net header included (a jumbo frame spans several with
    /// MRG_RXBUF).
    #[arg(long, default_value_t = 2048)]
    rx_buf_len: u32,
    /// Negotiate VIRTIO_RING_F_EVENT_IDX (on|off).
    #[arg(long, default_value = "on", value_parser = parse_on_off)]
    event_idx: bool,
    /// Negotiate VIRTIO_NET_F_MRG_RXBUF (on|off).
    #[arg(long, default_value = "on", value_parser = parse_on_off)]
    mrg_rxbuf: bool,
    /// At most this many bulk frames in flight (a receive window; default unlimited).
    #[arg(long)]
    window: Option<u64>,
    /// Pin the client thread to this CPU (testpmd's peer forwards on CPU 1).
    #[arg(long, default_value_t = 0)]
    cpu: usize,
    /// Check headers and trailers only, not every payload byte.
    #[arg(long)]
    no_verify: bool,
    /// Write every run's report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also measure the machine's reference: testpmd's virtio-user through its vhost PMD.
    #[arg(long)]
    loopback_reference: bool,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse()
        .map_err(|e: vmirq_netload::workload::WorkloadError| e.to_string())
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| format!("unknown mode {s:?} (interrupt, poll)"))
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}

/// Run `vmirq netload`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut run = run_config(Duration::from_secs_f64(args.seconds));
    run.warmup = Duration::from_secs_f64(args.warmup);
    run.bulk_window = args.window;
    run.verify_payload = !args.no_verify;
    run.cpu = Some(args.cpu);
    let cfg = BenchConfig {
        sockets: args.sockets,
        testpmd_ports: args.ports,
        workload: args.workload,
        modes: args.mode,
        repeat: args.repeat,
        run,
        port: PortConfig {
            rx_queue_size: args.rx_queue_size,
            tx_queue_size: args.tx_queue_size,
            rx_buf_len: args.rx_buf_len,
            event_idx: args.event_idx,
            mrg_rxbuf: args.mrg_rxbuf,
            ..PortConfig::default()
        },
    };
    let result = bench(&cfg, |r| eprintln!("{}", r.summary()))?;
    println!("peer: {}", result.peer);
    print!("{}", result.table());
    if args.loopback_reference {
        let dir = std::env::temp_dir().join(format!("vmirq-loopback-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let r = loopback_reference(&dir, 5);
        let _ = std::fs::remove_dir_all(&dir);
        let r = r.context("loopback reference")?;
        println!(
            "reference (testpmd virtio-user through testpmd vhost, 64 B, polling): {} pps median of {:?}",
            r.median_pps(),
            r.pps
        );
    }
    if let Some(path) = args.json {
        let text = serde_json::to_string_pretty(&result)?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let lost: u64 = result
        .runs
        .iter()
        .map(vmirq_netload::run::Report::lost)
        .sum();
    if lost > 0 {
        eprintln!(
            "vmirq netload: {lost} frames lost over all runs (the peer found no free receive \
             buffer; --window bounds the frames in flight)"
        );
    }
    Ok(ExitCode::SUCCESS)
}
