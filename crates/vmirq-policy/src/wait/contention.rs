//! The contention gate: stop polling while a neighbour wants the waiter's CPU.
//!
//! KVM ends a halt poll as soon as another task is runnable on the vCPU's CPU
//! (`single_task_running()` in `kvm_vcpu_halt()`): a poll burns CPU a neighbour could use. A
//! userspace waiter cannot look at its run queue, but it can see what the scheduler did to it:
//! the time it was runnable and not running (its run-queue delay, the second field of
//! `/proc/thread-self/schedstat`) against the time it ran (the first). The caller reads those
//! and passes the differences in as [`CpuSample`]s; the gate only does arithmetic on them.
//!
//! Waits for the waiter's own sibling threads (io_uring's io-wq workers run the storage
//! operations of a poller that yields to them, on its CPU) are the waiter's own work: the
//! caller reports how long siblings ran and that much is taken off the wait. (A process whose
//! siblings run on other CPUs makes the gate see less contention than there is.)
//!
//! The scheduler shares a CPU by weight, so the waited share is the neighbours' claim on the
//! waiter's CPU: a nice-0 task that runs whenever it can makes a nice-0 poller wait about half
//! of its runnable time, a nice-19 one about 1.4 % (weights 15 against 1024), a CPU of its own
//! only the brief runs of kernel threads. A waiter with real-time priority never waits for ordinary tasks, so it is
//! never stopped by them (its priority says it may take their CPU).
//!
//! Verdicts: samples add up until the waiter has been runnable (ran + waited) for
//! `verdict_ns`; the verdict is *contended* when it waited at least `wait_pct` percent of that.
//! A contended verdict closes the gate for `hold_ns`, doubled with each contended verdict in a
//! row up to `hold_max_ns`; while closed every wait sleeps. When the hold is over the gate
//! opens again (a probe), and a clean verdict while open resets the hold to `hold_ns`. Clean
//! verdicts while closed prove nothing (a waiter that does not poll leaves the CPU to its
//! neighbours) and change nothing.
//!
//! The gate never reads a clock or the OS; `now` and the samples come from the caller.

use super::WaitDecision;
use crate::Nanos;

/// What the scheduler did to the waiter since the previous sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuSample {
    /// Time the waiter ran on a CPU.
    pub ran_ns: Nanos,
    /// Time the waiter was runnable but waited for a CPU (run-queue delay).
    pub waited_ns: Nanos,
    /// Time the waiter's sibling threads ran (the other threads of its own process, such as
    /// io_uring's io-wq workers, which inherit its CPU): waiting for them is the waiter's own
    /// work, not a neighbour's claim, so it is taken off `waited_ns`.
    pub siblings_ns: Nanos,
}

impl CpuSample {
    /// The part of the wait that neighbours caused: `waited_ns` less what sibling threads ran.
    #[must_use]
    pub fn neighbour_wait_ns(&self) -> Nanos {
        self.waited_ns.saturating_sub(self.siblings_ns)
    }
}

/// Parameters of [`ContentionGate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentionConfig {
    /// Waited share of runnable time, in percent, from which a verdict is contended (1..=100;
    /// 0 disables the gate: it never closes).
    pub wait_pct: u32,
    /// Runnable time (ran + waited) each verdict is made over.
    pub verdict_ns: Nanos,
    /// How long the first contended verdict closes the gate.
    pub hold_ns: Nanos,
    /// Longest close, however long contention lasts (the gate probes at least this often).
    pub hold_max_ns: Nanos,
}

impl ContentionConfig {
    /// A gate that never closes.
    pub const OFF: Self = Self {
        wait_pct: 0,
        verdict_ns: 4_000_000,
        hold_ns: 10_000_000,
        hold_max_ns: 1_000_000_000,
    };

    /// Whether the gate can ever close.
    #[must_use]
    pub const fn enabled(&self) -> bool {
        self.wait_pct > 0
    }
}

impl Default for ContentionConfig {
    /// 10 %: well above what a nice-19 neighbour (1.4 % by the weights) or kernel threads make
    /// a nice-0 poller wait, well below a nice-0 neighbour (about 50 %). Verdicts over 4 ms of
    /// runnable time span a few scheduler slices (0.75-3 ms), so one slice given to a
    /// neighbour does not decide alone.
    fn default() -> Self {
        Self {
            wait_pct: 10,
            ..Self::OFF
        }
    }
}

/// Counts of what the gate did, for the caller's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Verdicts made.
    pub verdicts: u64,
    /// Contended verdicts.
    pub contended: u64,
    /// Poll decisions turned into sleeps.
    pub refused: u64,
}

/// Stops polling under CPU contention (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentionGate {
    cfg: ContentionConfig,
    ran_ns: Nanos,
    waited_ns: Nanos,
    /// Closed until this time (open when `now >= closed_until`).
    closed_until: Nanos,
    /// The next close's length.
    hold_ns: Nanos,
    stats: GateStats,
}

impl ContentionGate {
    /// An open gate.
    #[must_use]
    pub fn new(cfg: ContentionConfig) -> Self {
        Self {
            cfg,
            ran_ns: 0,
            waited_ns: 0,
            closed_until: 0,
            hold_ns: cfg.hold_ns,
            stats: GateStats::default(),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> ContentionConfig {
        self.cfg
    }

    /// What the gate has done so far.
    #[must_use]
    pub fn stats(&self) -> GateStats {
        self.stats
    }

    /// Whether polling is allowed at `now`.
    #[must_use]
    pub fn is_open(&self, now: Nanos) -> bool {
        now >= self.closed_until
    }

    /// Record a sample taken at `now`. Returns whether polling is still allowed.
    pub fn on_sample(&mut self, now: Nanos, sample: CpuSample) -> bool {
        if !self.cfg.enabled() {
            return true;
        }
        self.ran_ns = self.ran_ns.saturating_add(sample.ran_ns);
        self.waited_ns = self.waited_ns.saturating_add(sample.neighbour_wait_ns());
        let runnable = self.ran_ns.saturating_add(self.waited_ns);
        if runnable >= self.cfg.verdict_ns.max(1) {
            let contended = u128::from(self.waited_ns) * 100
                >= u128::from(self.cfg.wait_pct) * u128::from(runnable);
            self.verdict(now, contended);
            self.ran_ns = 0;
            self.waited_ns = 0;
        }
        self.is_open(now)
    }

    fn verdict(&mut self, now: Nanos, contended: bool) {
        self.stats.verdicts += 1;
        if contended {
            self.stats.contended += 1;
            self.closed_until = now.saturating_add(self.hold_ns);
            self.hold_ns = self
                .hold_ns
                .saturating_mul(2)
                .min(self.cfg.hold_max_ns.max(self.cfg.hold_ns));
        } else if self.is_open(now) {
            self.hold_ns = self.cfg.hold_ns;
        }
    }

    /// Pass a wait policy's decision through the gate: a poll becomes a sleep while closed.
    pub fn admit(&mut self, now: Nanos, decision: WaitDecision) -> WaitDecision {
        match decision {
            WaitDecision::Poll { .. } if !self.is_open(now) => {
                self.stats.refused += 1;
                WaitDecision::Sleep
            }
            d => d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const POLL: WaitDecision = WaitDecision::Poll { until: u64::MAX };

    fn gate() -> ContentionGate {
        ContentionGate::new(ContentionConfig::default())
    }

    /// Feed 1 ms samples from `t` for `ms` milliseconds, waiting `wait_permille` of each.
    fn feed(g: &mut ContentionGate, t: &mut Nanos, ms: u64, wait_permille: u64) {
        for _ in 0..ms {
            *t += MS;
            let waited_ns = MS * wait_permille / 1000;
            g.on_sample(
                *t,
                CpuSample {
                    ran_ns: MS - waited_ns,
                    waited_ns,
                    siblings_ns: 0,
                },
            );
        }
    }

    #[test]
    fn a_nice_19_neighbour_or_a_quiet_cpu_leaves_polling_alone() {
        let mut g = gate();
        let mut t = 0;
        feed(&mut g, &mut t, 1000, 14); // 1.4 %: a nice-19 busy loop's share
        feed(&mut g, &mut t, 1000, 2);
        assert!(g.is_open(t));
        assert_eq!(g.admit(t, POLL), POLL);
        assert_eq!(g.stats().contended, 0);
        assert_eq!(g.stats().verdicts, 500);
    }

    #[test]
    fn an_equal_neighbour_closes_the_gate_at_the_first_verdict() {
        let mut g = gate();
        let mut t = 0;
        feed(&mut g, &mut t, 3, 500);
        assert!(g.is_open(t), "no verdict before 4 ms of runnable time");
        feed(&mut g, &mut t, 1, 500);
        assert!(!g.is_open(t));
        assert_eq!(g.admit(t, POLL), WaitDecision::Sleep);
        assert_eq!(g.admit(t, WaitDecision::Sleep), WaitDecision::Sleep);
        assert_eq!(g.stats().refused, 1);
        // Open again after the 10 ms hold.
        assert!(!g.is_open(t + 10 * MS - 1));
        assert!(g.is_open(t + 10 * MS));
    }

    #[test]
    fn the_threshold_is_a_share_of_runnable_time() {
        for (permille, closed) in [(99, false), (100, true), (300, true)] {
            let mut g = gate();
            let mut t = 0;
            feed(&mut g, &mut t, 4, permille);
            assert_eq!(!g.is_open(t), closed, "{permille}");
        }
    }

    #[test]
    fn persistent_contention_backs_off_exponentially_up_to_the_cap() {
        let mut g = gate();
        let mut t = 0;
        let mut holds = [0u64; 9];
        for hold in &mut holds {
            // Wait for the gate to open, then probe with 4 ms of contended polling.
            while !g.is_open(t) {
                t += MS;
            }
            let start = t;
            feed(&mut g, &mut t, 4, 500);
            let closed_at = t;
            while !g.is_open(t) {
                t += MS;
            }
            *hold = (t - closed_at) / MS;
            assert!(t - start >= 4 * MS);
        }
        assert_eq!(holds, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        // Probing costs at most one 4 ms verdict per second once backed off: under 0.5 %.
    }

    #[test]
    fn a_clean_verdict_while_open_resets_the_back_off() {
        let mut g = gate();
        let mut t = 0;
        feed(&mut g, &mut t, 4, 500);
        t += 10 * MS;
        feed(&mut g, &mut t, 4, 500); // hold now 40 ms next time
        t += 20 * MS;
        feed(&mut g, &mut t, 4, 0); // clean, while open
        feed(&mut g, &mut t, 4, 500);
        let closed_at = t;
        assert!(!g.is_open(closed_at + 10 * MS - 1));
        assert!(g.is_open(closed_at + 10 * MS));
    }

    #[test]
    fn clean_verdicts_while_closed_do_not_reopen() {
        let mut g = gate();
        let mut t = 0;
        feed(&mut g, &mut t, 4, 500);
        let reopen = t + 10 * MS;
        // 4 ms of runnable time within the hold, no waiting: still closed until the hold ends.
        for _ in 0..4 {
            t += MS;
            g.on_sample(
                t,
                CpuSample {
                    ran_ns: MS,
                    waited_ns: 0,
                    siblings_ns: 0,
                },
            );
        }
        assert!(t < reopen && !g.is_open(t));
        assert!(g.is_open(reopen));
    }

    #[test]
    fn waits_for_sibling_threads_are_not_contention() {
        // Half the time waiting, all of it while the poller's own io-wq worker ran.
        let mut g = gate();
        let mut t = 0;
        for _ in 0..8 {
            t += MS;
            g.on_sample(
                t,
                CpuSample {
                    ran_ns: MS / 2,
                    waited_ns: MS / 2,
                    siblings_ns: MS / 2,
                },
            );
        }
        assert!(g.is_open(t));
        assert_eq!((g.stats().verdicts, g.stats().contended), (1, 0));
        // Siblings explain only part of it: the rest still counts.
        let s = CpuSample {
            ran_ns: MS / 2,
            waited_ns: MS / 2,
            siblings_ns: MS / 4,
        };
        assert_eq!(s.neighbour_wait_ns(), MS / 4);
        for _ in 0..8 {
            t += MS;
            g.on_sample(t, s);
        }
        assert!(!g.is_open(t));
    }

    #[test]
    fn off_never_closes() {
        let mut g = ContentionGate::new(ContentionConfig::OFF);
        let mut t = 0;
        feed(&mut g, &mut t, 100, 1000);
        assert!(g.is_open(t));
        assert_eq!(g.admit(t, POLL), POLL);
        assert_eq!(g.stats(), GateStats::default());
    }

    #[test]
    fn huge_samples_saturate_instead_of_overflowing() {
        let mut g = gate();
        g.on_sample(
            u64::MAX,
            CpuSample {
                ran_ns: u64::MAX,
                waited_ns: u64::MAX,
                siblings_ns: 0,
            },
        );
        assert!(!g.is_open(u64::MAX - 1));
        assert_eq!(g.stats().contended, 1);
    }
}
