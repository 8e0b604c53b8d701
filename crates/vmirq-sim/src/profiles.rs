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

/// Menu-like governor state of one pCPU: the last idle durations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Governor {
    recent: [Nanos; 8],
    n: usize,
    next: usize,
    /// When the pCPU went idle and the state index it entered.
    pub idle: Option<(Nanos, usize)>,
}

impl Governor {
    /// Record an idle period that just ended.
    pub fn record(&mut self, ns: Nanos) {
        self.recent[self.next] = ns;
        self.next = (self.next + 1) % self.recent.len();
        self.n = (self.n + 1).min(self.recent.len());
    }

    /// Predicted idle time: menu's "typical interval" of the recent idle periods (their mean
    /// if the spread is small: mean > 6 standard deviations or variance ≤ 400 µs²; else the
    /// largest is dropped and it tries again, up to 3 times), capped by the next timer.
    #[must_use]
    pub fn predict(&self, next_timer_ns: Nanos) -> Nanos {
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
        next_timer_ns
    }

    /// The deepest state whose target residency fits the prediction and whose exit latency
    /// times `multiplier` is below it (menu's `exit_latency * multiplier <= predicted`;
    /// menu's `performance_multiplier()` is `1 + 10 * nr_iowait_cpu` plus a load term not
    /// modelled). None passes: the shallowest state (menu would poll, which the model does
    /// not charge below the measured primitives).
    #[must_use]
    pub fn select(&self, states: &[CState], next_timer_ns: Nanos, multiplier: u64) -> usize {
        let predicted = self.predict(next_timer_ns);
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
        assert_eq!(g.predict(4_000_000), 15_000);
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 1)].name, "C1");
        for _ in 0..8 {
            g.record(1_000_000);
        }
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 1)].name, "C6");
        assert_eq!(extra_exit_ns(NEHALEM, 3), 197_000);
    }

    #[test]
    fn an_io_waiter_keeps_the_cpu_shallow() {
        // menu: exit_latency * (1 + 10 * nr_iowait) must stay below the prediction.
        let mut g = Governor::default();
        for _ in 0..8 {
            g.record(30_000);
        }
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 1)].name, "C1E");
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 11)].name, "C1");
        for _ in 0..8 {
            g.record(1_000_000);
        }
        // 20 us x 11 fits 1 ms, 200 us x 11 does not: C3 instead of C6.
        assert_eq!(NEHALEM[g.select(NEHALEM, 4_000_000, 11)].name, "C3");
    }

    #[test]
    fn scattered_idles_fall_back_to_the_next_timer() {
        let mut g = Governor::default();
        for x in [
            1_000, 900_000, 5_000, 3_000_000, 20_000, 700_000, 50, 2_000_000,
        ] {
            g.record(x);
        }
        assert_eq!(g.predict(4_000_000), 4_000_000);
        assert_eq!(Governor::default().predict(4_000_000), 4_000_000);
    }
}
