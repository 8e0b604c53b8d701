//! Wake gaps: how long a sender waits after one wake was handled before it sends the next.
//!
//! `vmirq kvm wake` and `halt` wake a halted vCPU over and over; the gap before each send is
//! the idle time the waiter's policy has to guess. A [`GapSpec`] says how gaps are drawn:
//!
//! ```text
//! const:us=30                                   every gap 30 µs (--interval-us 30)
//! exp:mean_us=80                                exponential, mean 80 µs
//! bimodal:short_us=20,long_us=1000,short_pct=70 20 µs with 70 % probability, else 1000 µs
//! phased:short_us=20,long_us=1000,short_n=7000,long_n=3000
//!                                               7000 gaps of 20 µs, then 3000 of 1000 µs, repeated
//! ```
//!
//! `phased` is the non-stationary case: bursts of short gaps alternating with idle phases of
//! long ones, so the best window changes over time. It is deterministic (no draws).
//!
//! The same syntax and error style as vmirq's policy specs. Draws come from a seeded
//! SplitMix64 generator ([`Gaps`]), so one `(spec, seed)` gives the same sequence in every
//! cell: every poller of a comparison sees the same workload.

use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use vmirq_policy::spec::params::{split_spec, Params as SpecParams, Value};
use vmirq_policy::spec::SpecError;

/// Largest gap or mean accepted, µs (1 s). Longer gaps measure nothing a poll could catch.
pub const GAP_MAX_US: u64 = 1_000_000;
const KINDS: &str = "const, exp, bimodal, phased";
/// Largest block length of `phased`, gaps.
pub const PHASE_MAX_N: u64 = 10_000_000;

/// Why a gap spec was refused. Messages name the bad kind, key or value; the `key=value`
/// syntax and its errors are vmirq's spec syntax ([`vmirq_policy::spec::params`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GapSpecError {
    /// Nothing or an unknown distribution was given.
    #[error("unknown gap distribution `{0}`; expected one of: {KINDS}")]
    UnknownKind(String),
    /// A parameter is malformed, unknown, repeated or out of range.
    #[error(transparent)]
    Param(#[from] SpecError),
    /// A required parameter is missing.
    #[error("`{kind}` needs parameter `{key}`")]
    Missing {
        /// The distribution.
        kind: &'static str,
        /// The key.
        key: &'static str,
    },
    /// `short_us` is not below `long_us`.
    #[error("`{kind}`: short_us={short_us} must be below long_us={long_us}")]
    ShortNotBelowLong {
        /// The distribution.
        kind: &'static str,
        /// The short gap.
        short_us: u64,
        /// The long gap.
        long_us: u64,
    },
}

/// A validated gap distribution. Values in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapSpec {
    /// Every gap the same (`const:us=N`; 0 = back to back).
    Const {
        /// The gap.
        us: u64,
    },
    /// Exponential gaps (`exp:mean_us=M`): a memoryless sender.
    Exp {
        /// The mean gap (1 to [`GAP_MAX_US`]).
        mean_us: u64,
    },
    /// Two gap lengths (`bimodal:short_us=S,long_us=L,short_pct=P`).
    Bimodal {
        /// The short gap (1 to [`GAP_MAX_US`]).
        short_us: u64,
        /// The long gap (above `short_us`, at most [`GAP_MAX_US`]).
        long_us: u64,
        /// Share of short gaps, percent (1 to 99).
        short_pct: u8,
    },
    /// Phases (`phased:short_us=S,long_us=L,short_n=A,long_n=B`): `short_n` gaps of
    /// `short_us`, then `long_n` gaps of `long_us`, repeated. Gap `k` (from 0) is short when
    /// `k mod (short_n + long_n) < short_n`.
    Phased {
        /// The gap of the short phase (1 to [`GAP_MAX_US`]).
        short_us: u64,
        /// The gap of the long phase (above `short_us`, at most [`GAP_MAX_US`]).
        long_us: u64,
        /// Gaps per short phase (1 to [`PHASE_MAX_N`]).
        short_n: u64,
        /// Gaps per long phase (1 to [`PHASE_MAX_N`]).
        long_n: u64,
    },
}

impl GapSpec {
    /// Mean gap, ns (what `interval_ns` reports for a cell with this distribution).
    #[must_use]
    pub fn mean_ns(&self) -> u64 {
        match *self {
            Self::Const { us } => us.saturating_mul(1000),
            Self::Exp { mean_us } => mean_us.saturating_mul(1000),
            Self::Bimodal {
                short_us,
                long_us,
                short_pct,
            } => {
                let p = u64::from(short_pct.min(100));
                short_us
                    .saturating_mul(p)
                    .saturating_add(long_us.saturating_mul(100 - p))
                    .saturating_mul(10)
            }
            Self::Phased {
                short_us,
                long_us,
                short_n,
                long_n,
            } => {
                // Block lengths are at most 1e7 and gaps 1e6 µs: the products fit a u64.
                let total_us = short_us
                    .saturating_mul(short_n)
                    .saturating_add(long_us.saturating_mul(long_n));
                total_us.saturating_mul(1000) / short_n.saturating_add(long_n).max(1)
            }
        }
    }
}

impl fmt::Display for GapSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Const { us } => write!(f, "const:us={us}"),
            Self::Exp { mean_us } => write!(f, "exp:mean_us={mean_us}"),
            Self::Bimodal {
                short_us,
                long_us,
                short_pct,
            } => write!(
                f,
                "bimodal:short_us={short_us},long_us={long_us},short_pct={short_pct}"
            ),
            Self::Phased {
                short_us,
                long_us,
                short_n,
                long_n,
            } => write!(
                f,
                "phased:short_us={short_us},long_us={long_us},short_n={short_n},long_n={long_n}"
            ),
        }
    }
}

impl Serialize for GapSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The parameters of one distribution, each key at most once, checked in key order.
struct Params<'a> {
    kind: &'static str,
    keys: &'static [&'static str],
    values: [Option<Value<'a>>; 4],
}

impl<'a> Params<'a> {
    fn parse(
        kind: &'static str,
        keys: &'static [&'static str],
        params: Option<&'a str>,
    ) -> Result<Self, GapSpecError> {
        let mut p = Self {
            kind,
            keys,
            values: [None, None, None, None],
        };
        let mut parser = SpecParams::new(kind, keys, params);
        while let Some((key, value)) = parser.next_param()? {
            if let Some(i) = keys.iter().position(|k| *k == key) {
                p.values[i] = Some(value);
            }
        }
        Ok(p)
    }

    /// Key `i` as an integer in `[min, max]` (`_` separators allowed).
    fn int(
        &self,
        i: usize,
        min: u64,
        max: u64,
        expected: &'static str,
    ) -> Result<u64, GapSpecError> {
        let value = self.values[i].as_ref().ok_or(GapSpecError::Missing {
            kind: self.kind,
            key: self.keys[i],
        })?;
        Ok(value.int(min, max, expected)?)
    }
}

const US_EXPECTED: &str = "microseconds, 1 to 1000000";
const N_EXPECTED: &str = "a number of gaps, 1 to 10000000";

impl FromStr for GapSpec {
    type Err = GapSpecError;

    fn from_str(s: &str) -> Result<Self, GapSpecError> {
        let (name, params) = split_spec(s);
        match name {
            "const" => {
                let p = Params::parse("const", &["us"], params)?;
                Ok(Self::Const {
                    us: p.int(0, 0, GAP_MAX_US, "microseconds, 0 to 1000000")?,
                })
            }
            "exp" => {
                let p = Params::parse("exp", &["mean_us"], params)?;
                Ok(Self::Exp {
                    mean_us: p.int(0, 1, GAP_MAX_US, US_EXPECTED)?,
                })
            }
            "bimodal" => {
                let p = Params::parse("bimodal", &["short_us", "long_us", "short_pct"], params)?;
                let short_us = p.int(0, 1, GAP_MAX_US, US_EXPECTED)?;
                let long_us = p.int(1, 1, GAP_MAX_US, US_EXPECTED)?;
                let short_pct = p.int(2, 1, 99, "a percentage, 1 to 99")?;
                if short_us >= long_us {
                    return Err(GapSpecError::ShortNotBelowLong {
                        kind: "bimodal",
                        short_us,
                        long_us,
                    });
                }
                Ok(Self::Bimodal {
                    short_us,
                    long_us,
                    short_pct: u8::try_from(short_pct).unwrap_or(99),
                })
            }
            "phased" => {
                let p = Params::parse(
                    "phased",
                    &["short_us", "long_us", "short_n", "long_n"],
                    params,
                )?;
                let short_us = p.int(0, 1, GAP_MAX_US, US_EXPECTED)?;
                let long_us = p.int(1, 1, GAP_MAX_US, US_EXPECTED)?;
                let short_n = p.int(2, 1, PHASE_MAX_N, N_EXPECTED)?;
                let long_n = p.int(3, 1, PHASE_MAX_N, N_EXPECTED)?;
                if short_us >= long_us {
                    return Err(GapSpecError::ShortNotBelowLong {
                        kind: "phased",
                        short_us,
                        long_us,
                    });
                }
                Ok(Self::Phased {
                    short_us,
                    long_us,
                    short_n,
                    long_n,
                })
            }
            other => Err(GapSpecError::UnknownKind(other.to_string())),
        }
    }
}

/// A gap distribution and the seed of its draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gaps {
    /// The distribution.
    pub spec: GapSpec,
    /// Seed of the generator (unused by `const` and `phased`).
    pub seed: u64,
}

impl Gaps {
    /// A constant gap (the `--interval-us` workload).
    #[must_use]
    pub fn constant_ns(interval_ns: u64) -> Self {
        Self {
            spec: GapSpec::Const {
                us: interval_ns / 1000,
            },
            seed: 0,
        }
    }

    /// A fresh draw sequence (the same for the same spec and seed).
    #[must_use]
    pub fn draws(&self) -> GapDraws {
        GapDraws {
            spec: self.spec,
            state: self.seed,
            index: 0,
        }
    }
}

/// An endless, reproducible sequence of gaps in ns.
#[derive(Debug, Clone)]
pub struct GapDraws {
    spec: GapSpec,
    state: u64,
    /// Gaps drawn so far (the position within `phased` blocks).
    index: u64,
}

impl GapDraws {
    /// SplitMix64 (Steele, Lea and Flood, OOPSLA 2014): a 64-bit counter stepped by the
    /// golden-ratio increment, then mixed. Every seed, 0 included, gives a full-period stream.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: 53 random bits, never 0 (so its logarithm is finite).
    fn unit(&mut self) -> f64 {
        #[allow(clippy::cast_precision_loss, reason = "53 bits fit an f64 exactly")]
        let v = ((self.next_u64() >> 11) + 1) as f64;
        v / (1u64 << 53) as f64
    }

    /// Uniform integer in `[0, n)` by multiply-shift (no modulo bias worth counting).
    fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.next_u64() >> 32) * u128::from(n);
        u64::try_from(wide >> 32).unwrap_or(0)
    }

    /// The next gap, ns. An exponential draw is at most `-ln(2^-53)` ≈ 36.7 × the mean.
    pub fn next_ns(&mut self) -> u64 {
        let k = self.index;
        self.index = self.index.wrapping_add(1);
        match self.spec {
            GapSpec::Const { us } => us.saturating_mul(1000),
            GapSpec::Exp { mean_us } => {
                #[allow(
                    clippy::cast_precision_loss,
                    reason = "parsed means are at most 1e9 ns"
                )]
                let mean_ns = mean_us.saturating_mul(1000) as f64;
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "-ln(u) is in [0, 36.8] for u in (0, 1]; `as` saturates past u64::MAX"
                )]
                let ns = (-self.unit().ln() * mean_ns).round() as u64;
                ns
            }
            GapSpec::Bimodal {
                short_us,
                long_us,
                short_pct,
            } => {
                if self.below(100) < u64::from(short_pct) {
                    short_us.saturating_mul(1000)
                } else {
                    long_us.saturating_mul(1000)
                }
            }
            GapSpec::Phased {
                short_us,
                long_us,
                short_n,
                long_n,
            } => {
                // Both lengths are at least 1, so the period is never 0.
                if k % short_n.saturating_add(long_n).max(1) < short_n {
                    short_us.saturating_mul(1000)
                } else {
                    long_us.saturating_mul(1000)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> String {
        s.parse::<GapSpec>().expect_err(s).to_string()
    }

    #[test]
    fn specs_parse_and_print_back() {
        for s in [
            "const:us=30",
            "const:us=0",
            "exp:mean_us=80",
            "bimodal:short_us=20,long_us=1000,short_pct=70",
            "phased:short_us=20,long_us=1000,short_n=7000,long_n=3000",
        ] {
            assert_eq!(s.parse::<GapSpec>().expect(s).to_string(), s);
        }
        assert_eq!(
            " bimodal: short_pct=70 , long_us=1_000,short_us=20 "
                .parse::<GapSpec>()
                .expect("any order, spaces, separators"),
            GapSpec::Bimodal {
                short_us: 20,
                long_us: 1000,
                short_pct: 70
            }
        );
    }

    #[test]
    fn bad_specs_name_the_bad_key_or_value() {
        assert_eq!(
            err("poisson:mean_us=5"),
            "unknown gap distribution `poisson`; expected one of: const, exp, bimodal, phased"
        );
        assert_eq!(
            err("exp:mean=5"),
            "`exp` has no parameter `mean`; allowed: mean_us"
        );
        assert_eq!(
            err("bimodal:short_us=20,long=1000,short_pct=70"),
            "`bimodal` has no parameter `long`; allowed: short_us, long_us, short_pct"
        );
        assert_eq!(
            err("exp:mean_us"),
            "`exp`: parameter `mean_us` is not of the form key=value"
        );
        assert_eq!(err("exp"), "`exp` needs parameter `mean_us`");
        assert_eq!(
            err("bimodal:short_us=20,short_pct=70"),
            "`bimodal` needs parameter `long_us`"
        );
        assert_eq!(
            err("const:us=1,us=2"),
            "`const`: parameter `us` is given twice"
        );
        assert_eq!(
            err("exp:mean_us=-5"),
            "`exp`: `mean_us=-5`: expected microseconds, 1 to 1000000"
        );
        assert_eq!(
            err("bimodal:short_us=1000,long_us=20,short_pct=70"),
            "`bimodal`: short_us=1000 must be below long_us=20"
        );
    }

    #[test]
    fn zero_and_overflowing_values_are_refused() {
        assert_eq!(
            err("exp:mean_us=0"),
            "`exp`: `mean_us=0`: expected microseconds, 1 to 1000000"
        );
        assert_eq!(
            err("bimodal:short_us=0,long_us=10,short_pct=50"),
            "`bimodal`: `short_us=0`: expected microseconds, 1 to 1000000"
        );
        for pct in ["0", "100", "256"] {
            assert_eq!(
                err(&format!("bimodal:short_us=1,long_us=10,short_pct={pct}")),
                format!("`bimodal`: `short_pct={pct}`: expected a percentage, 1 to 99")
            );
        }
        // Above the range, and above u64: both refused the same way, never wrapped.
        assert_eq!(
            err("const:us=1000001"),
            "`const`: `us=1000001`: expected microseconds, 0 to 1000000"
        );
        assert_eq!(
            err("exp:mean_us=99999999999999999999999"),
            "`exp`: `mean_us=99999999999999999999999`: expected microseconds, 1 to 1000000"
        );
        assert_eq!(
            err("const:us="),
            "`const`: `us=`: expected microseconds, 0 to 1000000"
        );
    }

    #[test]
    fn mean_of_each_distribution() {
        assert_eq!(GapSpec::Const { us: 30 }.mean_ns(), 30_000);
        assert_eq!(GapSpec::Exp { mean_us: 80 }.mean_ns(), 80_000);
        let b = GapSpec::Bimodal {
            short_us: 20,
            long_us: 1000,
            short_pct: 70,
        };
        assert_eq!(b.mean_ns(), 314_000);
        assert_eq!(Gaps::constant_ns(30_000).spec, GapSpec::Const { us: 30 });
        // 7000 × 20 µs + 3000 × 1000 µs over 10 000 gaps: the same mean as the bimodal one.
        let p: GapSpec = "phased:short_us=20,long_us=1000,short_n=7000,long_n=3000"
            .parse()
            .expect("valid");
        assert_eq!(p.mean_ns(), 314_000);
        // The largest values: no overflow, the mean of the two extremes.
        let p: GapSpec = "phased:short_us=1,long_us=1000000,short_n=10000000,long_n=10000000"
            .parse()
            .expect("valid");
        assert_eq!(p.mean_ns(), 500_000_500);
    }

    fn seq(spec: &str, seed: u64, n: usize) -> Vec<u64> {
        let mut d = Gaps {
            spec: spec.parse().expect(spec),
            seed,
        }
        .draws();
        (0..n).map(|_| d.next_ns()).collect()
    }

    #[test]
    fn a_seed_gives_the_same_sequence_and_another_seed_a_different_one() {
        let a = seq("exp:mean_us=80", 7, 1000);
        assert_eq!(a, seq("exp:mean_us=80", 7, 1000));
        assert_ne!(a, seq("exp:mean_us=80", 8, 1000));
        // Pinned values: the generator and the transform are part of a result's identity
        // (the same seed must give the same workload in a later build).
        assert_eq!(
            seq("bimodal:short_us=20,long_us=1000,short_pct=70", 1, 8),
            [20_000, 1_000_000, 1_000_000, 20_000, 20_000, 1_000_000, 1_000_000, 20_000]
        );
        assert_eq!(seq("const:us=30", 3, 3), [30_000; 3]);
    }

    #[test]
    fn the_generator_is_splitmix64() {
        // The reference implementation's first outputs for seed 0.
        let mut d = Gaps::constant_ns(0).draws();
        assert_eq!(d.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(d.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn exponential_draws_have_the_mean_and_spread_of_an_exponential() {
        let n = 200_000;
        let v = seq("exp:mean_us=80", 1, n);
        let mean = v.iter().sum::<u64>() / n as u64;
        // Standard error of the mean: 80 µs / sqrt(2e5) = 0.18 µs; 1 % is > 4 of them.
        assert!((79_200..=80_800).contains(&mean), "mean {mean}");
        // P(X > mean) = 1/e = 36.8 %; P(X > 3 mean) = 5.0 %.
        let above = |t: u64| v.iter().filter(|&&g| g > t).count() * 1000 / n;
        assert!((358..=378).contains(&above(80_000)), "{}", above(80_000));
        assert!((45..=55).contains(&above(240_000)), "{}", above(240_000));
    }

    #[test]
    fn bimodal_draws_have_the_short_share() {
        let n = 100_000;
        let v = seq("bimodal:short_us=20,long_us=1000,short_pct=70", 5, n);
        let short = v.iter().filter(|&&g| g == 20_000).count();
        let long = v.iter().filter(|&&g| g == 1_000_000).count();
        assert_eq!(short + long, n, "only the two gap lengths");
        // Binomial standard deviation sqrt(n p q) = 145: ±1 % is ~7 of them.
        assert!((69_000..=71_000).contains(&short), "{short}");
    }

    const PHASED: &str = "phased:short_us=20,long_us=1000,short_n=7000,long_n=3000";

    #[test]
    fn phased_specs_name_the_bad_key_or_value() {
        assert_eq!(
            err("phased:short_us=20,long_us=1000,every=5"),
            "`phased` has no parameter `every`; allowed: short_us, long_us, short_n, long_n"
        );
        assert_eq!(
            err("phased:short_us=20,long_us=1000,short_n=5"),
            "`phased` needs parameter `long_n`"
        );
        assert_eq!(
            err("phased:short_us=20,long_us=1000,short_n=5,long_n=5,short_n=6"),
            "`phased`: parameter `short_n` is given twice"
        );
        assert_eq!(
            err("phased:short_us=1000,long_us=20,short_n=5,long_n=5"),
            "`phased`: short_us=1000 must be below long_us=20"
        );
        assert_eq!(
            err("phased:short_us=20,long_us=1000001,short_n=5,long_n=5"),
            "`phased`: `long_us=1000001`: expected microseconds, 1 to 1000000"
        );
    }

    #[test]
    fn phased_block_lengths_of_zero_or_beyond_the_range_are_refused() {
        let phased = |short_n: &str, long_n: &str| {
            err(&format!(
                "phased:short_us=20,long_us=1000,short_n={short_n},long_n={long_n}"
            ))
        };
        let expected =
            |kv: &str| format!("`phased`: `{kv}`: expected a number of gaps, 1 to 10000000");
        assert_eq!(phased("0", "3"), expected("short_n=0"));
        assert_eq!(phased("7", "0"), expected("long_n=0"));
        assert_eq!(phased("7", "10000001"), expected("long_n=10000001"));
        assert_eq!(
            phased("99999999999999999999999", "3"),
            expected("short_n=99999999999999999999999")
        );
        assert_eq!(phased("7", "-1"), expected("long_n=-1"));
        assert_eq!(phased("", "3"), expected("short_n="));
        let max = format!("phased:short_us=20,long_us=1000,short_n={PHASE_MAX_N},long_n=1");
        assert!(max.parse::<GapSpec>().is_ok(), "{max}");
    }

    #[test]
    fn phased_gaps_come_in_blocks_whatever_the_seed() {
        let v = seq("phased:short_us=20,long_us=1000,short_n=3,long_n=2", 1, 12);
        let (s, l) = (20_000, 1_000_000);
        assert_eq!(v, [s, s, s, l, l, s, s, s, l, l, s, s]);
        // No draws: every seed gives the same sequence (the seed is recorded, not used).
        let a = seq(PHASED, 1, 35_000);
        assert_eq!(a, seq(PHASED, 2, 35_000));
        assert_eq!(a, seq(PHASED, u64::MAX, 35_000));
        // Even blocks are 7000 short gaps, odd ones 3000 long gaps: checked block by block over
        // three and a half periods (the last block partial).
        let mut k = 0;
        for block in 0.. {
            if k >= a.len() {
                break;
            }
            let (len, gap) = if block % 2 == 0 {
                (7000, 20_000)
            } else {
                (3000, 1_000_000)
            };
            let end = (k + len).min(a.len());
            assert!(
                a[k..end].iter().all(|&g| g == gap),
                "block {block} (gaps {k}..{end}) is all {gap} ns"
            );
            k = end;
        }
        assert_eq!(a.iter().filter(|&&g| g == 20_000).count(), 3 * 7000 + 5000);
    }
}
