//! # vmirq-replay: run moderation policies over recorded completion traces
//!
//! A trace is the sequence of submissions and completions a device queue saw, with times
//! ([`trace`]). Replaying it through a policy ([`replay`]) answers "how many notifications
//! would this policy have sent, and how long would each completion have waited for one?"
//! without a guest. The replay is open-loop: the guest's behaviour is the recorded one, so
//! effects of notifications on later submissions are not modelled (use `vmirq bench` or
//! `vmirq sim` for closed loops).
//!
//! [`synthetic`] generates the built-in default trace: bursty, QD-1 and trickle phases.

pub mod replay;
pub mod stats;
pub mod synthetic;
pub mod trace;

pub use replay::{replay, ReplayError, ReplayOptions, ReplayReport};
pub use stats::DelaySummary;
pub use trace::{parse_trace, Op, TraceError, TraceEvent};
