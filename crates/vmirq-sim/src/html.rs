//! Self-contained HTML report with inline SVG (no scripts): a CDF per latency series
//! across runs, and every time series (e.g. the vIC ratio over time); for sweeps, each
//! metric against the first grid axis, one line per run (and other grid axes).

use crate::report::Report;
use crate::scenario::SweepPoint;
use std::fmt::Write as _;

const W: f64 = 640.0;
const H: f64 = 300.0;
const PAD: f64 = 48.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One line: points in data coordinates.
struct Line<'a> {
    label: &'a str,
    pts: Vec<(f64, f64)>,
}

fn svg(title: &str, xlabel: &str, ylabel: &str, lines: &[Line<'_>]) -> String {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for l in lines {
        for &(x, y) in &l.pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 {
        return String::new();
    }
    if (x1 - x0).abs() < f64::EPSILON {
        x1 = x0 + 1.0;
    }
    if (y1 - y0).abs() < f64::EPSILON {
        y1 = y0 + 1.0;
    }
    let sx = |x: f64| PAD + (x - x0) / (x1 - x0) * (W - 2.0 * PAD);
    let sy = |y: f64| H - PAD - (y - y0) / (y1 - y0) * (H - 2.0 * PAD);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<h3>{}</h3><svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" style="font:11px sans-serif">"#,
        esc(title)
    );
    let _ = write!(
        o,
        r#"<rect x="{PAD}" y="{PAD}" width="{}" height="{}" fill="none" stroke="gray"/>"#,
        W - 2.0 * PAD,
        H - 2.0 * PAD
    );
    let _ = write!(
        o,
        r#"<text x="{PAD}" y="{}">{x0:.3}</text><text x="{}" y="{}" text-anchor="end">{x1:.3}</text>"#,
        H - PAD + 14.0,
        W - PAD,
        H - PAD + 14.0
    );
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        W / 2.0,
        H - 8.0,
        esc(xlabel)
    );
    let _ = write!(
        o,
        r#"<text x="4" y="{}">{y1:.3}</text><text x="4" y="{}">{y0:.3}</text><text x="4" y="14">{}</text>"#,
        PAD,
        H - PAD,
        esc(ylabel)
    );
    for (i, l) in lines.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = l
            .pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = write!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#,
            pts.join(" ")
        );
        #[allow(clippy::cast_precision_loss, reason = "legend position")]
        let ly = PAD + 14.0 * i as f64 + 12.0;
        let _ = write!(
            o,
            r#"<text x="{}" y="{ly}" fill="{c}">{}</text>"#,
            PAD + 6.0,
            esc(l.label)
        );
    }
    o.push_str("</svg>");
    o
}

#[allow(clippy::cast_precision_loss, reason = "plot coordinates")]
fn cdf(s: &[u64]) -> Vec<(f64, f64)> {
    let mut v = s.to_vec();
    v.sort_unstable();
    let n = v.len();
    let step = (n / 400).max(1);
    (0..n)
        .step_by(step)
        .chain(std::iter::once(n.saturating_sub(1)))
        .filter(|&i| i < n)
        .map(|i| (v[i] as f64 / 1000.0, (i + 1) as f64 / n as f64))
        .collect()
}

/// Render the report as a standalone HTML page.
#[must_use]
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = write!(o, "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title></head><body style=\"font-family:sans-serif\">", esc(&r.title));
    let _ = write!(o, "<h1>{}</h1><p>{}</p><table border=1 cellpadding=3><tr><th>check</th><th>published</th><th>simulated</th><th>unit</th><th>status</th></tr>", esc(&r.title), esc(&r.source));
    for c in &r.checks {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.name),
            c.published,
            c.simulated,
            esc(&c.unit),
            c.status
        );
    }
    o.push_str("</table>");
    let mut names: Vec<&str> = r
        .runs
        .values()
        .flat_map(|x| x.metrics.series.keys().copied())
        .collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let mut lines: Vec<Line<'_>> = r
            .runs
            .iter()
            .filter_map(|(l, x)| {
                x.metrics.series.get(name).map(|s| Line {
                    label: l,
                    pts: cdf(s),
                })
            })
            .collect();
        // Spans of more than three decades (e.g. shootdown latencies, 1 to 10^6 µs) are
        // drawn on a log axis.
        let xs = lines.iter().flat_map(|l| l.pts.iter().map(|p| p.0));
        let (lo, hi) = xs.fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
        let log = lo > 0.0 && hi / lo > 1e3;
        if log {
            for l in &mut lines {
                for p in &mut l.pts {
                    p.0 = p.0.log10();
                }
            }
        }
        let unit = if log { "log10 µs" } else { "µs" };
        o.push_str(&svg(
            &format!("CDF of {name}"),
            &format!("{name} ({unit})"),
            "fraction",
            &lines,
        ));
    }
    let mut tl: Vec<&str> = r
        .timelines
        .values()
        .flat_map(|m| m.keys().copied())
        .collect();
    tl.sort_unstable();
    tl.dedup();
    for name in tl {
        #[allow(clippy::cast_precision_loss, reason = "plot coordinates")]
        let lines: Vec<Line<'_>> = r
            .timelines
            .iter()
            .filter_map(|(l, m)| {
                m.get(name).map(|s| Line {
                    label: l,
                    pts: s.iter().map(|&(t, v)| (t as f64 / 1e6, v as f64)).collect(),
                })
            })
            .collect();
        o.push_str(&svg(
            &format!("{name} over time"),
            "time (ms)",
            name,
            &lines,
        ));
    }
    o.push_str("</body></html>");
    o
}

/// Render sweep results: for each metric, the metric against the first grid axis's value,
/// one line per run label and combination of the other axes.
#[must_use]
pub fn render_sweep(title: &str, points: &[SweepPoint], metrics: &[String]) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{0}</title></head>\
         <body style=\"font-family:sans-serif\"><h1>{0}</h1>",
        esc(title)
    );
    let axis = points
        .first()
        .and_then(|p| p.point.first())
        .and_then(|a| a.split_once('='))
        .map_or("x", |(k, _)| k);
    for m in metrics {
        let mut keys: Vec<String> = Vec::new();
        let mut pts: Vec<Vec<(f64, f64)>> = Vec::new();
        for p in points {
            let Some(x) = p
                .point
                .first()
                .and_then(|a| a.split_once('='))
                .and_then(|(_, v)| v.trim_matches('"').parse::<f64>().ok())
            else {
                continue;
            };
            let Some(&y) = p.values.get(m) else { continue };
            let mut key = p.run.clone();
            for other in p.point.iter().skip(1) {
                key.push(' ');
                key.push_str(other);
            }
            let i = keys.iter().position(|k| *k == key).unwrap_or_else(|| {
                keys.push(key);
                pts.push(Vec::new());
                keys.len() - 1
            });
            pts[i].push((x, y));
        }
        let lines: Vec<Line<'_>> = keys
            .iter()
            .zip(pts)
            .map(|(k, mut p)| {
                p.sort_by(|a, b| a.0.total_cmp(&b.0));
                Line { label: k, pts: p }
            })
            .collect();
        o.push_str(&svg(&format!("{m} vs {axis}"), axis, m, &lines));
    }
    o.push_str("</body></html>");
    o
}
