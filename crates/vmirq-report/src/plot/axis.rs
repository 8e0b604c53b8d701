//! Axes: the range and tick positions of a linear or logarithmic axis, compact tick labels,
//! and [`Coord`], the axis as a `plotters` coordinate (one type for both scales, so a chart
//! is drawn by the same code whatever its scales).

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use std::ops::Range;

/// How values map to positions along an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    /// Equal steps for equal differences.
    #[default]
    Linear,
    /// Equal steps for equal ratios; only positive values can be drawn.
    Log,
}

/// Most data values used as the ticks of a log axis (queue depths 1..128 are eight).
const DATA_TICKS_MAX: usize = 12;

/// An axis: its range, scale and ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct Coord {
    lo: f64,
    hi: f64,
    scale: Scale,
    ticks: Vec<f64>,
}

impl Coord {
    /// A linear axis over `lo..hi` widened to round ticks (about five).
    pub fn linear(lo: f64, hi: f64) -> Self {
        let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() && lo <= hi {
            (lo, hi)
        } else {
            (0.0, 1.0)
        };
        if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo, hi) = (lo - if lo == 0.0 { 0.0 } else { d }, hi + d);
        }
        let step = nice_step((hi - lo) / 5.0);
        let nlo = (lo / step).floor() * step;
        let nhi = (hi / step).ceil() * step;
        let n = ((nhi - nlo) / step).round();
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "n is a small positive count of steps (nice_step gives at most ~10)"
        )]
        let ticks = (0..=n as u32)
            .map(|i| {
                let t = nlo + f64::from(i) * step;
                if t.abs() < step * 1e-9 {
                    0.0
                } else {
                    t
                }
            })
            .collect();
        Self {
            lo: nlo,
            hi: nhi,
            scale: Scale::Linear,
            ticks,
        }
    }

    /// A log axis over the positive `values`. With `data_ticks` and few values (queue
    /// depths) it is ticked at the values themselves; otherwise it starts at the power of ten
    /// below the smallest value and is ticked at 1, 2 and 5 times powers of ten (powers of
    /// ten only over more than three decades).
    pub fn log(values: &[f64], data_ticks: bool) -> Self {
        let mut xs: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let (Some(&lo), Some(&hi)) = (xs.first(), xs.last()) else {
            return Self {
                lo: 1.0,
                hi: 10.0,
                scale: Scale::Log,
                ticks: vec![1.0, 10.0],
            };
        };
        if data_ticks && xs.len() <= DATA_TICKS_MAX {
            // A little room either side so the end points are not on the frame.
            let pad = if hi > lo { (hi / lo).powf(0.04) } else { 2.0 };
            return Self {
                lo: lo / pad,
                hi: hi * pad,
                scale: Scale::Log,
                ticks: xs,
            };
        }
        let d0 = lo.log10().floor();
        let start = 10f64.powf(d0);
        let end = if hi * 1.05 > start * 1.5 {
            hi * 1.05
        } else {
            start * 10.0
        };
        let steps: &[f64] = if end / start > 1e3 {
            &[1.0]
        } else {
            &[1.0, 2.0, 5.0]
        };
        let mut ticks = Vec::new();
        let mut p = start;
        while p <= end {
            ticks.extend(steps.iter().map(|m| m * p).filter(|t| *t <= end));
            p *= 10.0;
        }
        Self {
            lo: start,
            hi: end,
            scale: Scale::Log,
            ticks,
        }
    }

    /// Ticks at `0.5, 1.5, ..` over `0..n`: the centres of `n` categories.
    pub fn categories(n: usize) -> Self {
        let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        Self {
            lo: 0.0,
            hi: f64::from(n),
            scale: Scale::Linear,
            ticks: (0..n).map(|i| f64::from(i) + 0.5).collect(),
        }
    }

    /// The lower end of the range.
    pub fn lo(&self) -> f64 {
        self.lo
    }

    /// The tick positions.
    pub fn ticks(&self) -> &[f64] {
        &self.ticks
    }

    /// Where `v` lies, 0 at `lo` and 1 at `hi`.
    fn fraction(&self, v: f64) -> f64 {
        let (a, b, x) = match self.scale {
            Scale::Linear => (self.lo, self.hi, v),
            Scale::Log => (self.lo.ln(), self.hi.ln(), v.max(f64::MIN_POSITIVE).ln()),
        };
        if b > a {
            (x - a) / (b - a)
        } else {
            0.5
        }
    }
}

impl Ranged for Coord {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        // Values outside the range (none are drawn) stay near the frame.
        let t = self.fraction(*value).clamp(-0.1, 1.1);
        let px = f64::from(limit.0) + t * (f64::from(limit.1) - f64::from(limit.0));
        #[allow(
            clippy::cast_possible_truncation,
            reason = "a pixel within 10% of the plot area's limits"
        )]
        let px = px.round() as i32;
        px
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Coord {
    fn format(value: &f64) -> String {
        label(*value)
    }
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten that is at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|c| *c >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// Compact number for ticks and bar values: `1.5k`, `2M`, `0.25`, `0.001`, `120`.
#[must_use]
pub fn label(v: f64) -> String {
    let trimmed = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    let a = v.abs();
    if !v.is_finite() {
        "-".to_owned()
    } else if a >= 1e9 {
        format!("{}G", trimmed(format!("{:.2}", v / 1e9)))
    } else if a >= 1e6 {
        format!("{}M", trimmed(format!("{:.2}", v / 1e6)))
    } else if a >= 1e3 {
        format!("{}k", trimmed(format!("{:.2}", v / 1e3)))
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trimmed(format!("{v:.2}"))
    } else if a == 0.0 {
        "0".to_owned()
    } else {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a < 1 so -log10(a) > 0; capped at 6 decimals"
        )]
        let decimals = ((-a.log10()).ceil() as usize + 1).min(6);
        trimmed(format!("{v:.decimals$}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_compact() {
        assert_eq!(label(1500.0), "1.5k");
        assert_eq!(label(125_000.0), "125k");
        assert_eq!(label(2_000_000.0), "2M");
        assert_eq!(label(250.0), "250");
        assert_eq!(label(2.5), "2.5");
        assert_eq!(label(0.25), "0.25");
        assert_eq!(label(0.001), "0.001");
        assert_eq!(label(0.30000000000000004), "0.3");
        assert_eq!(label(0.0), "0");
        assert_eq!(label(-2000.0), "-2k");
        assert_eq!(label(f64::NAN), "-");
    }

    #[test]
    fn linear_axes_end_on_round_ticks() {
        let a = Coord::linear(0.0, 73.0);
        assert_eq!(a.range(), 0.0..80.0);
        assert_eq!(a.ticks(), &[0.0, 20.0, 40.0, 60.0, 80.0]);
        let b = Coord::linear(0.0, 180_000.0);
        assert_eq!(b.range(), 0.0..200_000.0);
        let c = Coord::linear(-0.3, 0.3);
        assert!(c.ticks().contains(&0.0));
    }

    #[test]
    fn degenerate_linear_ranges_still_have_a_span() {
        for (lo, hi) in [(0.0, 0.0), (5.0, 5.0), (f64::NAN, 1.0), (3.0, 1.0)] {
            let a = Coord::linear(lo, hi);
            assert!(a.range().end > a.range().start, "{lo}..{hi}");
            assert!(a.ticks().len() >= 2);
        }
    }

    #[test]
    fn log_axes_tick_at_few_data_values_else_decades() {
        let qd = Coord::log(&[1.0, 16.0, 128.0, 16.0, -1.0, f64::NAN], true);
        assert_eq!(qd.ticks(), &[1.0, 16.0, 128.0]);
        assert!(qd.range().start < 1.0 && qd.range().end > 128.0);
        let many: Vec<f64> = (1..=100).map(|i| f64::from(i) * 37.0).collect();
        let d = Coord::log(&many, true);
        assert_eq!(d.range().start, 10.0);
        assert!((d.range().end - 3700.0 * 1.05).abs() < 1e-9);
        assert_eq!(
            d.ticks(),
            &[10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        // Few values without data ticks (bar lengths): round ticks.
        let bars = Coord::log(&[3.0, 172.0], false);
        assert_eq!(bars.range().start, 1.0);
        assert_eq!(bars.ticks(), &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        // Over more than three decades, powers of ten only.
        let wide = Coord::log(&[0.5, 2e4], false);
        assert_eq!(wide.ticks(), &[0.1, 1.0, 10.0, 100.0, 1000.0, 10_000.0]);
        let empty = Coord::log(&[0.0], true);
        assert_eq!(empty.range(), 1.0..10.0);
    }

    #[test]
    fn log_axes_map_ratios_to_equal_steps() {
        let a = Coord::log(
            &(1..=20).map(|i| f64::from(i) * 60.0).collect::<Vec<_>>(),
            true,
        );
        let (p10, p100, p1000) = (
            a.map(&10.0, (0, 300)),
            a.map(&100.0, (0, 300)),
            a.map(&1000.0, (0, 300)),
        );
        assert_eq!(p100 - p10, p1000 - p100);
    }

    #[test]
    fn categories_tick_at_centres() {
        let c = Coord::categories(3);
        assert_eq!(c.ticks(), &[0.5, 1.5, 2.5]);
        assert_eq!(c.range(), 0.0..3.0);
    }
}
