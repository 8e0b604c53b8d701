//! Line charts: one line per series, a dot on every point of short series, linear or log
//! axes. The y axis of a linear chart includes zero unless asked otherwise, so heights
//! compare honestly.

use super::axis::{label, Coord, Scale};
use super::frame::{self, color, Area, DrawResult, Mark};
use super::{Series, Svg};
use crate::style::{AXIS_PT, CHAR_PX, FONT, TICK_PT};
use plotters::prelude::*;

/// Series with at most this many points get a dot on each.
const MARKERS_MAX: usize = 24;

/// A line chart, built with chained calls and drawn by [`LineChart::svg`].
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    title: String,
    x_label: String,
    x_scale: Scale,
    y_label: String,
    y_scale: Scale,
    y_zero: bool,
    series: Vec<Series>,
    size: (u32, u32),
}

impl LineChart {
    /// An empty chart with this title, 640 x 340 pixels, linear axes.
    #[must_use]
    pub fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            x_label: String::new(),
            x_scale: Scale::Linear,
            y_label: String::new(),
            y_scale: Scale::Linear,
            y_zero: true,
            series: Vec::new(),
            size: (640, 340),
        }
    }

    /// Name and scale of the x axis.
    #[must_use]
    pub fn x(mut self, label: impl Into<String>, scale: Scale) -> Self {
        self.x_label = label.into();
        self.x_scale = scale;
        self
    }

    /// Name and scale of the y axis.
    #[must_use]
    pub fn y(mut self, label: impl Into<String>, scale: Scale) -> Self {
        self.y_label = label.into();
        self.y_scale = scale;
        self
    }

    /// Fit a linear y axis to the data instead of starting it at zero.
    #[must_use]
    pub fn y_from_data(mut self) -> Self {
        self.y_zero = false;
        self
    }

    /// Add a series.
    #[must_use]
    pub fn series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }

    /// Add several series.
    #[must_use]
    pub fn with_series(mut self, series: impl IntoIterator<Item = Series>) -> Self {
        self.series.extend(series);
        self
    }

    /// Size in pixels.
    #[must_use]
    pub fn size(mut self, width: u32, height: u32) -> Self {
        self.size = (width, height);
        self
    }

    /// The points of `s` both axes can show.
    fn drawable(&self, s: &Series) -> Vec<(f64, f64)> {
        let ok = |scale: Scale, v: f64| v.is_finite() && (scale == Scale::Linear || v > 0.0);
        s.points
            .iter()
            .copied()
            .filter(|&(x, y)| ok(self.x_scale, x) && ok(self.y_scale, y))
            .collect()
    }

    fn axis(scale: Scale, values: &[f64], zero: bool) -> Coord {
        match scale {
            Scale::Log => Coord::log(values, true),
            Scale::Linear => {
                let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if values.is_empty() {
                    Coord::linear(0.0, 1.0)
                } else if zero {
                    Coord::linear(lo.min(0.0), hi.max(0.0))
                } else {
                    Coord::linear(lo, hi)
                }
            }
        }
    }

    /// Draw the chart.
    #[must_use]
    pub fn svg(&self) -> Svg {
        let lines: Vec<(usize, Vec<(f64, f64)>)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.color.unwrap_or(i), self.drawable(s)))
            .collect();
        let xs: Vec<f64> = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.0))
            .collect();
        let ys: Vec<f64> = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .collect();
        let xa = Self::axis(self.x_scale, &xs, false);
        let ya = Self::axis(self.y_scale, &ys, self.y_zero);
        let entries: Vec<frame::Entry> = self
            .series
            .iter()
            .zip(&lines)
            .map(|(s, (c, _))| (s.name.clone(), *c))
            .collect();
        frame::render(self.size, &self.title, &entries, Mark::Line, |area| {
            self.draw(area, xa, ya, &lines)
        })
    }

    fn draw(
        &self,
        area: &Area<'_>,
        xa: Coord,
        ya: Coord,
        lines: &[(usize, Vec<(f64, f64)>)],
    ) -> DrawResult {
        let y_chars = ya
            .ticks()
            .iter()
            .map(|t| label(*t).len())
            .max()
            .unwrap_or(1);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a few characters of a few pixels"
        )]
        let y_area = (y_chars as f64 * CHAR_PX + 34.0).round() as u32;
        let mut chart = ChartBuilder::on(area)
            .margin(8)
            .margin_right(16)
            .x_label_area_size(46)
            .y_label_area_size(y_area)
            .build_cartesian_2d(xa, ya)?;
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .label_style((FONT, TICK_PT))
            .axis_desc_style((FONT, AXIS_PT))
            .bold_line_style(RGBColor(0xe2, 0xe2, 0xe2))
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|v| label(*v))
            .y_label_formatter(&|v| label(*v))
            .draw()?;
        if lines.iter().all(|(_, p)| p.is_empty()) {
            return frame::no_data(area);
        }
        for (c, points) in lines {
            let col = color(*c);
            chart.draw_series(LineSeries::new(points.iter().copied(), col.stroke_width(2)))?;
            if points.len() <= MARKERS_MAX {
                chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, col.filled())))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::assert_well_formed;
    use super::*;

    #[test]
    fn a_line_per_series_with_escaped_names() {
        let svg = LineChart::new("IOPS <vs> depth")
            .x("queue depth", Scale::Log)
            .y("IOPS", Scale::Linear)
            .series(Series::new(
                "a<b",
                vec![(1.0, 10.0), (4.0, 20.0), (16.0, 30.0)],
            ))
            .series(Series::new("c", vec![(1.0, 5.0), (16.0, f64::NAN)]))
            .svg();
        let s = svg.as_str();
        assert_well_formed(s);
        // A line and a legend swatch per series, in its palette colour.
        assert_eq!(
            s.matches("stroke=\"#1F77B4\" stroke-width=\"2\"").count(),
            2
        );
        assert_eq!(
            s.matches("stroke=\"#D62728\" stroke-width=\"2\"").count(),
            2
        );
        assert!(s.contains("a&lt;b") && s.contains("IOPS &lt;vs&gt; depth"));
        // Every queue depth is a tick.
        for qd in [">\n1\n<", ">\n4\n<", ">\n16\n<"] {
            assert!(s.contains(qd), "tick {qd:?}");
        }
        assert!(!s.contains("plot failed"));
    }

    #[test]
    fn an_empty_chart_says_no_data() {
        for chart in [
            LineChart::new("empty"),
            LineChart::new("nothing drawable")
                .x("x", Scale::Log)
                .series(Series::new(
                    "s",
                    vec![(0.0, 1.0), (-1.0, 2.0), (f64::NAN, 1.0)],
                )),
        ] {
            let svg = chart.svg();
            assert_well_formed(svg.as_str());
            assert!(svg.as_str().contains("no data"));
            // At most the legend's swatch, no line.
            let strokes = svg
                .as_str()
                .matches("stroke=\"#1F77B4\" stroke-width=\"2\"");
            assert!(strokes.count() <= 1);
        }
    }

    #[test]
    fn long_series_have_no_markers_and_colours_can_be_fixed() {
        let pts: Vec<(f64, f64)> = (0..500).map(|i| (f64::from(i), f64::from(i % 7))).collect();
        let svg = LineChart::new("t")
            .series(Series::new("long", pts).color(1))
            .svg();
        let s = svg.as_str();
        assert_well_formed(s);
        assert_eq!(
            s.matches("<circle").count(),
            0,
            "no dots, no legend for one series"
        );
        assert!(s.contains("#D62728"), "palette entry 1");
    }
}
