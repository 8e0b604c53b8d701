//! `vmirq serve-net`: run the vhost-user-net switch (library `vmirq-net`) on two or more
//! unix sockets, one per port.

use anyhow::Context;
use clap::Args as ClapArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use vmirq_net::queues::{Datapath, Policies};
use vmirq_net::server::{Server, ServerConfig, ServerHandle};
use vmirq_net::switch::SwitchMode;
use vmirq_net::virtio::Mac;
use vmirq_policy::spec::{ContentionSpec, ModerationSpec, WaitSpec};

/// Options of `vmirq serve-net`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// vhost-user unix socket of a port (repeat, in port order: with the taps, two or more ports; an old file at
    /// the path is replaced).
    #[arg(long = "socket", value_name = "PATH", required = true, num_args = 1)]
    sockets: Vec<PathBuf>,
    /// A Linux tap device as a further port (repeat; ports after the sockets'): created, or
    /// attached if it exists; IFF_TAP|IFF_NO_PI, bare Ethernet frames, no virtio-net header.
    /// The interface is left down: bring it up with `ip link set NAME up`.
    #[arg(long = "tap", value_name = "NAME")]
    taps: Vec<String>,
    /// MAC address of a port's device (repeat, in port order; default 52:54:00:76:6e:NN).
    #[arg(long = "mac", value_name = "MAC", value_parser = parse_mac)]
    macs: Vec<Mac>,
    /// How frames are switched: `pairs` (port 0 <-> 1, 2 <-> 3, ...) or `learn` (MAC
    /// learning, unknown destinations flooded).
    #[arg(long = "switch", default_value = "pairs", value_parser = parse_switch)]
    switch: SwitchMode,
    /// Largest entries per queue a frontend may choose (power of two).
    #[arg(long, default_value_t = 1024)]
    queue_size: u16,
    /// Moderation of every receive queue's interrupts and transmit queue's completions, as
    /// in `vmirq serve`: `none`, `count:usecs=U,frames=F`, `dim`, `budget:us=B`, ...
    #[arg(long, default_value = "none", value_name = "SPEC")]
    moderation: ModerationSpec,
    /// One port's own moderation instead of `--moderation` (repeatable): `PORT=SPEC`, the
    /// port counted from 0 in `--socket` order, e.g. `--port-moderation 1=dim` (each VM's
    /// vNIC its own coalescing, as ethtool sets it per device). Socket ports only.
    #[arg(long, value_name = "PORT=SPEC")]
    port_moderation: Vec<vmirq_net::queues::PortModeration>,
    /// Kick wait policy of every transmit queue, as in `vmirq serve`: `never`, `kvm`,
    /// `fixed:ns=N`, `histogram`, ...
    #[arg(long, default_value = "never", value_name = "SPEC")]
    poll: WaitSpec,
    /// When kick polling stops for a neighbour: `stop`, `stop:wait_pct=P`, or `off`.
    #[arg(long, default_value_t = ContentionSpec::default(), value_name = "SPEC")]
    poll_contention: ContentionSpec,
    /// Which threads move frames: `per-port` (each port's worker drains its transmit queue
    /// when kicked) or `pmd[:cpu=N]` (one forwarding thread polls every port in bursts of
    /// 32, like an OVS-DPDK PMD thread, optionally pinned to CPU N; `--poll` bounds how
    /// long it keeps polling once idle).
    #[arg(long, default_value = "per-port", value_name = "MODE")]
    datapath: Datapath,
    /// Receive low-water mark: a receive interrupt the moderation holds is sent at once
    /// when the driver's available receive buffers fall to this fraction of the ring
    /// (`off`, `1/2`, `1/4`, `1/8`; as Intel e1000's RXDMT0 at RCTL.RDMTS), so that a hold
    /// never lets the ring run dry.
    #[arg(long, default_value = "off", value_name = "MARK")]
    rx_low_water: vmirq_net::rx::LowWater,
    /// Queue PAIRS of each vhost-user port, as QEMU's `-netdev vhost-user,queues=N` and
    /// DPDK's vhost PMD `queues=N` count them (1 to 16): more than one offers
    /// VIRTIO_NET_F_MQ with 2N + 1 virtqueues; the driver picks how many it uses
    /// (VQ_PAIRS_SET, `ethtool -L combined`). A frame goes to the receive queue its flow
    /// hash picks. Only with `--datapath per-port`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    queues: u16,
    /// Serve Prometheus counters on PORT (loopback) or HOST:PORT, as `vmirq serve` does:
    /// every port's and queue's counters, and the pmd thread's with `--datapath pmd`.
    #[arg(long, value_name = "ADDR", value_parser = vmirq_net::metrics::parse_addr)]
    metrics: Option<std::net::SocketAddr>,
}

fn parse_switch(s: &str) -> Result<SwitchMode, String> {
    s.parse()
}

fn parse_mac(s: &str) -> Result<Mac, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("{s:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"));
    }
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?}: bad byte {p:?}"))?;
    }
    Ok(mac)
}

/// Serve until SIGINT/SIGTERM; print every port's counters at the end (and on SIGUSR1).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut cfg = ServerConfig::new(args.sockets);
    cfg.taps = args.taps;
    cfg.macs = args.macs;
    cfg.switch = args.switch;
    cfg.queue_size = args.queue_size;
    cfg.queue_pairs = args.queues;
    cfg.metrics = args.metrics;
    cfg.port_moderation = args.port_moderation;
    cfg.policies = Policies {
        moderation: args.moderation,
        poll: args.poll,
        contention: args.poll_contention,
        datapath: args.datapath,
        rx_low_water: args.rx_low_water,
    };
    let server = Server::new(cfg).context("starting the switch")?;
    let handle = server.handle();
    let (report, stop) = (handle.clone(), handle.clone());
    vmirq_vhost::signals::install(move || eprint!("{}", summary(&report)), move || stop.stop())
        .context("installing signal handlers")?;
    let result = server.run();
    eprint!("{}", summary(&handle));
    result.context("serving")?;
    Ok(ExitCode::SUCCESS)
}

/// One line per port: its switch counters, then its queues' generic counters.
fn summary(handle: &ServerHandle) -> String {
    let mut out = String::new();
    if let Some((pmd, q)) = handle.pmd_counters() {
        out.push_str(&format!(
            "{pmd} poll_hits={} poll_misses={} poll_contended={}\n",
            q.poll_hits, q.poll_misses, q.poll_contended
        ));
    }
    for (p, c) in handle.counters().iter().enumerate() {
        let pairs: Vec<String> = c
            .pairs()
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&format!("port {p}: {}\n", pairs.join(" ")));
        let queues: Vec<_> = (0..handle.pairs(p))
            .filter_map(|q| handle.pair_counters(p, q))
            .flat_map(|(rx, tx)| [rx, tx])
            .collect();
        out.push_str(&vmirq_vhost::counters::summary(&queues));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse() {
        assert_eq!(
            parse_mac("52:54:00:aa:bb:0c"),
            Ok([0x52, 0x54, 0, 0xaa, 0xbb, 0x0c])
        );
        assert!(parse_mac("52:54:00:aa:bb").is_err());
        assert!(parse_mac("52:54:00:aa:bb:zz").is_err());
    }
}
