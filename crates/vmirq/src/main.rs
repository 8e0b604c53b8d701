//! `vmirq`: the command line over the vmirq libraries. Each subcommand lives in its own module
//! under `cmd/`; this file only parses arguments and dispatches.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// vmirq: when should a virtual device notify, and when should a waiter poll?
#[derive(Debug, Parser)]
#[command(name = "vmirq", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmark vmirq serve policies against qemu-storage-daemon and bare io_uring (with
    /// --net: vmirq serve-net against DPDK testpmd and Open vSwitch).
    Bench(cmd::bench::Args),
    /// Measure wakeups, exits, halt polling and a moderated device on the real KVM.
    Kvm(cmd::kvm::Args),
    /// Drive a vhost-user-net device as an interrupt-driven or polling guest (default peer: DPDK testpmd).
    Netload(cmd::netload::Args),
    /// Run moderation policies over a completion trace and report notifications and delay.
    Replay(cmd::replay::Args),
    /// Serve a vhost-user-blk device whose notifications and kick waits follow vmirq policies.
    Serve(cmd::serve::Args),
    /// Serve a vhost-user-net switch between ports whose interrupts and kick waits follow vmirq policies.
    ServeNet(cmd::serve_net::Args),
    /// Simulate a virtualized host running vmirq policies (scenarios/, paper vs simulated).
    Sim(cmd::sim::Args),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VMIRQ_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => cmd::bench::run(args),
        Command::Kvm(args) => cmd::kvm::run(args),
        Command::Netload(args) => cmd::netload::run(args),
        Command::Replay(args) => cmd::replay::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::ServeNet(args) => cmd::serve_net::run(args),
        Command::Sim(args) => cmd::sim::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("vmirq: {err:#}");
            ExitCode::FAILURE
        }
    }
}
