//! `ipi-gap`: VMware ESX's inter-processor interrupt coalescing (ESX 4.0; US patent
//! 9,336,165).
//!
//! When a completion arrives on a CPU other than the one running the VM, notifying the
//! guest needs an IPI. If the VM was last sent an interrupt less than `gap_us` ago (ESX default
//! 100 µs), the IPI is withheld: the completion waits and is picked up with a later delivery.
//! Completions on the VM's own CPU (no [`CompletionMeta::CROSS_CPU`] flag) are delivered at
//! once, and they also cover anything held. A held completion waits at most `gap_us`.
//!
//! [`CompletionMeta::CROSS_CPU`]: super::CompletionMeta::CROSS_CPU

use super::{CompletionMeta, Decision, Event, Knob, Moderator, Pending};
use crate::{Nanos, NS_PER_US};

/// Parameters of [`IpiGap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpiGapConfig {
    /// Least time between two cross-CPU deliveries, in microseconds.
    pub gap_us: u32,
}

impl Default for IpiGapConfig {
    fn default() -> Self {
        Self { gap_us: 100 }
    }
}

/// ESX-style IPI coalescing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpiGap {
    gap_ns: Nanos,
    pending: Pending,
    /// When an interrupt was last delivered; `None` before the first.
    last_delivery: Option<Nanos>,
}

impl IpiGap {
    /// An IPI-gap policy with these parameters.
    #[must_use]
    pub fn new(cfg: IpiGapConfig) -> Self {
        Self {
            gap_ns: u64::from(cfg.gap_us) * NS_PER_US,
            pending: Pending::default(),
            last_delivery: None,
        }
    }

    fn next_allowed(&self) -> Nanos {
        self.last_delivery
            .map_or(0, |t| t.saturating_add(self.gap_ns))
    }

    fn deliver(&mut self, now: Nanos) -> Decision {
        self.last_delivery = Some(now);
        self.pending.flush()
    }

    fn check(&mut self, now: Nanos) -> Decision {
        if self.pending.held > 0 && now >= self.next_allowed() {
            self.deliver(now)
        } else {
            self.pending.hold_until(self.next_allowed())
        }
    }
}

impl Moderator for IpiGap {
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision {
        match event {
            Event::Submit => {
                self.pending.submit();
                self.pending.hold_until(self.next_allowed())
            }
            Event::Complete(meta) => {
                self.pending.complete(now);
                if meta.has(CompletionMeta::CROSS_CPU) {
                    self.check(now)
                } else {
                    self.deliver(now)
                }
            }
            Event::Timer => self.check(now),
        }
    }
    fn pending(&self) -> &Pending {
        &self.pending
    }
    fn max_hold_ns(&self) -> Nanos {
        self.gap_ns
    }
    fn knob(&self) -> Knob {
        Knob::Gap { ns: self.gap_ns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moderation::RequestKind;

    const REMOTE: Event = Event::Complete(CompletionMeta {
        kind: RequestKind::Read,
        bytes: 512,
        flags: CompletionMeta::CROSS_CPU,
    });
    const LOCAL: Event = Event::Complete(CompletionMeta {
        kind: RequestKind::Read,
        bytes: 512,
        flags: 0,
    });

    #[test]
    fn holds_remote_completion_within_gap() {
        let mut p = IpiGap::new(IpiGapConfig::default());
        assert_eq!(p.on_event(1_000, REMOTE), Decision::Notify);
        assert_eq!(
            p.on_event(50_000, REMOTE),
            Decision::Hold { deadline: 101_000 }
        );
        assert_eq!(
            p.on_event(60_000, REMOTE),
            Decision::Hold { deadline: 101_000 }
        );
        assert_eq!(p.on_event(101_000, Event::Timer), Decision::Notify);
        assert_eq!(
            p.on_event(150_000, REMOTE),
            Decision::Hold { deadline: 201_000 }
        );
        // A local delivery covers what was held.
        assert_eq!(p.on_event(160_000, LOCAL), Decision::Notify);
        assert_eq!(p.held(), 0);
        assert_eq!(p.on_event(170_000, Event::Timer), Decision::Idle);
    }
}
