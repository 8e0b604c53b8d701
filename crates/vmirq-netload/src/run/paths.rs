//! Before a run: make sure frames cross the peer in both directions of every port pair.

use super::{port_err, Result, RunError, HELLO_FLOW, PATH_TIMEOUT};
use crate::frame::{self, Encap, Pattern, Probe};
use crate::port::NetPort;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Wait until frames cross the peer in both directions of every port pair (0 <-> 1,
/// 2 <-> 3, ...). A vhost-user backend acknowledges the last ring message before it has
/// necessarily started switching the device's packets (DPDK's vhost PMD turns queuing on
/// after replying), and vhost-user has no link-status message, so the client probes: one
/// small hello frame (the shortest of the sending port's encapsulation) per millisecond
/// until one arrives. Returns the hellos sent and received: the peer drops those sent
/// before it switched the port on.
///
/// # Errors
/// [`RunError::NoPath`] after [`PATH_TIMEOUT`], or a port error.
pub fn await_paths(ports: &mut [NetPort]) -> Result<Hellos> {
    let mut hellos = Hellos::default();
    let pattern = Pattern::new();
    let mut scratch = Vec::new();
    let pairs = ports.len() / 2;
    for (from, to) in (0..pairs).flat_map(|i| [(2 * i, 2 * i + 1), (2 * i + 1, 2 * i)]) {
        let start = Instant::now();
        let mut seq = 0;
        loop {
            let mut arrived = 0;
            ports[to]
                .receive(64, &mut scratch, &mut |f| {
                    if let Ok((encap, p)) = frame::parse_encap(f, &pattern, false) {
                        if is_hello(&p) {
                            arrived += 1;
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
