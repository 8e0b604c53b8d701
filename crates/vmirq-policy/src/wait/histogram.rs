//! `histogram` (vmirq's own): choose the poll window from the distribution of idle gaps.
//!
//! KVM's and the guest governor's windows react to the last halt only, so they oscillate on
//! mixed workloads and poll the full window before every long halt. This policy keeps a log2
//! histogram of observed idle durations (bucket `k` holds gaps in `[2^k, 2^(k+1))` ns) and
//! picks the window `W` (0 or a bucket edge `2^(k+1)` up to `max_ns`) that maximizes
//!
//! ```text
//!   hits(W) × wake_ns × 100  −  cpu_pct × polled_ns(W)
//! ```
//!
//! where `hits(W)` are idle gaps shorter than `W` (the poll catches them and saves a sleeping
//! wakeup, worth `wake_ns`), and `polled_ns(W)` is the CPU burnt polling: the gap itself for a
//! hit (each bucket keeps the sum of its gaps) and `W` for every miss. `cpu_pct` says what
//! a nanosecond of polling CPU is worth against a nanosecond of wakeup latency (default 10 %).
//! `wake_ns` is learned (EWMA, weight 1/8) from the wakeup costs the waiter reports.
//!
//! The gap recorded is when the wake *event* came, not when the waiter ran again: after a
//! sleep the waiter resumes `wake_cost_ns` after the event, so that much is taken off.
//! Recording the resume time instead would put every missed wake a whole wakeup cost later
//! than it was, and the policy would chase that phantom tail with longer windows.
//!
//! Counts and sums are halved when the total reaches 1024 so the histogram follows phase
//! changes. The choice is recomputed every 8 observations (32 buckets, prefix sums: O(32));
//! `begin` is O(1).

use super::{WaitDecision, Waiter, WakeOutcome};
use crate::Nanos;

/// Number of log2 buckets (gaps up to 2^32 ns ≈ 4.3 s; longer gaps go in the last one).
pub const HISTOGRAM_BUCKETS: usize = 32;
const DECAY_AT: u32 = 1024;
const RECOMPUTE_EVERY: u8 = 8;

/// Parameters of [`Histogram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramConfig {
    /// Largest window.
    pub max_ns: Nanos,
    /// Initial estimate of what a sleeping wakeup costs.
    pub wake_ns: Nanos,
    /// Value of a nanosecond of polling CPU relative to one of wakeup latency, in percent (1..=100).
    pub cpu_pct: u32,
}

impl Default for HistogramConfig {
    fn default() -> Self {
        Self {
            max_ns: 200_000,
            wake_ns: 30_000,
            cpu_pct: 10,
        }
    }
}

/// The idle-gap histogram wait policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Histogram {
    cfg: HistogramConfig,
    buckets: [u32; HISTOGRAM_BUCKETS],
    /// Sum of the gaps in each bucket, ns (what polling until each of them costs).
    sums: [u64; HISTOGRAM_BUCKETS],
    total: u32,
    wake_ns: Nanos,
    window: Nanos,
    start: Nanos,
    since_recompute: u8,
}

fn bucket_of(gap: Nanos) -> usize {
    let log = 63 - gap.max(1).leading_zeros();
    usize::try_from(log)
        .unwrap_or(HISTOGRAM_BUCKETS - 1)
        .min(HISTOGRAM_BUCKETS - 1)
}

impl Histogram {
    /// An empty histogram (window 0 until gaps have been seen).
    #[must_use]
    pub fn new(cfg: HistogramConfig) -> Self {
        Self {
            cfg,
            buckets: [0; HISTOGRAM_BUCKETS],
            sums: [0; HISTOGRAM_BUCKETS],
            total: 0,
            wake_ns: cfg.wake_ns,
            window: 0,
            start: 0,
            since_recompute: 0,
        }
    }

    /// The learned cost of a sleeping wakeup.
    #[must_use]
    pub fn wake_ns(&self) -> Nanos {
        self.wake_ns
    }

    fn record(&mut self, gap: Nanos) {
        let k = bucket_of(gap);
        self.buckets[k] += 1;
        self.sums[k] = self.sums[k].saturating_add(gap);
        self.total += 1;
        if self.total >= DECAY_AT {
            self.total = 0;
            for (b, sum) in self.buckets.iter_mut().zip(&mut self.sums) {
                *b /= 2;
                *sum /= 2;
                self.total += *b;
            }
        }
    }

    fn learn_wake_cost(&mut self, cost: Nanos) {
        if cost == 0 {
            return;
        }
        if cost >= self.wake_ns {
            self.wake_ns += (cost - self.wake_ns) >> 3;
        } else {
            self.wake_ns -= (self.wake_ns - cost) >> 3;
        }
    }

    /// The best window for the current histogram.
    fn choose(&self) -> Nanos {
        let cpu = i128::from(self.cfg.cpu_pct);
        let wake = i128::from(self.wake_ns) * 100;
        let (mut best_w, mut best_score) = (0u64, 0i128);
        let (mut hits, mut hit_poll_ns) = (0i128, 0i128);
        for (k, (&count, &sum)) in self.buckets.iter().zip(&self.sums).enumerate() {
            let edge = 1u64 << (k + 1);
            if edge > self.cfg.max_ns {
                break;
            }
            hits += i128::from(count);
            hit_poll_ns += i128::from(sum);
            let misses = i128::from(self.total) - hits;
            let score = hits * wake - cpu * (hit_poll_ns + misses * i128::from(edge));
            if score > best_score {
                (best_w, best_score) = (edge, score);
            }
        }
        best_w
    }
}

impl Waiter for Histogram {
    fn begin(&mut self, now: Nanos) -> WaitDecision {
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
        let resumed = now.saturating_sub(self.start);
        if outcome.slept {
            // The event came `wake_cost_ns` before the waiter ran again (0 when unknown).
            self.record(resumed.saturating_sub(outcome.wake_cost_ns));
            self.learn_wake_cost(outcome.wake_cost_ns);
        } else {
            self.record(resumed);
        }
        self.since_recompute += 1;
        if self.since_recompute >= RECOMPUTE_EVERY {
            self.since_recompute = 0;
            self.window = self.choose();
        }
    }

    fn window_ns(&self) -> Nanos {
        self.window
    }

    fn max_window_ns(&self) -> Nanos {
        self.cfg.max_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(h: &mut Histogram, gaps: &[Nanos], rounds: usize) {
        let mut t = 0;
        for _ in 0..rounds {
            for &g in gaps {
                let w = h.begin(t).window_ns(t);
                t += g;
                h.end(
                    t,
                    WakeOutcome {
                        slept: g > w,
                        ..WakeOutcome::SLEPT
                    },
                );
            }
        }
    }

    #[test]
    fn short_gaps_get_a_window_just_above_them() {
        let mut h = Histogram::new(HistogramConfig::default());
        feed(&mut h, &[3_000], 64);
        // 3 µs gaps sit in bucket [2048, 4096): the window is that edge, not the 200 µs max.
        assert_eq!(h.window_ns(), 4_096);
    }

    #[test]
    fn long_gaps_get_no_window() {
        let mut h = Histogram::new(HistogramConfig::default());
        feed(&mut h, &[5_000_000], 64);
        assert_eq!(h.window_ns(), 0);
    }

    #[test]
    fn bimodal_gaps_poll_for_the_short_mode_only() {
        let mut h = Histogram::new(HistogramConfig::default());
        // 70 % of gaps are 20 µs, 30 % are 10 ms: polling 32 µs catches the 70 %.
        feed(
            &mut h,
            &[
                20_000, 20_000, 20_000, 20_000, 20_000, 20_000, 20_000, 10_000_000, 10_000_000,
                10_000_000,
            ],
            20,
        );
        assert_eq!(h.window_ns(), 32_768);
    }

    #[test]
    fn window_never_exceeds_max() {
        let mut h = Histogram::new(HistogramConfig {
            max_ns: 50_000,
            ..HistogramConfig::default()
        });
        feed(&mut h, &[100_000], 64);
        assert!(h.window_ns() <= 50_000);
    }

    /// Each wait: the event comes `gap` after `begin`; a poll that covers it ends then, else
    /// the waiter sleeps and resumes `wake_cost` later, reporting that cost.
    fn feed_events(h: &mut Histogram, gap: Nanos, wake_cost: Nanos, n: usize) {
        let mut t = 0;
        for _ in 0..n {
            let w = h.begin(t).window_ns(t);
            if gap <= w {
                t += gap;
                h.end(t, WakeOutcome::POLLED);
            } else {
                t += gap + wake_cost;
                h.end(
                    t,
                    WakeOutcome {
                        wake_cost_ns: wake_cost,
                        ..WakeOutcome::SLEPT
                    },
                );
            }
        }
    }

    #[test]
    fn slept_wakes_are_recorded_when_the_event_came_not_when_the_waiter_resumed() {
        let mut h = Histogram::new(HistogramConfig::default());
        // Events 20 µs into each wait. The first 8 waits sleep (no history yet) and resume
        // 60 µs after the event; recorded at 80 µs they would make the window 131 µs.
        feed_events(&mut h, 20_000, 60_000, 8);
        assert_eq!(h.window_ns(), 32_768);
        feed_events(&mut h, 20_000, 60_000, 64);
        assert_eq!(h.window_ns(), 32_768);
    }

    #[test]
    fn hit_cost_is_the_observed_gap_not_a_bucket_estimate() {
        // Polling at full price (cpu_pct 100) pays off only if a hit polls for less than a
        // wakeup costs (20 µs). Gaps of 17 µs do; a 3/4-of-edge estimate (24.6 µs) says not.
        let mut h = Histogram::new(HistogramConfig {
            wake_ns: 20_000,
            cpu_pct: 100,
            ..HistogramConfig::default()
        });
        feed(&mut h, &[17_000], 64);
        assert_eq!(h.window_ns(), 32_768);
        // Gaps of 25 µs cost more to poll for than the wakeup they save: no window.
        let mut h = Histogram::new(HistogramConfig {
            wake_ns: 20_000,
            cpu_pct: 100,
            ..HistogramConfig::default()
        });
        feed(&mut h, &[25_000], 64);
        assert_eq!(h.window_ns(), 0);
    }

    #[test]
    fn learns_wake_cost() {
        let mut h = Histogram::new(HistogramConfig::default());
        for _ in 0..100 {
            h.begin(0);
            h.end(
                1_000_000,
                WakeOutcome {
                    wake_cost_ns: 5_000,
                    ..WakeOutcome::SLEPT
                },
            );
        }
        assert!(h.wake_ns() < 6_000, "{}", h.wake_ns());
    }
}
