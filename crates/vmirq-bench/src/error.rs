//! The one error type of the benchmark library.

use std::path::PathBuf;

/// Everything that can go wrong while setting up or running a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// libblkio refused an operation (connect, start, map memory, submit).
    #[error("libblkio {what} failed: {message} (errno {errno})")]
    Blkio {
        /// What the client was doing.
        what: &'static str,
        /// libblkio's message.
        message: String,
        /// The errno libblkio reported.
        errno: i32,
    },
    /// A request completed with an error.
    #[error("request failed with errno {errno} on {target}")]
    RequestFailed {
        /// Negative errno as returned in the completion.
        errno: i32,
        /// Target label.
        target: String,
    },
    /// Waiting for the completion eventfd failed.
    #[error("waiting on the completion fd failed")]
    Wait(#[source] std::io::Error),
    /// A target process could not be started.
    #[error("could not start {program}")]
    Spawn {
        /// The program that failed to start.
        program: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A target process did not create its socket in time, or exited early.
    #[error("{target} did not become ready: {reason}")]
    NotReady {
        /// Target label.
        target: String,
        /// What was observed.
        reason: String,
    },
    /// A file (disk image, socket directory, report) could not be created or written.
    #[error("file operation on {path} failed")]
    File {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A target or workload name on the command line is not known.
    #[error("invalid {what} {value:?}: {reason}")]
    Invalid {
        /// What kind of value.
        what: &'static str,
        /// The value given.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// The client stopped making progress (no completion within the stall bound).
    #[error("no completion for {ms} ms on {target} ({in_flight} in flight)")]
    Stalled {
        /// Target label.
        target: String,
        /// Requests in flight.
        in_flight: u32,
        /// How long nothing completed.
        ms: u64,
    },
    /// The Linux guest of `--guest` could not be prepared.
    #[error("the guest harness failed")]
    Guest(#[from] vmirq_guest::GuestError),
    /// Serialising the JSON report failed.
    #[error("JSON serialisation failed")]
    Json(#[from] serde_json::Error),
    /// A saved JSON report could not be read back.
    #[error("not a vmirq bench JSON report")]
    ReadJson(#[source] serde_json::Error),
}

impl BenchError {
    /// Wrap a libblkio error with what the client was doing.
    pub(crate) fn blkio(what: &'static str, err: &blkio::Error) -> Self {
        Self::Blkio {
            what,
            message: err.message().to_owned(),
            errno: err.errno().raw_os_error(),
        }
    }
}

/// Result alias for the benchmark library.
pub type Result<T> = std::result::Result<T, BenchError>;
