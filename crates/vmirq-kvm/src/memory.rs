//! Guest RAM: one anonymous mapping registered as KVM memory slot 0, with bounds-checked and
//! atomic accessors (the guest runs concurrently with the VMM threads that read it).

use crate::error::{Error, Result};
use crate::layout;
use std::sync::atomic::Ordering;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

/// The guest's RAM.
#[derive(Debug)]
pub struct GuestRam {
    mem: GuestMemoryMmap<()>,
}

impl GuestRam {
    /// Allocate [`layout::RAM_SIZE`] bytes of zeroed guest RAM.
    ///
    /// # Errors
    /// [`Error::Memory`] if the mapping fails.
    pub fn new() -> Result<Self> {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), layout::RAM_SIZE)])
            .map_err(|e| Error::Memory(e.to_string()))?;
        Ok(Self { mem })
    }

    /// Host address of guest physical 0 (for `KVM_SET_USER_MEMORY_REGION`).
    ///
    /// # Errors
    /// [`Error::Memory`] if the region is missing (cannot happen after `new`).
    pub fn host_base(&self) -> Result<u64> {
        let ptr = self
            .mem
            .get_host_address(GuestAddress(0))
            .map_err(|e| Error::Memory(e.to_string()))?;
        Ok(ptr as u64)
    }

    /// Copy `bytes` into guest memory at `gpa`.
    ///
    /// # Errors
    /// [`Error::Memory`] if the range is outside RAM.
    pub fn write(&self, gpa: u64, bytes: &[u8]) -> Result<()> {
        self.mem
            .write_slice(bytes, GuestAddress(gpa))
            .map_err(|e| Error::Memory(format!("write at {gpa:#x}: {e}")))
    }

    /// Store a u64 atomically (release) at `gpa` (must be 8-byte aligned).
    ///
    /// # Errors
    /// [`Error::Memory`] if outside RAM or misaligned.
    pub fn store(&self, gpa: u64, value: u64) -> Result<()> {
        self.mem
            .store(value, GuestAddress(gpa), Ordering::Release)
            .map_err(|e| Error::Memory(format!("store at {gpa:#x}: {e}")))
    }

    /// Load a u64 atomically (acquire) from `gpa` (must be 8-byte aligned).
    ///
    /// # Errors
    /// [`Error::Memory`] if outside RAM or misaligned.
    pub fn load(&self, gpa: u64) -> Result<u64> {
        self.mem
            .load(GuestAddress(gpa), Ordering::Acquire)
            .map_err(|e| Error::Memory(format!("load at {gpa:#x}: {e}")))
    }

    /// Store into a mailbox cell (offset from [`layout::MAILBOX`]).
    ///
    /// # Errors
    /// As [`GuestRam::store`].
    pub fn set_cell(&self, cell: u64, value: u64) -> Result<()> {
        self.store(layout::MAILBOX + cell, value)
    }

    /// Load a mailbox cell (offset from [`layout::MAILBOX`]).
    ///
    /// # Errors
    /// As [`GuestRam::load`].
    pub fn cell(&self, cell: u64) -> Result<u64> {
        self.load(layout::MAILBOX + cell)
    }
}
