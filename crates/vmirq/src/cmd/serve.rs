//! `vmirq serve`: run the vhost-user-blk backend (library `vmirq-blk`) on a unix socket.

use anyhow::Context;
use clap::Args as ClapArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use vmirq_blk::{parse_size, DiskSpec, Server, ServerOptions};
use vmirq_policy::spec::{ContentionSpec, ModerationSpec, WaitSpec};

/// Why the policy defaults are what they are (shown by `vmirq serve --help`).
const DEFAULTS_HELP: &str = include_str!("serve_defaults.txt");

/// Options of `vmirq serve`.
#[derive(Debug, ClapArgs)]
#[command(after_long_help = DEFAULTS_HELP)]
#[command(group(clap::ArgGroup::new("disk").required(true).args(["image", "ram", "null"])))]
pub struct Args {
    /// vhost-user unix socket to listen on (created; an old file at the path is replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Raw disk image file, accessed through io_uring.
    #[arg(long, value_name = "FILE")]
    image: Option<PathBuf>,
    /// In-memory disk of SIZE bytes (K/M/G/T suffixes), zero-filled.
    #[arg(long, value_name = "SIZE")]
    ram: Option<String>,
    /// Null disk of SIZE bytes: writes are dropped, reads return zeroes.
    #[arg(long, value_name = "SIZE")]
    null: Option<String>,
    /// Open the image with O_DIRECT (bypass the host page cache).
    #[arg(long)]
    direct: bool,
    /// Number of request queues.
    #[arg(long, alias = "num-queues", default_value_t = 1)]
    queues: u16,
    /// Entries per queue (power of two).
    #[arg(long, default_value_t = vmirq_blk::config::DEFAULT_QUEUE_SIZE)]
    queue_size: u16,
    /// Worker threads; queues are split into this many groups (default: one per queue).
    #[arg(long)]
    threads: Option<u16>,
    /// Completion moderation policy of every queue, e.g. `vic`, `none`, `count:usecs=50,frames=32`.
    #[arg(long, default_value_t = vmirq_blk::config::default_moderation(), value_name = "SPEC")]
    moderation: ModerationSpec,
    /// Kick wait policy of every queue, e.g. `kvm`, `never`, `histogram`, `fixed:ns=50000`.
    #[arg(long, default_value_t = vmirq_blk::config::default_poll(), value_name = "SPEC")]
    poll: WaitSpec,
    /// When kick polling stops for a neighbour: `stop` (while the worker waits for its CPU
    /// at least `wait_pct`=10 % of its runnable time), `stop:wait_pct=P`, or `off`.
    #[arg(long, default_value_t = ContentionSpec::default(), value_name = "SPEC")]
    poll_contention: ContentionSpec,
    /// Export the disk read-only (writes fail; DISCARD/WRITE_ZEROES not offered).
    #[arg(long, alias = "readonly")]
    read_only: bool,
    /// Serve Prometheus counters on PORT (loopback) or HOST:PORT.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Exit when the first frontend disconnects instead of waiting for the next one.
    #[arg(long)]
    once: bool,
    /// Serial number returned by GET_ID (at most 20 bytes).
    #[arg(long, default_value = "vmirq-blk")]
    serial: String,
}

/// Run the server until SIGINT/SIGTERM (or the first disconnect with `--once`).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let disk = match (&args.image, &args.ram, &args.null) {
        (Some(path), _, _) => DiskSpec::Image {
            path: path.clone(),
            direct: args.direct,
        },
        (_, Some(size), _) => DiskSpec::Ram(parse_size(size)?),
        (_, _, Some(size)) => DiskSpec::Null(parse_size(size)?),
        _ => anyhow::bail!("one of --image, --ram or --null is required"),
    };
    let mut opts = ServerOptions::new(args.socket, disk);
    opts.queues = args.queues;
    opts.queue_size = args.queue_size;
    opts.threads = args.threads;
    opts.moderation = args.moderation;
    opts.poll = args.poll;
    opts.contention = args.poll_contention;
    opts.read_only = args.read_only;
    opts.metrics = args.metrics;
    opts.once = args.once;
    opts.serial = args.serial;
    let server = Server::new(opts.validate()?).context("starting the server")?;
    let handle = server.handle();
    handle
        .install_signals()
        .context("installing signal handlers")?;
    let result = server.run();
    eprint!("{}", vmirq_blk::counters::summary(&handle.counters()));
    result.context("serving")?;
    Ok(ExitCode::SUCCESS)
}
