//! Grouped bar charts, drawn horizontally: one group per category (top to bottom, labels on
//! the left where long names fit), one bar per series in each group. The height grows with
//! the number of bars; few bars carry their value at their end.

use super::axis::{label, Coord, Scale};
use super::frame::{self, color, Area, DrawResult, Mark};
use super::Svg;
use crate::style::{AXIS_PT, CHAR_PX, FONT, TICK_PT};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Charts with at most this many bars draw them thick and print each bar's value.
const VALUES_MAX: usize = 12;
/// Category labels longer than this are cut.
const CATEGORY_CHARS_MAX: usize = 36;

/// One series of a bar chart: a value per category.
#[derive(Debug, Clone, PartialEq)]
struct Bars {
    name: String,
    values: Vec<f64>,
    color: Option<usize>,
}

/// A grouped bar chart, built with chained calls and drawn by [`BarChart::svg`].
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    title: String,
    value_label: String,
    scale: Scale,
    categories: Vec<String>,
    series: Vec<Bars>,
    reference: Option<f64>,
    width: u32,
}

impl BarChart {
    /// An empty chart with this title, 640 pixels wide.
    #[must_use]
    pub fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            value_label: String::new(),
            scale: Scale::Linear,
            categories: Vec::new(),
            series: Vec::new(),
            reference: None,
            width: 640,
        }
    }

    /// Name of the value axis.
    #[must_use]
    pub fn values(mut self, label: impl Into<String>) -> Self {
        self.value_label = label.into();
        self
    }

    /// Scale of the value axis; on a log scale bars start at the power of ten below the
    /// smallest value and values that are not positive have no bar.
    #[must_use]
    pub fn scale(mut self, scale: Scale) -> Self {
        self.scale = scale;
        self
    }

    /// The categories (groups), top to bottom.
    #[must_use]
    pub fn categories<S: Into<String>>(mut self, categories: impl IntoIterator<Item = S>) -> Self {
        self.categories = categories.into_iter().map(Into::into).collect();
        self
    }

    /// Add a series: one value per category (NaN, infinite or missing: no bar).
    #[must_use]
    pub fn series(self, name: impl Into<String>, values: Vec<f64>) -> Self {
        self.push(name.into(), values, None)
    }

    /// Add a series drawn in palette colour `index`.
    #[must_use]
    pub fn series_color(self, name: impl Into<String>, values: Vec<f64>, index: usize) -> Self {
        self.push(name.into(), values, Some(index))
    }

    fn push(mut self, name: String, values: Vec<f64>, color: Option<usize>) -> Self {
        self.series.push(Bars {
            name,
            values,
            color,
        });
        self
    }

    /// Draw a line across the chart at `value` and let the bars grow from it, to the left
    /// for smaller values and to the right for larger ones (1 on a chart of ratios, best on a
    /// log scale where 0.5 and 2 are equally long). Ignored unless the axis can show it.
    #[must_use]
    pub fn reference(mut self, value: f64) -> Self {
        self.reference = Some(value).filter(|v| v.is_finite());
        self
    }

    /// Width in pixels (the height follows from the number of bars).
    #[must_use]
    pub fn width(mut self, width: u32) -> Self {
        self.width = width;
        self
    }

    fn value(&self, series: usize, category: usize) -> Option<f64> {
        self.series
            .get(series)
            .and_then(|s| s.values.get(category))
            .copied()
            .filter(|v| v.is_finite() && (self.scale == Scale::Linear || *v > 0.0))
    }

    fn bar_px(&self) -> u32 {
        if self.series.len() * self.categories.len() <= VALUES_MAX {
            16
        } else {
            9
        }
    }

    fn group_px(&self) -> u32 {
        let n = u32::try_from(self.series.len().max(1)).unwrap_or(64);
        n * self.bar_px() + 10
    }

    fn height(&self) -> u32 {
        let groups = u32::try_from(self.categories.len().max(1)).unwrap_or(256);
        (40 + 16 + groups * self.group_px() + 50).max(200)
    }

    /// Draw the chart.
    #[must_use]
    pub fn svg(&self) -> Svg {
        let values: Vec<f64> = (0..self.series.len())
            .flat_map(|s| (0..self.categories.len()).filter_map(move |c| (s, c).into()))
            .filter_map(|(s, c)| self.value(s, c))
            .collect();
        let ends: Vec<f64> = values
            .iter()
            .chain(self.reference.as_ref())
            .copied()
            .collect();
        let xa = match self.scale {
            Scale::Linear => Coord::linear(
                ends.iter().copied().fold(0.0, f64::min),
                ends.iter().copied().fold(0.0, f64::max),
            ),
            Scale::Log => Coord::log(&ends, false),
        };
        let entries: Vec<frame::Entry> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), s.color.unwrap_or(i)))
            .collect();
        let size = (self.width, self.height());
        frame::render(size, &self.title, &entries, Mark::Box, |area| {
            self.draw(area, xa, values.len())
        })
    }

    fn category(&self, tick: f64) -> String {
        let n = self.categories.len();
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "ticks are category centres 0.5..n"
        )]
        let row = tick.max(0.0).floor() as usize;
        let Some(name) = n.checked_sub(row + 1).and_then(|i| self.categories.get(i)) else {
            return String::new();
        };
        if name.chars().count() <= CATEGORY_CHARS_MAX {
            name.clone()
        } else {
            let mut s: String = name.chars().take(CATEGORY_CHARS_MAX - 1).collect();
            s.push('…');
            s
        }
    }

    fn draw(&self, area: &Area<'_>, xa: Coord, bars: usize) -> DrawResult {
        let n = self.categories.len();
        let chars = self
            .categories
            .iter()
            .map(|c| c.chars().count().min(CATEGORY_CHARS_MAX))
            .max()
            .unwrap_or(1);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "at most 36 characters of a few pixels"
        )]
        let y_area = (chars as f64 * CHAR_PX + 18.0).round() as u32;
        let with_values = bars <= VALUES_MAX;
        let reference = self
            .reference
            .filter(|r| self.scale == Scale::Linear || *r > 0.0);
        let zero = reference.unwrap_or_else(|| xa.lo().max(0.0));
        let mut chart = ChartBuilder::on(area)
            .margin(8)
            .margin_right(if with_values { 48 } else { 16 })
            .x_label_area_size(46)
            .y_label_area_size(y_area)
            .build_cartesian_2d(xa, Coord::categories(n))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(self.value_label.as_str())
            .label_style((FONT, TICK_PT))
            .axis_desc_style((FONT, AXIS_PT))
            .bold_line_style(RGBColor(0xe2, 0xe2, 0xe2))
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|v| label(*v))
            .y_label_formatter(&|v| self.category(*v))
            .draw()?;
        if bars == 0 {
            return frame::no_data(area);
        }
        let group = f64::from(self.group_px());
        let bar = f64::from(self.bar_px()) / group;
        let pad = 5.0 / group;
        let value_style = (FONT, TICK_PT - 1.0)
            .into_font()
            .color(&RGBColor(0x44, 0x44, 0x44))
            .pos(Pos::new(HPos::Left, VPos::Center));
        for (si, s) in self.series.iter().enumerate() {
            let col = color(s.color.unwrap_or(si));
            for ci in 0..n {
                let Some(v) = self.value(si, ci) else {
                    continue;
                };
                #[allow(clippy::cast_precision_loss, reason = "small indices")]
                let top = (n - ci) as f64 - pad - bar * si as f64;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(zero, top), (v, top - bar)],
                    col.filled(),
                )))?;
                if with_values {
                    let at = (v.max(zero), top - bar / 2.0);
                    chart.draw_series(std::iter::once(
                        EmptyElement::at(at) + Text::new(label(v), (4, 0), value_style.clone()),
                    ))?;
                }
            }
        }
        if let Some(r) = reference {
            #[allow(clippy::cast_precision_loss, reason = "a small count")]
            let top = n as f64;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(r, 0.0), (r, top)],
                RGBColor(0x33, 0x33, 0x33).stroke_width(2),
            )))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::assert_well_formed;
    use super::*;

    fn chart() -> BarChart {
        BarChart::new("wake <latency>")
            .values("us")
            .categories(["irqfd poll 0", "ipi poll 200"])
            .series("p50", vec![12.0, f64::NAN])
            .series("p99 & more", vec![40.0, 55.5])
    }

    #[test]
    fn one_bar_per_finite_value_with_its_label() {
        let svg = chart().svg();
        let s = svg.as_str();
        assert_well_formed(s);
        // Three bars, two legend squares, one canvas, and the plot frame rectangles plotters
        // draws none of: count the filled bars by their palette colours.
        assert_eq!(
            s.matches("fill=\"#1F77B4\"").count(),
            1 + 1,
            "one p50 bar + legend"
        );
        assert_eq!(
            s.matches("fill=\"#D62728\"").count(),
            2 + 1,
            "two p99 bars + legend"
        );
        for text in [
            "irqfd poll 0",
            "ipi poll 200",
            "55.5",
            "p99 &amp; more",
            "wake &lt;latency&gt;",
        ] {
            assert!(s.contains(text), "{text}");
        }
    }

    #[test]
    fn log_bars_leave_out_values_that_are_not_positive() {
        let svg = BarChart::new("cpu")
            .scale(Scale::Log)
            .categories(["a", "b", "c"])
            .series("s", vec![3.0, 0.0, 172.0])
            .series("t", vec![5.0, 7.0, -1.0])
            .svg();
        let s = svg.as_str();
        assert_well_formed(s);
        assert_eq!(
            s.matches("fill=\"#1F77B4\"").count(),
            2 + 1,
            "two bars and legend"
        );
        assert_eq!(
            s.matches("fill=\"#D62728\"").count(),
            2 + 1,
            "two bars and legend"
        );
        assert!(s.contains(">\n100\n<"), "a tick at 100");
    }

    #[test]
    fn bars_grow_from_the_reference_line_both_ways() {
        let svg = BarChart::new("ratio")
            .scale(Scale::Log)
            .categories(["a"])
            .series("worse", vec![0.5])
            .series("better", vec![2.0])
            .reference(1.0)
            .svg();
        let s = svg.as_str();
        assert_well_formed(s);
        assert!(s.contains("stroke=\"#333333\" stroke-width=\"2\""));
        // The bar of a colour is its last rectangle (the legend's square comes first).
        let bar = |colour: &str| -> (i32, i32) {
            let at = s.rfind(&format!("fill=\"{colour}\"")).expect("bar");
            let tag = &s[s[..at].rfind("<rect").expect("rect")..at];
            let num = |k: &str| -> i32 {
                let i = tag.find(&format!(" {k}=\"")).expect(k) + k.len() + 3;
                tag[i..]
                    .split('"')
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("number")
            };
            (num("x"), num("width"))
        };
        let (worse_x, worse_w) = bar("#1F77B4");
        let (better_x, better_w) = bar("#D62728");
        // On a log axis 0.5 and 2 are as long as each other, on either side of 1.
        assert!(
            worse_w > 20 && (worse_w - better_w).abs() <= 1,
            "{worse_w} vs {better_w}"
        );
        assert!(
            (worse_x + worse_w - better_x).abs() <= 1,
            "both end at the line"
        );
    }

    #[test]
    fn the_first_category_is_on_top() {
        let c = chart();
        assert_eq!(c.category(1.5), "irqfd poll 0");
        assert_eq!(c.category(0.5), "ipi poll 200");
        assert_eq!(c.category(7.5), "");
    }

    #[test]
    fn an_empty_chart_says_no_data() {
        for c in [
            BarChart::new("empty"),
            BarChart::new("all missing")
                .categories(["a"])
                .series("s", vec![f64::NAN]),
        ] {
            let svg = c.svg();
            assert_well_formed(svg.as_str());
            assert!(svg.as_str().contains("no data"));
        }
    }

    #[test]
    fn height_grows_with_bars() {
        let small = chart().height();
        let big = BarChart::new("b")
            .categories((0..9).map(|i| format!("job{i}")))
            .series("a", vec![1.0; 9])
            .series("b", vec![1.0; 9])
            .series("c", vec![1.0; 9])
            .height();
        assert!(big > small + 100, "{big} vs {small}");
    }
}
