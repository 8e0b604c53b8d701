//! Completion moderation: when a device queue should signal the guest.
//!
//! The device tells the policy what happened ([`Event`]: a request was submitted, a request
//! completed, the timer the policy asked for fired) and gets a [`Decision`] back:
//! - [`Decision::Notify`]: signal the guest now. Every completion so far is covered by this
//!   signal; the caller may cancel any armed timer. (Guest-side suppression such as EVENT_IDX
//!   is applied by the caller on top of this.)
//! - [`Decision::Hold`]: at least one completion is held back; the caller must deliver a
//!   [`Event::Timer`] no later than `deadline` (replacing any earlier timer). Every policy
//!   bounds how long a completion can be held, so a caller that obeys never loses one.
//! - [`Decision::Idle`]: nothing is held; no timer is needed.
//!
//! A caller that receives `Hold` must not assume later completions will come: it arms the
//! timer. A timer that fires early (or late) is harmless: the policy answers with the same
//! `Hold` or with `Notify`.

mod batch;
mod budget;
mod count;
pub mod dim;
mod ipi_gap;
mod none;
mod policy;
mod spdk;
mod vic;

pub use batch::Decisions;
pub use budget::{Budget, BudgetConfig};
pub use count::{Count, CountConfig, TimerStart};
pub use dim::{
    BurstFilter, BurstStats, Dim, DimConfig, DimDirection, DimLoop, DimLoopConfig, DimLoopQueue,
    DimMode, DimProfile, DimVariant, LatencyFilter, NetDim, QueueCounters, RdmaDim,
};
pub use ipi_gap::{IpiGap, IpiGapConfig};
pub use none::NoModeration;
pub use policy::Moderation;
pub use spdk::{Spdk, SpdkConfig};
pub use vic::{Vic, VicConfig, VicRatio, VicState, VIC_TABLE_MAX};

use crate::Nanos;

/// What a completed request was, as far as moderation cares. The caller fills it from the
/// request it just completed; policies that do not look at metadata ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompletionMeta {
    /// Kind of request.
    pub kind: RequestKind,
    /// Payload bytes moved by the request (0 for flush and other data-less requests).
    pub bytes: u32,
    /// Flags, a bitwise OR of the `CompletionMeta::*` flag constants.
    pub flags: u8,
}

impl CompletionMeta {
    /// The request was synchronous (e.g. a write with FUA or issued by an O_DSYNC writer).
    pub const SYNC: u8 = 1 << 0;
    /// The submitter marked the request urgent (cinterrupts' "urgent" annotation).
    pub const URGENT: u8 = 1 << 1;
    /// A network completion that carried only a TCP ACK (no payload).
    pub const ACK_ONLY: u8 = 1 << 2;
    /// Delivering a notification now would need a cross-CPU interrupt (IPI) because the
    /// completion arrived on a CPU other than the one running the target vCPU.
    pub const CROSS_CPU: u8 = 1 << 3;

    /// A data request of `bytes` bytes.
    #[must_use]
    pub const fn new(kind: RequestKind, bytes: u32) -> Self {
        Self {
            kind,
            bytes,
            flags: 0,
        }
    }

    /// The same metadata with `flag` set.
    #[must_use]
    pub const fn with(mut self, flag: u8) -> Self {
        self.flags |= flag;
        self
    }

    /// Whether `flag` is set.
    #[must_use]
    pub const fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Kind of the completed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestKind {
    /// Device to driver data (virtio-blk IN, a received packet).
    #[default]
    Read,
    /// Driver to device data (virtio-blk OUT, a transmitted packet).
    Write,
    /// A cache flush (virtio-blk FLUSH): someone waits for durability.
    Flush,
    /// Anything else (GET_ID, DISCARD, WRITE_ZEROES, control).
    Other,
}

/// What happened at the device queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The guest submitted one request (commands in flight rises by one).
    Submit,
    /// One request completed and is visible in the used ring (commands in flight falls by one).
    Complete(CompletionMeta),
    /// The timer the policy asked for (via [`Decision::Hold`]) fired.
    Timer,
}

/// What the caller must do after an [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Signal the guest now; this covers every completion so far.
    Notify,
    /// Completions are held; deliver [`Event::Timer`] no later than `deadline`.
    Hold {
        /// Absolute time by which the caller must call back with [`Event::Timer`].
        deadline: Nanos,
    },
    /// Nothing is held and no timer is needed.
    Idle,
}

/// The current setting of a policy's adaptive knob, for reports and time series (the vIC
/// ratio, the DIM profile, the budget policy's batch cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    /// The policy has no adaptive setting.
    Fixed,
    /// vIC: deliver `deliver` of every `of` completions; `active` is false while vIC is
    /// disabled (low CIF or trickle I/O).
    Ratio {
        /// Completions delivered per cycle.
        deliver: u8,
        /// Cycle length.
        of: u8,
        /// Whether coalescing is currently applied.
        active: bool,
    },
    /// DIM: the profile index and the count/timer setting it applies.
    Profile {
        /// Index into the profile table.
        index: u8,
        /// Timer in microseconds.
        usecs: u16,
        /// Completion count.
        frames: u16,
    },
    /// SPDK / IPI gap: the current minimum gap between notifications.
    Gap {
        /// Gap in nanoseconds.
        ns: u64,
    },
    /// Budget: the expected gap to the next completion and the current batch cap.
    Budget {
        /// EWMA of inter-completion gaps in nanoseconds.
        gap_ns: u64,
        /// Most completions held at once right now.
        batch_cap: u32,
    },
}

/// A completion moderation policy.
pub trait Moderator {
    /// Feed one event at time `now`; returns what the caller must do.
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision;
    /// The policy's in-flight and held bookkeeping.
    fn pending(&self) -> &Pending;
    /// Completions held back right now (not yet covered by a notification).
    fn held(&self) -> u32 {
        self.pending().held
    }
    /// Commands in flight as the policy counts them (submits minus completions).
    fn in_flight(&self) -> u32 {
        self.pending().cif
    }
    /// The longest any single completion can be held, in nanoseconds (the policy's bound).
    fn max_hold_ns(&self) -> Nanos;
    /// The current setting of the adaptive knob.
    fn knob(&self) -> Knob {
        Knob::Fixed
    }
}

/// Bookkeeping every holding policy needs: commands in flight, how many completions are held
/// and since when. Kept separate so that each policy only states its own rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// Commands in flight.
    pub cif: u32,
    /// Completions held since the last notification.
    pub held: u32,
    /// When the oldest held completion arrived (meaningful only if `held > 0`).
    pub oldest: Nanos,
}

impl Pending {
    /// Count a submission.
    pub fn submit(&mut self) {
        self.cif = self.cif.saturating_add(1);
    }

    /// Count a completion at `now` as held.
    pub fn complete(&mut self, now: Nanos) {
        self.cif = self.cif.saturating_sub(1);
        if self.held == 0 {
            self.oldest = now;
        }
        self.held = self.held.saturating_add(1);
    }

    /// Count `n` submissions.
    pub fn submit_n(&mut self, n: u32) {
        self.cif = self.cif.saturating_add(n);
    }

    /// Count `n` completions at `now` as held (as `n` calls of [`Pending::complete`]).
    pub fn complete_n(&mut self, now: Nanos, n: u32) {
        if n == 0 {
            return;
        }
        self.cif = self.cif.saturating_sub(n);
        if self.held == 0 {
            self.oldest = now;
        }
        self.held = self.held.saturating_add(n);
    }

    /// Everything held so far is now covered by a notification.
    pub fn flush(&mut self) -> Decision {
        self.held = 0;
        Decision::Notify
    }

    /// Hold until `deadline`, or `Idle` if nothing is held.
    #[must_use]
    pub fn hold_until(&self, deadline: Nanos) -> Decision {
        if self.held == 0 {
            Decision::Idle
        } else {
            Decision::Hold { deadline }
        }
    }
}
