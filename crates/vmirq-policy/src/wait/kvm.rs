//! `kvm`: KVM's host halt polling (`kvm_vcpu_halt()` in `virt/kvm/kvm_main.c`,
//! `Documentation/virt/kvm/halt-polling.rst`), reimplemented.
//!
//! Per vCPU a poll window starts at 0. At each halt the window is first clamped to the
//! maximum (`halt_poll_ns`, or the per-VM `KVM_CAP_HALT_POLL` value); a non-zero window is
//! polled. When the halt ends, with `halt_ns` the whole halted time including polling:
//! - an invalid wakeup shrinks the window;
//! - `halt_ns <= window`: the wakeup landed inside the window, keep it;
//! - window non-zero and `halt_ns > max`: a long halt, shrink;
//! - window below max and `halt_ns < max`: a short halt the window missed, grow;
//! - with `max = 0` the window is 0.
//!
//! grow: `window × grow`, at least `grow_start` (no cap here: the cap applies at the next
//! halt). shrink: `window / shrink` (0 when `shrink = 0`), and to 0 below `grow_start`.
//! From 0 with x86 defaults: 0, 10 µs, 20, 40, 80, 160, 320 → clamped to 200 µs.

use super::{WaitDecision, Waiter, WakeOutcome};
use crate::Nanos;

/// Parameters of [`KvmHaltPoll`] (the kvm.ko module parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvmHaltPollConfig {
    /// `halt_poll_ns`: ceiling on the window (x86 default 200 000).
    pub max_ns: Nanos,
    /// `halt_poll_ns_grow`: multiplier (default 2; 0 = never grow).
    pub grow: u32,
    /// `halt_poll_ns_grow_start`: first non-zero window (default 10 000).
    pub grow_start_ns: Nanos,
    /// `halt_poll_ns_shrink`: divisor (default 2 since Linux 6.11; 0 = reset to 0).
    pub shrink: u32,
}

impl Default for KvmHaltPollConfig {
    fn default() -> Self {
        Self {
            max_ns: 200_000,
            grow: 2,
            grow_start_ns: 10_000,
            shrink: 2,
        }
    }
}

/// KVM halt polling for one vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvmHaltPoll {
    cfg: KvmHaltPollConfig,
    window: Nanos,
    start: Nanos,
}

impl KvmHaltPoll {
    /// A vCPU's halt-polling state, window 0.
    #[must_use]
    pub fn new(cfg: KvmHaltPollConfig) -> Self {
        Self {
            cfg,
            window: 0,
            start: 0,
        }
    }

    /// Change the ceiling at run time (what writing the module parameter or
    /// `KVM_CAP_HALT_POLL` does); applied at the next halt.
    pub fn set_max_ns(&mut self, max_ns: Nanos) {
        self.cfg.max_ns = max_ns;
    }

    fn grow(&mut self) {
        if self.cfg.grow == 0 {
            return;
        }
        self.window = self
            .window
            .saturating_mul(u64::from(self.cfg.grow))
            .max(self.cfg.grow_start_ns);
    }

    fn shrink(&mut self) {
        self.window = if self.cfg.shrink == 0 {
            0
        } else {
            self.window / u64::from(self.cfg.shrink)
        };
        if self.window < self.cfg.grow_start_ns {
            self.window = 0;
        }
    }
}

impl Waiter for KvmHaltPoll {
    fn begin(&mut self, now: Nanos) -> WaitDecision {
        self.window = self.window.min(self.cfg.max_ns);
        self.start = now;
        if self.window == 0 {
            WaitDecision::Sleep
        } else {
            WaitDecision::Poll {
                until: now.saturating_add(self.window),
            }
        }
    }

    fn end(&mut self, now: Nanos, outcome: WakeOutcome) {
        let halt_ns = now.saturating_sub(self.start);
        let max = self.cfg.max_ns;
        if !outcome.valid {
            self.shrink();
        } else if max != 0 {
            if halt_ns <= self.window {
                // The sweet spot: the wakeup came inside the window.
            } else if self.window != 0 && halt_ns > max {
                self.shrink();
            } else if self.window < max && halt_ns < max {
                self.grow();
            }
        } else {
            self.window = 0;
        }
    }

    fn window_ns(&self) -> Nanos {
        self.window.min(self.cfg.max_ns)
    }

    fn max_window_ns(&self) -> Nanos {
        self.cfg.max_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Halts of `gap` ns, each ending by a wakeup: returns the window offered at each halt.
    fn windows(p: &mut KvmHaltPoll, gap: Nanos, n: usize) -> [Nanos; 10] {
        let mut out = [0; 10];
        let mut t = 0;
        for slot in out.iter_mut().take(n) {
            *slot = p.begin(t).window_ns(t);
            t += gap;
            let slept = gap > *slot;
            p.end(
                t,
                WakeOutcome {
                    slept,
                    ..WakeOutcome::SLEPT
                },
            );
        }
        out
    }

    #[test]
    fn grows_from_zero_by_the_documented_sequence_and_clamps() {
        let mut p = KvmHaltPoll::new(KvmHaltPollConfig::default());
        // 150 µs halts: always short (< max) and longer than the window until it reaches 160.
        let w = windows(&mut p, 150_000, 8);
        assert_eq!(
            w[..8],
            [0, 10_000, 20_000, 40_000, 80_000, 160_000, 160_000, 160_000]
        );
        // 190 µs halts push it to 320 (stored) which is clamped to 200 µs at the next halt.
        let w = windows(&mut p, 190_000, 3);
        assert_eq!(w[..3], [160_000, 200_000, 200_000]);
    }

    #[test]
    fn long_halt_shrinks_and_floors_to_zero() {
        let mut p = KvmHaltPoll::new(KvmHaltPollConfig::default());
        windows(&mut p, 150_000, 6); // window 160 µs
        let w = windows(&mut p, 1_000_000, 5);
        assert_eq!(w[..5], [160_000, 80_000, 40_000, 20_000, 10_000]);
        assert_eq!(p.window_ns(), 0); // 10 000 / 2 < grow_start -> 0
    }

    #[test]
    fn shrink_zero_resets_and_invalid_wakeups_shrink() {
        let mut p = KvmHaltPoll::new(KvmHaltPollConfig {
            shrink: 0,
            ..KvmHaltPollConfig::default()
        });
        windows(&mut p, 150_000, 6);
        p.begin(0);
        p.end(1_000_000, WakeOutcome::SLEPT);
        assert_eq!(p.window_ns(), 0);
        let mut q = KvmHaltPoll::new(KvmHaltPollConfig::default());
        windows(&mut q, 150_000, 6);
        q.begin(0);
        q.end(
            5,
            WakeOutcome {
                slept: false,
                valid: false,
                wake_cost_ns: 0,
            },
        );
        assert_eq!(q.window_ns(), 80_000);
    }

    #[test]
    fn max_zero_disables() {
        let mut p = KvmHaltPoll::new(KvmHaltPollConfig {
            max_ns: 0,
            ..KvmHaltPollConfig::default()
        });
        assert_eq!(windows(&mut p, 1_000, 5), [0; 10]);
    }
}
