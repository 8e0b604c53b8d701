//! A minimal SVG plotter (no JavaScript, no external assets): line charts with an optional
//! log2 x axis, and grouped bar charts. Output is an `<svg>` element to inline in HTML.

use std::fmt::Write;

const W: f64 = 640.0;
const H: f64 = 300.0;
/// Bottom margin of bar charts, room for slanted category labels.
const BAR_BOTTOM: f64 = 110.0;
/// Horizontal room per bar in a bar chart.
const BAR_PX: f64 = 7.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 45.0;
const COLORS: [&str; 14] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#e7969c",
];

/// One named series of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
}

/// Escape text for SVG/HTML.
#[must_use]
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Compact axis label: 1.5k, 2M, 0.25.
fn tick(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| s.trim_end_matches('0').trim_end_matches('.').to_owned();
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.3}", v / 1e6)))
    } else if a >= 1e3 {
        format!("{}k", trim(format!("{:.2}", v / 1e3)))
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

struct Frame {
    x0: f64,
    x1: f64,
    y1: f64,
    log_x: bool,
    w: f64,
    h: f64,
    bottom: f64,
}

impl Frame {
    fn fx(&self, x: f64) -> f64 {
        let (a, b, v) = if self.log_x {
            (
                self.x0.max(1e-9).log2(),
                self.x1.max(1e-9).log2(),
                x.max(1e-9).log2(),
            )
        } else {
            (self.x0, self.x1, x)
        };
        let span = if b > a { b - a } else { 1.0 };
        LEFT + (v - a) / span * (self.w - LEFT - RIGHT)
    }

    fn fy(&self, y: f64) -> f64 {
        let span = if self.y1 > 0.0 { self.y1 } else { 1.0 };
        self.h - self.bottom - (y / span).clamp(0.0, 1.05) * (self.h - TOP - self.bottom)
    }
}

fn open(out: &mut String, f: &Frame, title: &str, x_label: &str, y_label: &str) {
    let (w, h) = (f.w, f.h);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        out,
        r#"<text x="{}" y="18" font-size="13" font-weight="bold">{}</text>"#,
        LEFT,
        escape(title)
    );
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (LEFT + f.w - RIGHT) / 2.0,
        f.h - 8.0,
        escape(x_label)
    );
    let _ = write!(
        out,
        r#"<text transform="translate(14,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (TOP + f.h - f.bottom) / 2.0,
        escape(y_label)
    );
}

fn y_axis(out: &mut String, f: &Frame) {
    for i in 0..=4 {
        let v = f.y1 * f64::from(i) / 4.0;
        let y = f.fy(v);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
            f.w - RIGHT
        );
        let _ = write!(
            out,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 4.0,
            y + 4.0,
            tick(v)
        );
    }
}

fn legend(out: &mut String, f: &Frame, names: &[&str]) {
    for (i, name) in names.iter().enumerate() {
        let y = TOP + 14.0 * crate::stats::as_f64(i as u64);
        let c = COLORS[i % COLORS.len()];
        let _ = write!(
            out,
            r#"<rect x="{}" y="{:.1}" width="10" height="10" fill="{c}"/>"#,
            f.w - RIGHT + 10.0,
            y
        );
        let _ = write!(
            out,
            r#"<text x="{}" y="{:.1}">{}</text>"#,
            f.w - RIGHT + 24.0,
            y + 9.0,
            escape(name)
        );
    }
}

fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|c| *c >= v)
        .unwrap_or(v)
}

/// Where to label the x axis: the data's own x values on a log axis (queue depths), six even
/// steps on a linear one.
fn x_ticks(series: &[Series], x0: f64, x1: f64, log_x: bool) -> Vec<f64> {
    if log_x {
        let mut xs: Vec<f64> = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        return xs;
    }
    (0..=5)
        .map(|i| x0 + (x1 - x0) * f64::from(i) / 5.0)
        .collect()
}

/// A line chart of `series`; `log_x` spaces x by powers of two (queue depths).
#[must_use]
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    let pts = series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for (x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if y.is_finite() {
            y1 = y1.max(y);
        }
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    let f = Frame {
        x0,
        x1,
        y1: nice_max(y1),
        log_x,
        w: W,
        h: H,
        bottom: BOTTOM,
    };
    let mut out = String::new();
    open(&mut out, &f, title, x_label, y_label);
    y_axis(&mut out, &f);
    for x in &x_ticks(series, x0, x1, log_x) {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            f.fx(*x),
            f.h - f.bottom + 14.0,
            tick(*x)
        );
    }
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|(x, y)| format!("{:.1},{:.1}", f.fx(*x), f.fy(*y)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.6" points="{}"/>"#,
            path.join(" ")
        );
        if s.points.len() <= 12 {
            for p in path {
                if let Some((x, y)) = p.split_once(',') {
                    let _ = write!(out, r#"<circle cx="{x}" cy="{y}" r="2.5" fill="{c}"/>"#);
                }
            }
        }
    }
    legend(
        &mut out,
        &f,
        &series.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
    );
    out.push_str("</svg>");
    out
}

/// A grouped bar chart: one group per category, one bar per series (`values[s][c]`).
#[must_use]
pub fn bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    names: &[String],
    values: &[Vec<f64>],
) -> String {
    let y1 = values
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let bars = crate::stats::as_f64((categories.len() * (names.len() + 1)).max(1) as u64);
    let f = Frame {
        x0: 0.0,
        x1: 1.0,
        y1: nice_max(y1),
        log_x: false,
        w: W.max(LEFT + RIGHT + bars * BAR_PX),
        h: H + BAR_BOTTOM - BOTTOM,
        bottom: BAR_BOTTOM,
    };
    let mut out = String::new();
    open(&mut out, &f, title, "", y_label);
    y_axis(&mut out, &f);
    let groups = crate::stats::as_f64(categories.len().max(1) as u64);
    let group_w = (f.w - LEFT - RIGHT) / groups;
    let bar_w = group_w * 0.8 / crate::stats::as_f64(names.len().max(1) as u64);
    for (ci, cat) in categories.iter().enumerate() {
        let gx = LEFT + group_w * crate::stats::as_f64(ci as u64);
        let _ = write!(
            out,
            r#"<text transform="translate({:.1},{:.1}) rotate(-35)" text-anchor="end">{}</text>"#,
            gx + group_w / 2.0,
            f.h - f.bottom + 12.0,
            escape(cat)
        );
        for (si, row) in values.iter().enumerate() {
            let v = row.get(ci).copied().unwrap_or(f64::NAN);
            if !v.is_finite() {
                continue;
            }
            let x = gx + group_w * 0.1 + bar_w * crate::stats::as_f64(si as u64);
            let y = f.fy(v);
            let c = COLORS[si % COLORS.len()];
            let _ = write!(
                out,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{c}"><title>{}: {}</title></rect>"#,
                bar_w.max(1.0),
                (f.h - f.bottom - y).max(0.0),
                escape(&names[si.min(names.len().saturating_sub(1))]),
                tick(v)
            );
        }
    }
    legend(
        &mut out,
        &f,
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_chart_is_an_svg_with_every_series() {
        let s = vec![
            Series {
                name: "a<b".into(),
                points: vec![(1.0, 10.0), (4.0, 20.0), (16.0, 30.0)],
            },
            Series {
                name: "c".into(),
                points: vec![(1.0, 5.0), (16.0, f64::NAN)],
            },
        ];
        let svg = line_chart("t", "QD", "IOPS", &s, true);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a&lt;b"));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn bar_chart_skips_missing_values() {
        let svg = bar_chart(
            "t",
            "y",
            &["x".into(), "y".into()],
            &["s1".into()],
            &[vec![1.0, f64::NAN]],
        );
        assert_eq!(svg.matches("<rect").count(), 1 + 1); // one bar, one legend swatch
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn ticks_and_scale() {
        assert_eq!(tick(1500.0), "1.5k");
        assert_eq!(tick(2_000_000.0), "2M");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(nice_max(73.0), 100.0);
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(180.0), 200.0);
    }
}
