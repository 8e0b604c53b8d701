//! `vmirq replay`: run moderation policies over a completion trace (or the built-in one) and
//! report notifications and added delay per completion.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use vmirq_policy::spec::ModerationSpec;
use vmirq_replay::synthetic::default_trace;
use vmirq_replay::trace::format_trace;
use vmirq_replay::{parse_trace, replay, ReplayOptions, ReplayReport};

/// Policies compared when no `--policy` is given.
const DEFAULT_POLICIES: &[&str] = &[
    "none",
    "count",
    "vic",
    "ipi-gap",
    "dim",
    "dim:latency=on",
    "dim-loop",
    "dim-lat",
    "spdk",
    "budget",
];

/// Arguments of `vmirq replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Moderation policy spec (repeat to compare several; default: every policy).
    #[arg(long = "policy", value_name = "SPEC", value_parser = parse_spec)]
    policies: Vec<ModerationSpec>,
    /// Trace file: one `<time_ns> submit|complete [queue]` per line, `#` comments
    /// (default: the built-in synthetic trace).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Seed of the built-in synthetic trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table (one object for one policy, else `{"trace", "results"}`).
    #[arg(long)]
    json: bool,
    /// Write the trace that is replayed to FILE (e.g. to see the built-in one).
    #[arg(long, value_name = "FILE")]
    write_trace: Option<PathBuf>,
}

fn parse_spec(s: &str) -> Result<ModerationSpec, String> {
    s.parse()
        .map_err(|e: vmirq_policy::spec::SpecError| e.to_string())
}

/// Run `vmirq replay`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (label, events) = match &args.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read trace {}", path.display()))?;
            let events =
                parse_trace(&text).with_context(|| format!("bad trace {}", path.display()))?;
            (path.display().to_string(), events)
        }
        None => (
            format!("built-in synthetic trace (seed {})", args.seed),
            default_trace(args.seed),
        ),
    };
    if let Some(out) = &args.write_trace {
        std::fs::write(out, format_trace(&events))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    let specs: Vec<ModerationSpec> = if args.policies.is_empty() {
        DEFAULT_POLICIES
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_, _>>()
            .context("built-in policy list")?
    } else {
        args.policies.clone()
    };
    let mut reports = Vec::with_capacity(specs.len());
    for spec in &specs {
        reports.push(replay(spec, &events, ReplayOptions::default())?);
    }
    if args.json {
        let value = if reports.len() == 1 && !args.policies.is_empty() {
            serde_json::to_value(&reports[0])?
        } else {
            serde_json::json!({ "trace": label, "results": reports })
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_table(&label, &reports);
    }
    Ok(ExitCode::SUCCESS)
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

fn print_table(label: &str, reports: &[ReplayReport]) {
    println!("trace: {label}");
    println!(
        "{:<22} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "policy", "completions", "notifs", "notif/io", "mean µs", "p50 µs", "p99 µs", "max µs"
    );
    for r in reports {
        println!(
            "{:<22} {:>11} {:>9} {:>9.3} {:>9} {:>9} {:>9} {:>9}",
            r.policy,
            r.completions,
            r.notifications,
            r.notifications_per_completion,
            us(r.added_delay_ns.mean),
            us(r.added_delay_ns.p50),
            us(r.added_delay_ns.p99),
            us(r.added_delay_ns.max)
        );
    }
    println!("(added delay = time from a completion to the notification that covers it)");
}
