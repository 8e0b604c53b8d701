//! Grouped bar charts as inline SVG.

use std::fmt::Write;

/// One series of a grouped bar chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// One value per category.
    pub values: Vec<f64>,
}

const COLORS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2",
];
const W: f64 = 640.0;
const H: f64 = 260.0;
const LEFT: f64 = 60.0;
const BOTTOM: f64 = 40.0;
const TOP: f64 = 30.0;

/// A grouped bar chart: one group per category, one bar per series. Values must be
/// non-negative; non-finite values draw as 0.
#[must_use]
pub fn bar_chart(title: &str, y_label: &str, categories: &[String], series: &[Series]) -> String {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let plot_w = W - LEFT - 10.0;
    let plot_h = H - TOP - BOTTOM;
    let groups = categories.len().max(1);
    #[allow(clippy::cast_precision_loss, reason = "small counts")]
    let group_w = plot_w / groups as f64;
    #[allow(clippy::cast_precision_loss, reason = "small counts")]
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r#"<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = write!(
        s,
        r#"<text x="12" y="{}" transform="rotate(-90 12 {})">{}</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        esc(y_label)
    );
    for tick in 0..=4 {
        let v = max * f64::from(tick) / 4.0;
        let y = TOP + plot_h - plot_h * f64::from(tick) / 4.0;
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - 10.0,
            LEFT - 4.0,
            y + 4.0,
            fmt_num(v)
        );
    }
    for (g, cat) in categories.iter().enumerate() {
        #[allow(clippy::cast_precision_loss, reason = "small counts")]
        let gx = LEFT + group_w * g as f64 + group_w * 0.1;
        for (i, ser) in series.iter().enumerate() {
            let v = ser
                .values
                .get(g)
                .copied()
                .filter(|v| v.is_finite())
                .unwrap_or(0.0)
                .max(0.0);
            let h = plot_h * v / max;
            #[allow(clippy::cast_precision_loss, reason = "small counts")]
            let x = gx + bar_w * i as f64;
            let color = COLORS[i % COLORS.len()];
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{color}"><title>{}: {}</title></rect>"#,
                TOP + plot_h - h,
                bar_w * 0.95,
                esc(&ser.name),
                fmt_num(v)
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            gx + group_w * 0.4,
            H - BOTTOM + 14.0,
            esc(cat)
        );
    }
    for (i, ser) in series.iter().enumerate() {
        #[allow(clippy::cast_precision_loss, reason = "small counts")]
        let x = LEFT + 120.0 * i as f64;
        let color = COLORS[i % COLORS.len()];
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{}" width="10" height="10" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
            H - 14.0,
            x + 14.0,
            H - 5.0,
            esc(&ser.name)
        );
    }
    s.push_str("</svg>");
    s
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Escape text for XML/HTML.
#[must_use]
pub fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bar_per_value_and_escaped_labels() {
        let svg = bar_chart(
            "t<1>",
            "us",
            &["a".into(), "b".into()],
            &[Series {
                name: "p50".into(),
                values: vec![1.0, 2.0],
            }],
        );
        assert_eq!(
            svg.matches("<rect").count(),
            2 + 1,
            "two bars and one legend swatch"
        );
        assert!(svg.contains("t&lt;1&gt;"));
    }
}
