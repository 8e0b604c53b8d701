//! The peers `vmirq netload` compares, interleaved in one session: DPDK testpmd's vhost PMD
//! (started per run by vmirq-netload) and `vmirq serve-net` (this process's own switch,
//! started per run on sockets in a temporary directory), each with the same clients:
//! vmirq-netload's interrupt/poll driver and, with `--loopback-reference`, testpmd's
//! polling virtio-user loopback.

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vmirq_net::queues::{Policies, PortModeration};
use vmirq_net::server::{Server, ServerConfig, ServerHandle};
use vmirq_net::switch::SwitchMode;
use vmirq_netload::bench::Spread;
use vmirq_netload::peer::{loopback_client, loopback_reference};
use vmirq_policy::spec::ModerationSpec;

/// A peer kind on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// testpmd's vhost PMD forwarding 0 <-> 1 (2 <-> 3).
    Testpmd,
    /// `vmirq serve-net` with fixed pairs.
    Vmirq,
}

/// One peer of a session: testpmd, or serve-net with one set of policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// testpmd's vhost PMD.
    Testpmd,
    /// `vmirq serve-net` with these policies.
    Vmirq(Policies),
}

impl Target {
    /// A short label: `testpmd`, `vmirq[none]`, `vmirq[dim]`, `vmirq[dim-lat:wait=off]`
    /// (the moderation spec in its canonical form: defaults left out, so that two
    /// variants of one policy in a session get labels of their own).
    pub fn label(&self) -> String {
        match self {
            Self::Testpmd => "testpmd".into(),
            Self::Vmirq(p) => {
                let mut label = format!("vmirq[{}", p.moderation);
                if p.datapath != vmirq_net::queues::Datapath::PerPort {
                    label.push_str(&format!(",{}", p.datapath));
                }
                if p.rx_low_water != vmirq_net::rx::LowWater::Off {
                    label.push_str(&format!(",rx-low-water={}", p.rx_low_water));
                }
                label + "]"
            }
        }
    }

    /// The targets of `peers`: one `vmirq` target per moderation in `moderations` and
    /// receive low-water mark in `marks` (moderations outer).
    pub fn expand(
        peers: &[Peer],
        moderations: &[ModerationSpec],
        marks: &[vmirq_net::rx::LowWater],
        base: Policies,
    ) -> Vec<Self> {
        peers
            .iter()
            .flat_map(|p| match p {
                Peer::Testpmd => vec![Self::Testpmd],
                Peer::Vmirq => moderations
                    .iter()
                    .flat_map(|m| {
                        marks.iter().map(move |w| {
                            Self::Vmirq(Policies {
                                moderation: *m,
                                rx_low_water: *w,
                                ..base
                            })
                        })
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Parse `testpmd` or `vmirq`.
pub fn parse_peer(s: &str) -> Result<Peer, String> {
    match s {
        "testpmd" => Ok(Peer::Testpmd),
        "vmirq" => Ok(Peer::Vmirq),
        _ => Err(format!("unknown peer {s:?} (testpmd, vmirq)")),
    }
}

/// `vmirq serve-net` running in a thread of this process.
pub struct VmirqPeer {
    /// Its sockets, in port order.
    pub sockets: Vec<PathBuf>,
    /// Ports with moderations of their own.
    port_moderation: Vec<PortModeration>,
    handle: ServerHandle,
    thread: Option<std::thread::JoinHandle<vmirq_net::server::Result<()>>>,
}

impl VmirqPeer {
    /// Start a switch of `ports` ports with sockets in `dir` ([`switch_for`] its mode), the
    /// ports of `port_moderation` with moderations of their own.
    pub fn start(
        dir: &Path,
        ports: usize,
        policies: Policies,
        port_moderation: &[PortModeration],
    ) -> anyhow::Result<Self> {
        let sockets: Vec<PathBuf> = (0..ports)
            .map(|i| dir.join(format!("vmirq-net-{i}.sock")))
            .collect();
        let mut cfg = ServerConfig::new(sockets.clone());
        cfg.policies = policies;
        cfg.port_moderation = port_moderation.to_vec();
        cfg.switch = switch_for(ports);
        let server = Server::new(cfg).context("starting vmirq serve-net")?;
        let handle = server.handle();
        let thread = std::thread::Builder::new()
            .name("vmirq-net".into())
            .spawn(move || server.run())?;
        Ok(Self {
            sockets,
            port_moderation: port_moderation.to_vec(),
            handle,
            thread: Some(thread),
        })
    }

    /// `serve-net` as a command line would say it.
    pub fn describe(&self, policies: &Policies) -> String {
        let mut s = format!(
            "vmirq serve-net (in process) --moderation {} --poll {} --datapath {}",
            policies.moderation, policies.poll, policies.datapath
        );
        if policies.rx_low_water != vmirq_net::rx::LowWater::Off {
            s.push_str(&format!(" --rx-low-water {}", policies.rx_low_water));
        }
        for o in &self.port_moderation {
            s.push_str(&format!(" --port-moderation {o}"));
        }
        if switch_for(self.sockets.len()) == SwitchMode::Learn {
            s.push_str(" --switch learn");
        }
        s
    }

    /// Stop and join (bounded); returns the per-port counter summary.
    pub fn stop(mut self) -> anyhow::Result<String> {
        self.handle.stop();
        let mut summary = String::new();
        if let Some((pmd, q)) = self.handle.pmd_counters() {
            summary.push_str(&format!(
                "{pmd} poll_hits={} poll_misses={} poll_contended={}\n",
                q.poll_hits, q.poll_misses, q.poll_contended
            ));
        }
        for (p, c) in self.handle.counters().iter().enumerate() {
            summary.push_str(&format!(
                "port {p}: tx_frames={} rx_frames={} dropped={} tx_yields={} tx_backpressure={} \
                 tx_blocked_us={} tx_resumes={} tx_resume_wait_us={} \
                 rx_parked={} rx_overtakes={} rx_reserved={} rx_low_water={}",
                c.tx_frames,
                c.rx_frames,
                c.dropped(),
                c.tx_yields,
                c.tx_backpressure,
                c.tx_blocked_ns / 1_000,
                c.tx_resumes,
                c.tx_resume_wait_ns / 1_000,
                c.rx_parked,
                c.rx_overtakes,
                c.rx_reserved,
                c.rx_low_water
            ));
            if let Some((rx, tx)) = self.handle.queue_counters(p) {
                summary.push_str(&format!(
                    " rx_kicks={} rx_notifications={} rx_suppressed={} rx_held={} rx_timer_fires={} tx_notifications={} tx_held={} tx_timer_fires={} tx_kicks={} tx_poll_hits={} tx_poll_misses={}",
                    rx.kicks, rx.notifications, rx.suppressed, rx.held, rx.timer_fires, tx.notifications, tx.held, tx.timer_fires, tx.kicks, tx.poll_hits, tx.poll_misses
                ));
            }
            summary.push('\n');
        }
        if let Some(t) = self.thread.take() {
            let start = Instant::now();
            while !t.is_finished() {
                anyhow::ensure!(
                    start.elapsed() < Duration::from_secs(10),
                    "serve-net did not stop"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            t.join()
                .map_err(|_| anyhow::anyhow!("serve-net panicked"))?
                .context("serve-net")?;
        }
        Ok(summary)
    }
}

/// How the in-process switch connects `ports` ports: fixed pairs (p <-> p ^ 1, testpmd's
/// `io` forwarding) for an even number; MAC learning for an odd one, where a pair would
/// leave a port without a partner (the 3-port mix routes 0 -> 1, 1 -> 2 and 2 -> 1). netload
/// learns every address with its path probes before a run (`await_paths`).
pub fn switch_for(ports: usize) -> SwitchMode {
    if ports % 2 == 0 {
        SwitchMode::Pairs
    } else {
        SwitchMode::Learn
    }
}

impl Drop for VmirqPeer {
    fn drop(&mut self) {
        self.handle.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// testpmd's polling virtio-user loopback through each peer, interleaved `repeat` times;
/// prints each peer's packets/s and the vmirq/testpmd ratio of each repeat.
pub fn loopback(peers: &[Target], repeat: usize, seconds: u32) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("vmirq-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut pps: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    for r in 0..repeat.max(1) {
        for (i, peer) in peers.iter().enumerate() {
            let median = match peer {
                Target::Testpmd => loopback_reference(&dir, seconds)
                    .context("loopback through testpmd")?
                    .median_pps(),
                Target::Vmirq(policies) => {
                    let srv = VmirqPeer::start(&dir, 2, *policies, &[])?;
                    let res = loopback_client(&dir, &srv.sockets, seconds);
                    let summary = srv.stop()?;
                    eprint!("{summary}");
                    res.context("loopback through vmirq serve-net")?
                        .median_pps()
                }
            };
            #[allow(clippy::cast_precision_loss)] // packet rates are far below 2^52
            pps[i].push(median as f64);
            eprintln!("loopback run {r} through {}: {median} pps", peer.label());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("testpmd virtio-user loopback (64 B, polling client), packets/s median [min..max]:");
    for (i, peer) in peers.iter().enumerate() {
        if let Some(s) = Spread::of(pps[i].clone()) {
            println!(
                "  {:<8} {:.0} [{:.0}..{:.0}]",
                peer.label(),
                s.median,
                s.min,
                s.max
            );
        }
    }
    print_ratio(peers, &pps, "loopback packets/s");
    Ok(())
}

/// Print every target against the first, per repeat (median [min..max]).
pub fn print_ratio(peers: &[Target], per_peer: &[Vec<f64>], what: &str) {
    let Some(base) = per_peer.first() else {
        return;
    };
    for (i, peer) in peers.iter().enumerate().skip(1) {
        let ratios: Vec<f64> = per_peer[i]
            .iter()
            .zip(base)
            .filter(|(_, b)| **b > 0.0)
            .map(|(v, b)| v / b)
            .collect();
        if let Some(s) = Spread::of(ratios) {
            println!(
                "  {}/{} {what}: {:.3}x [{:.3}..{:.3}] over {} interleaved repeats",
                peer.label(),
                peers[0].label(),
                s.median,
                s.min,
                s.max,
                per_peer[i].len().min(base.len())
            );
        }
    }
}
