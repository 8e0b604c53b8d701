//! Rendering the network section: one table per job (a row per target, median [min..max]
//! over repetitions, ratios to testpmd paired by repetition), the same table for the
//! terminal and the HTML report, and a headline of vmirq's ratios per job.

use super::results::{NetCell, PEER};
use super::NetSection;
use crate::stats::Spread;
use vmirq_report::table::short_number as num;
use vmirq_report::{BarChart, Cell, Page, Scale, Svg, Table, Tone};

fn spread(s: Spread, scale: f64) -> String {
    format!(
        "{} [{}..{}]",
        num(s.median / scale),
        num(s.min / scale),
        num(s.max / scale)
    )
}

/// A ratio cell, green when better than the peer by more than 2 %, red when worse.
fn ratio(s: Option<Spread>, higher_is_better: bool) -> Cell {
    let Some(s) = s else {
        return Cell::new("-", Tone::Muted);
    };
    let better = if higher_is_better {
        s.median > 1.02
    } else {
        s.median < 0.98
    };
    let worse = if higher_is_better {
        s.median < 0.98
    } else {
        s.median > 1.02
    };
    let tone = if better {
        Tone::Good
    } else if worse {
        Tone::Bad
    } else {
        Tone::Plain
    };
    Cell::new(
        format!("{:.3}x [{:.3}..{:.3}]", s.median, s.min, s.max),
        tone,
    )
}

const HEADER: &[&str] = &[
    "target",
    "packets/s",
    "Gbit/s",
    "RTT p50 us",
    "RTT p99 us",
    "interrupts/pkt",
    "client CPU ns/pkt",
    "backend CPU ns/pkt",
    "lost",
    "pps vs testpmd",
    "p50 vs testpmd",
    "p99 vs testpmd",
    "irq/pkt vs testpmd",
    "CPU/pkt vs testpmd",
];

fn row(c: &NetCell) -> Vec<Cell> {
    if c.repetitions == 0 {
        // The error goes last so that it widens no number column of the terminal table.
        let mut r = vec![
            Cell::from(c.target.as_str()),
            Cell::new("failed", Tone::Bad),
        ];
        r.resize(HEADER.len() - 1, Cell::from(""));
        let error: String = c
            .errors
            .first()
            .map_or("", String::as_str)
            .chars()
            .take(100)
            .collect();
        r.push(Cell::new(error, Tone::Bad));
        return r;
    }
    let opt = |s: Option<Spread>, scale: f64| s.map_or_else(String::new, |s| spread(s, scale));
    let vs = c.vs_peer.unwrap_or_default();
    let peer = c.target == PEER;
    let r = |s, hi| {
        if peer {
            Cell::new("1 (peer)", Tone::Muted)
        } else {
            ratio(s, hi)
        }
    };
    vec![
        Cell::new(c.target.clone(), Tone::Strong),
        spread(c.pps, 1.0).into(),
        spread(c.gbit_s, 1.0).into(),
        opt(c.rtt_p50_ns, 1e3).into(),
        opt(c.rtt_p99_ns, 1e3).into(),
        spread(c.interrupts_per_packet, 1.0).into(),
        spread(c.client_cpu_ns_per_packet, 1.0).into(),
        opt(c.backend_cpu_ns_per_packet, 1.0).into(),
        Cell::new(
            c.lost.to_string(),
            if c.lost > 0 { Tone::Muted } else { Tone::Plain },
        ),
        r(vs.pps, true),
        r(vs.rtt_p50, false),
        r(vs.rtt_p99, false),
        r(vs.interrupts_per_packet, false),
        r(vs.cpu_ns_per_packet, false),
    ]
}

/// The table of one job.
#[must_use]
pub fn job_table(section: &NetSection, job: &str) -> Table {
    let mut t = Table::new(HEADER).left_aligned(1);
    for c in section.cells.iter().filter(|c| c.job == job) {
        t.row(row(c));
    }
    t
}

/// One line per target over every job, then one per target and job: ratios to testpmd.
#[must_use]
pub fn headline(section: &NetSection) -> Vec<String> {
    let mut out: Vec<String> = section
        .versus
        .iter()
        .map(|v| {
            format!(
                "{} / {PEER} over {} jobs: packets/s geometric mean {:.3}x [{:.3}..{:.3}], \
                 CPU/packet median {}",
                v.target,
                v.jobs,
                v.pps_geomean,
                v.pps.min,
                v.pps.max,
                v.cpu_median
                    .map_or_else(|| "-".to_string(), |c| format!("{c:.3}x"))
            )
        })
        .collect();
    for c in section.cells.iter().filter(|c| c.target != PEER) {
        let Some(v) = c.vs_peer else { continue };
        let mut parts = Vec::new();
        let mut push = |name: &str, s: Option<Spread>| {
            if let Some(s) = s {
                parts.push(format!(
                    "{name} {:.3}x [{:.3}..{:.3}]",
                    s.median, s.min, s.max
                ));
            }
        };
        push("packets/s", v.pps);
        push("RTT p50", v.rtt_p50);
        push("RTT p99", v.rtt_p99);
        push("interrupts/packet", v.interrupts_per_packet);
        push("CPU/packet", v.cpu_ns_per_packet);
        out.push(format!(
            "{} / {PEER}, {} ({} paired repetitions): {}",
            c.target,
            c.job,
            v.pairs,
            parts.join(", ")
        ));
    }
    out
}

const NOTE: &str = "Client: vmirq-netload's virtio-net driver (VERSION_1, MRG_RXBUF with 2 KiB \
    receive buffers, EVENT_IDX, 256-entry rings) on CPU 0; poll jobs spin on the used rings \
    like a DPDK driver, interrupt jobs sleep on the call eventfds like a guest's NAPI. \
    Devices forward port 0 <-> 1 on CPU 1 (testpmd's and OVS's polling core; serve-net's \
    threads pinned there). Streams send as fast as the rings allow; rr is one 64-byte \
    request/response in flight (TCP_RR-like). Median [min..max] over repetitions; ratios to \
    testpmd pair runs of the same repetition. CPU/pkt: client thread plus the backend's \
    process (all threads) over the measured window; a polling peer's core is busy whatever \
    the rate. Lost: frames a device dropped for lack of receive buffers (serve-net holds \
    them in the sender's ring instead).";

/// One line per target: what ran and the virtio features the client negotiated with it.
#[must_use]
pub fn devices(section: &NetSection) -> Vec<String> {
    section
        .targets
        .iter()
        .filter_map(|t| {
            let c = section
                .cells
                .iter()
                .find(|c| &c.target == t && !c.describe.is_empty())?;
            Some(format!(
                "{t}: {} (features: {})",
                c.describe,
                c.features.join(" ")
            ))
        })
        .collect()
}

/// The load of everything but client and device over every measured window: the noise
/// indicator (0 on a quiet machine).
#[must_use]
pub fn machine_load(section: &NetSection) -> Option<String> {
    let others: Vec<f64> = section
        .cells
        .iter()
        .flat_map(|c| c.runs.iter().flatten())
        .filter_map(|m| m.others_busy_pct)
        .collect();
    if others.is_empty() {
        return None;
    }
    let s = Spread::of(&others);
    Some(format!(
        "other load (machine busy minus client and device) during the measured windows: \
         median {:.0}% [{:.0}..{:.0}] of all CPUs; above a few percent the run was not quiet",
        s.median, s.min, s.max
    ))
}

/// The terminal form.
#[must_use]
pub fn render_text(section: &NetSection) -> String {
    let mut s = format!(
        "network ({}): {} repetitions, {} ms warm-up + {} ms measured per run; targets {}\n",
        section.preset,
        section.repetitions,
        section.warmup_ms,
        section.measure_ms,
        section.targets.join(", ")
    );
    for d in devices(section) {
        s.push_str(&format!("  {d}\n"));
    }
    if let Some(load) = machine_load(section) {
        s.push_str(&format!("  {load}\n"));
    }
    for job in &section.jobs {
        s.push_str(&format!("\n{job}\n"));
        s.push_str(&job_table(section, job).to_text());
    }
    let lines = headline(section);
    if !lines.is_empty() {
        s.push_str("\nagainst testpmd's vhost PMD (same run, paired by repetition):\n");
        for l in lines {
            s.push_str(&format!("  {l}\n"));
        }
    }
    for n in &section.notices {
        s.push_str(&format!("notice: {n}\n"));
    }
    s
}

/// Bar charts per job: packets/s relative to testpmd (log scale, 1 = testpmd), and client
/// plus backend CPU per packet of every target; `None` for a chart with no value.
#[must_use]
pub fn plots(section: &NetSection) -> Vec<Svg> {
    let find = |job: &str, t: &str| {
        section
            .cells
            .iter()
            .find(|c| c.job == job && c.target == t && c.repetitions > 0)
    };
    let mut ratio = BarChart::new(format!("Packets/s relative to {PEER} (1 = {PEER})"))
        .values("packets/s / testpmd's (median of paired repetitions, log scale)")
        .scale(Scale::Log)
        .categories(section.jobs.iter().cloned())
        .reference(1.0)
        .width(900);
    let mut cpu = BarChart::new("Client + backend CPU per packet")
        .values("ns per received packet (median, log scale)")
        .scale(Scale::Log)
        .categories(section.jobs.iter().cloned())
        .width(900);
    let (mut any_ratio, mut any_cpu) = (false, false);
    for (i, t) in section.targets.iter().enumerate() {
        let cpus: Vec<f64> = section
            .jobs
            .iter()
            .map(|j| find(j, t).map_or(f64::NAN, |c| c.cpu_ns_per_packet.median))
            .collect();
        any_cpu |= cpus.iter().any(|v| v.is_finite() && *v > 0.0);
        cpu = cpu.series_color(t.clone(), cpus, i);
        if t == PEER {
            continue;
        }
        let ratios: Vec<f64> = section
            .jobs
            .iter()
            .map(|j| {
                find(j, t)
                    .and_then(|c| c.vs_peer?.pps)
                    .map_or(f64::NAN, |s| s.median)
            })
            .collect();
        any_ratio |= ratios.iter().any(|v| v.is_finite());
        ratio = ratio.series_color(t.clone(), ratios, i);
    }
    let mut out = Vec::new();
    if any_ratio {
        out.push(ratio.svg());
    }
    if any_cpu {
        out.push(cpu.svg());
    }
    out
}

/// The HTML section.
pub fn render_html(section: &NetSection, page: &mut Page) {
    page.section("Network: vmirq serve-net against testpmd's vhost PMD");
    page.paragraph(&format!(
        "Preset {}: {} repetitions, {} ms warm-up + {} ms measured per run; targets {}.",
        section.preset,
        section.repetitions,
        section.warmup_ms,
        section.measure_ms,
        section.targets.join(", ")
    ));
    let lines = headline(section);
    if !lines.is_empty() {
        page.list(&lines, false);
    }
    if !section.notices.is_empty() {
        page.list(&section.notices, true);
    }
    page.plots(plots(section));
    page.note(NOTE);
    let mut facts = devices(section);
    facts.extend(machine_load(section));
    page.list(&facts, false);
    for job in &section.jobs {
        page.subsection(job);
        page.table(&job_table(section, job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::plan::{NetPlan, NetPreset};
    use crate::net::results::{finalize, NetMetrics};

    fn section() -> NetSection {
        let plan = NetPlan::preset(NetPreset::Tiny, false);
        let mut cells = Vec::new();
        for job in &plan.jobs {
            for (target, pps) in [(PEER, 1000.0), ("vmirq", 500.0), ("vmirq:dim", 0.0)] {
                let mut c = NetCell::new(target.into(), job, 2);
                if pps > 0.0 {
                    let m = NetMetrics {
                        packets: 10,
                        pps,
                        rtt_p50_ns: Some(2_000),
                        rtt_p99_ns: Some(9_000),
                        interrupts_per_packet: 0.5,
                        cpu_ns_per_packet: 300.0,
                        ..NetMetrics::default()
                    };
                    c.runs = vec![Some(m), Some(m)];
                } else {
                    c.errors.push("vmirq:dim: <boom>\nsecond line".into());
                }
                cells.push(c);
            }
        }
        finalize(&mut cells);
        NetSection {
            preset: "net-tiny".into(),
            repetitions: 2,
            warmup_ms: 1,
            measure_ms: 2,
            targets: vec![PEER.into(), "vmirq".into(), "vmirq:dim".into()],
            versus: crate::net::results::versus(
                &cells,
                &[PEER.into(), "vmirq".into(), "vmirq:dim".into()],
            ),
            jobs: plan
                .jobs
                .iter()
                .map(crate::net::plan::NetJob::name)
                .collect(),
            cells,
            notices: vec!["ovs-dpdk left out: <reason>".into()],
        }
    }

    #[test]
    fn renders_ratios_failures_and_escapes_html() {
        let s = section();
        let text = render_text(&s);
        assert!(text.contains("vmirq / testpmd, stream-64/poll (2 paired repetitions): packets/s 0.500x [0.500..0.500]"), "{text}");
        assert!(text.contains("failed"));
        assert!(
            text.contains("vmirq / testpmd over 2 jobs: packets/s geometric mean 0.500x"),
            "{text}"
        );
        let mut page = Page::new("t");
        render_html(&s, &mut page);
        let html = page.finish();
        vmirq_report::check::page(&html).expect("well-formed");
        assert!(html.contains("&lt;boom&gt;") && !html.contains("<boom>"));
        assert!(html.contains("rr-64/interrupt"));
        assert_eq!(plots(&s).len(), 2);
        for svg in vmirq_report::check::svgs(&html) {
            vmirq_report::check::svg(svg).expect("well-formed plot");
        }
    }
}
