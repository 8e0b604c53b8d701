//! Report rendering: the terminal table ([`table`]) and reading ([`summary`]), the JSON
//! document ([`json`]), and the self-contained HTML report ([`html`]: [`headline`] first,
//! then [`plots`], then the results per workload from [`cells`]), built with vmirq-report.

pub mod cells;
pub mod group;
pub mod headline;
pub mod html;
pub mod json;
pub mod plots;
pub mod summary;
pub mod table;
pub mod versus;

pub use json::{Document, RunInfo};
