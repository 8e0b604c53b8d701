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
//! until the client thread lets it go.

use super::flows::{response_to, BulkFlow};
use super::{os, port_err, Result};
use crate::frame::{self, Kind, Mac, Pattern, Probe};
use crate::port::NetPort;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Shortest sleep between two bursts of the wire sender.
pub const WIRE_TICK: Duration = Duration::from_micros(20);

/// What the sender and the client thread share.
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
    /// Set by the client when the run is over: stop answering requests too, and return.
    pub quit: AtomicBool,
    /// Requests answered.
    pub answered: AtomicU64,
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
        port,
        dst,
        pattern,
        shared,
        answer,
        replies: VecDeque::new(),
        scratch: Vec::new(),
    };
    let res = w.run(&mut flow);
    shared.sent.store(flow.sent, Ordering::Release);
    shared.done.store(true, Ordering::Release);
    res
}

struct Wire<'a> {
    port: &'a mut NetPort,
    dst: Mac,
    pattern: &'a Pattern,
    shared: &'a WireShared,
    answer: bool,
    /// Responses waiting for TX room.
    replies: VecDeque<Probe>,
    scratch: Vec<u8>,
}

impl Wire<'_> {
    fn run(&mut self, flow: &mut BulkFlow) -> Result<()> {
        self.port.rx_disable_cb().map_err(port_err(0))?;
        self.port.tx_disable_cb().map_err(port_err(0))?;
        let start = Instant::now();
        let tick = u64::try_from(WIRE_TICK.as_nanos()).unwrap_or(u64::MAX);
        let quit = |s: &WireShared| s.quit.load(Ordering::Acquire);
        while !quit(self.shared) {
            let now = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if self.port.tx_in_flight() > 0 {
                self.port.reclaim_tx().map_err(port_err(0))?;
            }
            let mut queued = self.answer_requests()?;
            let streaming = !self.shared.stop.load(Ordering::Acquire);
            if streaming {
                let due = flow.due(now, self.port.tx_free() as u64);
                for _ in 0..due {
                    let probe = flow.next_probe(now);
                    self.port
                        .send(&probe, self.dst, self.pattern)
                        .map_err(port_err(0))?;
                }
                queued += due;
                self.shared.sent.store(flow.sent, Ordering::Release);
                self.shared.slips.store(flow.pace_slips, Ordering::Relaxed);
            } else if !self.shared.done.swap(true, Ordering::AcqRel) {
                self.shared.sent.store(flow.sent, Ordering::Release);
            }
            if queued > 0 {
                self.port.flush().map_err(port_err(0))?;
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

    /// Receive what reached the wire's port and answer every request; returns frames queued.
    fn answer_requests(&mut self) -> Result<u64> {
        if !self.answer {
            return Ok(0);
        }
        let Self {
            port,
            pattern,
            replies,
            scratch,
            ..
        } = self;
        port.receive(64, scratch, &mut |f| {
            if let Ok(p) = frame::parse(f, pattern, false) {
                if p.kind == Kind::Request {
                    replies.push_back(response_to(&p));
                }
            }
        })
        .map_err(port_err(0))?;
        let mut queued = 0;
        while let Some(r) = self.replies.front() {
            if !self
                .port
                .send(r, self.dst, self.pattern)
                .map_err(port_err(0))?
            {
                break;
            }
            self.replies.pop_front();
            self.shared.answered.fetch_add(1, Ordering::Relaxed);
            queued += 1;
        }
        Ok(queued)
    }

    /// Sleep for `timeout`; when answering, wake early for a request (receive interrupt).
    fn sleep(&mut self, timeout: Duration) -> Result<()> {
        if !self.answer {
            os::wait_readable(&[], timeout).map_err(super::RunError::Wait)?;
            return Ok(());
        }
        if self.port.rx_enable_cb().map_err(port_err(0))? {
            os::wait_readable(&[self.port.rx_call_fd()], timeout).map_err(super::RunError::Wait)?;
            self.port.take_calls();
        }
        self.port.rx_disable_cb().map_err(port_err(0))
    }
}
