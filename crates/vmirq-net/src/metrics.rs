//! serve-net's Prometheus text (`--metrics`, served by vmirq-vhost's endpoint as
//! `vmirq serve` does): every port's switch counters, every queue's generic counters, and
//! with `--datapath pmd` the forwarding thread's.
//!
//! Names and labels:
//! - `vmirq_net_port_<counter>_total{port="P"}`: [`crate::counters::PortCounters`];
//! - `vmirq_net_<counter>_total{port="P",queue="Q"}`: the queue counters of virtqueue `Q`
//!   (RX of pair `i` is `2i`, TX `2i + 1`; `vmirq_queue_broken_total` as for every device);
//! - `vmirq_net_pmd_<counter>_total`: [`crate::pmd::PmdCounters`] (`passes`, `idle_passes`:
//!   passes over every port that found nothing, the empty polls; `chains`: frames taken;
//!   `sleeps`, `wakeups`, `cpu_ns`), `vmirq_net_pmd_busy_passes_total` (passes that moved
//!   frames: frames per busy pass is `chains / busy_passes`), and the thread's kick-wait
//!   counters as `vmirq_net_pmd_<counter>_total` (`poll_hits`, `poll_misses`, ...).

use crate::server::ServerHandle;
use std::fmt::Write as _;
use std::net::SocketAddr;
use vmirq_vhost::counters::{metric_name, CounterFields, QueueSnapshot};

/// Host of `--metrics PORT`.
pub const DEFAULT_HOST: [u8; 4] = [127, 0, 0, 1];

/// `--metrics`: `PORT` (loopback) or `HOST:PORT`.
///
/// # Errors
/// A message saying what was expected.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from((DEFAULT_HOST, port)));
    }
    s.parse()
        .map_err(|_| format!("invalid metrics address {s:?} (expected PORT or HOST:PORT)"))
}

/// The Prometheus text of a running server.
#[must_use]
pub fn prometheus(h: &ServerHandle) -> String {
    let mut out = String::new();
    let ports = h.counters();
    if let Some(first) = ports.first() {
        for (i, (name, _)) in first.pairs().into_iter().enumerate() {
            let metric = format!("vmirq_net_port_{name}_total");
            let _ = writeln!(out, "# TYPE {metric} counter");
            for (p, c) in ports.iter().enumerate() {
                let _ = writeln!(out, "{metric}{{port=\"{p}\"}} {}", c.pairs()[i].1);
            }
        }
    }
    let queues: Vec<(usize, usize, QueueSnapshot)> = (0..ports.len())
        .flat_map(|p| {
            (0..h.pairs(p))
                .filter_map(move |q| h.pair_counters(p, q).map(|c| (p, q, c)))
                .flat_map(|(p, q, (rx, tx))| [(p, 2 * q, rx), (p, 2 * q + 1, tx)])
        })
        .collect();
    for (i, (name, _)) in QueueSnapshot::default().fields().into_iter().enumerate() {
        let metric = metric_name("vmirq_net", name);
        let _ = writeln!(out, "# TYPE {metric} counter");
        for (p, vq, c) in &queues {
            let v = c.fields()[i].1;
            let _ = writeln!(out, "{metric}{{port=\"{p}\",queue=\"{vq}\"}} {v}");
        }
    }
    if let Some((pmd, polls)) = h.pmd_counters() {
        let busy = pmd.passes.saturating_sub(pmd.idle_passes);
        let fields = [
            ("passes", pmd.passes),
            ("idle_passes", pmd.idle_passes),
            ("busy_passes", busy),
            ("chains", pmd.chains),
            ("busy_ns", pmd.busy_ns),
            ("slow_passes", pmd.slow_passes),
            ("sleeps", pmd.sleeps),
            ("wakeups", pmd.wakeups),
            ("cpu_ns", pmd.cpu_ns),
        ];
        for (name, v) in fields.into_iter().chain(polls.fields()) {
            let metric = format!("vmirq_net_pmd_{name}_total");
            let _ = writeln!(out, "# TYPE {metric} counter\n{metric} {v}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parse_addr;
    use std::net::SocketAddr;

    #[test]
    fn a_port_alone_binds_loopback() {
        assert_eq!(
            parse_addr("9100"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 9100)))
        );
        assert!(parse_addr("0.0.0.0:80").is_ok());
        assert!(parse_addr("nope").is_err());
    }
}
