//! The report layer of every vmirq command (`vmirq bench`, `vmirq sim`, `vmirq kvm`): one
//! self-contained HTML page builder ([`Page`]: style sheet, sections, escaped text, tables,
//! inline SVG plots), one table type for the terminal and the page ([`Table`]), and plot
//! helpers on `plotters`' SVG backend ([`LineChart`], [`BarChart`]) so that a new plot is a
//! few lines and every report looks the same.
//!
//! Pages have no scripts and load nothing: the plots are inline SVG whose text the browser
//! lays out with its own sans-serif font, so neither building nor running needs a font.

#![forbid(unsafe_code)]

pub mod check;
pub mod html;
pub mod plot;
mod style;
pub mod table;

pub use html::{escape, Page};
pub use plot::{BarChart, LineChart, Scale, Series, Svg};
pub use table::{Cell, Table, Tone};
