//! The load generator: libblkio playing the guest's virtio-blk driver. One thread, one queue,
//! closed-loop (or open-loop for trickle) submission, completions taken either by blocking on
//! the queue's completion eventfd (interrupt mode) or by spinning on the used ring (poll
//! mode). It counts what a guest would feel: latency per request, notifications (the eventfd
//! counter), wakeups (times it blocked and was woken) and its own CPU time.

mod device;
mod eventfd;
mod pacer;
mod run;

pub use device::{Device, Endpoint};
pub use pacer::{Offsets, Pacer};
pub use run::run;

use crate::workload::{ClientMode, Workload};
use hdrhistogram::Histogram;
use std::time::Duration;

/// Requests are spread over at most this many bytes of the device.
pub const SPAN_MAX_BYTES: u64 = 256 << 20;
/// The bursty trace keeps at most this many events (bounded memory).
pub const TRACE_EVENTS_MAX: usize = 2_000_000;

/// What to run and for how long.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Workload to play.
    pub workload: Workload,
    /// Interrupt or poll mode.
    pub mode: ClientMode,
    /// Unmeasured warm-up time.
    pub warmup: Duration,
    /// Measured time.
    pub measure: Duration,
    /// Seed for offsets and phases (same seed, same request sequence on every target).
    pub seed: u64,
    /// Backend process to charge CPU time to, if there is one.
    pub backend_pid: Option<u32>,
    /// Record submit/complete timestamps during the measured window.
    pub record_trace: bool,
    /// Target label for error messages.
    pub target: String,
}

/// One submit or completion seen by the client, for the policy-knob replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// Nanoseconds since the start of the measured window.
    pub t_ns: u64,
    /// True for a completion, false for a submission.
    pub complete: bool,
}

/// The measurements of one run (the measured window only).
#[derive(Debug, Clone)]
pub struct Sample {
    /// Requests completed.
    pub ios: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Length of the measured window in nanoseconds.
    pub elapsed_ns: u64,
    /// Per-request latency, submit to completion seen, in nanoseconds.
    pub latency: Histogram<u64>,
    /// Signals read from the completion eventfd.
    pub notifications: u64,
    /// Times the client blocked on the eventfd and was woken by a signal.
    pub wakeups: u64,
    /// CPU time of the client thread.
    pub client_cpu_ns: u64,
    /// CPU time of the backend process (all threads), if there is one.
    pub backend_cpu_ns: Option<u64>,
    /// Whole-machine CPU ticks during the window (busy, steal, total), for noise reporting.
    pub system: Option<crate::cpu::SystemTicks>,
    /// The backend's own counters for the whole connection (filled in by the runner for
    /// backends that report them).
    pub backend_counters: Option<crate::target::BackendCounters>,
    /// Submit/complete timestamps (empty unless requested).
    pub trace: Vec<TraceEvent>,
}
