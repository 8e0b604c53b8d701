//! vmirq-netload: the guest side of a virtio-net device reached over vhost-user, and a load
//! generator on top of it.
//!
//! [`port::NetPort`] is a small virtio-net driver: it creates the guest memory (a memfd),
//! connects to a vhost-user-net backend as the frontend, negotiates VERSION_1, MRG_RXBUF and
//! EVENT_IDX, and runs one RX and one TX split ring ([`ring`]) with kick and call eventfds.
//! [`run`] drives one or more ports like a guest's NAPI loop (sleep on the RX call eventfd,
//! drain with callbacks off, re-arm with EVENT_IDX, refill) or by polling, and measures
//! packets/s, Gbit/s, round-trip latency, interrupts and client CPU per packet for the
//! [`workload`]s. [`peer`] starts DPDK's testpmd as the peer (its vhost PMD) or as a
//! reference client (its virtio-user).
//!
//! It is a crate of its own, not part of the `vmirq-net` backend, because it is the other end
//! of the wire: the backend's tests and `vmirq bench` use it as their client without pulling
//! in the backend, as the block path uses libblkio.

#[cfg(not(target_endian = "little"))]
compile_error!("virtio 1.x rings are little-endian; this driver accesses them natively");

pub mod bench;
pub mod frame;
pub mod memory;
pub mod peer;
pub mod port;
pub mod ring;
pub mod run;
#[cfg(test)]
mod test_device;
pub mod vhost;
pub mod virtio_net;
pub mod workload;
