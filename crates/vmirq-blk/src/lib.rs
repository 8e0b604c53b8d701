//! # vmirq-blk: a vhost-user-blk device backend governed by vmirq policies
//!
//! The same kind of component as qemu-storage-daemon's vhost-user-blk export or
//! cloud-hypervisor's `vhost_user_block`: a VMM (QEMU, cloud-hypervisor) or a libblkio
//! process attaches to its unix socket and gets a virtio-blk device. What is different is
//! that each queue's completion notifications (writes to the vring call eventfd, i.e. the
//! guest's interrupts) follow a `vmirq_policy` moderation policy, with a timerfd for held
//! completions and EVENT_IDX applied on top, and its kick waits follow a wait policy
//! (bounded polling of the available ring before sleeping in epoll).
//!
//! Layers, from the socket inwards:
//! - [`server`]: socket, per-connection device lifetime, reconnects;
//! - [`guard`]: checks every vhost-user message before rust-vmm's handler sees it, and
//!   answers the INFLIGHT_SHMFD messages itself ([`inflight`]: restart without losing I/O);
//! - [`backend`]: the `VhostUserBackend` implementation (features, config space, events);
//! - [`engine`]: one queue's loop (drain, execute, complete, moderate, poll);
//! - [`chain`] and [`request`]: validation of guest descriptor chains (the trust boundary):
//!   ring rules first, then the virtio-blk request;
//! - [`storage`]: RAM, null and io_uring image-file disks.
//!
//! The device-independent queue machinery (moderation with its hold timer, EVENT_IDX,
//! kick polling, generic counters, the Prometheus endpoint) is `vmirq_vhost`'s, shared with
//! the other vmirq devices, as are the ring rules of [`chain`], the message [`guard`] and
//! INFLIGHT_SHMFD ([`inflight`]);
//! those modules are re-exported from there. The
//! vhost-user protocol itself is rust-vmm's (`vhost`, `vhost-user-backend`).

pub mod backend;
pub mod config;
pub mod counters;
pub mod engine;
pub mod guest_io;
#[cfg(feature = "test-utils")]
pub mod manual_io;
pub mod request;
pub mod server;
pub mod storage;
#[cfg(feature = "test-utils")]
pub mod test_device;
#[cfg(feature = "test-utils")]
pub mod vhost_frontend;
pub mod virtio;

pub use vmirq_vhost::{chain, clock, cpustat, guard, inflight};

/// The driver-side mock guest (vmirq-vhost's, feature `test-utils`) with the block device's
/// requests ([`BlkRequests`](test_device::BlkRequests)) and [`TestDevice`](test_device::TestDevice).
#[cfg(feature = "test-utils")]
pub mod mock_guest {
    pub use crate::test_device::*;
    pub use vmirq_vhost::mock_guest::*;
}
/// The adversarial vhost-user frontend (vmirq-vhost's, feature `test-utils`).
#[cfg(feature = "test-utils")]
pub use vmirq_vhost::raw_frontend;

pub use config::{parse_size, DiskSpec, ServerConfig, ServerOptions};
pub use server::{Server, ServerError, ServerHandle};
