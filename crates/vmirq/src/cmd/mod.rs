//! One module per `vmirq` subcommand. Each exposes `Args` (clap) and
//! `run(Args) -> anyhow::Result<ExitCode>`.

pub mod bench;
pub mod kvm;
pub mod netload;
pub mod netload_peers;
pub mod replay;
pub mod serve;
pub mod serve_net;
pub mod sim;
pub mod sim_sweep;
