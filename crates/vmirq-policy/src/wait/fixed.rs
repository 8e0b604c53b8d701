//! The two non-adaptive wait policies: `never` poll, and poll for a `fixed` window.

use super::{WaitDecision, Waiter, WakeOutcome};
use crate::Nanos;

/// Never poll: always sleep at once (the baseline).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Never;

impl Waiter for Never {
    fn begin(&mut self, _now: Nanos) -> WaitDecision {
        WaitDecision::Sleep
    }
    fn end(&mut self, _now: Nanos, _outcome: WakeOutcome) {}
    fn window_ns(&self) -> Nanos {
        0
    }
    fn max_window_ns(&self) -> Nanos {
        0
    }
}

/// Always poll for the same window (QEMU's `poll-max-ns` with grow and shrink disabled,
/// vhost-net's `busyloop_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed {
    window_ns: Nanos,
}

impl Fixed {
    /// Poll for `window_ns` before sleeping; 0 behaves like [`Never`].
    #[must_use]
    pub const fn new(window_ns: Nanos) -> Self {
        Self { window_ns }
    }
}

impl Waiter for Fixed {
    fn begin(&mut self, now: Nanos) -> WaitDecision {
        if self.window_ns == 0 {
            WaitDecision::Sleep
        } else {
            WaitDecision::Poll {
                until: now.saturating_add(self.window_ns),
            }
        }
    }
    fn end(&mut self, _now: Nanos, _outcome: WakeOutcome) {}
    fn window_ns(&self) -> Nanos {
        self.window_ns
    }
    fn max_window_ns(&self) -> Nanos {
        self.window_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_sleeps_and_fixed_polls_its_window() {
        assert_eq!(Never.begin(5), WaitDecision::Sleep);
        let mut f = Fixed::new(1_000);
        assert_eq!(f.begin(5), WaitDecision::Poll { until: 1_005 });
        f.end(2_000, WakeOutcome::SLEPT);
        assert_eq!(f.window_ns(), 1_000);
        assert_eq!(Fixed::new(0).begin(5), WaitDecision::Sleep);
        assert_eq!(
            Fixed::new(10).begin(u64::MAX),
            WaitDecision::Poll { until: u64::MAX }
        );
    }
}
