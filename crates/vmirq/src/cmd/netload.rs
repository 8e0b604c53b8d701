//! `vmirq netload`: the interrupt-driven virtio-net client (vmirq-netload) against a
//! vhost-user-net backend, or against DPDK testpmd's vhost PMD started as the peer; each
//! mode repeated and interleaved, summarised as median [min..max].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::netload_peers::{self, parse_peer, print_ratio, Peer, Target, VmirqPeer};
use anyhow::Context;
use vmirq_net::queues::Policies;
use vmirq_netload::bench::{bench, check_testpmd_ports, run_config, BenchConfig, BenchResult};
use vmirq_netload::frame::Encap;
use vmirq_netload::peer::loopback_reference;
use vmirq_netload::port::PortConfig;
use vmirq_netload::run::Mode;
use vmirq_netload::run::Report;
use vmirq_netload::workload::Workload;
use vmirq_policy::spec::{ModerationSpec, WaitSpec};

/// Arguments of `vmirq netload`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// vhost-user-net socket of a client port (repeat: 2 ports, 3 or 4 for `mix`: see
    /// --ports). Without any, testpmd's vhost PMD is started as the peer.
    #[arg(long = "socket", value_name = "PATH")]
    sockets: Vec<PathBuf>,
    /// Ports of the peer when no --socket is given: 2, or for `mix` 4 (the messages on their
    /// own queues, ports 2 <-> 3) or 3 (the bulk from port 0 and the responses from port 2
    /// into the client's one receive queue on port 1; needs `--sender wire` and a switch
    /// that learns addresses: `--peer vmirq`, which then runs with `--switch learn`).
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
    /// Who sends the bulk stream: `client` (the client thread, which also receives it) or
    /// `wire` (a thread of its own pinned to --wire-cpu, like another host sending to the
    /// guest: the client thread then only receives, and sleeps on its interrupts alone).
    /// `wire` needs `stream` or `mix`; on 2 ports the wire also answers the mix's
    /// requests, on 3 a responder thread on port 2 does.
    #[arg(long, default_value = "client", value_parser = parse_sender)]
    sender: Sender,
    /// CPU of the wire sender's thread.
    #[arg(long, default_value_t = 1)]
    wire_cpu: usize,
    /// CPU of the responder's thread in the 3-port mix (default: --wire-cpu, the other
    /// hosts' CPU, leaving the client's to the client).
    #[arg(long)]
    responder_cpu: Option<usize>,
    /// Check headers and trailers only, not every payload byte.
    #[arg(long)]
    no_verify: bool,
    /// Which receive queues an interrupt-mode round polls: `all` (every port's, whichever
    /// signal woke the client) or `queue` (as Linux virtio-net's per-queue NAPI: a queue
    /// only after its own interrupt, until a poll finds less than the budget).
    #[arg(long, default_value = "all", value_parser = parse_napi)]
    napi: vmirq_netload::run::Napi,
    /// Interrupt mode: before the client sleeps on its call eventfds it polls them for a
    /// wait policy's window, as KVM polls a halted vCPU (`kvm`: halt_poll_ns 200 µs, grow 2,
    /// shrink 2; `fixed:us=N`, `guest-haltpoll`, `histogram`, as `vmirq serve --poll`).
    /// Without it the client sleeps at once: a guest on a host with halt polling off.
    #[arg(long, value_name = "SPEC")]
    halt_poll: Option<vmirq_policy::spec::WaitSpec>,
    /// Encapsulation of the frames sent: `raw` (Ethernet with EtherType 0x88B5: every flow
    /// between two ports has the same addresses) or `udp` (Ethernet, IPv4 10.0.0.(port+1),
    /// UDP ports 0xC000 + flow: one UDP flow per netload flow, as a guest sends; frames of
    /// at least 82 bytes). Receivers take either.
    #[arg(long, default_value = "raw", value_parser = parse_frames)]
    frames: Encap,
    /// Write every run's report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also measure the machine's reference: testpmd's virtio-user through its vhost PMD
    /// (and through every other --peer).
    #[arg(long)]
    loopback_reference: bool,
    /// Peers to compare when no --socket is given, interleaved per repeat: `testpmd`
    /// (its vhost PMD) and/or `vmirq` (`vmirq serve-net` in this process).
    #[arg(long = "peer", default_value = "testpmd", value_delimiter = ',', value_parser = parse_peer)]
    peers: Vec<Peer>,
    /// `--moderation` of the `vmirq` peer; repeat to compare several (each its own peer,
    /// e.g. `--vmirq-moderation none --vmirq-moderation dim`).
    #[arg(long, default_value = "none", value_name = "SPEC")]
    vmirq_moderation: Vec<ModerationSpec>,
    /// `--poll` of the `vmirq` peer.
    #[arg(long, default_value = "never", value_name = "SPEC")]
    vmirq_poll: WaitSpec,
    /// `--datapath` of the `vmirq` peer (`per-port`, `pmd`, `pmd:cpu=N`).
    #[arg(long, default_value = "per-port", value_name = "MODE")]
    vmirq_datapath: vmirq_net::queues::Datapath,
    /// `--rx-low-water` of the `vmirq` peer (`off`, `1/2`, `1/4`, `1/8`); repeat to compare
    /// several (each moderation runs with each mark).
    #[arg(long, default_value = "off", value_name = "MARK")]
    vmirq_rx_low_water: Vec<vmirq_net::rx::LowWater>,
    /// `--port-moderation` of the `vmirq` peer (`PORT=SPEC`, repeatable): that port keeps
    /// this moderation in every compared target, e.g. `0=none --vmirq-port-moderation
    /// 2=none` on three ports moderates only the client's port 1 (the talk's setup, where
    /// the bulk sender and the far end are other hosts).
    #[arg(long, value_name = "PORT=SPEC")]
    vmirq_port_moderation: Vec<vmirq_net::queues::PortModeration>,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse()
        .map_err(|e: vmirq_netload::workload::WorkloadError| e.to_string())
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| format!("unknown mode {s:?} (interrupt, poll)"))
}

/// Who sends the bulk stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sender {
    /// The client thread.
    Client,
    /// A thread of its own.
    Wire,
}

fn parse_sender(s: &str) -> Result<Sender, String> {
    match s {
        "client" => Ok(Sender::Client),
        "wire" => Ok(Sender::Wire),
        _ => Err(format!("unknown sender {s:?} (client, wire)")),
    }
}

fn parse_napi(s: &str) -> Result<vmirq_netload::run::Napi, String> {
    vmirq_netload::run::Napi::parse(s).ok_or_else(|| format!("unknown napi {s:?} (all, queue)"))
}

fn parse_frames(s: &str) -> Result<Encap, String> {
    Encap::parse(s).ok_or_else(|| format!("unknown frames {s:?} (raw, udp)"))
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}

/// Each peer's session, interleaved: repeat `r` runs every mode against every peer before
/// repeat `r + 1`.
fn compare(
    cfg: &BenchConfig,
    peers: &[Target],
    port_moderation: &[vmirq_net::queues::PortModeration],
) -> anyhow::Result<Vec<BenchResult>> {
    let dir = std::env::temp_dir().join(format!("vmirq-netload-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut results: Vec<Option<BenchResult>> = vec![None; peers.len()];
    let one = BenchConfig {
        repeat: 1,
        ..cfg.clone()
    };
    for _ in 0..cfg.repeat.max(1) {
        for (i, peer) in peers.iter().enumerate() {
            let r = match peer {
                Target::Testpmd => bench(&one, |r| eprintln!("testpmd: {}", r.summary()))?,
                Target::Vmirq(policies) => {
                    let srv =
                        VmirqPeer::start(&dir, cfg.testpmd_ports, *policies, port_moderation)?;
                    let c = BenchConfig {
                        sockets: srv.sockets.clone(),
                        ..one.clone()
                    };
                    let label = peer.label();
                    let mut r = bench(&c, |r| eprintln!("{label}: {}", r.summary()))?;
                    r.peer = srv.describe(policies);
                    eprint!("{}", srv.stop()?);
                    r
                }
            };
            match &mut results[i] {
                Some(acc) => acc.runs.extend(r.runs),
                slot => *slot = Some(r),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(results.into_iter().flatten().collect())
}

/// One metric of a run, if the run has it.
type Getter = fn(&Report) -> Option<f64>;

/// The metrics compared peer against peer, repeat by repeat (a flow's own interrupts only
/// where its queues carry no other flow).
const RATIOS: [(&str, Getter); 6] = [
    ("packets/s", |r| Some(r.pps)),
    ("client CPU ns/packet", |r| Some(r.cpu_ns_per_packet)),
    ("interrupts/packet", |r| Some(r.interrupts_per_packet)),
    ("bulk interrupts/packet", |r| {
        r.bulk.and_then(|b| b.interrupts_per_packet)
    }),
    ("msg interrupts/packet", |r| {
        r.rr.and_then(|t| t.interrupts_per_packet)
    }),
    ("RTT p50", |r| r.rr.map(|t| t.rtt.p50_ns as f64)),
];

/// Refuse, before any peer starts, a workload its ports and sender cannot carry, and
/// testpmd as the peer of an odd number of ports (it forwards fixed pairs).
fn check_layout(args: &Args) -> anyhow::Result<()> {
    let what = || format!("workload {}", args.workload);
    args.workload.check_encap(args.frames).with_context(what)?;
    let ports = if args.sockets.is_empty() {
        args.ports
    } else {
        args.sockets.len()
    };
    args.workload
        .check_ports(ports, args.sender == Sender::Wire)
        .with_context(what)?;
    if args.sockets.is_empty() && args.peers.contains(&Peer::Testpmd) {
        check_testpmd_ports(ports).context("--peer testpmd")?;
    }
    Ok(())
}

/// Run `vmirq netload`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    check_layout(&args)?;
    let mut run = run_config(Duration::from_secs_f64(args.seconds));
    run.warmup = Duration::from_secs_f64(args.warmup);
    run.bulk_window = args.window;
    run.verify_payload = !args.no_verify;
    run.napi = args.napi;
    run.halt_poll = args.halt_poll;
    run.frames = args.frames;
    run.cpu = Some(args.cpu);
    run.wire_sender = (args.sender == Sender::Wire).then_some(Some(args.wire_cpu));
    run.responder_cpu = Some(args.responder_cpu.unwrap_or(args.wire_cpu));
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
    let base = Policies {
        poll: args.vmirq_poll,
        datapath: args.vmirq_datapath,
        ..Policies::default()
    };
    let peers = if cfg.sockets.is_empty() {
        Target::expand(
            &args.peers,
            &args.vmirq_moderation,
            &args.vmirq_rx_low_water,
            base,
        )
    } else {
        Vec::new()
    };
    let results = if peers.is_empty() {
        vec![bench(&cfg, |r| eprintln!("{}", r.summary()))?]
    } else {
        compare(&cfg, &peers, &args.vmirq_port_moderation)?
    };
    for result in &results {
        println!("peer: {}", result.peer);
        print!("{}", result.table());
    }
    if results.len() > 1 {
        for mode in &cfg.modes {
            for (name, get) in RATIOS {
                let per_peer: Vec<Vec<f64>> = results
                    .iter()
                    .map(|res| {
                        res.runs
                            .iter()
                            .filter(|r| r.mode == *mode)
                            .filter_map(get)
                            .collect()
                    })
                    .collect();
                if per_peer.iter().all(Vec::is_empty) {
                    continue;
                }
                print_ratio(&peers, &per_peer, &format!("{name} [{}]", mode.as_str()));
            }
        }
    }
    if args.loopback_reference {
        if peers.len() > 1 || peers.first().is_some_and(|p| *p != Target::Testpmd) {
            netload_peers::loopback(&peers, args.repeat, 5)?;
        } else {
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
    }
    if let Some(path) = args.json {
        let text = if results.len() == 1 {
            serde_json::to_string_pretty(&results[0])?
        } else {
            serde_json::to_string_pretty(&results)?
        };
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let lost: u64 = results
        .iter()
        .flat_map(|r| &r.runs)
        .map(vmirq_netload::run::Report::lost)
        .sum();
    let unsignalled: u64 = results
        .iter()
        .flat_map(|r| &r.runs)
        .map(|r| r.unsignalled)
        .sum();
    if unsignalled > 0 {
        eprintln!(
            "vmirq netload: {unsignalled} frames sat in a receive ring through a whole drain \
             without a signal (found by a last look; a lost notification or a hold whose timer \
             never fired)"
        );
    }
    if lost > 0 {
        eprintln!(
            "vmirq netload: {lost} frames sent and not received by the end of a drain over all \
             runs (testpmd's peer drops a frame when the receiver has no free buffer, --window \
             bounds the frames in flight; serve-net never drops (its counters say dropped=0), so \
             through serve-net these were still in flight: see UNSIGNALLED above and the \
             per-port counters)"
        );
    }
    Ok(ExitCode::SUCCESS)
}
