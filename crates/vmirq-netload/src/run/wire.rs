//! The bulk stream's sender on a thread of its own: "the wire", another host sending to the
//! guest, so that the client thread only receives (as a guest NIC's RX queue does in the
//! moderation talk, whose guest is not the sender of its own bulk traffic).
//!
//! With the sender in the client thread, a paced stream wakes the client at every paced send
//! and the client then polls its receive ring anyway: receive interrupts hardly matter and
//! moderation cannot show. Here the client sleeps on its call eventfds only.
//!
//! The sender sends what its pace allows every [`WIRE_TICK`] at least (a burst of about
//! `rate x tick` frames, not one timer wakeup per frame), reclaims its own transmit buffers
//! (no transmit interrupts) and stops the stream when told. Its counts are shared with the
//! client thread, which measures and drains.
//!
//! In the mix on two ports the wire is also the far end of the messages (the talk's guest
//! receiving a stream and answering short messages on the same queue): it answers every
//! request that reaches its port, sleeping on that port's receive interrupt between bursts,
//! until the client thread lets it go. Its responses then leave the same transmit ring as
//! the bulk, behind bulk frames waiting for room in the client's receive ring. In the mix
//! on three ports the far end is a host of its own ([`respond`], port 2): the bulk (from
//! port 0) and the responses (from port 2) meet only in the client's one receive queue, as
//! in the talk, where they come from different remote hosts.

use super::flows::{response_to, BulkFlow};
use super::halves::AnswerStamps;
use super::{os, port_err, Result};
use crate::frame::{self, Kind, Mac, Pattern, Probe};
use crate::port::NetPort;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Shortest sleep between two bursts of the wire sender.
pub const WIRE_TICK: Duration = Duration::from_micros(20);

/// Longest sleep of the responder with nothing to send: how long it may take to see `quit`
/// (a request wakes it at once through its receive interrupt).
pub const RESPONDER_IDLE: Duration = Duration::from_millis(1);

/// What the wire's threads (the sender, and on three ports the responder) and the client
/// thread share.
#[derive(Debug, Default)]
pub struct WireShared {
    /// Frames sent so far.
    pub sent: AtomicU64,
    /// Frames the pace skipped because the sender fell behind.
    pub slips: AtomicU64,
    /// Set by the client: stop sending the stream.
    pub stop: AtomicBool,
    /// Set by the sender when it sends no more of the stream (stopped or failed).
    pub done: AtomicBool,
    /// Set by the client when the run is over: stop answering requests too, and return
    /// (the sender and the responder).
    pub quit: AtomicBool,
    /// Requests answered (by the sender on two ports, by the responder on three).
    pub answered: AtomicU64,
    /// When each request was read and its response queued ([`super::halves`]).
    pub stamps: AnswerStamps,
}

/// Send `flow` from `port` to `dst` until `shared.stop` (answering requests with `answer`
/// until `shared.quit`); pinned to `cpu` if given.
///
/// # Errors
/// A port failure (the client thread sees `done` and stops waiting for frames).
pub fn send(
    port: &mut NetPort,
    mut flow: BulkFlow,
    dst: Mac,
    pattern: &Pattern,
    shared: &WireShared,
    cpu: Option<usize>,
    answer: bool,
) -> Result<()> {
    if let Some(cpu) = cpu {
        os::pin_to(cpu);
    }
    os::precise_timers();
    let mut w = Wire {
        far: FarEnd::new(port, WIRE_PORT, dst, pattern, shared),
        answer,
    };
    let res = w.run(&mut flow);
    shared.sent.store(flow.sent, Ordering::Release);
    shared.done.store(true, Ordering::Release);
    res
}

/// The wire's port index in the workload (for errors).
const WIRE_PORT: usize = 0;
/// The responder's port index in the three-port mix (for errors).
const RESPONDER_PORT: usize = 2;

/// Answer every request reaching `port` with a response of the same flow to `dst`, and send
/// nothing else, until `shared.quit`; pinned to `cpu` if given. Between bursts it sleeps on
/// the port's receive interrupt (the far end of the three-port mix: another host).
///
/// # Errors
/// A port failure.
pub fn respond(
    port: &mut NetPort,
    dst: Mac,
    pattern: &Pattern,
    shared: &WireShared,
    cpu: Option<usize>,
) -> Result<()> {
    if let Some(cpu) = cpu {
        os::pin_to(cpu);
    }
    os::precise_timers();
    let mut far = FarEnd::new(port, RESPONDER_PORT, dst, pattern, shared);
    far.port.rx_disable_cb().map_err(port_err(far.index))?;
    far.port.tx_disable_cb().map_err(port_err(far.index))?;
    while !shared.quit.load(Ordering::Acquire) {
        far.reclaim()?;
        if far.answer_requests()? > 0 {
            far.port.flush().map_err(port_err(far.index))?;
        }
        // Responses waiting for transmit room retry after a tick (no transmit interrupt).
        let idle = if far.replies.is_empty() {
            RESPONDER_IDLE
        } else {
            WIRE_TICK
        };
        far.sleep(idle)?;
    }
    Ok(())
}

/// One port of the far end: sends to `dst`, answers requests.
struct FarEnd<'a> {
    port: &'a mut NetPort,
    /// The port's index in the workload (for errors).
    index: usize,
    dst: Mac,
    pattern: &'a Pattern,
    shared: &'a WireShared,
    /// Responses waiting for TX room, with when their requests were read.
    replies: VecDeque<(Probe, u64)>,
    scratch: Vec<u8>,
}

impl<'a> FarEnd<'a> {
    fn new(
        port: &'a mut NetPort,
        index: usize,
        dst: Mac,
        pattern: &'a Pattern,
        shared: &'a WireShared,
    ) -> Self {
        Self {
            port,
            index,
            dst,
            pattern,
            shared,
            replies: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    /// Reclaim transmitted buffers (no transmit interrupts).
    fn reclaim(&mut self) -> Result<()> {
        if self.port.tx_in_flight() > 0 {
            self.port.reclaim_tx().map_err(port_err(self.index))?;
        }
        Ok(())
    }

    /// Receive what reached the port and answer every request; returns frames queued.
    fn answer_requests(&mut self) -> Result<u64> {
        let Self {
            port,
            pattern,
            replies,
            scratch,
            index,
            shared,
            ..
        } = self;
        port.receive(64, scratch, &mut |f| {
            if let Ok(p) = frame::parse(f, pattern, false) {
                if p.kind == Kind::Request {
                    replies.push_back((response_to(&p), shared.stamps.now()));
                }
            }
        })
        .map_err(port_err(*index))?;
        let mut queued = 0;
        while let Some((r, read_ns)) = self.replies.front() {
            if !self
                .port
                .send(r, self.dst, self.pattern)
                .map_err(port_err(self.index))?
            {
                break;
            }
            let stamps = &self.shared.stamps;
            stamps.stamp(r.seq, *read_ns, stamps.now());
            self.replies.pop_front();
            self.shared.answered.fetch_add(1, Ordering::Release);
            queued += 1;
        }
        Ok(queued)
    }

    /// Sleep for `timeout` or until a request's receive interrupt.
    fn sleep(&mut self, timeout: Duration) -> Result<()> {
        let i = self.index;
        if self.port.rx_enable_cb().map_err(port_err(i))? {
            os::wait_readable(&[self.port.rx_call_fd()], timeout).map_err(super::RunError::Wait)?;
            self.port.take_calls();
        }
        self.port.rx_disable_cb().map_err(port_err(i))
    }
}

struct Wire<'a> {
    far: FarEnd<'a>,
    /// Answer requests too (the mix on two ports).
    answer: bool,
}

impl Wire<'_> {
    fn run(&mut self, flow: &mut BulkFlow) -> Result<()> {
        let far = &mut self.far;
        far.port.rx_disable_cb().map_err(port_err(WIRE_PORT))?;
        far.port.tx_disable_cb().map_err(port_err(WIRE_PORT))?;
        let start = Instant::now();
        let tick = u64::try_from(WIRE_TICK.as_nanos()).unwrap_or(u64::MAX);
        let quit = |s: &WireShared| s.quit.load(Ordering::Acquire);
        while !quit(self.far.shared) {
            let now = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.far.reclaim()?;
            let mut queued = if self.answer {
                self.far.answer_requests()?
            } else {
                0
            };
            let streaming = !self.far.shared.stop.load(Ordering::Acquire);
            if streaming {
                queued += self.send_due(flow, now)?;
            } else if !self.far.shared.done.swap(true, Ordering::AcqRel) {
                self.far.shared.sent.store(flow.sent, Ordering::Release);
            }
            if queued > 0 {
                self.far.port.flush().map_err(port_err(WIRE_PORT))?;
            }
            if !self.answer && !streaming {
                // Nothing left to do but wait for `quit`.
                os::wait_readable(&[], WIRE_TICK).map_err(super::RunError::Wait)?;
                continue;
            }
            let next = flow
                .next_due_ns()
                .filter(|_| streaming)
                .unwrap_or(now.saturating_add(tick))
                .max(now.saturating_add(tick));
            self.sleep(Duration::from_nanos(next - now))?;
        }
        Ok(())
    }

    /// Queue the stream's frames due at `now`; returns how many.
    fn send_due(&mut self, flow: &mut BulkFlow, now: u64) -> Result<u64> {
        let far = &mut self.far;
        let due = flow.due(now, far.port.tx_free() as u64);
        for _ in 0..due {
            let probe = flow.next_probe(now);
            far.port
                .send(&probe, far.dst, far.pattern)
                .map_err(port_err(WIRE_PORT))?;
        }
        far.shared.sent.store(flow.sent, Ordering::Release);
        far.shared.slips.store(flow.pace_slips, Ordering::Relaxed);
        Ok(due)
    }

    /// Sleep for `timeout`; when answering, wake early for a request (receive interrupt).
    fn sleep(&mut self, timeout: Duration) -> Result<()> {
        if self.answer {
            return self.far.sleep(timeout);
        }
        os::wait_readable(&[], timeout).map_err(super::RunError::Wait)?;
        Ok(())
    }
}
