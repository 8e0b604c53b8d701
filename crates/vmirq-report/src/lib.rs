//! The report layer of every vmirq command; this page is the crate's README, and its example
//! is a doctest.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod check;
pub mod html;
pub mod plot;
pub mod stats;
mod style;
pub mod table;

pub use html::{escape, Page};
pub use plot::{BarChart, LineChart, Scale, Series, Svg};
pub use table::{Cell, Table, Tone};
