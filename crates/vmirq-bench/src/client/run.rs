//! The client's main loop: submit up to the wanted depth, harvest completions, and when
//! nothing is ready either block on the completion eventfd (interrupt mode) or spin (poll).

use super::TRACE_EVENTS_MAX;
use super::{eventfd, Device, Offsets, Pacer, RunConfig, Sample, TraceEvent, SPAN_MAX_BYTES};
use crate::cpu;
use crate::error::{BenchError, Result};
use crate::rng::Rng;
use crate::workload::ClientMode;
use blkio::{Completion, ReqFlags};
use hdrhistogram::Histogram;
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

/// No completion for this long with requests in flight aborts the run.
const STALL_NS: u64 = 5_000_000_000;
/// Longest single block on the eventfd (the loop re-checks its deadline after each).
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// Largest latency the histogram records (60 s); longer ones are clamped.
const LATENCY_MAX_NS: u64 = 60_000_000_000;
/// Bound on the final drain of requests still in flight after the window.
const DRAIN_NS: u64 = 2_000_000_000;

/// Counters that run through warm-up and measurement; the sample is a difference of two.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    ios: u64,
    bytes: u64,
    notifications: u64,
    wakeups: u64,
    client_cpu_ns: u64,
    backend_cpu_ns: Option<u64>,
    system: Option<cpu::SystemTicks>,
    t_ns: u64,
}

/// Mutable state of one run.
struct Loop<'a> {
    cfg: &'a RunConfig,
    clock: Instant,
    pacer: Pacer,
    offsets: Offsets,
    rng: Rng,
    free: Vec<usize>,
    submit_ns: Vec<u64>,
    in_flight: u32,
    last_progress_ns: u64,
    now: Counters,
    base: Option<Counters>,
    latency: Histogram<u64>,
    trace: Vec<TraceEvent>,
    completions: Vec<MaybeUninit<Completion>>,
}

/// Run `cfg` on `dev` and return the measured sample.
///
/// # Errors
/// A libblkio or eventfd failure, a failed request, or a stall (nothing completes for 5 s).
pub fn run(dev: &mut Device, cfg: &RunConfig) -> Result<Sample> {
    let max_qd = usize::try_from(cfg.workload.queue_depth().max(1)).unwrap_or(1);
    let block = usize::try_from(cfg.workload.block_size).unwrap_or(4096);
    if dev.buf_len() < max_qd * block {
        return Err(BenchError::Invalid {
            what: "buffer region",
            value: dev.buf_len().to_string(),
            reason: format!("needs {} bytes", max_qd * block),
        });
    }
    let interrupt = cfg.mode == ClientMode::Interrupt;
    // Interrupt mode keeps used-buffer notifications on (EVENT_IDX follows every harvest);
    // poll mode turns them off, as libblkio's poll queues do.
    dev.queue.set_completion_fd_enabled(interrupt);
    let mut lp = Loop::new(cfg, dev.capacity, max_qd)?;
    let warm_ns = duration_ns(cfg.warmup);
    let end_ns = warm_ns + duration_ns(cfg.measure);
    loop {
        let now = lp.t();
        if lp.base.is_none() && now >= warm_ns {
            lp.begin_measure(now);
        }
        if now >= end_ns {
            break;
        }
        lp.fill(dev, now);
        if lp.harvest(dev)? > 0 {
            continue;
        }
        lp.idle(dev, end_ns)?;
    }
    let sample = lp.finish();
    lp.drain(dev)?;
    Ok(sample)
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<'a> Loop<'a> {
    fn new(cfg: &'a RunConfig, capacity: u64, max_qd: usize) -> Result<Self> {
        let latency =
            Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3).map_err(|e| BenchError::Invalid {
                what: "latency histogram bound",
                value: LATENCY_MAX_NS.to_string(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            cfg,
            clock: Instant::now(),
            pacer: Pacer::new(cfg.workload.shape, cfg.seed),
            offsets: Offsets::new(&cfg.workload, capacity, SPAN_MAX_BYTES),
            rng: Rng::new(cfg.seed),
            free: (0..max_qd).rev().collect(),
            submit_ns: vec![0; max_qd],
            in_flight: 0,
            last_progress_ns: 0,
            now: Counters::default(),
            base: None,
            latency,
            trace: Vec::new(),
            completions: (0..max_qd).map(|_| MaybeUninit::uninit()).collect(),
        })
    }

    fn t(&self) -> u64 {
        duration_ns(self.clock.elapsed())
    }

    fn measuring(&self) -> bool {
        self.base.is_some()
    }

    fn snapshot(&mut self, t_ns: u64) -> Counters {
        self.now.t_ns = t_ns;
        self.now.client_cpu_ns = cpu::thread_cpu_ns().unwrap_or(0);
        self.now.backend_cpu_ns = self.cfg.backend_pid.and_then(cpu::process_cpu_ns);
        self.now.system = cpu::SystemTicks::read();
        self.now
    }

    fn begin_measure(&mut self, t_ns: u64) {
        self.base = Some(self.snapshot(t_ns));
        self.latency.reset();
    }

    /// Submit requests until the wanted depth is reached, then kick the device once.
    fn fill(&mut self, dev: &mut Device, now: u64) {
        let wanted = self.pacer.wanted(now);
        while self.in_flight < wanted {
            let Some(slot) = self.free.pop() else { break };
            self.submit(dev, slot, now);
        }
    }

    fn submit(&mut self, dev: &mut Device, slot: usize, now: u64) {
        let block = usize::try_from(self.cfg.workload.block_size).unwrap_or(4096);
        let offset = self.offsets.next(&mut self.rng);
        let roll = self.rng.roll();
        // The slot's buffer lies inside the mapped region (checked against buf_len in `run`)
        // and is not reused until this request completes.
        let buf = dev.buf_base().wrapping_add(slot * block);
        if self.cfg.workload.is_read(roll) {
            dev.queue.read(offset, buf, block, slot, ReqFlags::empty());
        } else {
            dev.queue.write(offset, buf, block, slot, ReqFlags::empty());
        }
        self.submit_ns[slot] = now;
        self.in_flight += 1;
        self.pacer.submitted(now);
        self.record(now, false);
    }

    fn record(&mut self, t_ns: u64, complete: bool) {
        if let (true, Some(base)) = (self.cfg.record_trace, self.base) {
            if self.trace.len() < TRACE_EVENTS_MAX {
                self.trace.push(TraceEvent {
                    t_ns: t_ns.saturating_sub(base.t_ns),
                    complete,
                });
            }
        }
    }

    /// Hand submissions to the device and take every completion that is ready, without
    /// blocking. Returns how many completed.
    fn harvest(&mut self, dev: &mut Device) -> Result<usize> {
        let n = dev
            .queue
            .do_io(&mut self.completions, 0, None, None)
            .map_err(|e| BenchError::blkio("do_io", &e))?;
        let now = self.t();
        let block = u64::from(self.cfg.workload.block_size);
        for i in 0..n.min(self.completions.len()) {
            // SAFETY: libblkio initialised the first `n` entries of the slice it was given.
            let c = unsafe { self.completions[i].assume_init_read() };
            if c.ret < 0 {
                return Err(BenchError::RequestFailed {
                    errno: c.ret,
                    target: self.cfg.target.clone(),
                });
            }
            let slot = c.user_data;
            let Some(&started) = self.submit_ns.get(slot) else {
                continue;
            };
            self.free.push(slot);
            self.in_flight = self.in_flight.saturating_sub(1);
            self.now.ios += 1;
            self.now.bytes += block;
            if self.measuring() {
                self.latency
                    .saturating_record(now.saturating_sub(started).clamp(1, LATENCY_MAX_NS));
            }
            self.record(now, true);
        }
        if n > 0 {
            self.last_progress_ns = now;
        }
        Ok(n)
    }

    /// Nothing completed: wait for the next event in the way the client mode prescribes.
    fn idle(&mut self, dev: &Device, end_ns: u64) -> Result<()> {
        let now = self.t();
        if self.in_flight == 0 {
            if let Some(due) = self.pacer.next_due_ns() {
                self.pause_until(due.min(end_ns), now);
            }
            self.last_progress_ns = now;
            return Ok(());
        }
        if now.saturating_sub(self.last_progress_ns) > STALL_NS {
            return Err(BenchError::Stalled {
                target: self.cfg.target.clone(),
                in_flight: self.in_flight,
                ms: STALL_NS / 1_000_000,
            });
        }
        match (self.cfg.mode, dev.completion_fd()) {
            (ClientMode::Interrupt, Some(fd)) => self.block_on(fd, end_ns.saturating_sub(now)),
            _ => {
                std::hint::spin_loop();
                Ok(())
            }
        }
    }

    /// Open-loop gap: sleep (interrupt mode: the guest halts) or spin (poll mode).
    fn pause_until(&self, due_ns: u64, now: u64) {
        if due_ns <= now {
            return;
        }
        if self.cfg.mode == ClientMode::Interrupt {
            std::thread::sleep(Duration::from_nanos(due_ns - now));
        } else {
            while self.t() < due_ns {
                std::hint::spin_loop();
            }
        }
    }

    /// Take a pending signal, or block for one (bounded by the window end and WAIT_SLICE).
    fn block_on(&mut self, fd: std::os::unix::io::RawFd, left_ns: u64) -> Result<()> {
        let pending = eventfd::take(fd, Duration::ZERO).map_err(BenchError::Wait)?;
        if pending > 0 {
            self.now.notifications += pending;
            return Ok(());
        }
        let wait = Duration::from_nanos(left_ns).min(WAIT_SLICE);
        let got = eventfd::take(fd, wait).map_err(BenchError::Wait)?;
        if got > 0 {
            self.now.notifications += got;
            self.now.wakeups += 1;
        }
        Ok(())
    }

    fn finish(&mut self) -> Sample {
        let end_t = self.t();
        let end = self.snapshot(end_t);
        let base = self.base.unwrap_or_default();
        Sample {
            ios: end.ios - base.ios,
            bytes: end.bytes - base.bytes,
            elapsed_ns: end.t_ns.saturating_sub(base.t_ns).max(1),
            latency: self.latency.clone(),
            notifications: end.notifications - base.notifications,
            wakeups: end.wakeups - base.wakeups,
            client_cpu_ns: end.client_cpu_ns.saturating_sub(base.client_cpu_ns),
            backend_cpu_ns: end
                .backend_cpu_ns
                .zip(base.backend_cpu_ns)
                .map(|(e, b)| e.saturating_sub(b)),
            system: end.system.zip(base.system).map(|(e, b)| e.since(&b)),
            backend_counters: None,
            trace: std::mem::take(&mut self.trace),
        }
    }

    /// Wait (bounded) for requests still in flight so the device is quiet before teardown.
    fn drain(&mut self, dev: &mut Device) -> Result<()> {
        let start = self.t();
        while self.in_flight > 0 && self.t().saturating_sub(start) < DRAIN_NS {
            if self.harvest(dev)? == 0 {
                match (self.cfg.mode, dev.completion_fd()) {
                    (ClientMode::Interrupt, Some(fd)) => {
                        eventfd::take(fd, Duration::from_millis(10)).map_err(BenchError::Wait)?;
                    }
                    _ => std::hint::spin_loop(),
                }
            }
        }
        Ok(())
    }
}
