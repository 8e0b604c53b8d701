//! The run loop itself (see the module above for its shape).

use super::flows::{response_to, BulkFlow, RrFlow};
use super::halt::HaltPoll;
use super::msgpath::MsgPath;
use super::paths::{is_hello, Hellos};
use super::report::{FrameErrors, Snapshot, Totals};
use super::wire::WireShared;
use super::{
    os, port_err, Mode, Napi, Phase, Report, Result, RunConfig, RunError, BULK_FLOW, RR_FLOW,
};
use crate::frame::{self, Encap, EncapCounts, FrameError, Mac, Pattern, Probe};
use crate::port::{Faults, NetPort};
use crate::virtio_net::feature_names;
use crate::workload::Workload;
use hdrhistogram::Histogram;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The server index of a request/response flow answered by another thread (the wire on
/// two ports, the responder on three).
const REMOTE: usize = usize::MAX;

/// The client's side of a wire sender.
#[derive(Clone, Copy)]
pub(super) struct WireLink<'a> {
    /// Counts and flags shared with the wire thread.
    pub shared: &'a WireShared,
    /// The address of the port that answers the client's requests.
    pub remote: Mac,
}

/// A received frame, parsed: its encapsulation and probe, or why it is not one.
type Parsed = std::result::Result<(Encap, Probe), FrameError>;

/// Most rounds of the last look after a timed-out drain.
const LAST_LOOK_ROUNDS: usize = 1024;

pub(super) struct Engine<'a> {
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
    /// Frames read ahead of each response, and its time since the client's wakeup.
    msgs: MsgPath,
    measuring: bool,
    errors: FrameErrors,
    wakeups: u64,
    timer_wakeups: u64,
    /// The client's halt polling (`--halt-poll`), interrupt mode only.
    halt: Option<HaltPoll>,
    /// Longest round, or longest oversleep past a timer: how long the client was away.
    stall_max_ns: u64,
    /// Frames the last look after a timed-out drain found in the receive rings.
    unsignalled: u64,
    hellos: Hellos,
    /// The bulk stream's sender when it runs on its own thread (then `ports` are the
    /// client's ports only, the workload's ports 1.. as 0..).
    wire: Option<&'a WireShared>,
    /// The far end's address: the server of the mix's messages (the wire's port on two
    /// ports, the responder's on three).
    remote: Option<Mac>,
    /// Reused buffers of the hot path: eventfds to sleep on (port, is TX, fd), ports sent on.
    poll_set: Vec<(usize, bool, RawFd)>,
    touched: Vec<bool>,
    scratch: Vec<u8>,
    /// Frames of one round: (port, frames read from the port before it since its ring was
    /// last empty, its number among all frames read, parsed frame).
    inbox: Vec<(usize, u64, u64, Parsed)>,
    /// Valid probe frames received in the run, by encapsulation.
    received: EncapCounts,
    /// Per port, with `Napi::Queue`: its NAPI context is scheduled (its interrupt came, or
    /// its last poll filled the budget); unscheduled ports have their callbacks enabled.
    scheduled: Vec<bool>,
}

impl<'a> Engine<'a> {
    pub(super) fn new(
        ports: &'a mut [NetPort],
        cfg: &'a RunConfig,
        (rtt, msgs): (Histogram<u64>, MsgPath),
        hellos: Hellos,
        link: Option<WireLink<'a>>,
    ) -> Self {
        let wire = link.map(|l| l.shared);
        let slack = ports
            .first()
            .map_or(256, |p| u64::from(p.tx_in_flight()) + p.tx_free() as u64);
        // With a wire sender the client has no port 0: the stream arrives on its port 0
        // (the workload's port 1), sent from elsewhere, and the client never paces it.
        let shift = usize::from(wire.is_some());
        let bulk_flow = |len: u32, rate: Option<u64>| {
            if wire.is_some() {
                BulkFlow::new(BULK_FLOW, 0, 0, len, None, slack)
            } else {
                BulkFlow::new(BULK_FLOW, 0, 1, len, rate, slack)
            }
        };
        let (bulk, rr) = match cfg.workload {
            Workload::Stream {
                frame_len,
                rate_pps,
            } => (Some(bulk_flow(frame_len, rate_pps)), None),
            Workload::Rr { frame_len, depth } => {
                (None, Some(RrFlow::new(RR_FLOW, 0, 1, frame_len, depth, 0)))
            }
            Workload::Mix {
                bulk_len,
                bulk_rate_pps,
                msg_len,
                msg_interval_us,
            } => {
                let (c, s) = match (ports.len() + shift, shift) {
                    (4, _) => (2 - shift, 3 - shift),
                    // Two or three ports with a wire: the client's one port asks, the wire
                    // (two) or the responder (three) answers.
                    (_, 1) => (0, REMOTE),
                    _ => (0, 1),
                };
                let interval = u64::from(msg_interval_us) * 1_000;
                (
                    Some(bulk_flow(bulk_len, bulk_rate_pps)),
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
            msgs,
            measuring: false,
            errors: FrameErrors::default(),
            wakeups: 0,
            timer_wakeups: 0,
            halt: cfg
                .halt_poll
                .filter(|_| cfg.mode == Mode::Interrupt)
                .map(HaltPoll::new),
            stall_max_ns: 0,
            unsignalled: 0,
            hellos,
            wire,
            remote: link.map(|l| l.remote),
            poll_set: Vec::new(),
            touched: Vec::new(),
            scratch: Vec::with_capacity(frame::FRAME_LEN_MAX as usize),
            inbox: Vec::new(),
            received: EncapCounts::default(),
            // Every context starts scheduled: the first poll finds the rings' state and
            // completes (enabling callbacks) where it drains.
            scheduled: vec![true; n],
        }
    }

    /// Whether rounds follow the per-queue NAPI contexts (`Napi::Queue`, interrupt mode).
    fn per_queue(&self) -> bool {
        self.cfg.napi == Napi::Queue && self.cfg.mode == Mode::Interrupt
    }

    fn now(&self) -> u64 {
        since(self.start)
    }

    pub(super) fn run(mut self) -> Result<Report> {
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
            self.sync_wire();
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
            if phase == Phase::Drain && self.settled() {
                break;
            }
            if phase == Phase::Drain && now >= drain_end {
                self.last_look(now)?;
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
        if self.per_queue() {
            self.schedule_signalled()?;
        }
        let (received, budget_used) = self.receive_all()?;
        self.dispatch();
        let mut reclaimed = 0;
        for (i, p) in self.ports.iter_mut().enumerate() {
            if p.tx_in_flight() > 0 {
                reclaimed += p.reclaim_tx().map_err(port_err(i))?;
            }
        }
        let sent = self.send_all(now)?;
        let scheduled = self.per_queue() && self.scheduled.iter().any(|&s| s);
        Ok(budget_used || received > 0 || sent > 0 || reclaimed > 0 || scheduled)
    }

    /// `Napi::Queue`: the interrupts that came while the client was busy schedule their
    /// queues' contexts (as a guest's interrupt handler does between NAPI polls): one
    /// `ppoll` without waiting over the unscheduled ports' call eventfds.
    fn schedule_signalled(&mut self) -> Result<()> {
        let mut fds = std::mem::take(&mut self.poll_set);
        fds.clear();
        for (i, p) in self.ports.iter().enumerate() {
            if !self.scheduled[i] {
                fds.push((i, false, p.rx_call_fd()));
            }
        }
        if !fds.is_empty() {
            let mut raw = [0; os::POLL_FDS_MAX];
            for (r, f) in raw.iter_mut().zip(&fds) {
                *r = f.2;
            }
            let ready = os::wait_readable(&raw[..fds.len().min(os::POLL_FDS_MAX)], Duration::ZERO)
                .map_err(RunError::Wait)?;
            self.schedule(&fds, ready)?;
        }
        self.poll_set = fds;
        Ok(())
    }

    /// The ports of `fds` whose bit is set in `ready` were signalled: read their eventfds
    /// and, with `Napi::Queue`, schedule their receive contexts (callbacks off).
    fn schedule(&mut self, fds: &[(usize, bool, RawFd)], ready: u64) -> Result<()> {
        for (bit, &(i, tx, _)) in fds.iter().enumerate() {
            if ready & (1 << bit) != 0 {
                self.ports[i].take_call(tx);
                if !tx {
                    self.rx_signalled(i)?;
                }
            }
        }
        Ok(())
    }

    /// Port `i`'s receive queue signalled: with `Napi::Queue` its context is scheduled
    /// (callbacks off) unless it already is; with `Napi::All` every round reads it anyway.
    fn rx_signalled(&mut self, i: usize) -> Result<()> {
        if self.per_queue() && !self.scheduled[i] {
            self.scheduled[i] = true;
            self.ports[i].rx_disable_cb().map_err(port_err(i))?;
        }
        Ok(())
    }

    fn receive_all(&mut self) -> Result<(usize, bool)> {
        let per_queue = self.per_queue();
        let Self {
            ports,
            cfg,
            pattern,
            scratch,
            inbox,
            msgs,
            scheduled,
            ..
        } = self;
        let mut total = 0;
        let mut budget_used = false;
        for (i, p) in ports.iter_mut().enumerate() {
            if per_queue && !scheduled[i] {
                continue;
            }
            let verify = cfg.verify_payload;
            let mut pos = msgs.position(i);
            let mut index = msgs.read_total();
            let n = p
                .receive(cfg.budget, scratch, &mut |f| {
                    inbox.push((i, pos, index, frame::parse_encap(f, pattern, verify)));
                    pos += 1;
                    index += 1;
                })
                .map_err(port_err(i))?;
            msgs.read(i, n, n < cfg.budget);
            total += n;
            budget_used |= n == cfg.budget;
            // NAPI complete: a poll below its budget re-enables the queue's callback; a
            // frame that raced in keeps the context scheduled (virtqueue_napi_complete).
            if per_queue && n < cfg.budget {
                scheduled[i] = !p.rx_enable_cb().map_err(port_err(i))?;
            }
        }
        Ok((total, budget_used))
    }

    fn dispatch(&mut self) {
        let mut inbox = std::mem::take(&mut self.inbox);
        for (port, ahead, index, parsed) in inbox.drain(..) {
            let p = match parsed {
                Ok((encap, p)) => {
                    self.received.add(encap);
                    if is_hello(&p) {
                        // A late probe of `await_paths`.
                        self.hellos.count(encap);
                        continue;
                    }
                    p
                }
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
                        // Read now, after the frames this pass read before it (from every
                        // port), not at the round's start.
                        let read_ns = since(self.start);
                        if let Some(rtt) = r.on_response(&p, read_ns) {
                            if self.measuring {
                                let _ = self.rtt.record(rtt.max(1));
                                self.msgs.response(p.seq, index, ahead, read_ns);
                                if let Some(w) = self.wire.filter(|_| r.server == REMOTE) {
                                    // The far end's stamps count from its epoch, before
                                    // this engine's start.
                                    let off = since_epoch(self.start, w.stamps.epoch);
                                    self.msgs.halves.record(
                                        &w.stamps,
                                        p.seq,
                                        p.t_ns + off,
                                        read_ns + off,
                                    );
                                }
                            } else {
                                self.msgs.unmark(p.seq);
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
        self.inbox = inbox;
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
                // Stamped when it is written, not at the round's start: the frames this
                // round read before it are not the message's time.
                let probe = rr.next_request(since(self.start));
                self.msgs.request(probe.seq);
                let mac = match self.ports.get(s) {
                    Some(p) => p.mac(),
                    None => self.remote.unwrap_or_default(),
                };
                self.ports[c]
                    .send(&probe, mac, &self.pattern)
                    .map_err(port_err(c))?;
                sent += 1;
                touched[c] = true;
            }
        }
        if let Some(bulk) = self.bulk.as_mut().filter(|_| self.wire.is_none()) {
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
        let per_queue = self.per_queue();
        let mut raced = false;
        for (i, p) in self.ports.iter_mut().enumerate() {
            // Per queue, an unscheduled context's callback is on since its completion.
            if !per_queue {
                raced |= !p.rx_enable_cb().map_err(port_err(i))?;
            }
            if self.tx_blocked[i] {
                raced |= !p.tx_enable_cb_delayed().map_err(port_err(i))?;
            }
        }
        if !raced {
            let now = self.now();
            let blocked = |port: usize| self.tx_blocked.get(port).copied().unwrap_or(false);
            let wake = next_wake(
                [
                    self.bulk
                        .as_ref()
                        .filter(|b| self.wire.is_none() && !blocked(b.tx))
                        .and_then(BulkFlow::next_due_ns),
                    self.rr
                        .as_ref()
                        .filter(|r| !blocked(r.client))
                        .and_then(RrFlow::next_due_ns),
                ],
                deadline,
            );
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
            let raw = &raw[..fds.len().min(os::POLL_FDS_MAX)];
            let ready = match self.halt.as_mut() {
                Some(h) => {
                    let start = self.start;
                    h.halt(raw, || since(start), expected_wake)
                }
                None => os::wait_readable(raw, timeout),
            }
            .map_err(RunError::Wait)?;
            if ready != 0 {
                self.wakeups += 1;
                // Reset only the eventfds that fired (a read is a system call).
                self.schedule(&fds, ready)?;
            } else {
                self.timer_wakeups += 1;
                let late = self.now().saturating_sub(expected_wake);
                self.stall_max_ns = self.stall_max_ns.max(late);
            }
            self.poll_set = fds;
            self.msgs.woke(self.now());
        }
        for (i, p) in self.ports.iter_mut().enumerate() {
            if !per_queue {
                p.rx_disable_cb().map_err(port_err(i))?;
            }
            p.tx_disable_cb().map_err(port_err(i))?;
        }
        Ok(())
    }

    /// The drain timed out with frames missing: look at the rings once more without
    /// waiting. What turns up now had been written into a receive ring while the client
    /// slept for a signal that never came (a lost notification, or a hold whose timer never
    /// fired); what is still missing never reached a receive ring.
    fn last_look(&mut self, now: u64) -> Result<()> {
        let before = self.arrived();
        for (i, p) in self.ports.iter_mut().enumerate() {
            p.rx_disable_cb().map_err(port_err(i))?;
        }
        self.scheduled.iter_mut().for_each(|s| *s = true);
        // Bounded: no new traffic starts in the drain, so rounds find less and less.
        for _ in 0..LAST_LOOK_ROUNDS {
            if !self.round(now)? {
                break;
            }
        }
        self.unsignalled = self.arrived() - before;
        if self.unsignalled > 0 {
            tracing::warn!(
                frames = self.unsignalled,
                "frames waited in a receive ring through the whole drain without a signal"
            );
        }
        Ok(())
    }

    /// Frames of every flow received so far (bulk frames and responses).
    fn arrived(&self) -> u64 {
        self.bulk.as_ref().map_or(0, |b| b.received) + self.rr.as_ref().map_or(0, |r| r.completed)
    }

    /// Copy the wire sender's counts into the bulk flow (the client only receives it).
    fn sync_wire(&mut self) {
        if let (Some(w), Some(b)) = (self.wire, self.bulk.as_mut()) {
            b.sent = w.sent.load(Ordering::Acquire);
            b.pace_slips = w.slips.load(Ordering::Relaxed);
        }
    }

    fn stop_traffic(&mut self) {
        if let Some(w) = self.wire {
            w.stop.store(true, Ordering::Release);
        }
        if let Some(b) = self.bulk.as_mut() {
            b.active = false;
        }
        if let Some(r) = self.rr.as_mut() {
            r.active = false;
        }
    }

    fn settled(&self) -> bool {
        self.wire.is_none_or(|w| w.done.load(Ordering::Acquire))
            && self.bulk.as_ref().is_none_or(|b| b.missing() == 0)
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
            halts: self.halt.as_ref().map_or(0, |h| h.halts),
            halts_caught: self.halt.as_ref().map_or(0, |h| h.caught),
            halt_polled_ns: self.halt.as_ref().map_or(0, |h| h.polled_ns),
            machine_ticks: os::machine_ticks(),
            backend_cpu_ns: self.cfg.backend_pid.and_then(os::process_cpu_ns),
            ..Snapshot::default()
        };
        for i in 0..self.ports.len() {
            // Counting reads the call eventfds: a signal not yet seen schedules its
            // queue here (per queue it would be lost, and the queue's flow would stall).
            let (rx_calls, _) = self.ports[i].take_calls();
            if rx_calls > 0 {
                // Only a layout bug fails here; the next poll reads the ring either way.
                let _ = self.rx_signalled(i);
            }
            let c = self.ports[i].counters();
            s.port_calls.push(c.rx_calls + c.tx_calls);
            add_counters(&mut s.ports, &c);
        }
        s
    }

    fn report(&mut self, base: &Snapshot, end: &Snapshot) -> Report {
        self.sync_wire();
        let mut faults = Faults::default();
        for p in self.ports.iter() {
            add_faults(&mut faults, &p.counters().faults);
        }
        let totals = Totals {
            workload: self.cfg.workload,
            mode: self.cfg.mode,
            frames: self.cfg.frames,
            received_frames: self.received,
            features: self
                .ports
                .first()
                .map(|p| feature_names(p.features()))
                .unwrap_or_default(),
            bulk: self.bulk.as_ref(),
            rr: self.rr.as_ref(),
            answered: self
                .wire
                .filter(|_| self.rr.as_ref().is_some_and(|r| r.server == REMOTE))
                .map(|w| w.answered.load(Ordering::Acquire)),
            rtt: &self.rtt,
            msgs: &self.msgs,
            frame_errors: self.errors,
            faults,
            stall_max_ns: self.stall_max_ns,
            halt_policy: self.halt.as_ref().map(HaltPoll::name),
            unsignalled: self.unsignalled,
            hellos: self.hellos,
        };
        Report::build(base, end, &totals)
    }
}

/// When a sleeping client must wake by itself: the earliest send that is due (`due`, one per
/// flow; the caller leaves out a flow whose port's TX ring is full: its sends wait for the TX
/// interrupt armed for them, not for a timeout, which would be due at once and turn the
/// sleep into a spin), or the phase's `deadline`.
fn next_wake(due: [Option<u64>; 2], deadline: u64) -> u64 {
    due.into_iter().flatten().fold(deadline, u64::min)
}

/// ns from `epoch` to `start` (0 if `start` is earlier).
fn since_epoch(start: Instant, epoch: Instant) -> u64 {
    u64::try_from(start.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds since `start` (the run's clock).
fn since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (the mix under moderation): a request due while the bulk stream had filled
    /// the TX ring made every sleep time out at once, and the client spun (up to 190k timer
    /// wakeups/s, 1.7x the CPU per packet of an unmoderated run, 0.5-0.8x its throughput)
    /// because moderated TX completions free the ring later. A flow blocked on its TX ring
    /// now waits for the TX interrupt: `sleep` leaves it out of `next_wake`.
    #[test]
    fn a_flow_blocked_on_its_tx_ring_does_not_set_the_wakeup() {
        let mut rr = RrFlow::new(RR_FLOW, 0, 1, 64, 1, 200_000);
        assert_eq!(rr.due(0), 1);
        let probe = rr.next_request(0);
        let _ = rr.on_response(&response_to(&probe), 1_000);
        // Due at 201 us; at 500 us it is overdue.
        assert_eq!(rr.next_due_ns(), Some(201_000));
        let deadline = 10_000_000;
        assert_eq!(next_wake([None, rr.next_due_ns()], deadline), 201_000);
        // Blocked: the caller passes None and the sleep lasts until the TX interrupt or the
        // deadline.
        assert_eq!(next_wake([None, None], deadline), deadline);
        let paced = BulkFlow::new(BULK_FLOW, 0, 1, 64, Some(1_000_000), 64);
        assert_eq!(
            next_wake([paced.next_due_ns(), rr.next_due_ns()], deadline),
            1_000
        );
    }
}
