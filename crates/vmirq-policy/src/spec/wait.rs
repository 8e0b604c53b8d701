//! [`WaitSpec`]: a validated wait (poll-before-sleep) policy and its parameters.

use core::fmt;
use core::str::FromStr;

use super::params::{split_spec, Params, SpecError, Value};
use super::Text;
use crate::wait::{
    Fixed, GuestHaltpoll, GuestHaltpollConfig, Histogram, HistogramConfig, KvmHaltPoll,
    KvmHaltPollConfig, Never, Wait,
};
use crate::Nanos;

const NAMES: &str = "never, fixed, kvm, guest-haltpoll, histogram";
/// Largest poll window any spec accepts: 1 s. Anything longer is a busy loop, not a poll.
const WINDOW_MAX_NS: u64 = 1_000_000_000;
const WINDOW_EXPECTED: &str = "nanoseconds, 0 to 1000000000";

/// A wait policy with validated parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitSpec {
    /// `never`.
    Never,
    /// `fixed:ns=N` (or `fixed:us=N`).
    Fixed(Nanos),
    /// `kvm:max_ns=M,grow=G,grow_start_ns=S,shrink=K`.
    Kvm(KvmHaltPollConfig),
    /// `guest-haltpoll:max_ns=M,grow=G,grow_start_ns=S,shrink=K,allow_shrink=on|off`.
    GuestHaltpoll(GuestHaltpollConfig),
    /// `histogram:max_ns=M,wake_ns=W,cpu_pct=P`.
    Histogram(HistogramConfig),
}

impl WaitSpec {
    /// The policy name as written in a spec.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Fixed(_) => "fixed",
            Self::Kvm(_) => "kvm",
            Self::GuestHaltpoll(_) => "guest-haltpoll",
            Self::Histogram(_) => "histogram",
        }
    }

    /// A fresh policy instance (one per waiter).
    #[must_use]
    pub fn build(&self) -> Wait {
        match *self {
            Self::Never => Wait::Never(Never),
            Self::Fixed(ns) => Wait::Fixed(Fixed::new(ns)),
            Self::Kvm(c) => Wait::Kvm(KvmHaltPoll::new(c)),
            Self::GuestHaltpoll(c) => Wait::GuestHaltpoll(GuestHaltpoll::new(c)),
            Self::Histogram(c) => Wait::Histogram(Histogram::new(c)),
        }
    }
}

/// The grow/shrink knobs KVM halt polling and the guest haltpoll governor share.
struct GrowShrink<'a> {
    max_ns: &'a mut Nanos,
    grow: &'a mut u32,
    grow_start_ns: &'a mut Nanos,
    shrink: &'a mut u32,
}

impl GrowShrink<'_> {
    /// Parse one of the shared keys; `false` if `key` is not one of them.
    fn set(&mut self, key: &str, v: &Value<'_>) -> Result<bool, SpecError> {
        match key {
            "max_ns" => *self.max_ns = v.int(0, WINDOW_MAX_NS, WINDOW_EXPECTED)?,
            "grow" => *self.grow = v.u32(0, 1024, "a multiplier, 0 to 1024")?,
            "grow_start_ns" => {
                *self.grow_start_ns = v.int(1, WINDOW_MAX_NS, "nanoseconds, 1 to 1000000000")?
            }
            "shrink" => *self.shrink = v.u32(0, 1024, "a divisor, 0 to 1024")?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn parse_kvm(mut p: Params<'_>) -> Result<KvmHaltPollConfig, SpecError> {
    let mut c = KvmHaltPollConfig::default();
    while let Some((key, v)) = p.next_param()? {
        GrowShrink {
            max_ns: &mut c.max_ns,
            grow: &mut c.grow,
            grow_start_ns: &mut c.grow_start_ns,
            shrink: &mut c.shrink,
        }
        .set(key, &v)?;
    }
    Ok(c)
}

fn parse_haltpoll(mut p: Params<'_>) -> Result<GuestHaltpollConfig, SpecError> {
    let mut c = GuestHaltpollConfig::default();
    while let Some((key, v)) = p.next_param()? {
        let shared = GrowShrink {
            max_ns: &mut c.max_ns,
            grow: &mut c.grow,
            grow_start_ns: &mut c.grow_start_ns,
            shrink: &mut c.shrink,
        }
        .set(key, &v)?;
        if !shared {
            c.allow_shrink = v.flag()?;
        }
    }
    Ok(c)
}

fn parse_histogram(mut p: Params<'_>) -> Result<HistogramConfig, SpecError> {
    let mut c = HistogramConfig::default();
    while let Some((key, v)) = p.next_param()? {
        match key {
            "max_ns" => c.max_ns = v.int(0, WINDOW_MAX_NS, WINDOW_EXPECTED)?,
            "wake_ns" => c.wake_ns = v.int(1, WINDOW_MAX_NS, "nanoseconds, 1 to 1000000000")?,
            "forget" => c.forget = v.u32(0, 1_000_000, "a count of gaps, 0 (never) to 1000000")?,
            _ => c.cpu_pct = v.u32(1, 100, "a percentage, 1 to 100")?,
        }
    }
    Ok(c)
}

impl FromStr for WaitSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let (name, params) = split_spec(s);
        Ok(match name {
            "" => {
                return Err(SpecError::Empty {
                    kind: "wait",
                    allowed: NAMES,
                })
            }
            "never" => {
                Params::new("never", &[], params).next_param()?;
                Self::Never
            }
            "fixed" => {
                let mut p = Params::new("fixed", &["ns", "us"], params);
                let mut ns = 50_000;
                let mut given = 0;
                while let Some((key, v)) = p.next_param()? {
                    given += 1;
                    ns = if key == "ns" {
                        v.int(0, WINDOW_MAX_NS, WINDOW_EXPECTED)?
                    } else {
                        v.int(0, WINDOW_MAX_NS / 1000, "microseconds, 0 to 1000000")? * 1000
                    };
                    if given > 1 {
                        return Err(v.bad("only one of ns or us"));
                    }
                }
                Self::Fixed(ns)
            }
            "kvm" => Self::Kvm(parse_kvm(Params::new(
                "kvm",
                &["max_ns", "grow", "grow_start_ns", "shrink"],
                params,
            ))?),
            "guest-haltpoll" => Self::GuestHaltpoll(parse_haltpoll(Params::new(
                "guest-haltpoll",
                &["max_ns", "grow", "grow_start_ns", "shrink", "allow_shrink"],
                params,
            ))?),
            "histogram" => Self::Histogram(parse_histogram(Params::new(
                "histogram",
                &["max_ns", "wake_ns", "cpu_pct", "forget"],
                params,
            ))?),
            other => {
                return Err(SpecError::UnknownPolicy {
                    kind: "wait",
                    name: Text::new(other),
                    allowed: NAMES,
                })
            }
        })
    }
}

fn kv(
    f: &mut fmt::Formatter<'_>,
    first: &mut bool,
    key: &str,
    value: impl fmt::Display,
) -> fmt::Result {
    let sep = if *first { ":" } else { "," };
    *first = false;
    write!(f, "{sep}{key}={value}")
}

/// Writes `key=value` for each parameter that differs from its default.
fn non_default(
    f: &mut fmt::Formatter<'_>,
    first: &mut bool,
    params: &[(&str, u64, u64)],
) -> fmt::Result {
    for &(key, cur, def) in params {
        if cur != def {
            kv(f, first, key, cur)?;
        }
    }
    Ok(())
}

/// The grow/shrink parameters KVM and the guest haltpoll governor share, with their defaults.
fn grow_shrink(
    max_ns: u64,
    grow: u32,
    grow_start_ns: u64,
    shrink: u32,
    d: (u64, u32, u64, u32),
) -> [(&'static str, u64, u64); 4] {
    [
        ("max_ns", max_ns, d.0),
        ("grow", grow.into(), d.1.into()),
        ("grow_start_ns", grow_start_ns, d.2),
        ("shrink", shrink.into(), d.3.into()),
    ]
}

impl fmt::Display for WaitSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let mut first = true;
        match *self {
            Self::Never => {}
            Self::Fixed(ns) => kv(f, &mut first, "ns", ns)?,
            Self::Kvm(c) => {
                let d = KvmHaltPollConfig::default();
                let defaults = (d.max_ns, d.grow, d.grow_start_ns, d.shrink);
                non_default(
                    f,
                    &mut first,
                    &grow_shrink(c.max_ns, c.grow, c.grow_start_ns, c.shrink, defaults),
                )?;
            }
            Self::GuestHaltpoll(c) => {
                let d = GuestHaltpollConfig::default();
                let defaults = (d.max_ns, d.grow, d.grow_start_ns, d.shrink);
                non_default(
                    f,
                    &mut first,
                    &grow_shrink(c.max_ns, c.grow, c.grow_start_ns, c.shrink, defaults),
                )?;
                if !c.allow_shrink {
                    kv(f, &mut first, "allow_shrink", "off")?;
                }
            }
            Self::Histogram(c) => {
                let d = HistogramConfig::default();
                non_default(
                    f,
                    &mut first,
                    &[
                        ("max_ns", c.max_ns, d.max_ns),
                        ("wake_ns", c.wake_ns, d.wake_ns),
                        ("cpu_pct", c.cpu_pct.into(), d.cpu_pct.into()),
                        ("forget", c.forget.into(), d.forget.into()),
                    ],
                )?;
            }
        }
        Ok(())
    }
}
