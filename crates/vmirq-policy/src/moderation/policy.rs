//! [`Moderation`]: one enum over every completion policy, so callers hold any policy by value
//! (no allocation, no trait objects) and dispatch with a match.

use super::{
    Budget, Decision, Dim, DimLoop, DimLoopQueue, Event, IpiGap, Knob, Moderator, NoModeration,
    Spdk, Vic,
};
use super::{Count, Pending};
use crate::Nanos;

/// Any completion moderation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moderation {
    /// Every completion notifies.
    None(NoModeration),
    /// Count + timer (virtio NOTF_COAL).
    Count(Count),
    /// VMware vIC.
    Vic(Vic),
    /// ESX IPI coalescing.
    IpiGap(IpiGap),
    /// net_dim / rdma_dim driving count (also `dim-lat`).
    Dim(Dim),
    /// net_dim as a hypervisor-side periodic control loop programming count.
    DimLoop(DimLoopQueue),
    /// SPDK vhost coalescing.
    Spdk(Spdk),
    /// vmirq's latency budget.
    Budget(Budget),
}

macro_rules! each {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            Moderation::None($p) => $e,
            Moderation::Count($p) => $e,
            Moderation::Vic($p) => $e,
            Moderation::IpiGap($p) => $e,
            Moderation::Dim($p) => $e,
            Moderation::DimLoop($p) => $e,
            Moderation::Spdk($p) => $e,
            Moderation::Budget($p) => $e,
        }
    };
}

impl Moderation {
    /// The periodic control loop inside the policy (`dim-loop`), if any. Its executor must
    /// wake the policy (an [`Event::Timer`]) at [`DimLoop::next_wakeup`] even when nothing
    /// is held, so that the loop's wakeups happen on time; [`DimLoop::wakeups`] counts them.
    #[must_use]
    pub fn control_loop(&self) -> Option<&DimLoop> {
        match self {
            Self::DimLoop(q) => Some(q.control_loop()),
            _ => None,
        }
    }

    /// The same port's driver transmitted `meta` at `now` (a receive queue's policy hears
    /// of its port's transmissions): `Some(decision)` when the policy acts on it (only
    /// `dim-lat`, see [`super::dim::ResponseWait`]), `None` otherwise.
    pub fn on_transmit(&mut self, now: Nanos, meta: super::CompletionMeta) -> Option<Decision> {
        match self {
            Self::Dim(d) => d.on_transmit(now, meta),
            _ => None,
        }
    }

    /// Whether the device should keep the completion `meta` out of the used ring while its
    /// notification is held, so that short messages of other flows can be published ahead
    /// of it (`dim-lat:overtake=on`, see [`super::dim::burst`]); false for every other
    /// policy.
    #[must_use]
    pub fn parks(&self, meta: &super::CompletionMeta) -> bool {
        match self {
            Self::Dim(d) => d.config().burst.is_some_and(|f| f.parks(meta)),
            _ => false,
        }
    }

    /// Receive buffers the device must leave free when it writes the completion `meta`
    /// (`dim-lat:overtake=on`'s reserve for short messages,
    /// [`super::dim::BurstFilter::reserve_for`]); 0 for every other policy.
    #[must_use]
    pub fn rx_reserve(&self, meta: &super::CompletionMeta) -> u16 {
        match self {
            Self::Dim(d) => d.config().burst.map_or(0, |f| f.reserve_for(meta)),
            _ => 0,
        }
    }

    /// Whether the policy may ever ask the device to keep completions out of the used ring
    /// ([`Self::parks`]).
    #[must_use]
    pub fn overtakes(&self) -> bool {
        match self {
            Self::Dim(d) => d.config().burst.is_some_and(|f| f.overtake),
            _ => false,
        }
    }

    /// The policy starts at `now` on its executor's clock (a periodic loop schedules its
    /// first wakeup one period later; the other policies have no start time). Call it before
    /// the first event.
    pub fn start_at(&mut self, now: Nanos) {
        if let Self::DimLoop(q) = self {
            q.start_at(now);
        }
    }
}

impl Moderator for Moderation {
    #[inline]
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision {
        each!(self, p => p.on_event(now, event))
    }
    fn pending(&self) -> &Pending {
        each!(self, p => p.pending())
    }
    fn max_hold_ns(&self) -> Nanos {
        each!(self, p => p.max_hold_ns())
    }
    fn knob(&self) -> Knob {
        each!(self, p => p.knob())
    }
}
