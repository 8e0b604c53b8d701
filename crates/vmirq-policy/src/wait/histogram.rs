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
//! changes. That memory is long (a burst of short gaps outweighs the idle gaps after it for
//! about two thousand halts), so with `forget = N` a run of `N` surprising gaps in a row also
//! halves them and recomputes the window at once: gaps the current window does not catch while
//! it polls, or, while it does not poll, gaps short enough that a poll would have paid for
//! itself (`gap × cpu_pct < wake_ns × 100`, and under `max_ns`). Halving keeps the shape of
//! the histogram, so on a stationary mix such runs change nothing; after a phase change each
//! run gives the new gaps twice the weight of the old ones. The choice is recomputed every 8
//! observations (32 buckets, prefix sums: O(32)); `begin` is O(1).

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
    /// Surprising gaps in a row after which the counts are halved (0: never; see the module
    /// documentation).
    pub forget: u32,
}

impl Default for HistogramConfig {
    fn default() -> Self {
        Self {
            max_ns: 200_000,
            wake_ns: 30_000,
            cpu_pct: 10,
            forget: 8,
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
    /// Surprising gaps in a row (see `forget`).
    surprises: u32,
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
            surprises: 0,
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
            self.halve();
        }
    }

    fn halve(&mut self) {
        self.total = 0;
        for (b, sum) in self.buckets.iter_mut().zip(&mut self.sums) {
            *b /= 2;
            *sum /= 2;
            self.total += *b;
        }
    }

    /// Whether `gap` disagrees with the current window: a poll that ran out, or a sleep where
    /// polling would have paid for itself.
    fn surprising(&self, gap: Nanos) -> bool {
        if self.window > 0 {
            gap >= self.window
        } else {
            gap < self.cfg.max_ns
                && gap.saturating_mul(u64::from(self.cfg.cpu_pct))
                    < self.wake_ns.saturating_mul(100)
        }
    }

    /// Count a run of surprising gaps; at `forget` of them, halve the counts. Returns whether
    /// it did (the window is then recomputed at once).
    fn note_surprise(&mut self, gap: Nanos) -> bool {
        if self.cfg.forget == 0 || !self.surprising(gap) {
            self.surprises = 0;
            return false;
        }
        self.surprises += 1;
        if self.surprises < self.cfg.forget {
            return false;
        }
        self.surprises = 0;
        self.halve();
        true
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
        // After a sleep the event came `wake_cost_ns` before the waiter ran again (0 when
        // unknown).
        let gap = if outcome.slept {
            resumed.saturating_sub(outcome.wake_cost_ns)
        } else {
            resumed
        };
        let forgot = self.note_surprise(gap);
        self.record(gap);
        if outcome.slept {
            self.learn_wake_cost(outcome.wake_cost_ns);
        }
        self.since_recompute += 1;
        if forgot || self.since_recompute >= RECOMPUTE_EVERY {
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

    fn forgetful(forget: u32) -> Histogram {
        Histogram::new(HistogramConfig {
            forget,
            ..HistogramConfig::default()
        })
    }

    /// Halts of `gap` fed one at a time until the window satisfies `done` (at most `limit`).
    fn halts_until(h: &mut Histogram, gap: Nanos, limit: usize, done: fn(Nanos) -> bool) -> usize {
        for n in 0..limit {
            if done(h.window_ns()) {
                return n;
            }
            feed(h, &[gap], 1);
        }
        limit
    }

    #[test]
    fn forget_stops_polling_soon_after_a_burst_ends() {
        // A burst of 4000 gaps of 20 µs, then idle gaps of 1 ms (past the window's reach).
        let mut plain = forgetful(0);
        let mut quick = forgetful(8);
        for h in [&mut plain, &mut quick] {
            feed(h, &[20_000], 4000);
            assert_eq!(h.window_ns(), 32_768);
        }
        let idle = |w: Nanos| w == 0;
        // The decaying counts alone take well over a thousand idle halts to let go ...
        assert!(halts_until(&mut plain, 1_000_000, 5000, idle) > 1000);
        // ... runs of 8 wasted polls halve them each time: about ten runs.
        let n = halts_until(&mut quick, 1_000_000, 5000, idle);
        assert!(n <= 120, "still polling after {n} idle halts");
    }

    #[test]
    fn forget_resumes_polling_soon_after_a_burst_starts() {
        let mut plain = forgetful(0);
        let mut quick = forgetful(8);
        for h in [&mut plain, &mut quick] {
            feed(h, &[1_000_000], 4000);
            assert_eq!(h.window_ns(), 0);
        }
        let polling = |w: Nanos| w == 32_768;
        let slow = halts_until(&mut plain, 20_000, 5000, polling);
        let n = halts_until(&mut quick, 20_000, 5000, polling);
        assert!(n <= 40, "not polling after {n} short gaps");
        assert!(n < slow, "forget {n} halts, plain {slow}");
    }

    #[test]
    fn forget_leaves_a_stationary_mix_alone() {
        // 7 short gaps, then 8 long ones: every cycle ends with a full run of surprises (the
        // counts are halved), yet the mix, and so the window, stays the same.
        let mut h = forgetful(8);
        let mut cycle = [20_000; 15];
        cycle[7..].fill(10_000_000);
        feed(&mut h, &cycle, 8);
        for _ in 0..200 {
            feed(&mut h, &cycle, 1);
            assert_eq!(h.window_ns(), 32_768);
        }
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
