//! # vmirq-bench: what each policy does to IOPS, latency and CPU, side by side
//!
//! A libblkio client plays the guest's virtio-blk driver against:
//! - `vmirq serve` with each moderation and poll policy (started as a child process),
//! - qemu-storage-daemon's vhost-user-blk export (the peer a user would run instead),
//! - `bare`: the same I/O through io_uring straight to the same memory-backed file, so the
//!   latency the virtual path adds can be measured.
//!
//! Each run measures IOPS, latency percentiles (hdrhistogram), notifications per I/O (the
//! completion eventfd counter the client reads), client wakeups per I/O, and CPU time per I/O
//! of client and backend (from `/proc/.../schedstat`). Runs are pinned, warmed up, repeated
//! with targets interleaved, and summarised as median with min/max and ratios to the peer
//! from the same repetition. Reports: a terminal table, JSON, and self-contained HTML with
//! inline SVG plots.
//!
//! Module map: [`workload`] and [`plan`] say what to run; [`client`] runs it; [`target`]
//! starts the devices; [`stats`] and [`results`] summarise; [`knob`] replays the bursty trace
//! through vmirq-policy; [`report`] renders; [`runner`] ties it together. [`guest`] is the
//! `--guest` mode: fio inside a real Linux guest against the same targets (vmirq-guest).
//! [`net`] is the `--net` mode: vmirq-netload's virtio-net client against `vmirq serve-net`,
//! DPDK testpmd's vhost PMD and Open vSwitch with DPDK (packets/s, Gbit/s, RTT p50/p99,
//! interrupts and CPU per packet, ratios to testpmd from the same run).

pub mod client;
pub mod cpu;
pub mod error;
pub mod guest;
pub mod knob;
pub mod kvm;
pub mod machine;
pub mod net;
pub mod plan;
pub mod progress;
pub mod report;
pub mod results;
pub mod rng;
pub mod runner;
pub mod session;
pub mod stats;
pub mod target;
pub mod workload;

pub use error::{BenchError, Result};
