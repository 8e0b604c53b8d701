//! Errors of the KVM measurement crate.

use std::io;

/// Everything that can go wrong while building or running a tiny guest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `/dev/kvm` is missing, not accessible, or refuses to create a VM. The string says
    /// which, in one line meant for the user.
    #[error("KVM is not usable here: {0}")]
    Unavailable(String),
    /// A KVM ioctl failed.
    #[error("KVM ioctl {what} failed")]
    Kvm {
        /// The operation that failed.
        what: &'static str,
        /// The errno KVM returned.
        #[source]
        source: vmm_sys_util::errno::Error,
    },
    /// A host system call failed.
    #[error("{what} failed")]
    Io {
        /// The operation that failed.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Guest memory could not be created or accessed.
    #[error("guest memory: {0}")]
    Memory(String),
    /// The guest program could not be assembled.
    #[error("assembling the guest program {program} failed: {message}")]
    Assemble {
        /// Which guest program.
        program: &'static str,
        /// The assembler's message.
        message: String,
    },
    /// The guest did something the VMM did not expect (a fault, an unknown exit).
    #[error("guest misbehaved: {0}")]
    Guest(String),
    /// A bounded wait for the guest ran out.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A policy spec did not parse.
    #[error("invalid policy spec: {0}")]
    Spec(String),
    /// The samples of a paired loop could not be paired up.
    #[error("per-pair differences")]
    Pairs(#[from] crate::pairs::Error),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Wrap a KVM errno with the name of the failed operation.
    pub fn kvm(what: &'static str) -> impl FnOnce(vmm_sys_util::errno::Error) -> Self {
        move |source| Self::Kvm { what, source }
    }

    /// Wrap an OS error with the name of the failed operation.
    pub fn io(what: &'static str) -> impl FnOnce(io::Error) -> Self {
        move |source| Self::Io { what, source }
    }

    /// Whether this error means "no usable KVM" (tests skip on it, commands exit non-zero).
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}
