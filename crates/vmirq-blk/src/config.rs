//! Server configuration: validated once, at the boundary (command line or library caller).
//!
//! [`ServerOptions`] is plain data as a user writes it; [`ServerConfig`] only comes out of it
//! through [`ServerOptions::validate`], so the server never sees an invalid combination.

use std::net::SocketAddr;
use std::path::PathBuf;
use vmirq_policy::moderation::VicConfig;
use vmirq_policy::spec::{ContentionSpec, ModerationSpec, WaitSpec};
use vmirq_policy::wait::KvmHaltPollConfig;

/// Largest number of queues (the vhost-user thread masks are 64-bit).
pub const MAX_QUEUES: u16 = 64;
/// Largest queue size (split virtqueue limit).
pub const MAX_QUEUE_SIZE: u16 = 32768;
/// Default queue size (as qemu-storage-daemon's vhost-user-blk export).
pub const DEFAULT_QUEUE_SIZE: u16 = 256;
/// Default Prometheus port when `--metrics` gives only a port.
pub const DEFAULT_METRICS_HOST: [u8; 4] = [127, 0, 0, 1];

/// Completion moderation when none is given: `vic` (the README's "Defaults" says why).
#[must_use]
pub fn default_moderation() -> ModerationSpec {
    ModerationSpec::Vic(VicConfig::default())
}

/// Kick wait policy when none is given: `kvm` (KVM's halt-polling rule, 200 µs ceiling).
#[must_use]
pub fn default_poll() -> WaitSpec {
    WaitSpec::Kvm(KvmHaltPollConfig::default())
}

/// Configuration errors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A size like `1G` could not be parsed.
    #[error("invalid size {0:?} (expected a number with optional K, M, G or T suffix)")]
    Size(String),
    /// Queue count out of range.
    #[error("queue count must be 1..={MAX_QUEUES}, got {0}")]
    Queues(u16),
    /// Queue size is not a power of two in range.
    #[error("queue size must be a power of two in 1..={MAX_QUEUE_SIZE}, got {0}")]
    QueueSize(u16),
    /// Thread count out of range.
    #[error("thread count must be 1..=queues, got {0}")]
    Threads(u16),
    /// Metrics address could not be parsed.
    #[error("invalid metrics address {0:?} (expected PORT or HOST:PORT)")]
    Metrics(String),
    /// The disk is smaller than one sector.
    #[error("disk size must be at least 512 bytes")]
    DiskSize,
    /// Serial number too long.
    #[error("serial must be at most 20 bytes")]
    Serial,
}

/// Where the disk's data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskSpec {
    /// A raw image file, through io_uring.
    Image {
        /// Path of the file.
        path: PathBuf,
        /// Open with O_DIRECT (bypass the host page cache).
        direct: bool,
    },
    /// A zero-filled RAM disk of this many bytes.
    Ram(u64),
    /// A null disk of this many bytes: writes dropped, reads return zeroes.
    Null(u64),
}

/// Options as given by the user.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// vhost-user socket path.
    pub socket: PathBuf,
    /// Disk backend.
    pub disk: DiskSpec,
    /// Number of request queues.
    pub queues: u16,
    /// Entries per queue.
    pub queue_size: u16,
    /// Worker threads (queues are split into this many contiguous groups); default one per queue.
    pub threads: Option<u16>,
    /// Completion moderation policy of every queue.
    pub moderation: ModerationSpec,
    /// Kick wait policy of every queue.
    pub poll: WaitSpec,
    /// When kick polling stops because a neighbour wants the worker's CPU.
    pub contention: ContentionSpec,
    /// Refuse writes; do not offer DISCARD / WRITE_ZEROES.
    pub read_only: bool,
    /// Prometheus endpoint: `PORT` (loopback) or `HOST:PORT`.
    pub metrics: Option<String>,
    /// Exit after the first frontend disconnects instead of accepting the next one.
    pub once: bool,
    /// GET_ID serial string (at most 20 bytes).
    pub serial: String,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// vhost-user socket path.
    pub socket: PathBuf,
    /// Disk backend (sizes at least one sector).
    pub disk: DiskSpec,
    /// Number of request queues, 1..=64.
    pub queues: u16,
    /// Entries per queue, a power of two.
    pub queue_size: u16,
    /// Worker threads, 1..=queues.
    pub threads: u16,
    /// Completion moderation policy.
    pub moderation: ModerationSpec,
    /// Kick wait policy.
    pub poll: WaitSpec,
    /// Kick-poll contention gate.
    pub contention: ContentionSpec,
    /// Read-only disk.
    pub read_only: bool,
    /// Prometheus endpoint.
    pub metrics: Option<SocketAddr>,
    /// Exit after the first connection.
    pub once: bool,
    /// GET_ID answer, NUL padded.
    pub serial: [u8; crate::virtio::ID_LEN],
}

impl ServerOptions {
    /// Options with defaults for everything but the socket and disk.
    #[must_use]
    pub fn new(socket: impl Into<PathBuf>, disk: DiskSpec) -> Self {
        Self {
            socket: socket.into(),
            disk,
            queues: 1,
            queue_size: DEFAULT_QUEUE_SIZE,
            threads: None,
            moderation: default_moderation(),
            poll: default_poll(),
            contention: ContentionSpec::default(),
            read_only: false,
            metrics: None,
            once: false,
            serial: "vmirq-blk".to_owned(),
        }
    }

    /// Check every option.
    ///
    /// # Errors
    /// The first invalid option.
    pub fn validate(self) -> Result<ServerConfig, ConfigError> {
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return Err(ConfigError::Queues(self.queues));
        }
        if !self.queue_size.is_power_of_two() || self.queue_size > MAX_QUEUE_SIZE {
            return Err(ConfigError::QueueSize(self.queue_size));
        }
        let threads = self.threads.unwrap_or(self.queues);
        if threads == 0 || threads > self.queues {
            return Err(ConfigError::Threads(threads));
        }
        if let DiskSpec::Ram(n) | DiskSpec::Null(n) = self.disk {
            if n < crate::virtio::SECTOR_SIZE {
                return Err(ConfigError::DiskSize);
            }
        }
        let metrics = self
            .metrics
            .as_deref()
            .map(parse_metrics_addr)
            .transpose()?;
        let bytes = self.serial.as_bytes();
        if bytes.len() > crate::virtio::ID_LEN {
            return Err(ConfigError::Serial);
        }
        let mut serial = [0u8; crate::virtio::ID_LEN];
        serial[..bytes.len()].copy_from_slice(bytes);
        Ok(ServerConfig {
            socket: self.socket,
            disk: self.disk,
            queues: self.queues,
            queue_size: self.queue_size,
            threads,
            moderation: self.moderation,
            poll: self.poll,
            contention: self.contention,
            read_only: self.read_only,
            metrics,
            once: self.once,
            serial,
        })
    }
}

/// Parse `PORT` (loopback) or `HOST:PORT`.
///
/// # Errors
/// [`ConfigError::Metrics`] when neither form parses.
pub fn parse_metrics_addr(s: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from((DEFAULT_METRICS_HOST, port)));
    }
    s.parse().map_err(|_| ConfigError::Metrics(s.to_owned()))
}

/// Parse a size such as `4096`, `64K`, `512M`, `1G`, `1GiB` (binary multiples).
///
/// # Errors
/// [`ConfigError::Size`] on anything else or on overflow.
pub fn parse_size(s: &str) -> Result<u64, ConfigError> {
    let err = || ConfigError::Size(s.to_owned());
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(err()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| err())?;
    n.checked_mul(1u64 << shift).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_accept_binary_suffixes_and_reject_garbage() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("3M"), Ok(3 << 20));
        assert!(parse_size("").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn validate_rejects_bad_queue_settings() {
        let base = || ServerOptions::new("/tmp/x.sock", DiskSpec::Ram(1 << 20));
        assert!(base().validate().is_ok());
        let mut o = base();
        o.queues = 0;
        assert_eq!(o.validate().err(), Some(ConfigError::Queues(0)));
        let mut o = base();
        o.queue_size = 100;
        assert_eq!(o.validate().err(), Some(ConfigError::QueueSize(100)));
        let mut o = base();
        o.queues = 2;
        o.threads = Some(3);
        assert_eq!(o.validate().err(), Some(ConfigError::Threads(3)));
        let mut o = base();
        o.disk = DiskSpec::Null(100);
        assert_eq!(o.validate().err(), Some(ConfigError::DiskSize));
    }

    #[test]
    fn defaults_are_vic_with_kvm_polling_that_stops_under_contention() {
        let c = ServerOptions::new("/tmp/x.sock", DiskSpec::Null(1 << 20))
            .validate()
            .expect("defaults are valid");
        assert_eq!(c.moderation.to_string(), "vic");
        assert_eq!(c.poll.to_string(), "kvm");
        assert_eq!(c.contention.to_string(), "stop");
        assert!(c.contention.0.enabled());
    }

    #[test]
    fn metrics_port_alone_binds_loopback() {
        let a = parse_metrics_addr("9100").ok();
        assert_eq!(a, Some(SocketAddr::from(([127, 0, 0, 1], 9100))));
        assert!(parse_metrics_addr("0.0.0.0:80").is_ok());
        assert!(parse_metrics_addr("nope").is_err());
    }
}
