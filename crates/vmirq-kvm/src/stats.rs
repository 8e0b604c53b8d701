//! KVM's binary statistics (`KVM_GET_STATS_FD`) for one vCPU: the halt-polling counters
//! (`halt_attempted_poll`, `halt_successful_poll`, `halt_poll_invalid`, `halt_wakeup`,
//! `halt_poll_success_ns`, `halt_poll_fail_ns`) and `exits`.
//!
//! The fd must be opened before the vCPU's first `KVM_RUN`: the ioctl takes the vCPU mutex,
//! which a running vCPU holds. Reading the fd afterwards needs no lock.

use crate::error::{Error, Result};
use kvm_bindings::{kvm_stats_desc, kvm_stats_header};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use vmm_sys_util::ioctl::ioctl;

/// ioctl request numbers not wrapped by kvm-ioctls.
mod nr {
    #![allow(missing_docs)]
    use kvm_bindings::KVMIO;
    use vmm_sys_util::ioctl_io_nr;
    ioctl_io_nr!(KVM_GET_STATS_FD, KVMIO, 0xce);
}
use nr::KVM_GET_STATS_FD;

/// Names of the counters this crate reports.
pub const NAMES: [&str; 8] = [
    "halt_exits",
    "halt_attempted_poll",
    "halt_successful_poll",
    "halt_poll_invalid",
    "halt_wakeup",
    "halt_poll_success_ns",
    "halt_poll_fail_ns",
    "exits",
];

/// An open statistics fd with the offsets of the counters we read.
#[derive(Debug)]
pub struct StatsFd {
    file: File,
    offsets: HashMap<String, u64>,
}

/// One reading of the counters (absent counters read as 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VcpuStats {
    /// HLT exits (x86 `halt_exits`).
    pub halt_exits: u64,
    /// Halts where KVM started polling.
    pub halt_attempted_poll: u64,
    /// Halts that polling ended (the wake came during the poll window).
    pub halt_successful_poll: u64,
    /// Polls aborted because the wake condition was invalid.
    pub halt_poll_invalid: u64,
    /// Halts that really slept and were woken.
    pub halt_wakeup: u64,
    /// Nanoseconds spent in successful polls.
    pub halt_poll_success_ns: u64,
    /// Nanoseconds spent in polls that failed (the vCPU then slept).
    pub halt_poll_fail_ns: u64,
    /// All VM exits.
    pub exits: u64,
}

impl VcpuStats {
    /// `self - earlier`, counter by counter (saturating).
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            halt_exits: self.halt_exits.saturating_sub(earlier.halt_exits),
            halt_attempted_poll: self
                .halt_attempted_poll
                .saturating_sub(earlier.halt_attempted_poll),
            halt_successful_poll: self
                .halt_successful_poll
                .saturating_sub(earlier.halt_successful_poll),
            halt_poll_invalid: self
                .halt_poll_invalid
                .saturating_sub(earlier.halt_poll_invalid),
            halt_wakeup: self.halt_wakeup.saturating_sub(earlier.halt_wakeup),
            halt_poll_success_ns: self
                .halt_poll_success_ns
                .saturating_sub(earlier.halt_poll_success_ns),
            halt_poll_fail_ns: self
                .halt_poll_fail_ns
                .saturating_sub(earlier.halt_poll_fail_ns),
            exits: self.exits.saturating_sub(earlier.exits),
        }
    }

    /// Total nanoseconds KVM spent polling (successful and failed polls).
    #[must_use]
    pub fn poll_ns(&self) -> u64 {
        self.halt_poll_success_ns + self.halt_poll_fail_ns
    }
}

/// Where the halt counters of a measured phase come from: KVM's stats fd for in-kernel
/// polling, the VMM's own counters for the userspace halt path. The collector reads either
/// at the same two moments, so both sides count the same halts.
pub trait HaltCounters: Sync {
    /// Read the counters now.
    ///
    /// # Errors
    /// [`Error::Io`] if a read fails.
    fn snapshot(&self) -> Result<VcpuStats>;
}

impl HaltCounters for StatsFd {
    fn snapshot(&self) -> Result<VcpuStats> {
        self.read()
    }
}

impl StatsFd {
    /// Open the statistics fd of `vcpu`. Call before the vCPU first runs.
    ///
    /// # Errors
    /// [`Error::Io`] if the ioctl fails (kernels before 5.14) or the header is unreadable.
    pub fn open(vcpu: &impl AsRawFd) -> Result<Self> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new fd or -1; the vCPU fd
        // is valid for the duration of the call.
        let fd = unsafe { ioctl(vcpu, KVM_GET_STATS_FD()) };
        if fd < 0 {
            return Err(Error::io("KVM_GET_STATS_FD")(
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        let offsets = read_offsets(&file)?;
        Ok(Self { file, offsets })
    }

    /// Read one counter by name (`None` if this kernel does not have it).
    ///
    /// # Errors
    /// [`Error::Io`] if the read fails.
    pub fn counter(&self, name: &str) -> Result<Option<u64>> {
        let Some(&offset) = self.offsets.get(name) else {
            return Ok(None);
        };
        let mut buf = [0u8; 8];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(Error::io("reading KVM stats"))?;
        Ok(Some(u64::from_le_bytes(buf)))
    }

    /// Read every counter in [`NAMES`].
    ///
    /// # Errors
    /// [`Error::Io`] if a read fails.
    pub fn read(&self) -> Result<VcpuStats> {
        let get = |name: &str| -> Result<u64> { Ok(self.counter(name)?.unwrap_or(0)) };
        Ok(VcpuStats {
            halt_exits: get("halt_exits")?,
            halt_attempted_poll: get("halt_attempted_poll")?,
            halt_successful_poll: get("halt_successful_poll")?,
            halt_poll_invalid: get("halt_poll_invalid")?,
            halt_wakeup: get("halt_wakeup")?,
            halt_poll_success_ns: get("halt_poll_success_ns")?,
            halt_poll_fail_ns: get("halt_poll_fail_ns")?,
            exits: get("exits")?,
        })
    }

    /// Whether the kernel exposes the named counter.
    #[must_use]
    pub fn has(&self, name: &str) -> bool {
        self.offsets.contains_key(name)
    }
}

/// Parse the header and descriptor block: name -> absolute file offset of its (first) value.
fn read_offsets(file: &File) -> Result<HashMap<String, u64>> {
    let mut hdr = [0u8; std::mem::size_of::<kvm_stats_header>()];
    file.read_exact_at(&mut hdr, 0)
        .map_err(Error::io("reading KVM stats header"))?;
    let word = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
    let (name_size, num_desc) = (word(4), word(8));
    let (desc_offset, data_offset) = (word(16), word(20));
    let desc_size = std::mem::size_of::<kvm_stats_desc>() + name_size as usize;
    if num_desc > 4096 || name_size > 4096 {
        return Err(Error::Guest(format!(
            "implausible KVM stats header ({num_desc} descriptors)"
        )));
    }
    let mut block = vec![0u8; desc_size * num_desc as usize];
    file.read_exact_at(&mut block, u64::from(desc_offset))
        .map_err(Error::io("reading KVM stats descriptors"))?;
    let fixed = std::mem::size_of::<kvm_stats_desc>();
    let mut offsets = HashMap::new();
    for desc in block.chunks_exact(desc_size) {
        // Layout: flags u32, exponent i16, size u16, offset u32, bucket_size u32, name[].
        let offset = u32::from_le_bytes([desc[8], desc[9], desc[10], desc[11]]);
        let name = &desc[fixed..];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        let name = String::from_utf8_lossy(&name[..end]).into_owned();
        offsets.insert(name, u64::from(data_offset) + u64::from(offset));
    }
    Ok(offsets)
}
