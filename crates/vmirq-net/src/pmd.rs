//! `--datapath pmd`: one forwarding thread for every port, like an OVS-DPDK PMD thread or
//! testpmd's single forwarding lcore (`--nb-cores=1`).
//!
//! The thread takes bursts of at most [`BURST`] transmit chains off each port in turn (one
//! pass). While a pass moves frames it starts the next at once, with every transmit
//! queue's kicks left off (EVENT_IDX: `avail_event` stays behind; otherwise
//! VRING_USED_F_NO_NOTIFY), so a polling driver never has to kick. When a pass finds
//! nothing the `--poll` policy decides, through a [`KickPoller`], whether to keep polling
//! and for how long (`never`: not at all; `fixed:us=N`: a bounded busy window; `kvm`:
//! adaptive), the contention gate able to refuse or cut the window when a neighbour wants
//! the CPU. Then kicks are re-enabled on every transmit queue, the queues are looked at
//! once more (a driver may have added buffers before it saw the flag), and the thread
//! sleeps until a port's worker forwards a kick, a blocked destination's refill, or a
//! resume of a transmit queue's moderation ([`Pmd::wake`]).
//!
//! Receive queues: a driver without EVENT_IDX (DPDK's virtio PMD) would kick after every
//! refill; the thread sets VIRTQ_USED_F_NO_NOTIFY on a receive queue no source waits on
//! and clears it when one starts waiting ([`crate::rx::quiet_refill_kicks`]).
//!
//! The per-port vhost-user-backend workers stay: they own each connection's lifetime,
//! hold timers and control queue, and in this mode only count kicks and wake this thread.
//! The thread never sleeps inside a pass and never holds a lock across passes.

use crate::fabric::Fabric;
use crate::queues::{kick_sampler, Policies};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;
use vmirq_vhost::clock::now_ns;
use vmirq_vhost::counters::QueueCounters;
use vmirq_vhost::cpustat::ThreadSchedstat;
use vmirq_vhost::poll::{KickPoller, PollStart};

/// Transmit chains taken off one port per pass (testpmd's and OVS's burst size).
pub const BURST: usize = 32;
/// Longest sleep before the thread looks at its stop flag again.
const SLEEP_MAX: Duration = Duration::from_millis(50);
/// A pass that moved frames and took longer than this was preempted (a burst of 32 frames
/// takes tens of µs): it counts in [`PmdCounters::slow_passes`], not in `busy_ns`.
const PASS_SLOW_NS: u64 = 1_000_000;

/// What the forwarding thread did (monotonic).
#[derive(Debug, Default)]
pub struct PmdCounters {
    /// Passes over every port.
    pub passes: AtomicU64,
    /// Passes that moved nothing.
    pub idle_passes: AtomicU64,
    /// Transmit chains taken (frames switched or dropped).
    pub chains: AtomicU64,
    /// Wall time of the passes that moved frames, nanoseconds (`busy_ns / chains`: the
    /// time a frame costs while the thread moves frames, apart from empty passes and sleeps).
    pub busy_ns: AtomicU64,
    /// Passes that moved frames but took longer than 1 ms (preempted), left out of `busy_ns`.
    pub slow_passes: AtomicU64,
    /// Times the thread went to sleep (kicks re-enabled).
    pub sleeps: AtomicU64,
    /// Sleeps ended by a wake (a kick, a refill, a resume), not by the stop-check timeout.
    pub wakeups: AtomicU64,
    /// CPU time of the thread, nanoseconds (updated when it goes to sleep and at exit).
    pub cpu_ns: AtomicU64,
}

/// A copy of [`PmdCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmdSnapshot {
    /// See [`PmdCounters::passes`].
    pub passes: u64,
    /// See [`PmdCounters::idle_passes`].
    pub idle_passes: u64,
    /// See [`PmdCounters::chains`].
    pub chains: u64,
    /// See [`PmdCounters::busy_ns`].
    pub busy_ns: u64,
    /// See [`PmdCounters::slow_passes`].
    pub slow_passes: u64,
    /// See [`PmdCounters::sleeps`].
    pub sleeps: u64,
    /// See [`PmdCounters::wakeups`].
    pub wakeups: u64,
    /// See [`PmdCounters::cpu_ns`].
    pub cpu_ns: u64,
}

impl PmdCounters {
    /// Read every counter.
    #[must_use]
    pub fn snapshot(&self) -> PmdSnapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PmdSnapshot {
            passes: r(&self.passes),
            idle_passes: r(&self.idle_passes),
            chains: r(&self.chains),
            busy_ns: r(&self.busy_ns),
            slow_passes: r(&self.slow_passes),
            sleeps: r(&self.sleeps),
            wakeups: r(&self.wakeups),
            cpu_ns: r(&self.cpu_ns),
        }
    }
}

impl std::fmt::Display for PmdSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pmd: passes={} idle_passes={} chains={} busy_ns={} slow_passes={} sleeps={} wakeups={} cpu_ns={}",
            self.passes,
            self.idle_passes,
            self.chains,
            self.busy_ns,
            self.slow_passes,
            self.sleeps,
            self.wakeups,
            self.cpu_ns
        )
    }
}

/// The forwarding thread's shared state: its wake flag and counters.
#[derive(Debug, Default)]
pub struct Pmd {
    pending: Mutex<bool>,
    cv: Condvar,
    /// What it did.
    pub counters: PmdCounters,
    /// Its kick waits (poll hits, misses, contended refusals).
    pub queue: Arc<QueueCounters>,
}

impl Pmd {
    /// Wake the thread if it sleeps (or make its next sleep return at once).
    pub fn wake(&self) {
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if !*p {
            *p = true;
            self.cv.notify_one();
        }
    }

    /// Sleep until woken or `SLEEP_MAX`; true when woken.
    fn sleep(&self) -> bool {
        let p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut p, _) = self
            .cv
            .wait_timeout_while(p, SLEEP_MAX, |p| !*p)
            .unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *p, false)
    }
}

/// Run the forwarding thread over `fabric` until `stop` is set (and [`Pmd::wake`] called or
/// `SLEEP_MAX` passed). `cpu`: pin the thread there first.
pub fn run(fabric: &Fabric, pmd: &Pmd, stop: &AtomicBool, policies: &Policies, cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        if let Err(e) = vmirq_os::pin_current_thread(cpu) {
            tracing::warn!(cpu, error = %e, "cannot pin the forwarding thread");
        }
    }
    let mut poller = KickPoller::new(
        policies.poll.build(),
        policies.contention.build(),
        kick_sampler(Box::new(ThreadSchedstat::new())),
        pmd.queue.clone(),
    );
    let c = &pmd.counters;
    // One pass; returns the chains it took and the clock after it (read once per pass:
    // the start of an empty pass, the end of a busy one), which the poll window reuses.
    let pass = || {
        let t0 = now_ns();
        let n = fabric.pmd_pass(BURST);
        c.passes.fetch_add(1, Ordering::Relaxed);
        if n == 0 {
            c.idle_passes.fetch_add(1, Ordering::Relaxed);
            return (0, t0);
        }
        c.chains.fetch_add(n as u64, Ordering::Relaxed);
        let end = now_ns();
        let took = end.saturating_sub(t0);
        if took > PASS_SLOW_NS {
            c.slow_passes.fetch_add(1, Ordering::Relaxed);
        } else {
            c.busy_ns.fetch_add(took, Ordering::Relaxed);
        }
        (n, end)
    };
    fabric.pmd_kicks(false);
    'outer: while !stop.load(Ordering::Acquire) {
        if pass().0 > 0 {
            continue;
        }
        if let PollStart::Poll(mut w) = poller.decide() {
            loop {
                if stop.load(Ordering::Acquire) {
                    break 'outer;
                }
                let (n, now) = pass();
                if n > 0 {
                    poller.hit(now);
                    continue 'outer;
                }
                if !poller.spin(&mut w, now, false) {
                    break;
                }
            }
            if fabric.pmd_kicks(true) {
                poller.hit(now_ns());
                fabric.pmd_kicks(false);
                continue;
            }
            poller.slept();
        } else if fabric.pmd_kicks(true) {
            fabric.pmd_kicks(false);
            continue;
        }
        c.sleeps.fetch_add(1, Ordering::Relaxed);
        c.cpu_ns.store(vmirq_os::thread_cpu_ns(), Ordering::Relaxed);
        if pmd.sleep() {
            c.wakeups.fetch_add(1, Ordering::Relaxed);
            poller.on_kick();
        }
        fabric.pmd_kicks(false);
    }
    c.cpu_ns.store(vmirq_os::thread_cpu_ns(), Ordering::Relaxed);
}
