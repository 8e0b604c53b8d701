//! Plots as inline SVG, drawn with `plotters`' SVG backend: [`LineChart`] (lines with
//! markers, linear or log axes) and [`BarChart`] (grouped horizontal bars). Every plot has
//! the same frame: a title, axes with compact tick labels, and a legend on the right whose
//! colours follow the series order (or the colour index a series asks for, so one target
//! keeps its colour across the plots of a page).

mod axis;
mod bar;
mod frame;
mod line;

pub use axis::{label, Scale};
pub use bar::BarChart;
pub use line::LineChart;

/// One named series of points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// Points `(x, y)` in drawing order; points an axis cannot show (NaN, infinite, not
    /// positive on a log axis) are left out.
    pub points: Vec<(f64, f64)>,
    /// Palette index; `None` takes the series' position.
    pub color: Option<usize>,
}

impl Series {
    /// A series with its position's colour.
    #[must_use]
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            color: None,
        }
    }

    /// Use palette colour `index` (the same index gives the same colour in every plot).
    #[must_use]
    pub fn color(mut self, index: usize) -> Self {
        self.color = Some(index);
        self
    }
}

/// One SVG element, ready to inline in a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Svg(String);

impl Svg {
    /// The markup (`<svg ...>...</svg>`).
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Svg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    /// Panics unless `svg` is one well-formed `<svg>` element ([`crate::check::svg`]).
    pub fn assert_well_formed(svg: &str) {
        if let Err(e) = crate::check::svg(svg) {
            panic!("{e}: {svg}");
        }
    }
}
