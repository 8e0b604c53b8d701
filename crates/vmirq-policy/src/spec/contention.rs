//! [`ContentionSpec`]: whether and how a waiter stops polling under CPU contention.
//!
//! `stop` (the default: [`ContentionConfig::default`]) or
//! `stop:wait_pct=P,verdict_ns=N,hold_ns=N,hold_max_ns=N`; `off` never stops.

use core::fmt;
use core::str::FromStr;

use super::params::{split_spec, Params, SpecError};
use super::Text;
use crate::wait::{ContentionConfig, ContentionGate};

const NAMES: &str = "stop, off";
const KEYS: &[&str] = &["wait_pct", "verdict_ns", "hold_ns", "hold_max_ns"];
/// Longest verdict or hold any spec accepts: 60 s.
const SPAN_MAX_NS: u64 = 60_000_000_000;
const SPAN_EXPECTED: &str = "nanoseconds, 1 to 60000000000";

/// A validated contention-gate configuration (default: `stop`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContentionSpec(pub ContentionConfig);

impl ContentionSpec {
    /// `off`: never stop polling.
    pub const OFF: Self = Self(ContentionConfig::OFF);

    /// A fresh gate (one per waiter).
    #[must_use]
    pub fn build(&self) -> ContentionGate {
        ContentionGate::new(self.0)
    }
}

impl FromStr for ContentionSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let (name, params) = split_spec(s);
        match name {
            "" => Err(SpecError::Empty {
                kind: "contention",
                allowed: NAMES,
            }),
            "off" => {
                Params::new("off", &[], params).next_param()?;
                Ok(Self::OFF)
            }
            "stop" => {
                let mut c = ContentionConfig::default();
                let mut p = Params::new("stop", KEYS, params);
                while let Some((key, v)) = p.next_param()? {
                    match key {
                        "wait_pct" => c.wait_pct = v.u32(1, 100, "a percentage, 1 to 100")?,
                        "verdict_ns" => c.verdict_ns = v.int(1, SPAN_MAX_NS, SPAN_EXPECTED)?,
                        "hold_ns" => c.hold_ns = v.int(1, SPAN_MAX_NS, SPAN_EXPECTED)?,
                        _ => c.hold_max_ns = v.int(1, SPAN_MAX_NS, SPAN_EXPECTED)?,
                    }
                }
                if c.hold_max_ns < c.hold_ns {
                    c.hold_max_ns = c.hold_ns;
                }
                Ok(Self(c))
            }
            other => Err(SpecError::UnknownPolicy {
                kind: "contention",
                name: Text::new(other),
                allowed: NAMES,
            }),
        }
    }
}

impl fmt::Display for ContentionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.0;
        if !c.enabled() {
            return f.write_str("off");
        }
        f.write_str("stop")?;
        let d = ContentionConfig::default();
        let mut sep = ":";
        for (key, cur, def) in [
            ("wait_pct", u64::from(c.wait_pct), u64::from(d.wait_pct)),
            ("verdict_ns", c.verdict_ns, d.verdict_ns),
            ("hold_ns", c.hold_ns, d.hold_ns),
            ("hold_max_ns", c.hold_max_ns, d.hold_max_ns),
        ] {
            if cur != def {
                write!(f, "{sep}{key}={cur}")?;
                sep = ",";
            }
        }
        Ok(())
    }
}
