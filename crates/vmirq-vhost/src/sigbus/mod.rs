//! Surviving a frontend that shrinks its guest memory file after handing it over.
//!
//! The guard checks at SET_MEM_TABLE / ADD_MEM_REG that each region fits its file, but an
//! unsealed file (a memfd without F_SEAL_SHRINK, a tmpfs or hugetlbfs file) can be truncated
//! afterwards; the backend's next access to those pages raises SIGBUS, which by default kills
//! the process and every other frontend's connection with it.
//!
//! Each connection registers its guest memory mappings ([`Registration`]) in a process-wide,
//! lock-free table ([`table`]); a SIGBUS handler ([`handler`]) replaces a registered mapping
//! that faults with private zero memory and marks it revoked, so the access
//! completes (reading zeros). The data path asks [`revoked_in`] before it completes a request
//! and after each batch: a request that may have touched revoked memory is never completed,
//! the device breaks its queues and drops the connection. A SIGBUS anywhere else goes to the
//! previous disposition.
//!
//! [`Revocation`] is one connection's side of this for any device (vmirq-blk and vmirq-net).
//!
//! [`unsealed_memfd`] tells the guard when a region's file is a memfd that can still shrink
//! (a warning only: QEMU's file and hugetlbfs memory backends cannot be sealed).

pub mod handler;
pub mod revocation;
pub mod table;

pub use revocation::Revocation;

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use table::{Mapping, SlotId, Table};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// The process's table of registered guest memory mappings.
pub static TABLE: Table = Table::new();

/// A mapping whose memory the frontend took away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revoked {
    /// Guest physical address of the region.
    pub guest_addr: u64,
    /// Region size in bytes.
    pub len: usize,
}

impl std::fmt::Display for Revoked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "guest memory region at {:#x} ({} bytes) was truncated by the frontend",
            self.guest_addr, self.len
        )
    }
}

/// Errors of [`Registration::update`].
#[derive(Debug, thiserror::Error)]
pub enum SigbusError {
    /// The SIGBUS handler could not be installed.
    #[error("cannot install the SIGBUS handler")]
    Install(#[source] io::Error),
    /// Every slot of the process's mapping table is taken.
    #[error(
        "too many guest memory mappings registered in this process ({})",
        table::CAPACITY
    )]
    Full,
}

/// One connection's guest memory mappings in [`TABLE`]. Holds the memory it registered, so a
/// registered range is always mapped: slots are removed before that memory is released (in
/// [`Registration::update`] and on drop).
#[derive(Default)]
pub struct Registration {
    slots: Vec<(SlotId, Mapping)>,
    held: Option<Arc<GuestMemoryMmap>>,
}

impl Registration {
    /// An empty registration.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The connection's memory is now `mem` (after SET_MEM_TABLE, ADD_MEM_REG, REM_MEM_REG):
    /// register its regions (installing the handler on first use), unregister the regions
    /// that are gone, and hold `mem`.
    ///
    /// # Errors
    /// When the handler cannot be installed or the table is full (the regions that fit are
    /// registered).
    pub fn update(&mut self, mem: Arc<GuestMemoryMmap>) -> Result<(), SigbusError> {
        handler::install().map_err(SigbusError::Install)?;
        let mut full = false;
        let mut slots = Vec::with_capacity(mem.num_regions());
        for r in mem.iter() {
            let m = Mapping {
                start: r.as_ptr() as usize,
                len: r.size(),
                guest_addr: r.start_addr().0,
            };
            if let Some(&kept) = self.slots.iter().find(|(_, k)| *k == m) {
                slots.push(kept);
            } else if let Some(id) = TABLE.insert(m) {
                slots.push((id, m));
            } else {
                full = true;
            }
        }
        for old in &self.slots {
            if !slots.contains(old) {
                TABLE.remove(old.0);
            }
        }
        self.slots = slots;
        // Only now may the previous memory be unmapped: none of its ranges is registered.
        self.held = Some(mem);
        if full {
            return Err(SigbusError::Full);
        }
        Ok(())
    }

    /// The first revoked mapping of this connection, if any.
    #[must_use]
    pub fn revoked(&self) -> Option<Revoked> {
        if !TABLE.any_revoked() {
            return None;
        }
        self.slots
            .iter()
            .find(|(id, _)| TABLE.is_revoked(*id))
            .map(|(_, m)| Revoked {
                guest_addr: m.guest_addr,
                len: m.len,
            })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        for (id, _) in self.slots.drain(..) {
            TABLE.remove(id);
        }
        // `held` is dropped after this: the mappings go away unregistered.
    }
}

/// The first region of `mem` whose memory was revoked, if any (one atomic load when no
/// mapping in the process is revoked: call it before completing a request).
#[must_use]
pub fn revoked_in(mem: &GuestMemoryMmap) -> Option<Revoked> {
    if !TABLE.any_revoked() {
        return None;
    }
    mem.iter().find_map(|r| {
        let (id, m) = TABLE.find(r.as_ptr() as usize)?;
        TABLE.is_revoked(id).then_some(Revoked {
            guest_addr: m.guest_addr,
            len: m.len,
        })
    })
}

/// Revocations recorded since the process started.
#[must_use]
pub fn revocations() -> u64 {
    TABLE.revocations()
}

/// `true` when `file` is a memfd that may still shrink (F_GET_SEALS works, F_SEAL_SHRINK is
/// not set); `false` for sealed memfds and for files that take no seals (regular files on
/// most filesystems, hugetlbfs without sealing support).
#[must_use]
pub fn unsealed_memfd(file: &File) -> bool {
    // SAFETY: F_GET_SEALS only reads the seals of the descriptor `file` owns.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{FileOffset, GuestAddress};

    fn memfd(len: u64) -> File {
        // SAFETY: a NUL-terminated literal name and valid flags.
        let fd = unsafe {
            libc::memfd_create(
                c"sigbus-test".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
        let f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.set_len(len).expect("set_len");
        f
    }

    /// The whole mechanism in one process: a mapped memfd, truncated to one page; reading
    /// past it would kill the test binary without the handler. The handler hands back zeros,
    /// the registration reports the region, and once unregistered the table forgets it.
    #[test]
    fn a_truncated_registered_mapping_reads_zeros_and_is_reported_revoked() {
        let f = memfd(4 << 20);
        let mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
            GuestAddress(0x10_0000),
            4 << 20,
            Some(FileOffset::new(f.try_clone().expect("dup"), 0)),
        )])
        .expect("map");
        let mem = Arc::new(mem);
        use vm_memory::Bytes;
        mem.write_obj(0xABu8, GuestAddress(0x10_0000 + (2 << 20)))
            .expect("write");
        let mut reg = Registration::new();
        reg.update(Arc::clone(&mem)).expect("register");
        assert_eq!(reg.revoked(), None);
        assert_eq!(revoked_in(&mem), None);
        assert!(unsealed_memfd(&f));
        f.set_len(4096).expect("truncate");
        let before = revocations();
        let v: u8 = mem
            .read_obj(GuestAddress(0x10_0000 + (2 << 20)))
            .expect("read");
        assert_eq!(v, 0, "a revoked page reads as zeros");
        mem.write_obj(0x5Au8, GuestAddress(0x10_0000 + (3 << 20)))
            .expect("a write to a truncated page lands in a private page");
        let want = Revoked {
            guest_addr: 0x10_0000,
            len: 4 << 20,
        };
        assert_eq!(reg.revoked(), Some(want));
        assert_eq!(revoked_in(&mem), Some(want));
        assert!(revocations() > before);
        // The whole mapping is private zero memory now (the frontend's data is not seen).
        let first: u8 = mem.read_obj(GuestAddress(0x10_0000)).expect("read");
        assert_eq!(first, 0);
        let again: u8 = mem
            .read_obj(GuestAddress(0x10_0000 + (3 << 20)))
            .expect("read");
        assert_eq!(again, 0x5A, "private writes stay readable");
        drop(reg);
        assert_eq!(
            revoked_in(&mem),
            None,
            "unregistered memory is not reported"
        );
    }

    /// Child side of the test below: install the handler, then read past the end of a
    /// truncated memfd that is mapped but not registered.
    #[test]
    #[ignore = "the child process of a_fault_outside_registered_memory_still_kills_the_process"]
    fn child_faults_outside_registered_memory() {
        assert!(
            std::env::var_os("VMIRQ_SIGBUS_CHILD").is_some(),
            "run by a_fault_outside_registered_memory_still_kills_the_process (it dies of SIGBUS)"
        );
        handler::install().expect("install");
        let f = memfd(1 << 20);
        let mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
            GuestAddress(0),
            1 << 20,
            Some(FileOffset::new(f.try_clone().expect("dup"), 0)),
        )])
        .expect("map");
        f.set_len(4096).expect("truncate");
        use vm_memory::Bytes;
        let v: u8 = mem.read_obj(GuestAddress(1 << 19)).expect("read");
        eprintln!("unregistered truncated memory read {v} and the process survived");
        std::process::exit(3);
    }

    /// A SIGBUS that is not in registered guest memory still ends the process, as without
    /// the handler (it chains to the previous disposition). Run in a child process.
    #[test]
    fn a_fault_outside_registered_memory_still_kills_the_process() {
        use std::os::unix::process::ExitStatusExt;
        let exe = std::env::current_exe().expect("test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "sigbus::tests::child_faults_outside_registered_memory",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("VMIRQ_SIGBUS_CHILD", "1")
            .output()
            .expect("spawn child");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "child: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn a_sealed_memfd_is_not_reported_unsealed() {
        let f = memfd(4096);
        // SAFETY: adding a seal to the descriptor this test owns.
        let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        assert_eq!(r, 0);
        assert!(!unsealed_memfd(&f));
        let plain = tempfile_in_tmp();
        assert!(!unsealed_memfd(&plain), "a regular file takes no seals");
    }

    fn tempfile_in_tmp() -> File {
        tempfile::tempfile().expect("tempfile")
    }
}
