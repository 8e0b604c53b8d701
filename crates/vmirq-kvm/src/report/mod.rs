//! Reports shaped like `vmirq bench`: a plain-text table, JSON (serde), and a self-contained
//! HTML page with inline SVG charts generated here (no scripts, no external resources).

pub mod html;
pub mod svg;
pub mod table;

pub use table::Table;

/// Nanoseconds as microseconds with one decimal.
#[must_use]
pub fn us(ns: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let v = ns as f64 / 1000.0;
    format!("{v:.1}")
}

/// `part / whole` as a percentage with one decimal ("-" when `whole` is 0).
#[must_use]
pub fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let v = part as f64 * 100.0 / whole as f64;
    format!("{v:.1}")
}
