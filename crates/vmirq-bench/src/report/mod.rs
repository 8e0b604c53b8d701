//! Report rendering: the terminal table ([`table`]), the JSON document ([`json`]) and the
//! self-contained HTML report with inline SVG plots ([`html`], drawing with [`svg`]).

pub mod html;
pub mod json;
pub mod summary;
pub mod svg;
pub mod table;

pub use json::{Document, RunInfo};
