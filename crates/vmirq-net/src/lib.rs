//! # vmirq-net: a vhost-user-net device backend governed by vmirq policies
//!
//! A switch between vhost-user-net ports (`vmirq serve-net`): frames a port's driver
//! transmits are delivered to another port's receive queue, and each queue's interrupts
//! and kick waits follow a `vmirq_policy` policy, with the guest's own `ethtool -C`
//! (VIRTIO_NET_F_NOTF_COAL / VQ_NOTF_COAL) and a hypervisor-side DIM control loop able to
//! program them.
