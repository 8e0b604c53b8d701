//! What one run measured: rates, round-trip latency, interrupts, wakeups, kicks and client
//! CPU per packet over the measured window; loss and errors over the whole run.

use super::Mode;
use crate::frame::{Encap, EncapCounts};
use crate::port::{Faults, PortCounters};
use crate::workload::Workload;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::fmt::Write as _;

/// Counters of the whole client at one instant.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Nanoseconds since the run started.
    pub t_ns: u64,
    /// Client thread CPU time.
    pub cpu_ns: u64,
    /// Sum over ports.
    pub ports: PortCounters,
    /// Bulk frames received.
    pub bulk_received: u64,
    /// Transactions completed.
    pub rr_completed: u64,
    /// Sleeps ended by a call eventfd.
    pub wakeups: u64,
    /// Sleeps ended by the timeout (pacing or phase end).
    pub timer_wakeups: u64,
    /// Halts of the client (`--halt-poll`; 0 without it).
    pub halts: u64,
    /// Halts its poll window ended (no sleep).
    pub halts_caught: u64,
    /// Time the client spent polling in its halts (ns).
    pub halt_polled_ns: u64,
    /// Whole-machine (busy, total) CPU ticks.
    pub machine_ticks: Option<(u64, u64)>,
    /// CPU time of the backend process (all threads), if its pid was given.
    pub backend_cpu_ns: Option<u64>,
    /// Device signals (RX and TX call eventfds) of each port, in port order.
    pub port_calls: Vec<u64>,
}

/// Frames the client could not use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FrameErrors {
    /// Not probe frames.
    pub foreign: u64,
    /// Probe frames with a wrong length, IPv4/UDP header, payload or trailer.
    pub invalid: u64,
    /// Probe frames on a port or flow they were not sent to.
    pub misrouted: u64,
}

impl FrameErrors {
    /// Sum.
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.foreign + self.invalid + self.misrouted
    }
}

/// Latency percentiles in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// Mean.
    pub mean_ns: f64,
}

/// The percentiles of a half of the round trip, `None` when nothing was split.
fn halve(h: &Histogram<u64>) -> Option<Latency> {
    (!h.is_empty()).then(|| Latency::of(h))
}

impl Latency {
    /// Percentiles of `h`.
    #[must_use]
    pub fn of(h: &Histogram<u64>) -> Self {
        Self {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
            mean_ns: h.mean(),
        }
    }
}

/// The bulk stream's results.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BulkReport {
    /// Frame length.
    pub frame_len: u32,
    /// Frames received in the measured window.
    pub frames: u64,
    /// Their rate.
    pub pps: f64,
    /// Their bit rate (Ethernet frame bytes, no preamble or FCS).
    pub gbit_s: f64,
    /// Frames sent over the whole run.
    pub sent: u64,
    /// Frames received over the whole run.
    pub received: u64,
    /// Sent and never received (after draining).
    pub lost: u64,
    /// Received after a later frame of the flow.
    pub out_of_order: u64,
    /// Frames a paced sender skipped because the client fell behind.
    pub pace_slips: u64,
    /// Device signals on the stream's two ports in the window, when no other flow uses
    /// them (the mix on separate queues); `None` on shared queues.
    pub interrupts: Option<u64>,
    /// Those signals per stream frame received.
    pub interrupts_per_packet: Option<f64>,
}

/// The request/response flow's results.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RrReport {
    /// Request and response length.
    pub frame_len: u32,
    /// Transactions completed in the measured window.
    pub transactions: u64,
    /// Their rate.
    pub per_s: f64,
    /// Round-trip time, request sent to response received.
    pub rtt: Latency,
    /// Requests never answered (after draining).
    pub lost: u64,
    /// Responses that answered nothing outstanding.
    pub unexpected: u64,
    /// Requests another thread answered over the whole run (the wire on two ports, the
    /// responder on three); `None` when the client's own port answers.
    pub answered: Option<u64>,
    /// Device signals on the flow's two ports in the window, when no other flow uses them
    /// (the mix on separate queues); `None` on shared queues.
    pub interrupts: Option<u64>,
    /// Those signals per message packet (a request and a response per transaction).
    pub interrupts_per_packet: Option<f64>,
    /// Frames the client read from the response's port before the response, since it last
    /// found that port's ring empty: median and 90th percentile ([`super::msgpath`]).
    pub frames_ahead_p50: Option<u64>,
    /// See `frames_ahead_p50`.
    pub frames_ahead_p90: Option<u64>,
    /// Time from the client's last wakeup to reading the response.
    pub wake_to_read: Latency,
    /// Frames the client read from all its ports while a message was in flight (from
    /// sending the request to reading its response): median and 90th percentile.
    pub frames_in_flight_p50: Option<u64>,
    /// See `frames_in_flight_p50`.
    pub frames_in_flight_p90: Option<u64>,
    /// When another thread answers ([`super::halves`]): request sent to read by the far
    /// end; `None` otherwise.
    pub out: Option<Latency>,
    /// Request read by the far end to its response queued.
    pub far: Option<Latency>,
    /// Response queued by the far end to read by the client.
    pub back: Option<Latency>,
}

/// The client's halt polling in the window (`--halt-poll`, [`super::halt`]).
#[derive(Debug, Clone, Serialize)]
pub struct HaltPollReport {
    /// The wait policy's name.
    pub policy: &'static str,
    /// Halts (the client had nothing to do and would sleep).
    pub halts: u64,
    /// Halts its poll window ended without a sleep (a signal or its own timer came).
    pub caught: u64,
    /// Time polled per halt (ns).
    pub polled_ns_per_halt: f64,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What ran.
    pub workload: Workload,
    /// Interrupt or poll mode.
    pub mode: Mode,
    /// Encapsulation of the frames sent (`raw` or `udp`).
    pub frames: Encap,
    /// Valid probe frames the client thread received over the whole run (path probes
    /// after [`super::await_paths`] included), by encapsulation.
    pub received_frames: EncapCounts,
    /// Negotiated virtio features of the first port.
    pub features: Vec<&'static str>,
    /// Measured window.
    pub measured_ns: u64,
    /// Frames received by all ports in the window.
    pub packets: u64,
    /// Their rate.
    pub pps: f64,
    /// Their bit rate.
    pub gbit_s: f64,
    /// Bulk stream, if the workload has one.
    pub bulk: Option<BulkReport>,
    /// Request/response flow, if the workload has one.
    pub rr: Option<RrReport>,
    /// Device signals on all call eventfds (the guest's interrupts).
    pub interrupts: u64,
    /// Interrupts per received packet.
    pub interrupts_per_packet: f64,
    /// Device signals of each port in the window, in port order.
    pub port_interrupts: Vec<u64>,
    /// Sleeps ended by a call eventfd.
    pub wakeups: u64,
    /// Wakeups per received packet.
    pub wakeups_per_packet: f64,
    /// Sleeps ended by a timeout.
    pub timer_wakeups: u64,
    /// The client's halt polling (`--halt-poll`), if it had one.
    pub halt_poll: Option<HaltPollReport>,
    /// Kicks the client wrote.
    pub kicks: u64,
    /// Kicks per sent packet.
    pub kicks_per_tx_packet: f64,
    /// Client thread CPU time.
    pub client_cpu_ns: u64,
    /// Client CPU per received packet.
    pub cpu_ns_per_packet: f64,
    /// Client CPU time over wall time.
    pub client_cpu_util: f64,
    /// Backend process CPU per received packet (all its threads), if its pid was given.
    pub backend_cpu_ns_per_packet: Option<f64>,
    /// Busy share of all the machine's CPUs during the window (a polling peer keeps one
    /// busy; more than peer plus client is other work: noise).
    pub machine_busy: Option<f64>,
    /// Sends refused because a TX ring was full.
    pub tx_ring_full: u64,
    /// Unusable frames.
    pub frame_errors: FrameErrors,
    /// Device faults over the whole run.
    pub faults: Faults,
    /// Longest time the client loop was away (a round, or oversleeping a timer): on a
    /// shared machine, how long other work kept it off the CPU.
    pub stall_max_ns: u64,
    /// Frames found in a receive ring only by a last look after the drain timed out: the
    /// device had written them but never signalled (0 in a sound run).
    pub unsignalled: u64,
    /// Path probes sent before the run (and received, before or during it).
    pub hellos: super::Hellos,
}

fn per(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

fn rate(n: u64, ns: u64) -> f64 {
    per(n, ns) * 1e9
}

/// Inputs of [`Report::build`] that are not snapshots.
#[derive(Debug)]
pub struct Totals<'a> {
    /// Workload.
    pub workload: Workload,
    /// Mode.
    pub mode: Mode,
    /// Encapsulation sent.
    pub frames: Encap,
    /// Frames received by encapsulation.
    pub received_frames: EncapCounts,
    /// Features of port 0.
    pub features: Vec<&'static str>,
    /// Bulk flow at the end.
    pub bulk: Option<&'a super::flows::BulkFlow>,
    /// Request/response flow at the end.
    pub rr: Option<&'a super::flows::RrFlow>,
    /// Requests another thread answered (see [`RrReport::answered`]).
    pub answered: Option<u64>,
    /// RTT histogram of the window.
    pub rtt: &'a Histogram<u64>,
    /// Where the messages' time went.
    pub msgs: &'a super::msgpath::MsgPath,
    /// Frame errors of the whole run.
    pub frame_errors: FrameErrors,
    /// Faults of the whole run.
    pub faults: Faults,
    /// Longest stall of the client loop.
    pub stall_max_ns: u64,
    /// Frames found by the last look after a timed-out drain.
    pub unsignalled: u64,
    /// The client's halt polling policy (`--halt-poll`), if it had one.
    pub halt_policy: Option<&'static str>,
    /// Path probes.
    pub hellos: super::Hellos,
}

impl Report {
    /// Combine the window's start and end snapshots with the run's totals.
    #[must_use]
    pub fn build(a: &Snapshot, b: &Snapshot, t: &Totals<'_>) -> Self {
        let ns = b.t_ns.saturating_sub(a.t_ns);
        let d = |f: fn(&PortCounters) -> u64| f(&b.ports).saturating_sub(f(&a.ports));
        let packets = d(|c| c.rx_frames);
        let bytes = d(|c| c.rx_bytes);
        let tx_packets = d(|c| c.tx_frames);
        let interrupts = d(|c| c.rx_calls + c.tx_calls);
        let kicks = d(|c| c.rx_kicks + c.tx_kicks);
        let wakeups = b.wakeups - a.wakeups;
        let cpu = b.cpu_ns.saturating_sub(a.cpu_ns);
        let port_interrupts: Vec<u64> = b
            .port_calls
            .iter()
            .enumerate()
            .map(|(i, n)| n.saturating_sub(a.port_calls.get(i).copied().unwrap_or(0)))
            .collect();
        let bulk_ports = t.bulk.map(|f| [f.tx, f.rx]);
        let rr_ports = t.rr.map(|f| [f.client, f.server]);
        // A flow's own interrupts, when its ports carry no other flow.
        let own = |mine: Option<[usize; 2]>, other: Option<[usize; 2]>| {
            let mine = mine?;
            if other.is_some_and(|o| o.iter().any(|p| mine.contains(p))) {
                return None;
            }
            let mut ports = mine.to_vec();
            ports.dedup();
            Some(
                ports
                    .iter()
                    .filter_map(|p| port_interrupts.get(*p))
                    .sum::<u64>(),
            )
        };
        let bulk_irqs = own(bulk_ports, rr_ports);
        let rr_irqs = own(rr_ports, bulk_ports);
        let bulk = t.bulk.map(|f| {
            let frames = b.bulk_received - a.bulk_received;
            BulkReport {
                frame_len: f.len,
                frames,
                pps: rate(frames, ns),
                gbit_s: rate(frames * u64::from(f.len) * 8, ns) / 1e9,
                sent: f.sent,
                received: f.received,
                lost: f.missing(),
                out_of_order: f.out_of_order,
                pace_slips: f.pace_slips,
                interrupts: bulk_irqs,
                interrupts_per_packet: bulk_irqs.map(|n| per(n, frames)),
            }
        });
        let rr = t.rr.map(|f| {
            let n = b.rr_completed - a.rr_completed;
            RrReport {
                frame_len: f.len,
                transactions: n,
                per_s: rate(n, ns),
                rtt: Latency::of(t.rtt),
                lost: f.in_flight() as u64,
                unexpected: f.unexpected,
                answered: t.answered,
                interrupts: rr_irqs,
                interrupts_per_packet: rr_irqs.map(|i| per(i, 2 * n)),
                frames_ahead_p50: t.msgs.ahead_quantile(0.5),
                frames_ahead_p90: t.msgs.ahead_quantile(0.9),
                wake_to_read: Latency::of(&t.msgs.wake_to_read),
                frames_in_flight_p50: t.msgs.in_flight_quantile(0.5),
                frames_in_flight_p90: t.msgs.in_flight_quantile(0.9),
                out: halve(&t.msgs.halves.out),
                far: halve(&t.msgs.halves.far),
                back: halve(&t.msgs.halves.back),
            }
        });
        Self {
            workload: t.workload,
            mode: t.mode,
            frames: t.frames,
            received_frames: t.received_frames,
            features: t.features.clone(),
            measured_ns: ns,
            packets,
            pps: rate(packets, ns),
            gbit_s: rate(bytes * 8, ns) / 1e9,
            bulk,
            rr,
            interrupts,
            interrupts_per_packet: per(interrupts, packets),
            port_interrupts,
            wakeups,
            wakeups_per_packet: per(wakeups, packets),
            timer_wakeups: b.timer_wakeups - a.timer_wakeups,
            halt_poll: t.halt_policy.map(|policy| {
                let halts = b.halts.saturating_sub(a.halts);
                HaltPollReport {
                    policy,
                    halts,
                    caught: b.halts_caught.saturating_sub(a.halts_caught),
                    polled_ns_per_halt: per(
                        b.halt_polled_ns.saturating_sub(a.halt_polled_ns),
                        halts,
                    ),
                }
            }),
            kicks,
            kicks_per_tx_packet: per(kicks, tx_packets),
            client_cpu_ns: cpu,
            cpu_ns_per_packet: per(cpu, packets),
            client_cpu_util: per(cpu, ns),
            backend_cpu_ns_per_packet: a
                .backend_cpu_ns
                .zip(b.backend_cpu_ns)
                .map(|(c0, c1)| per(c1.saturating_sub(c0), packets)),
            machine_busy: a
                .machine_ticks
                .zip(b.machine_ticks)
                .map(|((b0, t0), (b1, t1))| per(b1.saturating_sub(b0), t1.saturating_sub(t0))),
            tx_ring_full: d(|c| c.tx_ring_full),
            frame_errors: t.frame_errors,
            faults: t.faults,
            stall_max_ns: t.stall_max_ns,
            unsignalled: t.unsignalled,
            hellos: t.hellos,
        }
    }

    /// Lost frames of every flow (after draining).
    #[must_use]
    pub fn lost(&self) -> u64 {
        self.bulk.map_or(0, |b| b.lost) + self.rr.map_or(0, |r| r.lost)
    }

    /// A short human-readable summary (several lines).
    #[must_use]
    pub fn summary(&self) -> String {
        let mut s = String::new();
        // `raw` is not named, so summaries of runs without --frames read as before.
        let frames = match self.frames {
            Encap::Raw => "",
            Encap::Udp => ", udp frames",
        };
        let _ = writeln!(
            s,
            "{} [{}{frames}]: {:.0} pps, {:.3} Gbit/s received over {:.2} s",
            self.workload,
            self.mode.as_str(),
            self.pps,
            self.gbit_s,
            self.measured_ns as f64 / 1e9
        );
        if let Some(b) = &self.bulk {
            let _ = writeln!(
                s,
                "  bulk: {:.0} pps {:.3} Gbit/s; sent {} received {} lost {} out-of-order {} slips {}",
                b.pps, b.gbit_s, b.sent, b.received, b.lost, b.out_of_order, b.pace_slips
            );
            if let Some(ipp) = b.interrupts_per_packet {
                let _ = writeln!(s, "  bulk interrupts/pkt {ipp:.4} (its own queues)");
            }
        }
        if let Some(r) = &self.rr {
            let _ = writeln!(
                s,
                "  rr: {:.0} trans/s; rtt p50 {:.1} us p99 {:.1} us max {:.1} us; lost {} unexpected {}",
                r.per_s,
                r.rtt.p50_ns as f64 / 1e3,
                r.rtt.p99_ns as f64 / 1e3,
                r.rtt.max_ns as f64 / 1e3,
                r.lost,
                r.unexpected
            );
            if let Some(ipp) = r.interrupts_per_packet {
                let _ = writeln!(s, "  rr interrupts/pkt {ipp:.4} (its own queues)");
            }
            if let (Some(a50), Some(a90)) = (r.frames_ahead_p50, r.frames_ahead_p90) {
                let _ = writeln!(
                    s,
                    "  rr: frames read ahead of a response (backlog) p50 {a50} p90 {a90}; last wakeup to response p50 {:.1} us p90 {:.1} us",
                    r.wake_to_read.p50_ns as f64 / 1e3,
                    r.wake_to_read.p90_ns as f64 / 1e3
                );
            }
            if let (Some(f50), Some(f90)) = (r.frames_in_flight_p50, r.frames_in_flight_p90) {
                let _ = writeln!(
                    s,
                    "  rr: frames read from all ports while a message was in flight p50 {f50} p90 {f90}"
                );
            }
            if let (Some(o), Some(f), Some(b)) = (&r.out, &r.far, &r.back) {
                let us = |l: &Latency| {
                    format!(
                        "p50 {:.1} p99 {:.1} us",
                        l.p50_ns as f64 / 1e3,
                        l.p99_ns as f64 / 1e3
                    )
                };
                let _ = writeln!(
                    s,
                    "  rr halves: out (to the far end) {}; far end {}; back (to the client) {}",
                    us(o),
                    us(f),
                    us(b)
                );
            }
        }
        if self.unsignalled > 0 {
            let _ = writeln!(
                s,
                "  UNSIGNALLED: {} frames sat in a receive ring through the drain without a signal",
                self.unsignalled
            );
        }
        if let Some(busy) = self.machine_busy {
            let _ = writeln!(s, "  machine busy {:.0}% of all CPUs", busy * 100.0);
        }
        if let Some(h) = &self.halt_poll {
            let _ = writeln!(
                s,
                "  halt polling ({}): {} of {} halts caught by the poll, {:.1} us polled per halt",
                h.policy,
                h.caught,
                h.halts,
                h.polled_ns_per_halt / 1e3
            );
        }
        let _ = write!(
            s,
            "  interrupts/pkt {:.4} wakeups/pkt {:.4} (timer wakeups {}) kicks/tx-pkt {:.4} cpu {:.0} ns/pkt ({:.0}% of a CPU); tx-ring-full {}; frame errors {}; faults {}; longest stall {:.0} us",
            self.interrupts_per_packet,
            self.wakeups_per_packet,
            self.timer_wakeups,
            self.kicks_per_tx_packet,
            self.cpu_ns_per_packet,
            self.client_cpu_util * 100.0,
            self.tx_ring_full,
            self.frame_errors.total(),
            self.faults.total(),
            self.stall_max_ns as f64 / 1e3
        );
        s
    }
}
