//! Wait policies: how long a waiter with nothing to do polls before it sleeps.
//!
//! A waiter (a halted vCPU in the hypervisor, an idle guest CPU, a device queue worker waiting
//! for a kick) calls [`Waiter::begin`] when it runs out of work. The answer is either
//! [`WaitDecision::Sleep`] or [`WaitDecision::Poll`] with an absolute deadline: poll for the
//! wake condition until then, and if it has not come, sleep. When the wait ends the waiter
//! reports how it ended with [`Waiter::end`] so adaptive policies can learn.
//!
//! Every poll window is bounded by the policy's configured maximum ([`Waiter::max_window_ns`]).
//! A [`ContentionGate`] in front of any of them turns polls into sleeps while the waiter's CPU
//! is contended (the caller passes in what the scheduler did to it).

mod contention;
mod fixed;
mod haltpoll;
mod histogram;
mod kvm;
mod policy;

pub use contention::{ContentionConfig, ContentionGate, CpuSample, GateStats};
pub use fixed::{Fixed, Never};
pub use haltpoll::{GuestHaltpoll, GuestHaltpollConfig};
pub use histogram::{Histogram, HistogramConfig, HISTOGRAM_BUCKETS};
pub use kvm::{KvmHaltPoll, KvmHaltPollConfig};
pub use policy::Wait;

use crate::Nanos;

/// What the waiter should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitDecision {
    /// Block immediately.
    Sleep,
    /// Poll for the wake condition until `until` (absolute), then block.
    Poll {
        /// Absolute end of the poll window.
        until: Nanos,
    },
}

impl WaitDecision {
    /// The poll window in nanoseconds, given the time `now` the decision was made at.
    #[must_use]
    pub fn window_ns(&self, now: Nanos) -> Nanos {
        match *self {
            WaitDecision::Sleep => 0,
            WaitDecision::Poll { until } => until.saturating_sub(now),
        }
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeOutcome {
    /// The waiter had to block: polling did not catch the wake condition.
    pub slept: bool,
    /// The wakeup was a real one (KVM's "valid wakeup"); spurious wakeups shrink KVM's window.
    pub valid: bool,
    /// If the waiter slept and knows what the wakeup cost it (latency from the event to
    /// running again), in nanoseconds; 0 when unknown. Learning policies use it.
    pub wake_cost_ns: Nanos,
}

impl WakeOutcome {
    /// The poll caught the wake condition.
    pub const POLLED: Self = Self {
        slept: false,
        valid: true,
        wake_cost_ns: 0,
    };
    /// The waiter slept and was woken by a real event.
    pub const SLEPT: Self = Self {
        slept: true,
        valid: true,
        wake_cost_ns: 0,
    };
}

/// A wait policy.
pub trait Waiter {
    /// The waiter has nothing to do at `now`: poll or sleep?
    fn begin(&mut self, now: Nanos) -> WaitDecision;
    /// The wait that began at the last [`Waiter::begin`] ended at `now`.
    fn end(&mut self, now: Nanos, outcome: WakeOutcome);
    /// The current poll window in nanoseconds (what the next `begin` would offer).
    fn window_ns(&self) -> Nanos;
    /// The largest window this policy can ever return.
    fn max_window_ns(&self) -> Nanos;
}
