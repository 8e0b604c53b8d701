//! [`Wait`]: one enum over every wait policy, held by value and dispatched with a match.

use super::{
    Fixed, GuestHaltpoll, Histogram, KvmHaltPoll, Never, WaitDecision, Waiter, WakeOutcome,
};
use crate::Nanos;

/// Any wait policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per waiter, held by value: policies never allocate, and ~0.4 KiB is cheap"
)]
pub enum Wait {
    /// Never poll.
    Never(Never),
    /// A fixed window.
    Fixed(Fixed),
    /// KVM host halt polling.
    Kvm(KvmHaltPoll),
    /// The Linux guest haltpoll governor.
    GuestHaltpoll(GuestHaltpoll),
    /// vmirq's idle-gap histogram.
    Histogram(Histogram),
}

macro_rules! each {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            Wait::Never($p) => $e,
            Wait::Fixed($p) => $e,
            Wait::Kvm($p) => $e,
            Wait::GuestHaltpoll($p) => $e,
            Wait::Histogram($p) => $e,
        }
    };
}

impl Waiter for Wait {
    #[inline]
    fn begin(&mut self, now: Nanos) -> WaitDecision {
        each!(self, p => p.begin(now))
    }
    fn end(&mut self, now: Nanos, outcome: WakeOutcome) {
        each!(self, p => p.end(now, outcome));
    }
    fn window_ns(&self) -> Nanos {
        each!(self, p => p.window_ns())
    }
    fn max_window_ns(&self) -> Nanos {
        each!(self, p => p.max_window_ns())
    }
}
