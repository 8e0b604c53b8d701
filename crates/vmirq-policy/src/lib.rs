//! # vmirq-policy: when to notify, and how long to poll before sleeping
//!
//! Every policy here is a small deterministic state machine with the shape
//! `fn on_event(&mut self, now: Nanos, event) -> Decision`: the caller passes the time (it is
//! never read here), the policy records what it saw and *returns* what to do. The caller (the
//! vhost-user-blk backend, the simulator, the KVM harness, `vmirq replay`) executes the
//! decision: signal the guest now, hold and arm a timer, poll for a bounded window, or sleep.
//!
//! Rules every policy keeps:
//! - `no_std`, no allocation, no floating point, no clock reads;
//! - integer arithmetic only on the hot path (the vIC per-completion path has no division);
//! - every hold has a deadline and every poll window has a hard upper bound, so a caller that
//!   obeys the decisions can never wait forever.
//!
//! The two families:
//! - [`moderation`]: completion moderation (notification coalescing) for a device queue:
//!   `none`, `count` (virtio-net NOTF_COAL semantics), `vic`, `ipi-gap`, `dim` (net_dim,
//!   rdma_dim, latency-adaptive), `dim-loop` (net_dim as a hypervisor-side control loop
//!   programming `count` every few milliseconds), `dim-lat` (net_dim with the packet-burst
//!   heuristics that let short messages bypass moderation), `spdk`, `budget`.
//! - [`wait`]: wait policies (how long to poll before sleeping): `never`, `fixed`, `kvm`
//!   (KVM halt polling), `guest-haltpoll`, `histogram`; and the contention gate, which turns
//!   any of them into sleeps while the caller's CPU samples show a neighbour waiting for the
//!   waiter's CPU (KVM's `single_task_running()` check, from userspace).
//!
//! Plus [`pollmode`] (when a queue worker should switch between notification mode and busy
//! polling), [`event_idx`] (virtio EVENT_IDX arithmetic) and [`spec`] (the policy-spec syntax
//! shared by every vmirq command).
#![no_std]
#![forbid(unsafe_code)]

pub mod event_idx;
pub mod moderation;
pub mod pollmode;
pub mod spec;
pub mod wait;

/// Time in nanoseconds on the caller's monotonic clock. Only differences are meaningful.
pub type Nanos = u64;

/// Nanoseconds in one microsecond.
pub const NS_PER_US: u64 = 1_000;
/// Nanoseconds in one millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
