//! # vmirq-net: a vhost-user-net device backend governed by vmirq policies
//!
//! A switch between vhost-user-net ports (`vmirq serve-net`): frames a port's driver
//! transmits are delivered to another port's receive queue (fixed pairs 0 <-> 1, 2 <-> 3,
//! or a learning bridge), and each queue's interrupts and kick waits follow a
//! `vmirq_policy` policy.
//!
//! Layers, from the sockets inwards:
//! - [`server`]: one listening socket per port, per-connection device lifetime,
//!   reconnects;
//! - [`backend`]: the `VhostUserBackend` implementation (features, config space, events);
//! - [`fabric`]: the ports and the frame path between them (threading, locks and
//!   backpressure are described there);
//! - [`tx`] and [`rx`]: validation of guest descriptor chains (the trust boundary) and the
//!   copy into receive buffers with MRG_RXBUF;
//! - [`queues`]: each queue's moderation and kick waits, from the shared crate
//!   `vmirq-vhost` (one implementation for the block and the net device);
//! - [`switch`]: where a frame goes (which port; [`flow`]: which of its queue pairs);
//!   [`virtio`]: the virtio-net definitions; [`tap`]: a
//!   Linux tap device as a port (`--tap`);
//! - [`ctrlq`]: the control virtqueue on a live ring; [`ctrl`]: its commands (NOTF_COAL etc.) as a pure state machine,
//!   [`classify`]: packet classification for latency-adaptive moderation.
//!
//! Threading choice: one vhost-user-backend worker thread per port (not one thread owning
//! every port, as a DPDK forwarding core would): each frontend connection keeps
//! vhost-user-backend's own lifetime handling, and a frame is moved by the thread that
//! takes it off its source queue, under the source's TX and the destination's RX vring
//! locks (per batch and per frame respectively; uncontended in the pairs case except when
//! both directions touch the same port at once).

pub mod backend;
pub mod classify;
pub mod counters;
pub mod ctrl;
pub mod ctrlq;
pub mod fabric;
pub mod flow;
pub mod metrics;
pub mod pmd;
pub mod prefetch;
pub mod queues;
pub mod regions;
pub mod rings;
pub mod rx;
pub mod server;
pub mod switch;
pub mod tap;
pub mod tx;
pub mod virtio;
