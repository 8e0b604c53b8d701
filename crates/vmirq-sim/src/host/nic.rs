//! A NIC receive queue (virtio-net / vDPA RX) with posted buffers and a completion
//! moderation policy at the device (hypervisor-side or device-offloaded DIM). While the
//! guest's NAPI poll runs it suppresses interrupts (as virtio-net does), so the policy's
//! notifications during NAPI are not delivered.
//!
//! With [`NicDev::one_shot`] the device itself stops after each notification it delivers
//! until NAPI re-arms the queue (`VIRTIO_F_RING_EVENT_IDX`: no signal before the used index
//! crosses the driver's `used_event`, which the driver moves only when it re-enables
//! callbacks; virtio 1.x §2.7.10), instead of notifying until the guest's handler has run.

use super::moderated::QueueTarget;
use super::{Core, Ev, Result, VcpuId};
use crate::engine::Timer;
use crate::Nanos;
use std::collections::VecDeque;
use vmirq_policy::moderation::{
    CompletionMeta, Decision, Event, Moderation, Moderator, RequestKind,
};

/// One received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pkt {
    /// Arrival at the device.
    pub arrived: Nanos,
    /// Bytes.
    pub bytes: u32,
    /// Part of a short request/response message (latency-sensitive).
    pub short: bool,
}

/// A NIC RX queue.
#[derive(Debug, Clone)]
pub struct NicDev {
    /// Moderation policy at the device.
    pub policy: Moderation,
    /// vCPU that handles the queue.
    pub vcpu: VcpuId,
    /// Received packets not yet taken by the guest.
    pub ring: VecDeque<Pkt>,
    /// Guest NAPI is polling: interrupts are suppressed.
    pub suppressed: bool,
    /// RX buffers the guest has posted.
    pub posted: u32,
    /// One-shot notifications: a delivered notification suppresses the next ones until the
    /// guest re-arms (clears [`NicDev::suppressed`] at NAPI's end). False: the device keeps
    /// notifying until the guest's handler suppresses.
    pub one_shot: bool,
    timer: Timer,
    last_knob: Option<i64>,
}

impl NicDev {
    /// A queue with `buffers` posted RX buffers.
    #[must_use]
    pub fn new(policy: Moderation, vcpu: VcpuId) -> Self {
        Self {
            policy,
            vcpu,
            ring: VecDeque::new(),
            suppressed: false,
            posted: 0,
            one_shot: false,
            timer: Timer::default(),
            last_knob: None,
        }
    }
}

impl Core {
    /// The guest posts `n` RX buffers on NIC queue `q`.
    pub fn nic_refill(&mut self, q: usize, n: u32) {
        let now = self.now();
        let nic = &mut self.nics[q];
        nic.posted += n;
        for _ in 0..n {
            let _ = nic.policy.on_event(now, Event::Submit);
        }
    }

    /// A packet arrives at NIC queue `q`.
    pub fn nic_rx(&mut self, q: usize, pkt: Pkt) -> Result<()> {
        let now = self.now();
        if self.nics[q].posted == 0 {
            self.metrics.count("rx_drops");
            return Ok(());
        }
        self.nics[q].posted -= 1;
        self.nics[q].ring.push_back(pkt);
        let mut meta = CompletionMeta::new(RequestKind::Read, pkt.bytes);
        if pkt.short {
            meta = meta.with(CompletionMeta::SYNC);
        }
        let dec = self.nics[q].policy.on_event(now, Event::Complete(meta));
        self.nic_knob(q);
        self.nic_apply(q, dec)
    }

    /// The moderation timer of queue `q` fired.
    pub fn nic_timer(&mut self, q: usize) -> Result<()> {
        let now = self.now();
        self.nics[q].timer.fired();
        let dec = self.nics[q].policy.on_event(now, Event::Timer);
        self.nic_apply(q, dec)
    }

    fn nic_knob(&mut self, q: usize) {
        let knob = self.nics[q].policy.knob();
        let mut last = self.nics[q].last_knob;
        self.record_knob_point(knob, &mut last);
        self.nics[q].last_knob = last;
    }

    fn nic_apply(&mut self, q: usize, dec: Decision) -> Result<()> {
        let target = QueueTarget {
            vcpu: self.nics[q].vcpu,
            queue: q,
            timer_event: Ev::NicTimer(q),
            sent_metric: "nic_irqs",
            suppressed_metric: self.nics[q].suppressed.then_some("nic_irqs_suppressed"),
        };
        self.nics[q].timer = self.apply_moderation(self.nics[q].timer, dec, target)?;
        if dec == Decision::Notify && self.nics[q].one_shot {
            // Delivered (or already suppressed): nothing more until the guest re-arms.
            self.nics[q].suppressed = true;
        }
        Ok(())
    }
}
