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
//! (no transmit interrupts) and stops when told. Its counts are shared with the client
//! thread, which measures and drains.

use super::flows::BulkFlow;
use super::{os, port_err, Result};
use crate::frame::{Mac, Pattern};
use crate::port::NetPort;
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
    /// Set by the client: stop sending.
    pub stop: AtomicBool,
    /// Set by the sender when it sends no more (stopped or failed).
    pub done: AtomicBool,
}

/// Send `flow` from `port` to `dst` until `shared.stop`; pinned to `cpu` if given.
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
) -> Result<()> {
    if let Some(cpu) = cpu {
        os::pin_to(cpu);
    }
    os::precise_timers();
    let res = sender_loop(port, &mut flow, dst, pattern, shared);
    shared.sent.store(flow.sent, Ordering::Release);
    shared.done.store(true, Ordering::Release);
    res
}

fn sender_loop(
    port: &mut NetPort,
    flow: &mut BulkFlow,
    dst: Mac,
    pattern: &Pattern,
    shared: &WireShared,
) -> Result<()> {
    port.rx_disable_cb().map_err(port_err(0))?;
    port.tx_disable_cb().map_err(port_err(0))?;
    let start = Instant::now();
    let tick = u64::try_from(WIRE_TICK.as_nanos()).unwrap_or(u64::MAX);
    while !shared.stop.load(Ordering::Acquire) {
        let now = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if port.tx_in_flight() > 0 {
            port.reclaim_tx().map_err(port_err(0))?;
        }
        let due = flow.due(now, port.tx_free() as u64);
        for _ in 0..due {
            let probe = flow.next_probe(now);
            port.send(&probe, dst, pattern).map_err(port_err(0))?;
        }
        if due > 0 {
            port.flush().map_err(port_err(0))?;
        }
        shared.sent.store(flow.sent, Ordering::Release);
        shared.slips.store(flow.pace_slips, Ordering::Relaxed);
        let next = flow
            .next_due_ns()
            .unwrap_or(now.saturating_add(tick))
            .max(now.saturating_add(tick));
        os::wait_readable(&[], Duration::from_nanos(next - now)).map_err(super::RunError::Wait)?;
    }
    Ok(())
}
