//! Target names: `bare`, `qemu-storage-daemon` (alias `qsd`), `qemu-storage-daemon+poll`
//! (alias `qsd+poll`: the export in an IOThread with adaptive polling, QEMU's own polling
//! mode), `vmirq` (`vmirq serve` with no policy flags: its defaults) and
//! `vmirq:<moderation spec>[+<poll spec>]`, e.g. `vmirq:vic+never`, `vmirq:none+kvm`; without
//! `+<poll spec>` the backend's default kick wait applies.

use crate::error::{BenchError, Result};
use std::fmt;
use std::str::FromStr;
use vmirq_policy::spec::{ModerationSpec, WaitSpec};

/// One device under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSpec {
    /// The same I/O straight to the disk file through io_uring: the bare-metal baseline.
    Bare,
    /// qemu-storage-daemon exporting the disk file over vhost-user-blk: the peer.
    Qsd,
    /// The peer with its export in an IOThread that polls adaptively (`poll-max-ns`), the
    /// fair opponent for vmirq targets with kick polling.
    QsdPoll,
    /// `vmirq serve` with no policy flags: what a user gets by default, compared first with
    /// the peer's defaults.
    VmirqDefaults,
    /// `vmirq serve` with a moderation policy and a wait (poll) policy.
    Vmirq {
        /// Completion moderation policy.
        moderation: ModerationSpec,
        /// Backend wait policy; `None` leaves the backend's default.
        poll: Option<WaitSpec>,
    },
}

impl TargetSpec {
    /// Whether a backend process is involved.
    #[must_use]
    pub fn has_backend(&self) -> bool {
        !matches!(self, Self::Bare)
    }

    /// Whether the backend is `vmirq serve`.
    #[must_use]
    pub fn is_vmirq(&self) -> bool {
        matches!(self, Self::VmirqDefaults | Self::Vmirq { .. })
    }

    /// Whether this is the peer every vmirq target is compared with.
    #[must_use]
    pub fn is_peer(&self) -> bool {
        matches!(self, Self::Qsd)
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bare => f.write_str("bare"),
            Self::Qsd => f.write_str("qemu-storage-daemon"),
            Self::QsdPoll => f.write_str("qemu-storage-daemon+poll"),
            Self::VmirqDefaults => f.write_str("vmirq"),
            Self::Vmirq {
                moderation,
                poll: None,
            } => write!(f, "vmirq:{moderation}"),
            Self::Vmirq {
                moderation,
                poll: Some(p),
            } => write!(f, "vmirq:{moderation}+{p}"),
        }
    }
}

impl FromStr for TargetSpec {
    type Err = BenchError;

    fn from_str(s: &str) -> Result<Self> {
        let invalid = |reason: String| BenchError::Invalid {
            what: "target",
            value: s.to_owned(),
            reason,
        };
        match s {
            "bare" => return Ok(Self::Bare),
            "qsd" | "qemu-storage-daemon" => return Ok(Self::Qsd),
            "qsd+poll" | "qemu-storage-daemon+poll" => return Ok(Self::QsdPoll),
            "vmirq" => return Ok(Self::VmirqDefaults),
            _ => {}
        }
        let Some(rest) = s.strip_prefix("vmirq:") else {
            return Err(invalid(
                "expected bare, qemu-storage-daemon, qemu-storage-daemon+poll, vmirq or \
                 vmirq:<policy>"
                    .into(),
            ));
        };
        let (m, p) = match rest.split_once('+') {
            Some((m, p)) => (m, Some(p)),
            None => (rest, None),
        };
        let moderation: ModerationSpec = m.parse().map_err(|e| invalid(format!("{e}")))?;
        let poll = match p {
            Some(p) => Some(p.parse::<WaitSpec>().map_err(|e| invalid(format!("{e}")))?),
            None => None,
        };
        Ok(Self::Vmirq { moderation, poll })
    }
}

#[cfg(test)]
mod tests {
    use super::TargetSpec;

    #[test]
    fn names_round_trip() {
        for name in [
            "bare",
            "qemu-storage-daemon",
            "qemu-storage-daemon+poll",
            "vmirq",
            "vmirq:none",
            "vmirq:vic+never",
        ] {
            let t: TargetSpec = name.parse().expect(name);
            assert_eq!(t.to_string(), name);
        }
        assert_eq!("qsd".parse::<TargetSpec>().ok(), Some(TargetSpec::Qsd));
        assert_eq!(
            "qsd+poll".parse::<TargetSpec>().ok(),
            Some(TargetSpec::QsdPoll)
        );
        let t: TargetSpec = "vmirq:none+fixed:ns=50000".parse().expect("poll spec");
        assert!(matches!(t, TargetSpec::Vmirq { poll: Some(_), .. }));
        assert!(t.to_string().starts_with("vmirq:none+fixed"));
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!("nvme".parse::<TargetSpec>().is_err());
        assert!("vmirq:no-such-policy".parse::<TargetSpec>().is_err());
        assert!("vmirq:none+no-such-wait".parse::<TargetSpec>().is_err());
    }
}
