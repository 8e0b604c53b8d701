//! `budget` (vmirq's own): hold completions only while it costs less than a latency budget.
//!
//! The user states the added latency a completion may suffer (e.g. 20 µs). The policy keeps an
//! integer EWMA of the gaps between completions (weight 1/8, shifts only) and, at each
//! completion, holds only if the *oldest* held completion would still be within budget when
//! the next completion is expected: `now + expected_gap - oldest <= budget`. So:
//! - it never holds when nothing is in flight (no later completion will come);
//! - under trickle I/O (expected gap above the budget) it never holds: no explicit rate gate;
//! - the batch is capped at half the commands in flight, rounded up, so the guest gets
//!   completions back while the device pipeline stays at least half full;
//! - a held completion is always delivered by `oldest + budget` (the timer).
//!
//! Compared with vIC (a CIF→ratio table) and DIM (a hill climb over fixed profiles), the
//! bound is stated in the unit the user cares about, and the hold adapts per completion.

use super::{Decision, Event, Knob, Moderator, Pending};
use crate::{Nanos, NS_PER_US};

/// Weight of a new gap sample in the EWMA: 1 / 2^EWMA_SHIFT.
const EWMA_SHIFT: u32 = 3;

/// Parameters of [`Budget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetConfig {
    /// Added latency allowed per completion, in microseconds.
    pub us: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self { us: 20 }
    }
}

/// Latency-budget moderation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    budget_ns: Nanos,
    pending: Pending,
    gap_ewma_ns: Nanos,
    last_completion: Option<Nanos>,
}

impl Budget {
    /// A budget policy with these parameters.
    #[must_use]
    pub fn new(cfg: BudgetConfig) -> Self {
        let budget_ns = u64::from(cfg.us) * NS_PER_US;
        // Start pessimistic (expected gap just over the budget): nothing is held until gaps
        // have been seen.
        Self {
            budget_ns,
            pending: Pending::default(),
            gap_ewma_ns: budget_ns + 1,
            last_completion: None,
        }
    }

    fn learn_gap(&mut self, now: Nanos) {
        if let Some(last) = self.last_completion {
            let gap = now.saturating_sub(last);
            if gap >= self.gap_ewma_ns {
                self.gap_ewma_ns += (gap - self.gap_ewma_ns) >> EWMA_SHIFT;
            } else {
                self.gap_ewma_ns -= (self.gap_ewma_ns - gap) >> EWMA_SHIFT;
            }
        }
        self.last_completion = Some(now);
    }

    /// Most completions held at once at the current CIF: half of it, rounded up.
    fn batch_cap(&self) -> u32 {
        self.pending.cif.div_ceil(2).max(1)
    }

    fn deadline(&self) -> Nanos {
        self.pending.oldest.saturating_add(self.budget_ns)
    }

    fn on_complete(&mut self, now: Nanos) -> Decision {
        self.learn_gap(now);
        self.pending.complete(now);
        if self.pending.cif == 0 || self.pending.held >= self.batch_cap() {
            return self.pending.flush();
        }
        let next_expected = now.saturating_add(self.gap_ewma_ns);
        if next_expected.saturating_sub(self.pending.oldest) > self.budget_ns {
            return self.pending.flush();
        }
        Decision::Hold {
            deadline: self.deadline(),
        }
    }
}

impl Moderator for Budget {
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision {
        match event {
            Event::Submit => {
                self.pending.submit();
                self.pending.hold_until(self.deadline())
            }
            Event::Complete(_) => self.on_complete(now),
            Event::Timer => {
                if self.pending.held > 0 && now >= self.deadline() {
                    self.pending.flush()
                } else {
                    self.pending.hold_until(self.deadline())
                }
            }
        }
    }
    fn pending(&self) -> &Pending {
        &self.pending
    }
    fn max_hold_ns(&self) -> Nanos {
        self.budget_ns
    }
    fn knob(&self) -> Knob {
        Knob::Budget {
            gap_ns: self.gap_ewma_ns,
            batch_cap: self.batch_cap(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moderation::CompletionMeta;

    const C: Event = Event::Complete(CompletionMeta {
        kind: crate::moderation::RequestKind::Read,
        bytes: 4096,
        flags: 0,
    });

    /// Closed loop at queue depth `qd`, one completion every `gap` ns, timers honoured.
    /// Returns (notifications, notifications caused by completions, worst hold).
    fn run_closed_loop(p: &mut Budget, qd: u32, gap: Nanos, n: u32) -> (u32, u32, Nanos) {
        let mut t = 0;
        for _ in 0..qd {
            p.on_event(t, Event::Submit);
        }
        let (mut notes, mut on_completion, mut worst) = (0, 0, 0);
        let mut oldest: Option<Nanos> = None;
        let mut timer: Option<Nanos> = None;
        for _ in 0..n {
            t += gap;
            if let Some(deadline) = timer.take().filter(|d| *d <= t) {
                assert_eq!(p.on_event(deadline, Event::Timer), Decision::Notify);
                notes += 1;
                worst = worst.max(deadline - oldest.take().unwrap_or(deadline));
            }
            oldest.get_or_insert(t);
            match p.on_event(t, C) {
                Decision::Notify => {
                    notes += 1;
                    on_completion += 1;
                    worst = worst.max(t - oldest.take().unwrap_or(t));
                    timer = None;
                }
                Decision::Hold { deadline } => {
                    assert!(deadline <= oldest.unwrap_or(t) + p.max_hold_ns());
                    timer = Some(deadline);
                }
                Decision::Idle => {}
            }
            p.on_event(t, Event::Submit);
        }
        (notes, on_completion, worst)
    }

    #[test]
    fn batches_at_high_rate_within_budget() {
        let mut p = Budget::new(BudgetConfig { us: 20 });
        let (notes, _, worst) = run_closed_loop(&mut p, 32, 1_000, 10_000);
        // Gaps of 1 µs and a 20 µs budget: batches of about 20, far fewer notifications.
        assert!(notes < 1_000, "{notes}");
        assert!(worst <= 20_000, "{worst}");
    }

    #[test]
    fn never_holds_at_trickle_rate_or_qd1() {
        let mut p = Budget::new(BudgetConfig { us: 20 });
        let (_, immediate, _) = run_closed_loop(&mut p, 32, 50_000, 100);
        assert_eq!(immediate, 100);
        let mut q = Budget::new(BudgetConfig { us: 20 });
        let (_, immediate, _) = run_closed_loop(&mut q, 1, 1_000, 100);
        assert_eq!(immediate, 100);
    }

    #[test]
    fn batch_is_capped_by_half_the_cif() {
        let mut p = Budget::new(BudgetConfig { us: 1_000 });
        let (notes, _, _) = run_closed_loop(&mut p, 8, 1_000, 800);
        // cif after a completion is 7 -> cap 4: one notification per 4 completions (the very
        // first completion notifies at once: no gap has been seen yet).
        assert!((200..=201).contains(&notes), "{notes}");
    }
}
