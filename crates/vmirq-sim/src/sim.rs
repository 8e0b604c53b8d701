//! One simulation run: build the host and workload from a [`ModelConfig`], run the event
//! loop to the end time (bounded by `max_events`), and collect flat metrics.

use crate::engine::{EngineError, EngineStats};
use crate::host::metrics::{summarize, Cat};
use crate::host::{Core, Ev, Metrics, NicDev, StorageDev};
use crate::model::{ConfigError, ModelConfig};
use crate::workload::{Workload, WorkloadConfig};
use crate::Nanos;
use std::collections::BTreeMap;

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Invalid configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The engine refused an operation or the event budget ran out.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A model invariant broke (a bug in the model).
    #[error("model invariant violated at {now} ns: {what}")]
    Invariant {
        /// Time.
        now: Nanos,
        /// Description.
        what: String,
    },
}

/// Result of one run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunResult {
    /// Seed used.
    pub seed: u64,
    /// Simulated duration.
    pub duration_ns: Nanos,
    /// Engine counters.
    pub engine: EngineStats,
    /// Flat metrics: `series.stat`, counters, `cpu.<cat>_pct`, rates.
    pub values: BTreeMap<String, f64>,
    /// Raw series, counters and timelines.
    #[serde(skip)]
    pub metrics: Metrics,
}

/// Run `cfg` with `seed`; `check_every` > 0 checks invariants every that many events.
///
/// # Errors
/// [`SimError`].
pub fn run(cfg: &ModelConfig, seed: u64, check_every: u64) -> Result<RunResult, SimError> {
    let mut workload = Workload::new(&cfg.workload);
    workload.validate()?;
    let mut core = cfg.build_core(seed, workload.vcpus_needed())?;
    let policy = cfg.moderation_policy()?;
    match &cfg.workload {
        WorkloadConfig::Storage(c) => {
            let dev = StorageDev::new(c.parallelism, c.latency, policy, 0, seed);
            core.devs.push(dev);
        }
        WorkloadConfig::NetRx(_) => core.nics.push(NicDev::new(policy, 0)),
        _ => {}
    }
    core.start_scheduler()?;
    workload.start(&mut core)?;
    let warm = cfg.warmup_us.saturating_mul(1_000);
    let end = warm + cfg.duration_us.saturating_mul(1_000);
    let mut n = 0u64;
    let mut warmed = warm == 0;
    while let Some((t, _, ev)) = core.q.pop_until(end) {
        if !warmed && t >= warm {
            warmed = true;
            core.metrics = Metrics::default();
            for p in &mut core.pcpus {
                p.time.reset(warm);
            }
        }
        n += 1;
        if n > cfg.max_events {
            return Err(EngineError::EventBudget {
                limit: cfg.max_events,
                now: core.now(),
            }
            .into());
        }
        step(&mut core, &mut workload, ev)?;
        if check_every > 0 && n % check_every == 0 {
            if let Some(what) = core.invariant_violation() {
                return Err(SimError::Invariant {
                    now: core.now(),
                    what,
                });
            }
        }
    }
    Ok(collect(core, seed, warm, end))
}

fn step(core: &mut Core, workload: &mut Workload, ev: Ev) -> Result<(), EngineError> {
    match ev {
        Ev::WorkDone(v) => {
            if let Some(h) = core.work_done(v)? {
                workload.hook(core, h)?;
            }
            core.dispatch(v)
        }
        Ev::PollEnd(v) => core.poll_end(v),
        Ev::Running(v) => {
            if let Some(h) = core.running(v)? {
                workload.hook(core, h)?;
            }
            core.dispatch(v)
        }
        Ev::Timeslice(p) => core.timeslice(p),
        Ev::Notice(v, irq) => {
            if let Some(h) = core.notice(v, irq)? {
                workload.hook(core, h)?;
            }
            core.dispatch(v)
        }
        Ev::Wake(v) => core.wake_thread_pub(v),
        Ev::Workload(tag, data) => workload.timer(core, tag, data),
        Ev::IoDone(d, req) => core.io_done(d, req),
        Ev::ModTimer(d) => core.mod_timer(d),
        Ev::NicTimer(q) => core.nic_timer(q),
    }
}

#[allow(clippy::cast_precision_loss, reason = "report values")]
fn collect(core: Core, seed: u64, warm: Nanos, end: Nanos) -> RunResult {
    let mut values = BTreeMap::new();
    for (name, s) in &core.metrics.series {
        let m = summarize(s);
        values.insert(format!("{name}.n"), m.n as f64);
        values.insert(format!("{name}.mean"), m.mean);
        values.insert(format!("{name}.p50"), m.p50 as f64);
        values.insert(format!("{name}.p90"), m.p90 as f64);
        values.insert(format!("{name}.p99"), m.p99 as f64);
        values.insert(format!("{name}.max"), m.max as f64);
    }
    let span = end - warm;
    let secs = span as f64 / 1e9;
    for (name, &c) in &core.metrics.counters {
        values.insert((*name).to_string(), c as f64);
        values.insert(format!("{name}.per_s"), c as f64 / secs);
    }
    let mut total = [0u64; crate::host::metrics::N_CAT];
    for p in &core.pcpus {
        for (t, x) in total.iter_mut().zip(p.time.totals(end)) {
            *t += x;
        }
    }
    let all = (span as f64) * core.pcpus.len() as f64;
    for c in Cat::ALL {
        values.insert(
            format!("cpu.{}_pct", c.name()),
            100.0 * total[c as usize] as f64 / all,
        );
    }
    let busy: u64 = total.iter().sum::<u64>() - total[Cat::Idle as usize];
    values.insert("cpu.busy_pct".into(), 100.0 * busy as f64 / all);
    let work = busy - total[Cat::Poll as usize];
    values.insert("cpu.work_pct".into(), 100.0 * work as f64 / all);
    for (name, k) in &core.metrics.timeline {
        let mut d: Vec<i64> = k.iter().map(|p| p.1).collect();
        values.insert(format!("{name}.changes"), d.len() as f64);
        d.sort_unstable();
        d.dedup();
        values.insert(format!("{name}.distinct"), d.len() as f64);
    }
    let rx = core.metrics.counter("rx_bytes");
    if rx > 0 {
        values.insert("rx_gbps".into(), rx as f64 * 8.0 / secs / 1e9);
    }
    let ios = core.metrics.counter("ios_completed");
    if ios > 0 {
        let host = core.metrics.counter("host_io_ns");
        values.insert("cpu_ns_per_io".into(), (busy + host) as f64 / ios as f64);
        values.insert("iops".into(), ios as f64 / secs);
        let irqs = core.metrics.counter("notifications");
        values.insert("irqs_per_io".into(), irqs as f64 / ios as f64);
    }
    RunResult {
        seed,
        duration_ns: span,
        engine: core.q.stats(),
        values,
        metrics: core.metrics,
    }
}
