//! # vmirq-sim: a deterministic discrete-event simulator of a virtualized host
//!
//! vmirq-sim runs the *same* `vmirq-policy` state machines the real backend runs, inside a
//! model of a host: pCPUs, VMs whose vCPUs are host threads, a host scheduler, VM exits and
//! entries, IPIs, HLT with host and guest halt polling, tickless APIC timer programming,
//! virtual interrupt injection, polling threads, and storage/network devices.
//!
//! - [`engine`]: the event queue (integer ns, heap + slab, lazy cancellation).
//! - [`rng`]: the seeded PRNG (bit-identical across platforms).
//! - [`hold`]: the hold-model microbenchmark.
//! - [`costs`]: the named primitive costs and their sources; [`profiles`]: host profiles
//!   (idle states per CPU generation) and the menu-like idle governor; [`era`]: each
//!   profile's indirect exit cost and interrupt-path exits.
//! - [`host`]: the host model; [`workload`]: what the guests do; [`sync`]: guest kernel
//!   synchronization (TLB shootdowns, spinlocks, PLE) on the host model.
//! - [`model`]: a run's configuration; [`sim`]: one run; [`scenario`]: scenario files,
//!   run variants, published-vs-simulated checks; [`sweep`]: parameter grids, on this
//!   machine or a Dask cluster; [`report`]: text, JSON, HTML.
#![forbid(unsafe_code)]

pub mod checks;
pub mod costs;
pub mod engine;
pub mod era;
pub mod hold;
pub mod host;
pub mod html;
pub mod model;
pub mod profiles;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod sweep;
pub mod sync;
pub mod workload;

/// Simulated time in nanoseconds.
pub type Nanos = u64;
