//! The device thread: polls the guest's submit counter, completes requests after the service
//! time, and executes the completion policy's decisions (notify through the irqfd, or hold
//! with one timer).

use crate::error::{Error, Result};
use crate::guest::device::{COMPLETED, SUBMITTED, SUBMIT_RING, SUBMIT_SLOTS};
use crate::host::{rdtsc, TscClock};
use crate::memory::GuestRam;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use vmirq_policy::moderation::{
    CompletionMeta, Decision, Event, Moderation, Moderator, RequestKind,
};
use vmirq_policy::Nanos;
use vmm_sys_util::eventfd::EventFd;

/// Longest run.
const MAX_DURATION: Duration = Duration::from_secs(60);

/// What the device thread counted.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeviceCounts {
    pub(crate) submit_tsc: Vec<u64>,
    pub(crate) notifies: u64,
    /// TSC ticks the device thread spent in each irqfd `write()` (its own cost per
    /// notification, during which it polls nothing).
    pub(crate) notify_write_ticks: Vec<u64>,
    pub(crate) wall_ns: u64,
}

pub(crate) struct Engine<'a> {
    ram: &'a GuestRam,
    irqfd: &'a EventFd,
    kick: &'a EventFd,
    policy: Moderation,
    clock: TscClock,
    service_ticks: u64,
    base: u64,
    due: VecDeque<u64>,
    completed: u64,
    timer: Option<Nanos>,
    counts: DeviceCounts,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(
        ram: &'a GuestRam,
        irqfd: &'a EventFd,
        kick: &'a EventFd,
        policy: Moderation,
        clock: TscClock,
        service_ns: u64,
    ) -> Self {
        Self {
            ram,
            irqfd,
            kick,
            policy,
            clock,
            service_ticks: clock.ticks(service_ns),
            base: rdtsc(),
            due: VecDeque::new(),
            completed: 0,
            timer: None,
            counts: DeviceCounts::default(),
        }
    }

    fn now(&self, tsc: u64) -> Nanos {
        self.clock.ns(tsc.saturating_sub(self.base))
    }

    /// Poll until `duration` has passed (at most [`MAX_DURATION`]).
    pub(crate) fn run(&mut self, duration: Duration) -> Result<DeviceCounts> {
        let start = Instant::now();
        let duration = duration.min(MAX_DURATION);
        let mut spins = 0u32;
        while start.elapsed() < duration {
            let tsc = rdtsc();
            self.take_submissions(tsc)?;
            self.complete_due(tsc)?;
            let now = self.now(tsc);
            if self.timer.is_some_and(|t| t <= now) {
                self.timer = None;
                let d = self.policy.on_event(now, Event::Timer);
                self.apply(d)?;
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                // Kicks are in-kernel ioeventfd exits; the ring is polled, so just drain.
                let _ = self.kick.read();
            }
            std::hint::spin_loop();
        }
        self.counts.wall_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Ok(std::mem::take(&mut self.counts))
    }

    fn take_submissions(&mut self, tsc: u64) -> Result<()> {
        let submitted = self.ram.cell(SUBMITTED)?;
        let seen = self.counts.submit_tsc.len() as u64;
        if submitted.saturating_sub(seen) > SUBMIT_SLOTS {
            return Err(Error::Guest("submit ring overrun".into()));
        }
        for i in seen..submitted {
            let t = self.ram.load(SUBMIT_RING + (i % SUBMIT_SLOTS) * 8)?;
            self.counts.submit_tsc.push(t);
            self.due.push_back(tsc + self.service_ticks);
            let d = self.policy.on_event(self.now(tsc), Event::Submit);
            self.apply(d)?;
        }
        Ok(())
    }

    fn complete_due(&mut self, tsc: u64) -> Result<()> {
        let meta = CompletionMeta {
            kind: RequestKind::Read,
            bytes: 4096,
            flags: 0,
        };
        while self.due.front().is_some_and(|&d| d <= tsc) {
            self.due.pop_front();
            self.completed += 1;
            self.ram.set_cell(COMPLETED, self.completed)?;
            let d = self.policy.on_event(self.now(tsc), Event::Complete(meta));
            self.apply(d)?;
        }
        Ok(())
    }

    fn apply(&mut self, d: Decision) -> Result<()> {
        match d {
            Decision::Notify => {
                self.timer = None;
                self.counts.notifies += 1;
                let before = rdtsc();
                self.irqfd.write(1).map_err(Error::io("irqfd write"))?;
                self.counts
                    .notify_write_ticks
                    .push(rdtsc().saturating_sub(before));
                Ok(())
            }
            Decision::Hold { deadline } => {
                self.timer = Some(deadline);
                Ok(())
            }
            Decision::Idle => {
                self.timer = None;
                Ok(())
            }
        }
    }
}
