//! Devices: a storage device with internal parallelism and a service-time distribution,
//! whose completion notifications go through a vmirq-policy [`Moderation`] at the virtual
//! device (the hypervisor side), exactly as the real backend does.

use super::moderated::QueueTarget;
use super::{Core, Ev, Result, VcpuId};
use crate::engine::Timer;
use crate::rng::Rng;
use crate::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use vmirq_policy::moderation::{
    CompletionMeta, Decision, Event, Moderation, Moderator, RequestKind,
};

/// Service-time distribution of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Latency {
    /// Always `us`.
    Fixed {
        /// Microseconds.
        us: u64,
    },
    /// `min_us` plus an exponential part with mean `exp_us` (a fast path plus queueing or
    /// seek variation inside the device).
    ShiftedExp {
        /// Minimum in microseconds.
        min_us: u64,
        /// Mean of the exponential part in microseconds.
        exp_us: u64,
    },
}

impl Latency {
    /// Draw one service time.
    pub fn draw(&self, rng: &mut Rng) -> Nanos {
        match *self {
            Latency::Fixed { us } => us * 1_000,
            Latency::ShiftedExp { min_us, exp_us } => min_us * 1_000 + rng.exp_ns(exp_us * 1_000),
        }
    }
}

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    /// When the guest started submitting it.
    pub submitted: Nanos,
    /// Payload bytes.
    pub bytes: u32,
    /// Kind.
    pub kind: RequestKind,
}

/// A storage device and its virtual queue.
#[derive(Debug, Clone)]
pub struct StorageDev {
    /// Requests served at once.
    pub parallelism: u32,
    /// Service time.
    pub latency: Latency,
    /// The completion moderation policy at the virtual device.
    pub policy: Moderation,
    /// vCPU that receives this device's interrupts.
    pub vcpu: VcpuId,
    /// Completions in the used ring not yet consumed by the guest.
    pub ring: VecDeque<Req>,
    waiting: VecDeque<Req>,
    in_service: u32,
    timer: Timer,
    rng: Rng,
    /// Completions ever produced (each request completes exactly once).
    pub completed: u64,
    /// Requests ever submitted.
    pub submitted: u64,
    last_knob: Option<i64>,
    /// The device thread is inside its notification `write()` until then (only with
    /// `Costs::device_notify_ns`): what falls due meanwhile is seen when it returns.
    busy_until: Nanos,
}

impl StorageDev {
    /// A device.
    #[must_use]
    pub fn new(
        parallelism: u32,
        latency: Latency,
        policy: Moderation,
        vcpu: VcpuId,
        seed: u64,
    ) -> Self {
        Self {
            parallelism: parallelism.max(1),
            latency,
            policy,
            vcpu,
            ring: VecDeque::new(),
            waiting: VecDeque::new(),
            in_service: 0,
            timer: Timer::default(),
            rng: Rng::new(seed, 7),
            completed: 0,
            submitted: 0,
            last_knob: None,
            busy_until: 0,
        }
    }

    /// Requests submitted and not yet completed by the device.
    #[must_use]
    pub fn outstanding(&self) -> u64 {
        self.submitted - self.completed
    }
}

impl Core {
    /// The device emulation received request `req` (after the guest's kick exit; or, for a
    /// device that polls the ring, when the guest published it, and not before the device
    /// thread is back from a notification `write()`).
    pub fn io_submit(&mut self, d: usize, req: Req) -> Result<()> {
        let now = self.now();
        let dev = &mut self.devs[d];
        dev.submitted += 1;
        let _ = dev.policy.on_event(now, Event::Submit);
        let seen_in = dev.busy_until.saturating_sub(now);
        if dev.in_service < dev.parallelism {
            dev.in_service += 1;
            let t = dev.latency.draw(&mut dev.rng);
            self.q.schedule_in(seen_in + t, Ev::IoDone(d, req))?;
        } else {
            dev.waiting.push_back(req);
        }
        Ok(())
    }

    /// The device finished `req`: host completion handling, then the moderation policy.
    pub fn io_done(&mut self, d: usize, req: Req) -> Result<()> {
        let now = self.now();
        let dev = &mut self.devs[d];
        if now < dev.busy_until {
            // Due while the device thread is in its `write()`: completed when it returns,
            // in order (events at one instant run in the order they were scheduled).
            let at = dev.busy_until;
            self.q.schedule_at(at, Ev::IoDone(d, req))?;
            return Ok(());
        }
        dev.in_service -= 1;
        dev.completed += 1;
        if let Some(next) = dev.waiting.pop_front() {
            dev.in_service += 1;
            let t = dev.latency.draw(&mut dev.rng);
            self.q.schedule_in(t, Ev::IoDone(d, next))?;
        }
        self.metrics.add("host_io_ns", self.costs.host_irq_ns);
        self.devs[d].ring.push_back(req);
        let meta = CompletionMeta::new(req.kind, req.bytes).with(CompletionMeta::CROSS_CPU);
        let dec = self.devs[d].policy.on_event(now, Event::Complete(meta));
        self.record_knob(d);
        self.apply_decision(d, dec)
    }

    /// The moderation timer fired.
    pub fn mod_timer(&mut self, d: usize) -> Result<()> {
        let now = self.now();
        self.devs[d].timer.fired();
        if now < self.devs[d].busy_until {
            // The device thread checks its timer after its `write()` returns.
            let at = self.devs[d].busy_until;
            let mut timer = self.devs[d].timer;
            timer.arm(&mut self.q, at, Ev::ModTimer(d))?;
            self.devs[d].timer = timer;
            return Ok(());
        }
        let dec = self.devs[d].policy.on_event(now, Event::Timer);
        self.apply_decision(d, dec)
    }

    /// Record the policy's knob when it changes (e.g. the vIC ratio over time).
    fn record_knob(&mut self, d: usize) {
        let knob = self.devs[d].policy.knob();
        let mut last = self.devs[d].last_knob;
        self.record_knob_point(knob, &mut last);
        self.devs[d].last_knob = last;
    }

    fn apply_decision(&mut self, d: usize, dec: Decision) -> Result<()> {
        if dec == Decision::Notify && self.costs.device_notify_ns > 0 {
            // The device thread's own irqfd `write()`: an IPI inside it when the vCPU runs
            // guest code, else only the signal and KVM's injection.
            let v = self.devs[d].vcpu;
            let ns = if self.runs_guest_code(v) {
                self.costs.device_notify_ns
            } else {
                self.costs.irqfd_inject_ns
            };
            let now = self.now();
            self.devs[d].busy_until = now + ns;
            self.metrics.add("device_notify_write_ns", ns);
        }
        let target = QueueTarget {
            vcpu: self.devs[d].vcpu,
            queue: d,
            timer_event: Ev::ModTimer(d),
            sent_metric: "notifications",
            suppressed_metric: None,
        };
        self.devs[d].timer = self.apply_moderation(self.devs[d].timer, dec, target)?;
        Ok(())
    }
}
