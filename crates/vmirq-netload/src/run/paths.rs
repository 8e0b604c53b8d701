//! Before a run: make sure frames cross the peer on every path the workload uses (both
//! directions of every port pair; with three ports 1 -> 2, 2 -> 1 and 0 -> 1).

use super::{port_err, Result, RunError, HELLO_FLOW, PATH_TIMEOUT};
use crate::frame::{self, Encap, Pattern, Probe};
use crate::port::NetPort;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Wait until frames cross the peer on every path of [`paths`] (both directions of every
/// port pair, 0 <-> 1, 2 <-> 3, ...; with three ports 1 -> 2, 2 -> 1, 0 -> 1). A vhost-user
/// backend acknowledges the last ring message before it has
/// necessarily started switching the device's packets (DPDK's vhost PMD turns queuing on
/// after replying), and vhost-user has no link-status message, so the client probes: one
/// small hello frame (the shortest of the sending port's encapsulation) per millisecond
/// until one from the path's source arrives (a hello from another port, late or flooded,
/// proves nothing about this path). Returns the hellos sent and received: the peer drops
/// those sent before it switched the port on.
///
/// A MAC-learning switch learns each port's address from these hellos, so none of the run's
/// frames is flooded: with three ports the first path's hellos are (no address is known
/// yet), and every later path goes to an address learned before it.
///
/// # Errors
/// [`RunError::NoPath`] after [`PATH_TIMEOUT`], or a port error.
pub fn await_paths(ports: &mut [NetPort]) -> Result<Hellos> {
    let mut hellos = Hellos::default();
    let pattern = Pattern::new();
    let mut scratch = Vec::new();
    for (from, to) in paths(ports.len()) {
        let start = Instant::now();
        let mut seq = 0;
        let src = ports[from].mac();
        loop {
            let mut arrived = 0;
            ports[to]
                .receive(64, &mut scratch, &mut |f| {
                    if let Ok((encap, p)) = frame::parse_encap(f, &pattern, false) {
                        if is_hello(&p) {
                            arrived += u32::from(f.get(6..12) == Some(&src[..]));
                            hellos.count(encap);
                        }
                    }
                })
                .map_err(port_err(to))?;
            ports[from].reclaim_tx().map_err(port_err(from))?;
            if arrived > 0 {
                break;
            }
            if start.elapsed() > PATH_TIMEOUT {
                return Err(RunError::NoPath { from, to });
            }
            let hello = Probe {
                kind: frame::Kind::Bulk,
                flow: HELLO_FLOW,
                seq,
                t_ns: 0,
                len: ports[from].encap().frame_len_min(),
            };
            seq += 1;
            let mac = ports[to].mac();
            if ports[from]
                .send(&hello, mac, &pattern)
                .map_err(port_err(from))?
            {
                ports[from].flush().map_err(port_err(from))?;
                hellos.sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(hellos)
}

/// The paths [`await_paths`] checks on `ports` ports, in order: both directions of every
/// pair, or with three ports (the mix's: bulk 0 -> 1, requests 1 -> 2, responses 2 -> 1)
/// 1 -> 2 first, so that a learning switch floods only those hellos, then 2 -> 1 and 0 -> 1
/// to addresses it has learned.
#[must_use]
pub fn paths(ports: usize) -> Vec<(usize, usize)> {
    if ports == 3 {
        return vec![(1, 2), (2, 1), (0, 1)];
    }
    (0..ports / 2)
        .flat_map(|i| [(2 * i, 2 * i + 1), (2 * i + 1, 2 * i)])
        .collect()
}

pub(super) fn is_hello(p: &Probe) -> bool {
    p.flow == HELLO_FLOW && p.kind == frame::Kind::Bulk
}

/// Path probes of [`await_paths`] (received ones include those arriving during the run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Hellos {
    /// Hello frames sent.
    pub sent: u64,
    /// Hello frames received.
    pub received: u64,
    /// Of those, `udp` frames.
    pub received_udp: u64,
}

impl Hellos {
    /// Count one hello received in `encap`.
    pub fn count(&mut self, encap: Encap) {
        self.received += 1;
        self.received_udp += u64::from(encap == Encap::Udp);
    }
}

#[cfg(test)]
mod tests {
    use super::paths;

    #[test]
    fn three_ports_check_the_mix_paths_learned_addresses_first() {
        assert_eq!(paths(2), [(0, 1), (1, 0)]);
        assert_eq!(paths(4), [(0, 1), (1, 0), (2, 3), (3, 2)]);
        // Each later path's destination sent on an earlier path (its address is learned).
        let p = paths(3);
        assert_eq!(p, [(1, 2), (2, 1), (0, 1)]);
        for (i, &(_, to)) in p.iter().enumerate().skip(1) {
            assert!(p[..i].iter().any(|&(from, _)| from == to), "{p:?}");
        }
    }
}
