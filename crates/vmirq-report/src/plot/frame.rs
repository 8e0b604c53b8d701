//! What every plot shares: the SVG backend writing into a string, the white canvas, the
//! title, the legend column on the right, the "no data" frame, and the fallback that turns a
//! drawing error into a visible message instead of a missing plot.

use super::Svg;
use crate::html::escape;
use crate::style::{CHAR_PX, FONT, LEGEND_PT, PALETTE, TITLE_PT};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The drawing area of a plot.
pub type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// What drawing a plot can fail with (plotters' error, boxed).
pub type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Legend names longer than this are cut (with an ellipsis).
const LEGEND_CHARS_MAX: usize = 34;

/// Colour of palette entry `index` (wrapping).
pub fn color(index: usize) -> RGBColor {
    let (r, g, b) = PALETTE[index % PALETTE.len()];
    RGBColor(r, g, b)
}

/// How a legend entry is marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A short line with a dot (line charts).
    Line,
    /// A filled square (bar charts).
    Box,
}

/// One legend entry: name and palette index.
pub type Entry = (String, usize);

fn cut(name: &str) -> String {
    if name.chars().count() <= LEGEND_CHARS_MAX {
        name.to_owned()
    } else {
        let mut s: String = name.chars().take(LEGEND_CHARS_MAX - 1).collect();
        s.push('…');
        s
    }
}

/// Width of the legend column for these entries (0 without entries).
fn legend_width(entries: &[Entry]) -> u32 {
    let chars = entries
        .iter()
        .map(|(n, _)| cut(n).chars().count())
        .max()
        .unwrap_or(0);
    if entries.is_empty() {
        return 0;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "at most 34 characters of a few pixels each"
    )]
    let w = (chars as f64 * CHAR_PX + 40.0).round() as u32;
    w.clamp(90, 280)
}

fn draw_legend(area: &Area<'_>, entries: &[Entry], mark: Mark) -> DrawResult {
    let style = (FONT, LEGEND_PT).into_font().color(&BLACK);
    for (row, (name, index)) in entries.iter().enumerate() {
        let y = 12 + 18 * i32::try_from(row).unwrap_or(i32::MAX / 32);
        let c = color(*index);
        match mark {
            Mark::Line => {
                area.draw(&PathElement::new(
                    vec![(4, y + 6), (22, y + 6)],
                    c.stroke_width(2),
                ))?;
                area.draw(&Circle::new((13, y + 6), 3, c.filled()))?;
            }
            Mark::Box => {
                area.draw(&Rectangle::new([(6, y), (18, y + 12)], c.filled()))?;
            }
        }
        area.draw(&Text::new(cut(name), (28, y - 1), style.clone()))?;
    }
    Ok(())
}

/// Draw a plot of `size` pixels: canvas, `title`, the legend of `entries` (none for a single
/// series: the title names it), then `body` on the area left for the chart. A drawing error
/// gives an SVG that says so.
pub fn render(
    size: (u32, u32),
    title: &str,
    entries: &[Entry],
    mark: Mark,
    body: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Svg {
    let mut buf = String::new();
    let result = (|| -> DrawResult {
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        root.fill(&WHITE)?;
        let below_title =
            root.titled(title, (FONT, TITLE_PT).into_font().style(FontStyle::Bold))?;
        let entries = if entries.len() >= 2 { entries } else { &[] };
        let lw = legend_width(entries);
        let (chart, legend) = below_title.split_horizontally(size.0.saturating_sub(lw));
        if lw > 0 {
            draw_legend(&legend, entries, mark)?;
        }
        body(&chart)?;
        root.present()?;
        Ok(())
    })();
    match result {
        Ok(()) => Svg(buf),
        Err(e) => failed(size, title, &e.to_string()),
    }
}

/// An SVG saying that the plot `title` could not be drawn, and why.
fn failed(size: (u32, u32), title: &str, why: &str) -> Svg {
    Svg(format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"{FONT}\"><rect width=\"{w}\" height=\"{h}\" \
         fill=\"white\"/><text x=\"10\" y=\"24\" font-weight=\"bold\">{}</text><text x=\"10\" \
         y=\"48\" fill=\"#b3261e\">plot failed: {}</text></svg>",
        escape(title),
        escape(why),
        w = size.0,
        h = size.1,
    ))
}

/// Write "no data" in the middle of `area` (an empty plot says why it is empty).
pub fn no_data(area: &Area<'_>) -> DrawResult {
    let (w, h) = area.dim_in_pixel();
    let style = (FONT, TITLE_PT)
        .into_font()
        .color(&RGBColor(0x88, 0x88, 0x88))
        .pos(plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Center,
        ));
    area.draw(&Text::new(
        "no data",
        (
            i32::try_from(w / 2).unwrap_or(0),
            i32::try_from(h / 2).unwrap_or(0),
        ),
        style,
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_legend_names_are_cut() {
        let long = "x".repeat(80);
        assert_eq!(cut(&long).chars().count(), LEGEND_CHARS_MAX);
        assert_eq!(cut("short"), "short");
        assert_eq!(legend_width(&[]), 0);
        assert!(legend_width(&[(long, 0)]) <= 280);
    }

    #[test]
    fn a_failed_plot_says_why() {
        let svg = failed((100, 50), "t<", "bad & worse");
        super::super::tests::assert_well_formed(svg.as_str());
        assert!(svg.as_str().contains("plot failed: bad &amp; worse"));
    }
}
