//! Network receive workload: a bulk stream at a link rate (iperf-like, MTU-sized packets)
//! and/or short request/response messages, received by the guest's NAPI poll on vCPU 0.

use crate::host::{Core, Ev, Hook, Pkt, Result, Work};
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// Network receive parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetRxConfig {
    /// Bulk stream rate in Mbit/s on this queue (0 = no bulk stream).
    pub bulk_mbps: u64,
    /// Bulk packet size (MTU) in bytes.
    pub mtu: u32,
    /// Packets the bulk sender puts on the wire back to back (one TSO/GSO frame segmented by
    /// the sender's NIC; 1 = evenly spaced packets). Linux sizes a TSO frame to about 1 ms of
    /// the pacing rate, capped at `GSO_MAX_SIZE` (64 KiB) (`tcp_tso_autosize`,
    /// net/ipv4/tcp_output.c): at 13 Gbit/s the cap binds, 65,536 / 8,948 (MSS at MTU 9000)
    /// = 7 segments.
    #[serde(default = "one")]
    pub tso_pkts: u32,
    /// Wire rate of the sender's link within a burst, Gbit/s (0 = the stream's own rate,
    /// i.e. no bursts).
    #[serde(default)]
    pub link_gbps: u64,
    /// Bulk stream window in packets (a TCP-like sender: at most this many unacknowledged
    /// packets; 0 = open loop at the link rate).
    #[serde(default)]
    pub window_pkts: u32,
    /// Time for an ACK to reach the bulk sender after the guest processed a packet, µs.
    #[serde(default = "ack_us")]
    pub ack_us: u64,
    /// Short request/response flow from an external client, closed loop: the next request
    /// is sent this mean time (exponential; wire + client) after the guest consumed the
    /// previous one, in microseconds (0 = no short flow).
    #[serde(default)]
    pub short_gap_us: u64,
    /// The short flow's gap is exactly `short_gap_us` (a ping-pong client without jitter)
    /// instead of exponential with that mean. An analysis knob: no bundled scenario sets it.
    #[serde(default)]
    pub short_gap_fixed: bool,
    /// Short message size in bytes.
    #[serde(default = "short_bytes")]
    pub short_bytes: u32,
    /// Guest CPU per bulk packet (virtio-net RX, GRO, TCP, copy), ns.
    pub rx_pkt_ns: Nanos,
    /// Guest CPU per short packet, ns.
    pub short_pkt_ns: Nanos,
    /// Guest CPU per interrupt beyond the IDT entry (handler, NAPI schedule, softirq), ns.
    pub irq_ns: Nanos,
    /// RX ring size (buffers posted).
    #[serde(default = "ring")]
    pub ring: u32,
    /// NAPI budget (packets per poll).
    #[serde(default = "budget")]
    pub budget: u32,
    /// The device notifies once and then waits for the guest's NAPI to re-arm the queue
    /// (EVENT_IDX, or virtio 1.4's proposed coalescing re-arm; `crate::host::nic`). False
    /// (the talk's device: EVENT_IDX is "hard for PCI hardware", seeds.md §5): it notifies
    /// until the guest's handler suppresses notifications.
    #[serde(default)]
    pub notify_one_shot: bool,
}

fn one() -> u32 {
    1
}
fn short_bytes() -> u32 {
    128
}
fn ack_us() -> u64 {
    20
}
fn ring() -> u32 {
    1024
}
fn budget() -> u32 {
    64
}

const BULK: u32 = 40;
const SHORT: u32 = 41;
const NAPI: u32 = 42;
const BATCH: u32 = 43;
const ACK: u32 = 44;

/// Running network receiver.
#[derive(Debug, Clone)]
pub struct NetRx {
    cfg: NetRxConfig,
    napi: bool,
    batch: Vec<Pkt>,
    unacked: u32,
    sender_waiting: bool,
    /// Packets left in the current sender burst.
    burst_left: u32,
    /// When the next burst may start (keeps the stream's average rate).
    next_burst: Nanos,
}

impl NetRx {
    /// Build.
    #[must_use]
    pub fn new(cfg: NetRxConfig) -> Self {
        Self {
            cfg,
            napi: false,
            batch: Vec::new(),
            unacked: 0,
            sender_waiting: false,
            burst_left: 0,
            next_burst: 0,
        }
    }

    fn bulk_gap(&self) -> Nanos {
        (u64::from(self.cfg.mtu) * 8_000).div_ceil(self.cfg.bulk_mbps.max(1))
    }

    /// Gap before the short flow's next request: exponential with mean `short_gap_us`, or
    /// exactly that with `short_gap_fixed`.
    fn short_gap(&self, core: &mut Core) -> Nanos {
        let mean = self.cfg.short_gap_us * 1_000;
        if self.cfg.short_gap_fixed {
            mean
        } else {
            core.rng.exp_ns(mean)
        }
    }

    /// Gap to the sender's next packet after one was sent at `now`: the wire time at the
    /// link rate inside a burst, else the wait that keeps the average at `bulk_mbps`.
    fn next_send(&mut self, now: Nanos) -> Nanos {
        let tso = self.cfg.tso_pkts.max(1);
        if tso == 1 || self.cfg.link_gbps == 0 {
            return self.bulk_gap();
        }
        if self.burst_left == 0 {
            // this packet opened a burst
            self.burst_left = tso;
            self.next_burst = self.next_burst.max(now) + u64::from(tso) * self.bulk_gap();
        }
        self.burst_left -= 1;
        if self.burst_left > 0 {
            (u64::from(self.cfg.mtu) * 8).div_ceil(self.cfg.link_gbps)
        } else {
            self.next_burst.saturating_sub(now).max(1)
        }
    }

    pub(super) fn start(&mut self, core: &mut Core) -> Result<()> {
        core.nics[0].one_shot = self.cfg.notify_one_shot;
        core.nic_refill(0, self.cfg.ring);
        if self.cfg.bulk_mbps > 0 {
            core.q.schedule_in(self.bulk_gap(), Ev::Workload(BULK, 0))?;
        }
        if self.cfg.short_gap_us > 0 {
            let gap = self.short_gap(core);
            core.q.schedule_in(gap, Ev::Workload(SHORT, 0))?;
        }
        core.dispatch(0)
    }

    pub(super) fn timer(&mut self, core: &mut Core, tag: u32) -> Result<()> {
        let now = core.now();
        match tag {
            BULK => {
                let w = self.cfg.window_pkts;
                if w > 0 && self.unacked >= w {
                    self.sender_waiting = true; // window full: wait for an ACK
                    return Ok(());
                }
                self.unacked += 1;
                let gap = self.next_send(now);
                core.q.schedule_in(gap, Ev::Workload(BULK, 0))?;
                core.nic_rx(
                    0,
                    Pkt {
                        arrived: now,
                        bytes: self.cfg.mtu,
                        short: false,
                    },
                )
            }
            ACK => {
                self.unacked = self.unacked.saturating_sub(1);
                if self.sender_waiting {
                    self.sender_waiting = false;
                    core.q.schedule_in(0, Ev::Workload(BULK, 0))?;
                }
                Ok(())
            }
            SHORT => core.nic_rx(
                0,
                Pkt {
                    arrived: now,
                    bytes: self.cfg.short_bytes,
                    short: true,
                },
            ),
            _ => Ok(()),
        }
    }

    /// Take the next batch from the ring, or end NAPI (re-enabling interrupts).
    fn next_batch(&mut self, core: &mut Core) {
        let n = core.nics[0].ring.len().min(self.cfg.budget as usize);
        if n == 0 {
            self.napi = false;
            core.nics[0].suppressed = false;
            return;
        }
        self.batch = core.nics[0].ring.drain(..n).collect();
        let cost: Nanos = self
            .batch
            .iter()
            .map(|p| {
                if p.short {
                    self.cfg.short_pkt_ns
                } else {
                    self.cfg.rx_pkt_ns
                }
            })
            .sum();
        core.vcpus[0].work.push_back(Work::app(cost, BATCH));
    }

    pub(super) fn hook(&mut self, core: &mut Core, hook: Hook) -> Result<()> {
        let now = core.now();
        match hook {
            Hook::Irq(0, _) => {
                core.metrics.count("guest_interrupts");
                if !self.napi {
                    self.napi = true;
                    core.nics[0].suppressed = true;
                    core.vcpus[0]
                        .work
                        .push_back(Work::app(self.cfg.irq_ns, NAPI));
                }
            }
            Hook::App(0, NAPI) => self.next_batch(core),
            Hook::App(0, BATCH) => {
                let batch = std::mem::take(&mut self.batch);
                for p in &batch {
                    core.metrics.add("rx_bytes", u64::from(p.bytes));
                    if p.short {
                        core.metrics.sample("short_latency_ns", now - p.arrived);
                        core.metrics.count("short_msgs");
                        let gap = self.short_gap(core);
                        core.q.schedule_in(gap, Ev::Workload(SHORT, 0))?;
                    } else if self.cfg.window_pkts > 0 {
                        core.q
                            .schedule_in(self.cfg.ack_us * 1_000, Ev::Workload(ACK, 0))?;
                    }
                }
                core.metrics.sample("pkts_per_poll", batch.len() as u64);
                core.nic_refill(0, u32::try_from(batch.len()).unwrap_or(u32::MAX));
                self.next_batch(core);
            }
            _ => {}
        }
        Ok(())
    }
}
