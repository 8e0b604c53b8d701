//! Host profiles: named CPU generations / kernel eras, each a table of host idle states
//! (C-states) with the source next to every number, and a menu-like cpuidle governor that
//! picks one when a pCPU goes idle. A scenario picks a profile (`profile = "..."` in
//! `[model]`); nothing here is set per check.
//!
//! Primitive costs (`crate::costs`) are shared by the Intel profiles: the only published
//! per-primitive breakdown is the 2015 Sandy Bridge one (seeds.md §2), and the references
//! hold no per-primitive numbers for Westmere or Haswell. The profiles differ in idle
//! states. Because the measured primitives (scheduler wakeup, native IPI wakeup) already
//! include leaving the shallowest state, a wakeup is charged only the *extra* exit latency
//! of a deeper state: `exit_latency(chosen) - exit_latency(shallowest)`.

use crate::Nanos;

/// One host idle state (Linux `struct cpuidle_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CState {
    /// Name as in intel_idle.
    pub name: &'static str,
    /// Declared worst-case exit latency.
    pub exit_latency_ns: Nanos,
    /// Shortest idle time for which entering the state pays off.
    pub target_residency_ns: Nanos,
}

const fn cs(name: &'static str, exit_us: Nanos, residency_us: Nanos) -> CState {
    CState {
        name,
        exit_latency_ns: exit_us * 1_000,
        target_residency_ns: residency_us * 1_000,
    }
}

/// Nehalem and Westmere: Linux drivers/idle/intel_idle.c `nehalem_cstates` (exit latency /
/// target residency in µs: C1 3/6, C1E 10/20, C3 20/80, C6 200/800).
pub const NEHALEM: &[CState] = &[
    cs("C1", 3, 6),
    cs("C1E", 10, 20),
    cs("C3", 20, 80),
    cs("C6", 200, 800),
];

/// Sandy Bridge: intel_idle.c `snb_cstates` (C1 2/2, C1E 10/20, C3 80/211, C6 104/345,
/// C7 109/345).
pub const SANDY_BRIDGE: &[CState] = &[
    cs("C1", 2, 2),
    cs("C1E", 10, 20),
    cs("C3", 80, 211),
    cs("C6", 104, 345),
    cs("C7", 109, 345),
];

/// Haswell: intel_idle.c `hsw_cstates` (C1 2/2, C1E 10/20, C3 33/100, C6 133/400, C7s
/// 166/500; C8-C10 exist on client parts only and are left out).
pub const HASWELL: &[CState] = &[
    cs("C1", 2, 2),
    cs("C1E", 10, 20),
    cs("C3", 33, 100),
    cs("C6", 133, 400),
    cs("C7s", 166, 500),
];

/// A named host profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// Name used in scenarios.
    pub name: &'static str,
    /// Idle states the host may enter, shallowest first.
    pub cstates: &'static [CState],
    /// Upper bound of the governor's prediction: the host's next timer event when idle
    /// (tickless host, one tick at CONFIG_HZ=250: 4 ms; assumption).
    pub next_timer_ns: Nanos,
    /// Where the table comes from and what limits it.
    pub about: &'static str,
}

/// The profiles.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "westmere-2012",
        cstates: NEHALEM,
        next_timer_ns: 4_000_000,
        about: "FAST'12-era host (Westmere-EP, Linux 3.x, intel_idle + menu): \
                intel_idle nehalem_cstates, all states enabled",
    },
    Profile {
        name: "sandybridge-2015",
        cstates: &[cs("C1", 2, 2)],
        next_timer_ns: 4_000_000,
        about: "KVM Forum 2015 host (Sandy Bridge 2.6 GHz): C1 only. Inferred from the talk's \
                bare-metal IPI wakeup of 1,200 cycles after ~100 us halts: C1E (10 us) or \
                deeper would show in it, so deeper states were off on that machine",
    },
    Profile {
        name: "sandybridge",
        cstates: SANDY_BRIDGE,
        next_timer_ns: 4_000_000,
        about: "Sandy Bridge with every intel_idle state enabled (snb_cstates)",
    },
    Profile {
        name: "haswell",
        cstates: HASWELL,
        next_timer_ns: 4_000_000,
        about: "Haswell server with every intel_idle state enabled (hsw_cstates)",
    },
];

/// The idle states a `this-host` costs file measured: none if
/// [`crate::costs::Costs::host_idle_deep_exit_ns`] is 0 (every era profile), else a
/// shallow state (exit latency 0 beyond the measured primitives, which are taken after
/// short idles) and a deep one that a wake pays `host_idle_deep_exit_ns` more to leave,
/// chosen by the governor when it predicts at least `host_idle_deep_residency_ns` of idle.
/// A named profile's table replaces them.
#[must_use]
pub fn measured_states(costs: &crate::costs::Costs) -> Vec<CState> {
    if costs.host_idle_deep_exit_ns == 0 {
        return Vec::new();
    }
    vec![
        CState {
            name: "measured-shallow",
            exit_latency_ns: 0,
            target_residency_ns: 0,
        },
        CState {
            name: "measured-deep",
            exit_latency_ns: costs.host_idle_deep_exit_ns,
            target_residency_ns: costs.host_idle_deep_residency_ns,
        },
    ]
}

/// The profile named `name`.
#[must_use]
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// menu's `RESOLUTION * DECAY` (1024 * 8): a correction factor of 1.0.
const CORR_ONE: u64 = 1024 * 8;
/// menu's `DECAY`: each wakeup moves the correction factor 1/8 of the way to its ratio.
const CORR_DECAY: u64 = 8;
/// menu's `MAX_INTERESTING` (50 ms): a longer idle counts as a perfect prediction.
const MAX_INTERESTING_NS: Nanos = 50_000_000;

/// Menu-like governor state of one pCPU: the last idle durations and menu's correction
/// factors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Governor {
    recent: [Nanos; 8],
    n: usize,
    next: usize,
    /// When the pCPU went idle and the state index it entered.
    pub idle: Option<(Nanos, usize)>,
    /// menu's `correction_factor` per bucket (in units of 1/`CORR_ONE`; 0 = not used yet,
    /// i.e. 1.0): bucket 0 without I/O waiters, 1 with (menu's `which_bucket` also splits
    /// by the expected idle's decade, which is always the model's fixed next timer).
    corr: [u64; 2],
    /// Bucket and expected idle (the next timer) of the last selection, for `record`.
    bucket: usize,
    expected: Nanos,
}

impl Governor {
    /// Record an idle period that just ended (its length excludes the state's exit
    /// latency, as menu's `menu_update` deducts it), and update the bucket's correction
    /// factor of the selection it ended (menu: `new = old * (DECAY - 1) / DECAY +
    /// RESOLUTION * measured / expected`, measured capped at expected).
    pub fn record(&mut self, ns: Nanos) {
        self.recent[self.next] = ns;
        self.next = (self.next + 1) % self.recent.len();
        self.n = (self.n + 1).min(self.recent.len());
        let b = self.bucket;
        let ratio = if ns < MAX_INTERESTING_NS {
            (CORR_ONE / CORR_DECAY * ns.min(self.expected)).checked_div(self.expected)
        } else {
            Some(CORR_ONE / CORR_DECAY)
        };
        // No selection yet (expected 0): nothing to correct.
        if let Some(add) = ratio {
            let decayed = self.factor(b) * (CORR_DECAY - 1) / CORR_DECAY;
            self.corr[b] = (decayed + add).max(1);
        }
    }

    fn factor(&self, bucket: usize) -> u64 {
        match self.corr[bucket] {
            0 => CORR_ONE,
            f => f,
        }
    }

    /// Predicted idle time: menu's "typical interval" of the recent idle periods (their mean
    /// if the spread is small: mean > 6 standard deviations or variance ≤ 400 µs²; else the
    /// largest is dropped and it tries again, up to 3 times), capped by the next timer.
    /// Without a typical interval: the next timer, times the correction factor of the
    /// current bucket if `correction` (menu's `expected_us * correction_factor[bucket]`;
    /// without it, the bare next timer: the model before the eighth session of issue 16).
    #[must_use]
    pub fn predict(&self, next_timer_ns: Nanos, correction: bool) -> Nanos {
        let mut v: Vec<Nanos> = self.recent[..self.n].to_vec();
        v.sort_unstable();
        for _ in 0..3 {
            if v.len() < 3 {
                break;
            }
            let n = v.len() as u128;
            let sum: u128 = v.iter().map(|&x| u128::from(x)).sum();
            let avg = sum / n;
            let var: u128 = v
                .iter()
                .map(|&x| {
                    let d = u128::from(x).abs_diff(avg);
                    d * d
                })
                .sum::<u128>()
                / n;
            // In ns²: 400 µs² = 4e8 ns²; avg > 6 σ  <=>  avg² > 36 var.
            if var <= 400_000_000 || avg * avg > 36 * var {
                return Nanos::try_from(avg)
                    .unwrap_or(Nanos::MAX)
                    .min(next_timer_ns);
            }
            v.pop();
        }
        if correction {
            let f = u128::from(self.factor(self.bucket));
            let p = u128::from(next_timer_ns) * f / u128::from(CORR_ONE);
            Nanos::try_from(p).unwrap_or(next_timer_ns)
        } else {
            next_timer_ns
        }
    }

    /// The deepest state whose target residency fits the prediction and whose exit latency
    /// times `multiplier` is below it (menu's `exit_latency * multiplier <= predicted`;
    /// menu's `performance_multiplier()` is `1 + 10 * nr_iowait_cpu` plus a load term not
    /// modelled). None passes: the shallowest state (menu would poll, which the model does
    /// not charge below the measured primitives).
    /// `correction`: menu's correction factor in the fallback prediction (see `predict`).
    #[must_use]
    pub fn select(
        &mut self,
        states: &[CState],
        next_timer_ns: Nanos,
        multiplier: u64,
        correction: bool,
    ) -> usize {
        self.bucket = usize::from(multiplier > 1);
        self.expected = next_timer_ns;
        let predicted = self.predict(next_timer_ns, correction);
        states
            .iter()
            .rposition(|s| {
                s.target_residency_ns <= predicted
                    && s.exit_latency_ns.saturating_mul(multiplier) <= predicted
            })
            .unwrap_or(0)
    }
}

/// Extra wakeup latency of state `i` over the shallowest one (already in the primitives).
#[must_use]
pub fn extra_exit_ns(states: &[CState], i: usize) -> Nanos {
    match (states.get(i), states.first()) {
        (Some(s), Some(first)) => s.exit_latency_ns.saturating_sub(first.exit_latency_ns),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_short_idles_pick_a_shallow_state_and_long_ones_a_deep_one() {
        let mut g = Governor::default();
        for _ in 0..8 {
            g.record(15_000);
        }
        assert_eq!(g.predict(4_000_000, false), 15_000);
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 1, false)].name, "C1");
        for _ in 0..8 {
            g.record(1_000_000);
        }
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 1, false)].name, "C6");
        assert_eq!(extra_exit_ns(NEHALEM, 3), 197_000);
    }

    #[test]
    fn an_io_waiter_keeps_the_cpu_shallow() {
        // menu: exit_latency * (1 + 10 * nr_iowait) must stay below the prediction.
        let mut g = Governor::default();
        for _ in 0..8 {
            g.record(30_000);
        }
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 1, false)].name, "C1E");
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 11, false)].name, "C1");
        for _ in 0..8 {
            g.record(1_000_000);
        }
        // 20 us x 11 fits 1 ms, 200 us x 11 does not: C3 instead of C6.
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 11, false)].name, "C3");
    }

    #[test]
    fn scattered_idles_fall_back_to_the_next_timer() {
        let mut g = Governor::default();
        for x in [
            1_000, 900_000, 5_000, 3_000_000, 20_000, 700_000, 50, 2_000_000,
        ] {
            g.record(x);
        }
        assert_eq!(g.predict(4_000_000, false), 4_000_000);
        assert_eq!(Governor::default().predict(4_000_000, false), 4_000_000);
    }

    #[test]
    fn menu_correction_pulls_a_scattered_fallback_down_to_the_measured_idles() {
        // Scattered idles of 20-100 us: no typical interval. Without the correction the
        // fallback is the next timer (4 ms, C6); with it, 4 ms times a factor that decays
        // by 1/8 per wakeup toward measured / expected.
        let scattered = [
            20_000, 100_000, 30_000, 90_000, 25_000, 80_000, 40_000, 95_000,
        ];
        let mut g = Governor::default();
        let first = g.select(NEHALEM, 4_000_000, 1, true);
        assert_eq!(NEHALEM[first].name, "C6", "factor 1.0 at the start");
        for _ in 0..8 {
            for &x in &scattered {
                let _ = g.select(NEHALEM, 4_000_000, 1, true);
                g.record(x);
            }
        }
        assert_eq!(g.predict(4_000_000, false), 4_000_000);
        let p = g.predict(4_000_000, true);
        assert!((20_000..=100_000).contains(&p), "{p}");
        let s = g.select(NEHALEM, 4_000_000, 1, true);
        assert!(
            NEHALEM[s].name == "C1E" || NEHALEM[s].name == "C3",
            "{}",
            NEHALEM[s].name
        );
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 1, false)].name, "C6");
        // The bucket with I/O waiters has its own factor, still 1.0: 4 ms predicted, and
        // C6's 200 us x 11 fits it.
        assert_eq!(
            NEHALEM[g.clone().select(NEHALEM, 4_000_000, 11, true)].name,
            "C6"
        );
    }
}
