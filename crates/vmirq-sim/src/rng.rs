//! The simulator's own pseudo-random numbers: SplitMix64 for seeding and xoshiro256** for
//! draws, plus the few distributions the model needs. Only integer operations and IEEE
//! `+ - * /` are used (no platform `ln`/`exp`), so a seed gives bit-identical streams on
//! every platform.

use crate::Nanos;

/// SplitMix64 step (Vigna): used to expand one u64 seed into independent stream states.
#[must_use]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** generator (Blackman and Vigna).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator for `seed` and stream number `stream` (independent streams per entity
    /// keep one entity's draws from shifting another's when the model changes).
    #[must_use]
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut sm = seed ^ stream.wrapping_mul(0xD134_2543_DE82_EF95);
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Self { s }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        // 53 bits fit exactly in an f64 mantissa.
        #[allow(clippy::cast_precision_loss, reason = "53-bit value is exact in f64")]
        let v = (self.next_u64() >> 11) as f64;
        v * (1.0 / 9_007_199_254_740_992.0)
    }

    /// Uniform integer in `[0, n)` (Lemire's multiply-shift; `n == 0` gives 0).
    pub fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.next_u64()) * u128::from(n);
        // The high half of a 64x64 product always fits in 64 bits.
        #[allow(clippy::cast_possible_truncation, reason = "high half of u128 product")]
        let hi = (wide >> 64) as u64;
        hi
    }

    /// Exponentially distributed nanoseconds with the given mean.
    pub fn exp_ns(&mut self, mean_ns: Nanos) -> Nanos {
        let u = 1.0 - self.unit(); // (0, 1]
        #[allow(clippy::cast_precision_loss, reason = "means are far below 2^53 ns")]
        let v = -ln(u) * mean_ns as f64;
        to_ns(v)
    }
}

/// Round a non-negative float to nanoseconds, saturating.
#[must_use]
pub fn to_ns(v: f64) -> Nanos {
    if v.is_nan() || v <= 0.0 {
        0
    } else if v >= 1.8e19 {
        u64::MAX
    } else {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "range checked above"
        )]
        let n = (v + 0.5) as u64;
        n
    }
}

/// 1/(2k+1) for k = 0..12.
const INV_ODD: [f64; 12] = [
    1.0,
    1.0 / 3.0,
    1.0 / 5.0,
    1.0 / 7.0,
    1.0 / 9.0,
    1.0 / 11.0,
    1.0 / 13.0,
    1.0 / 15.0,
    1.0 / 17.0,
    1.0 / 19.0,
    1.0 / 21.0,
    1.0 / 23.0,
];

/// `ln m` for `m` in `[1, 2)` by `2 atanh((m-1)/(m+1))` (12 series terms, error < 1e-16);
/// `const` so the table below is computed by the compiler with IEEE arithmetic.
const fn ln_1_2(m: f64) -> f64 {
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    let mut p = INV_ODD[11];
    let mut k = 11;
    while k > 0 {
        k -= 1;
        p = p * t2 + INV_ODD[k];
    }
    2.0 * p * t
}

/// Table size for [`ln`]: the top 7 mantissa bits pick a row.
const LN_ROWS: usize = 128;

/// `ln(1 + i/128)` for each row.
const LN_TAB: [f64; LN_ROWS] = {
    let mut t = [0.0; LN_ROWS];
    let mut i = 0;
    while i < LN_ROWS {
        t[i] = ln_1_2(1.0 + i as f64 / 128.0);
        i += 1;
    }
    t
};

/// `1 / (1 + i/128)` for each row.
const INV_TAB: [f64; LN_ROWS] = {
    let mut t = [0.0; LN_ROWS];
    let mut i = 0;
    while i < LN_ROWS {
        t[i] = 1.0 / (1.0 + i as f64 / 128.0);
        i += 1;
    }
    t
};

/// Natural logarithm of a positive finite `x` using only IEEE basic operations (so the
/// result is identical on every platform): `x = 2^e * c * (1 + u)` with `c = 1 + i/128`
/// from the top mantissa bits, `ln c` from a compile-time table, and `ln(1 + u)` for
/// `0 <= u < 1/128` by 7 series terms (error below 1e-16).
#[must_use]
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        return f64::NEG_INFINITY;
    }
    let mut bits = x.to_bits();
    let mut e: i64 = 0;
    if (bits >> 52) & 0x7ff == 0 {
        // subnormal: scale into the normal range first
        bits = (x * 18_014_398_509_481_984.0).to_bits(); // 2^54
        e -= 54;
    }
    #[allow(clippy::cast_possible_wrap, reason = "11-bit exponent field")]
    let exp_field = ((bits >> 52) & 0x7ff) as i64;
    e += exp_field - 1023;
    let frac = bits & 0x000f_ffff_ffff_ffff;
    let m = f64::from_bits(frac | 0x3ff0_0000_0000_0000);
    // Top 7 mantissa bits: always < 128.
    #[allow(clippy::cast_possible_truncation, reason = "7-bit index")]
    let i = (frac >> 45) as usize;
    #[allow(clippy::cast_precision_loss, reason = "i < 128")]
    let c = 1.0 + i as f64 / 128.0;
    let u = (m - c) * INV_TAB[i]; // m - c is exact
    let l1p = u
        * (1.0
            - u * (0.5
                - u * (1.0 / 3.0 - u * (0.25 - u * (0.2 - u * (1.0 / 6.0 - u * (1.0 / 7.0)))))));
    #[allow(clippy::cast_precision_loss, reason = "exponent is below 2^11")]
    let ef = e as f64;
    ef * core::f64::consts::LN_2 + LN_TAB[i] + l1p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_matches_std_closely() {
        for &x in &[1e-300, 1e-9, 0.3, 0.5, 0.999, 1.0, 1.5, 2.0, 10.0, 1e12] {
            let d = (ln(x) - x.ln()).abs();
            assert!(d <= 1e-13 * x.ln().abs().max(1.0), "ln({x}) off by {d}");
        }
    }

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..8)
            .map(|_| 0)
            .scan(Rng::new(7, 1), |r, _: u64| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..8)
            .map(|_| 0)
            .scan(Rng::new(7, 1), |r, _: u64| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..8)
            .map(|_| 0)
            .scan(Rng::new(7, 2), |r, _: u64| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn exp_mean_is_close() {
        let mut r = Rng::new(1, 0);
        let n = 20_000u64;
        let sum: u64 = (0..n).map(|_| r.exp_ns(1_000)).sum();
        let mean = sum / n;
        assert!((950..=1050).contains(&mean), "mean {mean}");
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(3, 0);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
    }
}
