//! `dim-loop`: DIM run by the hypervisor as a periodic control loop over a device's counters
//! (the first stage of the netdev 0x18 virtio interrupt-moderation talk).
//!
//! The device moderates a queue with `count` (virtio NOTF_COAL semantics). Every `period_ms`
//! (the talk: 10 ms) the hypervisor wakes up, reads the queue's free-running counters
//! (packets, bytes, interrupts) and feeds them to net_dim ([`NetDim`], the same state machine
//! the in-device `dim` policy runs); when net_dim moves to another profile the loop outputs the
//! profile's (max_packets, max_usecs) for the device to program. net_dim still decides only
//! once 64 interrupts have passed since its window started, so at low interrupt rates a window
//! spans several periods; the event rate of a window is measured from the interrupt counter
//! (a period holds any number of interrupts, not exactly 64).
//!
//! The loop's own cost is its wakeups: one per period whatever the traffic (the talk's ~100
//! host interrupts per second per device at 10 ms), counted by [`DimLoop::wakeups`].
//!
//! [`DimLoop`] is the bare controller for a data path that owns a periodic timer and real
//! counters:
//! ```text
//! let mut l = DimLoop::new(DimLoopConfig::default(), now);   // period_ms = 10
//! program(queue, l.profile());                                // count: net_dim's default
//! // whenever now >= l.next_wakeup() (a timerfd armed at it):
//! let c = QueueCounters { packets, bytes, interrupts };       // free-running, this queue
//! if let Some(cfg) = l.on_period(now, c) { program(queue, cfg) }   // count's reconfigure
//! l.wakeups()                                                  // the loop's own cost
//! ``` [`DimLoopQueue`] puts the controller and the device's `count` policy into one
//! [`Moderator`] (counting notifications as the device's interrupts) for callers that run
//! any policy by name, such as the simulator and the block backend.

use super::profiles::{net_table, DimDirection, DimMode, DimProfile, NET_DEFAULT_INDEX};
use super::{DimSample, NetDim};
use crate::moderation::{Count, CountConfig, Decision, Event, Knob, Moderator, Pending};
use crate::{Nanos, NS_PER_MS};

/// Default period of the loop in milliseconds (the talk's query period).
pub const DIM_LOOP_PERIOD_MS: u32 = 10;
/// Longest period accepted, in milliseconds.
pub const DIM_LOOP_PERIOD_MS_MAX: u32 = 10_000;
/// Periods [`DimLoopQueue`] replays one by one after an idle stretch before skipping ahead
/// (with unchanged counters net_dim reaches a fixed point within three periods).
const CATCH_UP_MAX: u32 = 4;

/// Parameters of the control loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DimLoopConfig {
    /// Period between two counter reads, in milliseconds (1 to [`DIM_LOOP_PERIOD_MS_MAX`]).
    pub period_ms: u32,
    /// EQE or CQE profile table (and the matching count timer start).
    pub mode: DimMode,
    /// RX or TX profile table.
    pub dir: DimDirection,
}

impl Default for DimLoopConfig {
    fn default() -> Self {
        Self {
            period_ms: DIM_LOOP_PERIOD_MS,
            mode: DimMode::Eqe,
            dir: DimDirection::Rx,
        }
    }
}

/// A queue's free-running counters as the device exports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueCounters {
    /// Packets (completions) put in the used ring.
    pub packets: u64,
    /// Bytes of those packets.
    pub bytes: u64,
    /// Interrupts (notifications) sent to the driver.
    pub interrupts: u64,
}

/// The low bits of a free-running counter: DIM works on wrapping differences.
fn low32(v: u64) -> u32 {
    u32::try_from(v & u64::from(u32::MAX)).unwrap_or(0)
}

fn low16(v: u64) -> u16 {
    u16::try_from(v & u64::from(u16::MAX)).unwrap_or(0)
}

/// The hypervisor-side DIM control loop for one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DimLoop {
    cfg: DimLoopConfig,
    table: &'static [DimProfile; 5],
    dim: NetDim,
    period_ns: Nanos,
    next_wakeup: Nanos,
    wakeups: u64,
}

impl DimLoop {
    /// A loop whose first wakeup is one period after `start`.
    #[must_use]
    pub fn new(cfg: DimLoopConfig, start: Nanos) -> Self {
        let period_ms = cfg.period_ms.clamp(1, DIM_LOOP_PERIOD_MS_MAX);
        let period_ns = u64::from(period_ms) * NS_PER_MS;
        Self {
            cfg: DimLoopConfig { period_ms, ..cfg },
            table: net_table(cfg.dir, cfg.mode),
            dim: NetDim::new(5, NET_DEFAULT_INDEX).measuring_events(),
            period_ns,
            next_wakeup: start.saturating_add(period_ns),
            wakeups: 0,
        }
    }

    /// The parameters in force.
    #[must_use]
    pub fn config(&self) -> DimLoopConfig {
        self.cfg
    }

    /// The count setting of the current profile (what the device should have programmed).
    #[must_use]
    pub fn profile(&self) -> CountConfig {
        let p = self
            .table
            .get(usize::from(self.dim.index()))
            .copied()
            .unwrap_or(DimProfile {
                usecs: 0,
                frames: 1,
            });
        CountConfig {
            usecs: u32::from(p.usecs),
            frames: u32::from(p.frames),
            timer: self.cfg.mode.timer(),
        }
    }

    /// The current profile index.
    #[must_use]
    pub fn index(&self) -> u8 {
        self.dim.index()
    }

    /// When the loop wants to run next.
    #[must_use]
    pub fn next_wakeup(&self) -> Nanos {
        self.next_wakeup
    }

    /// Wakeups so far (the loop's own host cost).
    #[must_use]
    pub fn wakeups(&self) -> u64 {
        self.wakeups
    }

    /// The loop woke up at `now` and read `counters`: returns the count setting to program
    /// when net_dim moved to another profile. The next wakeup is one period after the
    /// scheduled one (no drift), or one period after `now` if the caller was more than a
    /// period late.
    pub fn on_period(&mut self, now: Nanos, counters: QueueCounters) -> Option<CountConfig> {
        self.wakeups = self.wakeups.saturating_add(1);
        let scheduled = self.next_wakeup.saturating_add(self.period_ns);
        self.next_wakeup = if scheduled > now {
            scheduled
        } else {
            now.saturating_add(self.period_ns)
        };
        let sample = DimSample {
            time: now,
            pkts: low32(counters.packets),
            bytes: low32(counters.bytes),
            events: low16(counters.interrupts),
            comps: low32(counters.packets),
        };
        self.dim.on_sample(sample).map(|_| self.profile())
    }

    /// `periods` wakeups that read counters unchanged since the last one and, the caller
    /// knows, change nothing: count them and move the schedule.
    fn skip(&mut self, periods: u64) {
        self.wakeups = self.wakeups.saturating_add(periods);
        self.next_wakeup = self
            .next_wakeup
            .saturating_add(self.period_ns.saturating_mul(periods));
    }
}

/// A queue moderated by `count` whose parameters a [`DimLoop`] programs: the whole first
/// stage as one policy. The loop's wakeups happen at their period boundaries: a hold never
/// outlasts the next wakeup (so a new profile applies on time), and after an idle stretch the
/// missed wakeups are replayed when the next event arrives (their counters were unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DimLoopQueue {
    ctl: DimLoop,
    count: Count,
    counters: QueueCounters,
}

impl DimLoopQueue {
    /// A queue whose loop starts at time 0 with net_dim's default profile programmed.
    #[must_use]
    pub fn new(cfg: DimLoopConfig) -> Self {
        let ctl = DimLoop::new(cfg, 0);
        Self {
            count: Count::new(ctl.profile()),
            ctl,
            counters: QueueCounters::default(),
        }
    }

    /// Start the loop at `now` instead of time 0: its first wakeup is one period later.
    /// For a caller whose clock does not start at 0 (the backends' CLOCK_MONOTONIC), so
    /// that the time before the queue existed is not counted as missed wakeups. Call it
    /// before the first event; counters and the programmed profile start over.
    pub fn start_at(&mut self, now: Nanos) {
        let ctl = DimLoop::new(self.ctl.config(), now);
        *self = Self {
            count: Count::new(ctl.profile()),
            ctl,
            counters: QueueCounters::default(),
        };
    }

    /// The controller (wakeups, profile, schedule).
    #[must_use]
    pub fn control_loop(&self) -> &DimLoop {
        &self.ctl
    }

    /// The device counters the loop reads.
    #[must_use]
    pub fn counters(&self) -> QueueCounters {
        self.counters
    }

    /// Run one wakeup at its scheduled time; returns whether it notified (a new profile
    /// released what was held; the virtio spec applies a change at once).
    fn wake(&mut self) -> bool {
        let at = self.ctl.next_wakeup();
        let Some(cfg) = self.ctl.on_period(at, self.counters) else {
            return false;
        };
        let notified = self.count.reconfigure(at, cfg) == Decision::Notify;
        if notified {
            self.counters.interrupts = self.counters.interrupts.wrapping_add(1);
        }
        notified
    }

    /// Run every wakeup due by `now`; returns whether one of them notified.
    fn catch_up(&mut self, now: Nanos) -> bool {
        let mut notified = false;
        let mut replayed = 0;
        while self.ctl.next_wakeup() <= now && replayed < CATCH_UP_MAX {
            notified |= self.wake();
            replayed += 1;
        }
        if self.ctl.next_wakeup() <= now {
            let behind = now - self.ctl.next_wakeup();
            self.ctl.skip(behind / self.ctl.period_ns + 1);
        }
        notified
    }

    fn decide(&mut self, now: Nanos, event: Event) -> Decision {
        let woke_notify = self.catch_up(now);
        let d = self.count.on_event(now, event);
        if woke_notify {
            // The wakeup's notification is still to be sent: it covers this event too.
            self.count.covered();
            return Decision::Notify;
        }
        match d {
            Decision::Hold { deadline } => Decision::Hold {
                deadline: deadline.min(self.ctl.next_wakeup()),
            },
            Decision::Notify => {
                self.counters.interrupts = self.counters.interrupts.wrapping_add(1);
                Decision::Notify
            }
            Decision::Idle => Decision::Idle,
        }
    }
}

impl Moderator for DimLoopQueue {
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision {
        if let Event::Complete(meta) = event {
            self.counters.packets = self.counters.packets.wrapping_add(1);
            self.counters.bytes = self.counters.bytes.wrapping_add(u64::from(meta.bytes));
        }
        self.decide(now, event)
    }
    fn pending(&self) -> &Pending {
        self.count.pending()
    }
    fn max_hold_ns(&self) -> Nanos {
        super::max_hold_over(self.ctl.table, self.ctl.config().mode.timer())
    }
    fn knob(&self) -> Knob {
        let c = self.count.config();
        Knob::Profile {
            index: self.ctl.index(),
            usecs: u16::try_from(c.usecs).unwrap_or(u16::MAX),
            frames: u16::try_from(c.frames).unwrap_or(u16::MAX),
        }
    }
}

#[cfg(test)]
mod tests;
