//! Number formats shared by the reports of `vmirq kvm` (tables, JSON and HTML pages are
//! built with `vmirq-report`, like every other vmirq report).

pub use vmirq_report::Table;

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
