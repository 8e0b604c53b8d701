//! The one error type of the guest harness.

use std::path::PathBuf;

/// Everything that can go wrong while building, booting or talking to a guest.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// A program the harness needs is not installed.
    #[error("{program} is not installed ({hint})")]
    Missing {
        /// The program looked for.
        program: String,
        /// How to install it.
        hint: &'static str,
    },
    /// The initramfs build script failed.
    #[error("building the guest failed: {0}")]
    Build(String),
    /// A process could not be started.
    #[error("could not start {program}")]
    Spawn {
        /// The program.
        program: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file or socket operation failed.
    #[error("{what} {}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A backend did not create its socket in time, or exited before.
    #[error("{backend} did not become ready: {reason}")]
    NotReady {
        /// Which backend.
        backend: String,
        /// Why, with the backend's stderr when there is one.
        reason: String,
    },
    /// QEMU did not connect to the protocol port.
    #[error("QEMU did not start the guest: {0}")]
    NoGuest(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, GuestError>;

impl GuestError {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { what, path, source }
    }
}
