//! The client's main loop over its ports, one thread, shaped like a guest's NAPI driver.
//!
//! Each round receives up to `budget` frames per port (callbacks off), answers requests,
//! reclaims transmitted buffers and sends what the workload wants now. When a round finds
//! nothing to do, interrupt mode re-arms the RX callbacks with EVENT_IDX (and the TX
//! callback, delayed, on a port whose ring is full), re-checks for a race, and sleeps on the
//! call eventfds until a signal or the next paced send; poll mode spins instead. A run has a
//! warm-up, a measured window, and a drain (new traffic stops, in-flight frames may
//! arrive), all bounded in time.

pub mod flows;
mod os;
pub mod report;

use crate::frame::{self, FrameError, Pattern, Probe};
use crate::port::{Faults, NetPort, PortError};
use crate::virtio_net::feature_names;
use crate::workload::{Workload, WorkloadError};
use flows::{response_to, BulkFlow, RrFlow};
use hdrhistogram::Histogram;
use report::{FrameErrors, Totals};
pub use report::{Report, Snapshot};
use serde::Serialize;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The workload does not fit.
    #[error("workload")]
    Workload(#[from] WorkloadError),
    /// A port failed (broken ring, vanished backend).
    #[error("port {index}")]
    Port {
        /// Port index.
        index: usize,
        /// The port error.
        #[source]
        source: PortError,
    },
    /// The latency histogram could not be created.
    #[error("latency histogram")]
    Histogram(#[from] hdrhistogram::CreationError),
    /// Frames sent between two ports never arrived.
    #[error("no frame from port {from} reached port {to} in {PATH_TIMEOUT:?}")]
    NoPath {
        /// Sending port.
        from: usize,
        /// Receiving port.
        to: usize,
    },
    /// Sleeping on the eventfds failed.
    #[error("waiting for call eventfds")]
    Wait(#[source] std::io::Error),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, RunError>;

/// How the client learns that frames arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Sleep on the call eventfds between rounds (a guest's NAPI with interrupts).
    Interrupt,
    /// Never sleep; spin over the used rings (a polling driver, like DPDK's).
    Poll,
}

impl Mode {
    /// Name on the command line and in reports.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Interrupt => "interrupt",
            Self::Poll => "poll",
        }
    }

    /// Parse `interrupt` or `poll`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "interrupt" | "irq" => Some(Self::Interrupt),
            "poll" => Some(Self::Poll),
            _ => None,
        }
    }
}

/// What to run and for how long.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Traffic.
    pub workload: Workload,
    /// Interrupt or poll mode.
    pub mode: Mode,
    /// Unmeasured time at the start.
    pub warmup: Duration,
    /// Measured window.
    pub measure: Duration,
    /// Longest wait for in-flight frames after the window.
    pub drain_max: Duration,
    /// Frames received per port per round (NAPI weight).
    pub budget: usize,
    /// Compare every payload byte (header, length and trailer are always checked).
    pub verify_payload: bool,
    /// Pin the client thread to this CPU.
    pub cpu: Option<usize>,
    /// At most this many bulk frames sent and not yet received (a receive window, as TCP
    /// keeps); `None`: unlimited, the peer drops what the receiver has no buffers for.
    pub bulk_window: Option<u64>,
}

impl RunConfig {
    /// Defaults: 0.5 s warm-up, 2 s measured, 0.5 s drain, budget 64, payload verified.
    #[must_use]
    pub const fn new(workload: Workload, mode: Mode) -> Self {
        Self {
            workload,
            mode,
            warmup: Duration::from_millis(500),
            measure: Duration::from_secs(2),
            drain_max: Duration::from_millis(500),
            budget: 64,
            verify_payload: true,
            cpu: None,
            bulk_window: None,
        }
    }
}

/// Flow ids in the frames.
const HELLO_FLOW: u8 = 0;
const BULK_FLOW: u8 = 1;
const RR_FLOW: u8 = 2;

/// How long [`await_paths`] tries before giving up.
const PATH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

/// Run `cfg` over `ports` (connected, in the workload's port order) in the calling thread.
///
/// # Errors
/// [`RunError`].
pub fn run(ports: &mut [NetPort], cfg: &RunConfig) -> Result<Report> {
    cfg.workload.validate()?;
    cfg.workload.check_ports(ports.len())?;
    if let Some(cpu) = cfg.cpu {
        os::pin_to(cpu);
    }
    os::precise_timers();
    let hellos = await_paths(ports)?;
    // 1 ns .. 10 s at 3 significant digits.
    let rtt = Histogram::new_with_bounds(1, 10_000_000_000, 3)?;
    let mut engine = Engine::new(ports, cfg, rtt);
    engine.hellos = hellos;
    engine.run()
}

/// Wait until frames cross the peer in both directions of every port pair (0 <-> 1,
/// 2 <-> 3, ...). A vhost-user backend acknowledges the last ring message before it has
/// necessarily started switching the device's packets (DPDK's vhost PMD turns queuing on
/// after replying), and vhost-user has no link-status message, so the client probes: one
/// small hello frame per millisecond until one arrives. Returns the hellos sent and
/// received: the peer drops those sent before it switched the port on.
///
/// # Errors
/// [`RunError::NoPath`] after [`PATH_TIMEOUT`], or a port error.
pub fn await_paths(ports: &mut [NetPort]) -> Result<Hellos> {
    let mut hellos = Hellos::default();
    let pattern = Pattern::new();
    let mut scratch = Vec::new();
    let pairs = ports.len() / 2;
    for (from, to) in (0..pairs).flat_map(|i| [(2 * i, 2 * i + 1), (2 * i + 1, 2 * i)]) {
        let start = Instant::now();
        let mut seq = 0;
        loop {
            let mut arrived = 0;
            ports[to]
                .receive(64, &mut scratch, &mut |f| {
                    arrived +=
                        u64::from(frame::parse(f, &pattern, false).is_ok_and(|p| is_hello(&p)));
                })
                .map_err(port_err(to))?;
            hellos.received += arrived;
            ports[from].reclaim_tx().map_err(port_err(from))?;
            if arrived > 0 {
                break;
            }
            if start.elapsed() > PATH_TIMEOUT {
                return Err(RunError::NoPath { from, to });
            }
            let hello = Probe {
                kind: frame::Kind::Bulk,
                flow: HELLO_FLOW,
                seq,
                t_ns: 0,
                len: frame::FRAME_LEN_MIN,
            };
            seq += 1;
            let mac = ports[to].mac();
            if ports[from]
                .send(&hello, mac, &pattern)
                .map_err(port_err(from))?
            {
                ports[from].flush().map_err(port_err(from))?;
                hellos.sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(hellos)
}

fn is_hello(p: &Probe) -> bool {
    p.flow == HELLO_FLOW && p.kind == frame::Kind::Bulk
}

/// Path probes of [`await_paths`] (received ones include those arriving during the run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Hellos {
    /// Hello frames sent.
    pub sent: u64,
    /// Hello frames received.
    pub received: u64,
}

struct Engine<'a> {
    ports: &'a mut [NetPort],
    cfg: &'a RunConfig,
    pattern: Pattern,
    start: Instant,
    bulk: Option<BulkFlow>,
    rr: Option<RrFlow>,
    /// Responses waiting for TX room, per port: (probe, destination port).
    pending: Vec<VecDeque<(Probe, usize)>>,
    tx_blocked: Vec<bool>,
    rtt: Histogram<u64>,
    measuring: bool,
    errors: FrameErrors,
    wakeups: u64,
    timer_wakeups: u64,
    /// Longest round, or longest oversleep past a timer: how long the client was away.
    stall_max_ns: u64,
    hellos: Hellos,
    /// Reused buffers of the hot path: eventfds to sleep on (port, is TX, fd), ports sent on.
    poll_set: Vec<(usize, bool, RawFd)>,
    touched: Vec<bool>,
    scratch: Vec<u8>,
    inbox: Vec<(usize, std::result::Result<Probe, FrameError>)>,
}

fn port_err(index: usize) -> impl FnOnce(PortError) -> RunError {
    move |source| RunError::Port { index, source }
}

impl<'a> Engine<'a> {
    fn new(ports: &'a mut [NetPort], cfg: &'a RunConfig, rtt: Histogram<u64>) -> Self {
        let slack = ports
            .first()
            .map_or(256, |p| u64::from(p.tx_in_flight()) + p.tx_free() as u64);
        let (bulk, rr) = match cfg.workload {
            Workload::Stream {
                frame_len,
                rate_pps,
            } => (
                Some(BulkFlow::new(BULK_FLOW, 0, 1, frame_len, rate_pps, slack)),
                None,
            ),
            Workload::Rr { frame_len, depth } => {
                (None, Some(RrFlow::new(RR_FLOW, 0, 1, frame_len, depth, 0)))
            }
            Workload::Mix {
                bulk_len,
                bulk_rate_pps,
                msg_len,
                msg_interval_us,
            } => {
                let (c, s) = if ports.len() == 4 { (2, 3) } else { (0, 1) };
                let interval = u64::from(msg_interval_us) * 1_000;
                (
                    Some(BulkFlow::new(
                        BULK_FLOW,
                        0,
                        1,
                        bulk_len,
                        bulk_rate_pps,
                        slack,
                    )),
                    Some(RrFlow::new(RR_FLOW, c, s, msg_len, 1, interval)),
                )
            }
        };
        let n = ports.len();
        Self {
            ports,
            cfg,
            pattern: Pattern::new(),
            start: Instant::now(),
            bulk,
            rr,
            pending: vec![VecDeque::new(); n],
            tx_blocked: vec![false; n],
            rtt,
            measuring: false,
            errors: FrameErrors::default(),
            wakeups: 0,
            timer_wakeups: 0,
            stall_max_ns: 0,
            hellos: Hellos::default(),
            poll_set: Vec::new(),
            touched: Vec::new(),
            scratch: Vec::with_capacity(frame::FRAME_LEN_MAX as usize),
            inbox: Vec::new(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn run(mut self) -> Result<Report> {
        if self.cfg.mode == Mode::Poll {
            for (i, p) in self.ports.iter_mut().enumerate() {
                p.rx_disable_cb().map_err(port_err(i))?;
            }
        }
        let warm_end = dur_ns(self.cfg.warmup);
        // Set when the window opens, so a stalled client still measures a full window.
        let mut measure_end = u64::MAX;
        let mut drain_end = u64::MAX;
        let mut phase = Phase::Warmup;
        let mut base = Snapshot::default();
        let mut end = Snapshot::default();
        loop {
            let now = self.now();
            if phase == Phase::Warmup && now >= warm_end {
                base = self.snapshot(now);
                self.measuring = true;
                phase = Phase::Measure;
                measure_end = now + dur_ns(self.cfg.measure);
            }
            if phase == Phase::Measure && now >= measure_end {
                end = self.snapshot(now);
                self.measuring = false;
                self.stop_traffic();
                phase = Phase::Drain;
                drain_end = now + dur_ns(self.cfg.drain_max);
            }
            if phase == Phase::Drain && (self.settled() || now >= drain_end) {
                break;
            }
            let busy = self.round(now)?;
            self.stall_max_ns = self.stall_max_ns.max(self.now().saturating_sub(now));
            if !busy && self.cfg.mode == Mode::Interrupt {
                let deadline = match phase {
                    Phase::Warmup => warm_end,
                    Phase::Measure => measure_end,
                    Phase::Drain => drain_end,
                };
                self.sleep(deadline)?;
            }
        }
        for p in self.ports.iter_mut() {
            p.take_calls();
        }
        Ok(self.report(&base, &end))
    }

    /// One NAPI-like round; true if there was work (the caller then polls again at once).
    fn round(&mut self, now: u64) -> Result<bool> {
        let (received, budget_used) = self.receive_all()?;
        self.dispatch(now);
        let mut reclaimed = 0;
        for (i, p) in self.ports.iter_mut().enumerate() {
            if p.tx_in_flight() > 0 {
                reclaimed += p.reclaim_tx().map_err(port_err(i))?;
            }
        }
        let sent = self.send_all(now)?;
        Ok(budget_used || received > 0 || sent > 0 || reclaimed > 0)
    }

    fn receive_all(&mut self) -> Result<(usize, bool)> {
        let Self {
            ports,
            cfg,
            pattern,
            scratch,
            inbox,
            ..
        } = self;
        let mut total = 0;
        let mut budget_used = false;
        for (i, p) in ports.iter_mut().enumerate() {
            let verify = cfg.verify_payload;
            let n = p
                .receive(cfg.budget, scratch, &mut |f| {
                    inbox.push((i, frame::parse(f, pattern, verify)));
                })
                .map_err(port_err(i))?;
            total += n;
            budget_used |= n == cfg.budget;
        }
        Ok((total, budget_used))
    }

    fn dispatch(&mut self, now: u64) {
        for (port, parsed) in self.inbox.drain(..) {
            let p = match parsed {
                Ok(p) => p,
                Err(FrameError::Foreign) => {
                    self.errors.foreign += 1;
                    continue;
                }
                Err(e) => {
                    tracing::debug!(port, %e, "invalid frame");
                    self.errors.invalid += 1;
                    continue;
                }
            };
            if is_hello(&p) {
                // A late probe of `await_paths`.
                self.hellos.received += 1;
                continue;
            }
            let routed = match p.kind {
                frame::Kind::Bulk => match self.bulk.as_mut() {
                    Some(b) if b.flow == p.flow && b.rx == port => {
                        b.on_receive(&p);
                        true
                    }
                    _ => false,
                },
                frame::Kind::Request => match self.rr.as_ref() {
                    Some(r) if r.flow == p.flow && r.server == port => {
                        self.pending[port].push_back((response_to(&p), r.client));
                        true
                    }
                    _ => false,
                },
                frame::Kind::Response => match self.rr.as_mut() {
                    Some(r) if r.flow == p.flow && r.client == port => {
                        if let Some(rtt) = r.on_response(&p, now) {
                            if self.measuring {
                                let _ = self.rtt.record(rtt.max(1));
                            }
                        }
                        true
                    }
                    _ => false,
                },
            };
            if !routed {
                self.errors.misrouted += 1;
            }
        }
    }

    /// Send pending responses, due requests and due bulk frames; returns frames queued.
    fn send_all(&mut self, now: u64) -> Result<usize> {
        self.tx_blocked.iter_mut().for_each(|b| *b = false);
        let mut sent = 0;
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        touched.resize(self.ports.len(), false);
        for (i, queue) in self.pending.iter_mut().enumerate() {
            while let Some(&(probe, dst)) = queue.front() {
                let mac = self.ports[dst].mac();
                if !self.ports[i]
                    .send(&probe, mac, &self.pattern)
                    .map_err(port_err(i))?
                {
                    self.tx_blocked[i] = true;
                    break;
                }
                queue.pop_front();
                sent += 1;
                touched[i] = true;
            }
        }
        if let Some(rr) = self.rr.as_mut() {
            let (c, s) = (rr.client, rr.server);
            for _ in 0..rr.due(now) {
                if self.ports[c].tx_free() == 0 {
                    self.tx_blocked[c] = true;
                    break;
                }
                let probe = rr.next_request(now);
                let mac = self.ports[s].mac();
                self.ports[c]
                    .send(&probe, mac, &self.pattern)
                    .map_err(port_err(c))?;
                sent += 1;
                touched[c] = true;
            }
        }
        if let Some(bulk) = self.bulk.as_mut() {
            let (t, r) = (bulk.tx, bulk.rx);
            let window = self
                .cfg
                .bulk_window
                .map_or(u64::MAX, |w| w.saturating_sub(bulk.missing()));
            let room = (self.ports[t].tx_free().min(self.cfg.budget) as u64).min(window);
            let due = bulk.due(now, room);
            let mac = self.ports[r].mac();
            for _ in 0..due {
                let probe = bulk.next_probe(now);
                self.ports[t]
                    .send(&probe, mac, &self.pattern)
                    .map_err(port_err(t))?;
                sent += 1;
                touched[t] = true;
            }
            if self.ports[t].tx_free() == 0 && bulk.wants(now) {
                self.tx_blocked[t] = true;
            }
        }
        for (i, p) in self.ports.iter_mut().enumerate() {
            if touched[i] {
                p.flush().map_err(port_err(i))?;
            }
        }
        self.touched = touched;
        Ok(sent)
    }

    /// Arm callbacks, and if nothing raced in, sleep until a call eventfd fires, the next
    /// paced send is due, or `deadline`.
    fn sleep(&mut self, deadline: u64) -> Result<()> {
        let mut raced = false;
        for (i, p) in self.ports.iter_mut().enumerate() {
            raced |= !p.rx_enable_cb().map_err(port_err(i))?;
            if self.tx_blocked[i] {
                raced |= !p.tx_enable_cb_delayed().map_err(port_err(i))?;
            }
        }
        if !raced {
            let now = self.now();
            let wake = [
                self.bulk.as_ref().and_then(BulkFlow::next_due_ns),
                self.rr.as_ref().and_then(RrFlow::next_due_ns),
                Some(deadline),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(deadline);
            let mut fds = std::mem::take(&mut self.poll_set);
            fds.clear();
            for (i, p) in self.ports.iter().enumerate() {
                fds.push((i, false, p.rx_call_fd()));
                if self.tx_blocked[i] {
                    fds.push((i, true, p.tx_call_fd()));
                }
            }
            let timeout = Duration::from_nanos(wake.saturating_sub(now));
            let expected_wake = wake.max(now);
            let mut raw = [0; os::POLL_FDS_MAX];
            for (r, f) in raw.iter_mut().zip(&fds) {
                *r = f.2;
            }
            let ready = os::wait_readable(&raw[..fds.len().min(os::POLL_FDS_MAX)], timeout)
                .map_err(RunError::Wait)?;
            if ready != 0 {
                self.wakeups += 1;
                // Reset only the eventfds that fired (a read is a system call).
                for (bit, &(i, tx, _)) in fds.iter().enumerate() {
                    if ready & (1 << bit) != 0 {
                        self.ports[i].take_call(tx);
                    }
                }
            } else {
                self.timer_wakeups += 1;
                let late = self.now().saturating_sub(expected_wake);
                self.stall_max_ns = self.stall_max_ns.max(late);
            }
            self.poll_set = fds;
        }
        for (i, p) in self.ports.iter_mut().enumerate() {
            p.rx_disable_cb().map_err(port_err(i))?;
            p.tx_disable_cb().map_err(port_err(i))?;
        }
        Ok(())
    }

    fn stop_traffic(&mut self) {
        if let Some(b) = self.bulk.as_mut() {
            b.active = false;
        }
        if let Some(r) = self.rr.as_mut() {
            r.active = false;
        }
    }

    fn settled(&self) -> bool {
        self.bulk.as_ref().is_none_or(|b| b.missing() == 0)
            && self.rr.as_ref().is_none_or(|r| r.in_flight() == 0)
            && self.pending.iter().all(VecDeque::is_empty)
    }

    fn snapshot(&mut self, now: u64) -> Snapshot {
        let mut s = Snapshot {
            t_ns: now,
            cpu_ns: os::thread_cpu_ns(),
            bulk_received: self.bulk.as_ref().map_or(0, |b| b.received),
            rr_completed: self.rr.as_ref().map_or(0, |r| r.completed),
            wakeups: self.wakeups,
            timer_wakeups: self.timer_wakeups,
            machine_ticks: os::machine_ticks(),
            ..Snapshot::default()
        };
        for p in self.ports.iter_mut() {
            p.take_calls();
            add_counters(&mut s.ports, &p.counters());
        }
        s
    }

    fn report(&self, base: &Snapshot, end: &Snapshot) -> Report {
        let mut faults = Faults::default();
        for p in self.ports.iter() {
            add_faults(&mut faults, &p.counters().faults);
        }
        let totals = Totals {
            workload: self.cfg.workload,
            mode: self.cfg.mode,
            features: self
                .ports
                .first()
                .map(|p| feature_names(p.features()))
                .unwrap_or_default(),
            bulk: self.bulk.as_ref(),
            rr: self.rr.as_ref(),
            rtt: &self.rtt,
            frame_errors: self.errors,
            faults,
            stall_max_ns: self.stall_max_ns,
            hellos: self.hellos,
        };
        Report::build(base, end, &totals)
    }
}

fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn add_counters(sum: &mut crate::port::PortCounters, c: &crate::port::PortCounters) {
    sum.tx_frames += c.tx_frames;
    sum.tx_bytes += c.tx_bytes;
    sum.rx_frames += c.rx_frames;
    sum.rx_bytes += c.rx_bytes;
    sum.rx_buffers += c.rx_buffers;
    sum.tx_kicks += c.tx_kicks;
    sum.rx_kicks += c.rx_kicks;
    sum.rx_calls += c.rx_calls;
    sum.tx_calls += c.tx_calls;
    sum.tx_ring_full += c.tx_ring_full;
    add_faults(&mut sum.faults, &c.faults);
}

fn add_faults(sum: &mut Faults, f: &Faults) {
    sum.used_id_out_of_range += f.used_id_out_of_range;
    sum.used_id_not_in_flight += f.used_id_not_in_flight;
    sum.used_len_too_long += f.used_len_too_long;
    sum.rx_short += f.rx_short;
    sum.rx_bad_header += f.rx_bad_header;
    sum.rx_missing_buffers += f.rx_missing_buffers;
    sum.tx_len_nonzero += f.tx_len_nonzero;
}
