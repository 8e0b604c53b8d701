//! Self-contained HTML reports, built with vmirq-report like every vmirq report. A scenario
//! run: the paper-versus-simulation checks and the policy comparisons, a CDF per latency
//! series across runs (log x axis when it spans more than three decades), and every time
//! series (e.g. the vIC ratio over time). A sweep: each metric against the first grid axis,
//! one line per run (and other grid axes).

use crate::report::Report;
use crate::scenario::SweepPoint;
use vmirq_report::{Cell, LineChart, Page, Scale, Series, Svg, Table, Tone};

/// Most points drawn per CDF.
const CDF_POINTS: usize = 400;

/// The CDF of `s` as `(value / scale, fraction at or below)`, thinned to about
/// [`CDF_POINTS`] points.
#[allow(clippy::cast_precision_loss, reason = "plot coordinates")]
fn cdf(s: &[u64], scale: f64) -> Vec<(f64, f64)> {
    let mut v = s.to_vec();
    v.sort_unstable();
    let n = v.len();
    let step = (n / CDF_POINTS).max(1);
    let last = n.saturating_sub(1);
    (0..n)
        .step_by(step)
        .chain((last % step != 0).then_some(last))
        .map(|i| (v[i] as f64 / scale, (i + 1) as f64 / n as f64))
        .collect()
}

fn checks(r: &Report) -> Table {
    let mut t = Table::new(&[
        "check",
        "published",
        "simulated",
        "unit",
        "off%",
        "status",
        "why",
    ])
    .left_aligned(1);
    for c in &r.checks {
        let published = if (c.published_hi - c.published).abs() > f64::EPSILON {
            format!("{}-{}", c.published, c.published_hi)
        } else {
            format!("{}", c.published)
        };
        let tone = match c.status {
            "reproduced" => Tone::Good,
            "not reproduced" => Tone::Bad,
            _ => Tone::Plain,
        };
        t.row([
            Cell::from(c.name.as_str()),
            Cell::from(published),
            Cell::from(format!("{:.2}", c.simulated)),
            Cell::from(c.unit.as_str()),
            Cell::from(format!("{:.1}", c.off_pct)),
            Cell::new(c.status, tone),
            Cell::from(c.note.as_str()),
        ]);
    }
    t
}

fn comparisons(r: &Report) -> Table {
    let mut t = Table::new(&[
        "comparison",
        "candidate",
        "value",
        "baseline",
        "value",
        "verdict",
    ])
    .left_aligned(2);
    for c in &r.compare {
        let tone = match c.verdict {
            "better" => Tone::Good,
            "worse" => Tone::Bad,
            _ => Tone::Plain,
        };
        t.row([
            Cell::from(format!("{} ({})", c.name, c.metric)),
            Cell::from(c.candidate.0.as_str()),
            Cell::from(format!("{:.2}", c.candidate.1)),
            Cell::from(c.baseline.0.as_str()),
            Cell::from(format!("{:.2}", c.baseline.1)),
            Cell::new(c.verdict, tone),
        ]);
    }
    t
}

/// With one series the chart has no legend, so the title names its run.
fn titled(title: String, series: &[Series]) -> String {
    match series {
        [only] => format!("{title}: {}", only.name),
        _ => title,
    }
}

fn cdfs(r: &Report) -> Vec<Svg> {
    let mut names: Vec<&str> = r
        .runs
        .values()
        .flat_map(|x| x.metrics.series.keys().copied())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            // Series named `*_ns` are durations, drawn in µs; others are counts.
            let (scale, unit) = if name.ends_with("_ns") {
                (1000.0, " (µs)")
            } else {
                (1.0, "")
            };
            let lines: Vec<Series> = r
                .runs
                .iter()
                .filter_map(|(l, x)| {
                    let s = x.metrics.series.get(name)?;
                    Some(Series::new(l, cdf(s, scale)))
                })
                .collect();
            // Spans of more than three decades (e.g. shootdown latencies, 1 to 10^6 µs) are
            // drawn on a log axis.
            let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
            let (lo, hi) = xs.fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
            let x_scale = if lo > 0.0 && hi / lo > 1e3 {
                Scale::Log
            } else {
                Scale::Linear
            };
            LineChart::new(titled(format!("CDF of {name}"), &lines))
                .x(format!("{name}{unit}"), x_scale)
                .y("fraction", Scale::Linear)
                .with_series(lines)
                .svg()
        })
        .collect()
}

fn timelines(r: &Report) -> Vec<Svg> {
    let mut names: Vec<&str> = r
        .timelines
        .values()
        .flat_map(|m| m.keys().copied())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            #[allow(clippy::cast_precision_loss, reason = "plot coordinates")]
            let lines: Vec<Series> = r
                .timelines
                .iter()
                .filter_map(|(l, m)| {
                    m.get(name).map(|s| {
                        Series::new(
                            l,
                            s.iter().map(|&(t, v)| (t as f64 / 1e6, v as f64)).collect(),
                        )
                    })
                })
                .collect();
            LineChart::new(titled(format!("{name} over time"), &lines))
                .x("time (ms)", Scale::Linear)
                .y(name, Scale::Linear)
                .y_from_data()
                .with_series(lines)
                .svg()
        })
        .collect()
}

/// Render the report as a standalone HTML page.
#[must_use]
pub fn render(r: &Report) -> String {
    let mut page = Page::new(&r.title);
    page.paragraph(&r.source);
    page.section("Paper vs vmirq-sim").table(&checks(r));
    if !r.compare.is_empty() {
        page.section("vmirq policies vs the published mechanism")
            .note("same = within 2% of the baseline")
            .table(&comparisons(r));
    }
    let plots = cdfs(r);
    if !plots.is_empty() {
        page.section("Latency distributions").plots(plots);
    }
    let plots = timelines(r);
    if !plots.is_empty() {
        page.section("Time series").plots(plots);
    }
    page.finish()
}

/// The value of the first grid axis of `p`, if it is a number.
fn first_axis(p: &SweepPoint) -> Option<f64> {
    p.point
        .first()
        .and_then(|a| a.split_once('='))
        .and_then(|(_, v)| v.trim_matches('"').parse::<f64>().ok())
}

/// Render sweep results: for each metric, the metric against the first grid axis's value,
/// one line per run label and combination of the other axes.
#[must_use]
pub fn render_sweep(title: &str, points: &[SweepPoint], metrics: &[String]) -> String {
    let mut page = Page::new(title);
    let axis = points
        .first()
        .and_then(|p| p.point.first())
        .and_then(|a| a.split_once('='))
        .map_or("x", |(k, _)| k);
    let mut plots = Vec::new();
    for m in metrics {
        let mut lines: Vec<Series> = Vec::new();
        for p in points {
            let (Some(x), Some(&y)) = (first_axis(p), p.values.get(m)) else {
                continue;
            };
            let mut key = p.run.clone();
            for other in p.point.iter().skip(1) {
                key.push(' ');
                key.push_str(other);
            }
            match lines.iter_mut().find(|l| l.name == key) {
                Some(l) => l.points.push((x, y)),
                None => lines.push(Series::new(key, vec![(x, y)])),
            }
        }
        for l in &mut lines {
            l.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        plots.push(
            LineChart::new(titled(format!("{m} vs {axis}"), &lines))
                .x(axis, Scale::Linear)
                .y(m.as_str(), Scale::Linear)
                .y_from_data()
                .with_series(lines)
                .svg(),
        );
    }
    page.plots(plots);
    page.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(axis: &str, run: &str, m: f64) -> SweepPoint {
        SweepPoint {
            point: vec![axis.to_owned(), "b=\"x\"".to_owned()],
            run: run.to_owned(),
            seed: 1,
            digest: String::new(),
            values: [("m".to_owned(), m)].into_iter().collect(),
        }
    }

    #[test]
    fn a_sweep_plots_each_metric_with_a_line_per_run() {
        let points = [
            point("pcpus=24", "vic", 3.0),
            point("pcpus=12", "vic", 2.0),
            point("pcpus=24", "none", 5.0),
            point("pcpus=\"twelve\"", "none", 9.0),
        ];
        let page = render_sweep("sweep <1>", &points, &["m".to_owned(), "absent".to_owned()]);
        vmirq_report::check::page(&page).expect("well-formed page");
        assert_eq!(vmirq_report::check::svgs(&page).len(), 2);
        assert!(page.contains("m vs pcpus") && page.contains("sweep &lt;1&gt;"));
        assert!(page.contains("vic b=&quot;x&quot;") && page.contains("none b=&quot;x&quot;"));
        // The metric no point has is an empty plot that says so.
        assert!(page.contains("no data"));
    }

    #[test]
    fn cdf_ends_at_one_and_is_thinned() {
        let s: Vec<u64> = (1..=10_000).rev().collect();
        let c = cdf(&s, 1000.0);
        assert!(c.len() <= CDF_POINTS + 2);
        assert_eq!(c.last(), Some(&(10.0, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
        assert!(cdf(&[], 1.0).is_empty());
        assert_eq!(cdf(&[3], 1.0), vec![(3.0, 1.0)]);
    }
}
