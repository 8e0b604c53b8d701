//! The devices under test, started and stopped by the bench: `vmirq serve` with a moderation
//! and a poll policy, qemu-storage-daemon's vhost-user-blk export (the peer), and the bare
//! io_uring baseline (no virtual path at all). All of them serve the same in-memory file.

mod counters;
mod disk;
mod process;
mod spec;

pub use counters::{BackendCounters, BackendPerIo};
pub use disk::DiskFile;
pub(crate) use process::pin_child;
pub use process::{find_on_path, Running, Setup};
pub use spec::TargetSpec;
