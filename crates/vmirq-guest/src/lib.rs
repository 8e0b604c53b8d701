//! # vmirq-guest: a real Linux guest for vmirq's end-to-end tests and bench
//!
//! Debian's cloud kernel and a busybox initramfs with fio, e2fsprogs and util-linux's
//! blkdiscard, booted under QEMU (KVM where it can run a Linux guest, TCG otherwise) against
//! vhost-user-blk backends (`vmirq serve`, qemu-storage-daemon) and vhost-user-net backends
//! (`vmirq serve-net`). The guest's `/init` runs a
//! command list and reports each step's output and exit status over a serial port.
//!
//! ```no_run
//! use vmirq_guest::{Backend, Harness, Script, VhostUserBlk};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let harness = Harness::prepare()?; // build or reuse the guest, decide KVM or TCG
//! let sock = std::env::temp_dir().join("doc.sock");
//! let _backend = Backend::vmirq_serve("target/debug/vmirq".as_ref(), &sock, &["--ram", "64M"])?;
//! let machine = harness.machine().disk(VhostUserBlk::new(&sock, 1));
//! let script = Script::new().wait_block("vda", 10).step("size", 10, "cat /sys/block/vda/size");
//! let run = harness.run(&machine, &script)?;
//! assert!(run.ok(), "{}", run.diagnostics());
//! assert_eq!(run.output("size").trim(), "131072");
//! # Ok(()) }
//! ```
//!
//! Module map: [`image`] builds and caches the guest (scripts/guest/build-initramfs.sh and
//! init.sh, compiled in); [`accel`] decides KVM or TCG; [`qemu`] runs one QEMU process and
//! reads the protocol into a [`transcript`]; [`script`] writes command lists; [`backend`]
//! runs the device side; [`fio`] and [`interrupts`] parse what the guest printed; [`process`]
//! keeps children from outliving their owner.

pub mod accel;
pub mod backend;
pub mod error;
pub mod fio;
pub mod image;
pub mod interrupts;
pub mod nic;
pub mod process;
pub mod qemu;
pub mod script;
pub mod shared;
pub mod transcript;

pub use accel::{Accel, Choice};
pub use backend::Backend;
pub use error::{GuestError, Result};
pub use image::Image;
pub use nic::VhostUserNet;
pub use qemu::{Exit, Machine, Run, VhostUserBlk, Vm};
pub use script::Script;
pub use shared::{shared_harness, skip};
pub use transcript::{StepResult, Transcript};

use std::path::PathBuf;

/// A built guest and the accelerator to run it under.
#[derive(Debug, Clone)]
pub struct Harness {
    /// The kernel and initramfs.
    pub image: Image,
    /// KVM or TCG, and why.
    pub accel: Choice,
    /// The cache directory.
    pub cache: PathBuf,
}

impl Harness {
    /// Build (or reuse) the guest in [`image::default_cache_dir`] and decide the accelerator.
    ///
    /// # Errors
    /// QEMU is not installed ([`GuestError::Missing`]), or the guest cannot be built (a
    /// package is missing: the message names it).
    pub fn prepare() -> Result<Self> {
        Self::prepare_in(image::default_cache_dir())
    }

    /// As [`Harness::prepare`] with the cache in `cache`.
    ///
    /// # Errors
    /// As [`Harness::prepare`].
    pub fn prepare_in(cache: PathBuf) -> Result<Self> {
        if process::find_program(qemu::QEMU).is_none() {
            return Err(GuestError::Missing {
                program: qemu::QEMU.to_owned(),
                hint: "Debian: apt-get install qemu-system-x86, or run scripts/setup.sh",
            });
        }
        let image = Image::prepare(&cache)?;
        let accel = accel::choose(&image, &cache);
        tracing::info!(%accel, kernel = image.kernel_release(), "guest ready");
        Ok(Self {
            image,
            accel,
            cache,
        })
    }

    /// A machine under the chosen accelerator (see [`Machine::new`] for the defaults).
    #[must_use]
    pub fn machine(&self) -> Machine {
        Machine::new(self.accel.accel)
    }

    /// Boot `machine`, run `script`, and wait for the end.
    ///
    /// # Errors
    /// QEMU does not start (see [`Vm::start`]); a guest that fails is a [`Run`] that is not
    /// [`Run::ok`].
    pub fn run(&self, machine: &Machine, script: &Script) -> Result<Run> {
        Ok(Vm::start(&self.image, machine, script)?.finish())
    }

    /// Start `machine` running `script` without waiting, to act on the host while the guest
    /// runs (e.g. kill and restart the backend); see [`Vm::wait_until`].
    ///
    /// # Errors
    /// As [`Vm::start`].
    pub fn start(&self, machine: &Machine, script: &Script) -> Result<Vm> {
        Vm::start(&self.image, machine, script)
    }
}
