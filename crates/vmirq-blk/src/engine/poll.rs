//! The engine's kick waits: the steps of [`vmirq_vhost::poll::KickPoller`], with what a
//! block queue does while it polls (the worker is not in epoll): complete finished storage
//! operations and deliver a due hold timer.

use super::{EngineError, QueueEngine, Ring};
use std::sync::Arc;
use vm_memory::GuestMemoryMmap;
use vmirq_vhost::clock::now_ns;
use vmirq_vhost::poll::{has_work, PollStart};

impl QueueEngine {
    /// The ring is empty: ask the wait policy whether to poll. Returns `true` when polling
    /// found new requests (the caller drains again), `false` when the worker should go back
    /// to epoll (notifications are enabled then).
    pub(super) fn poll(
        &mut self,
        ring: &mut dyn Ring,
        mem: &Arc<GuestMemoryMmap>,
    ) -> Result<bool, EngineError> {
        if self.notifier.resuming() {
            return Ok(false);
        }
        let PollStart::Poll(mut window) = self.poller.begin(ring, mem)? else {
            return Ok(false);
        };
        loop {
            let now = now_ns();
            if has_work(ring, mem)? {
                self.poller.hit(now);
                return Ok(true);
            }
            let in_flight = self.inflight.len() > 0;
            if in_flight {
                if let Some(d) = self.complete_finished(ring, mem)? {
                    self.notifier.follow(d)?;
                }
            }
            self.notifier.fire_due(now, ring, mem)?;
            if !self.poller.spin(&mut window, now, in_flight) {
                break;
            }
        }
        // Window over: re-enable kicks, and catch requests that raced with that.
        Ok(self.poller.finish(ring, mem)?)
    }
}
