//! What the load generator sends: a bulk stream (paced or not), request/response ping-pong
//! between two ports (TCP_RR-like), or the moderation talk's mix (a bulk stream plus short
//! request/response messages: on the same queues, on a second pair of ports, or with three
//! ports, the bulk and the responses from two source ports into the client's one receive
//! queue).

use crate::frame::{Encap, FRAME_LEN_MAX, FRAME_LEN_MIN};
use serde::Serialize;
use std::fmt;

/// A workload and its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Workload {
    /// Frames from port 0 to port 1, as fast as the rings allow or at `rate_pps`.
    Stream {
        /// Frame length in bytes.
        frame_len: u32,
        /// Packets per second, or `None` for as fast as possible.
        rate_pps: Option<u64>,
    },
    /// Requests from port 0 to port 1, each answered by port 1 with a response of the same
    /// length; `depth` transactions outstanding (netperf TCP_RR has 1).
    Rr {
        /// Request and response length.
        frame_len: u32,
        /// Transactions in flight.
        depth: u32,
    },
    /// A bulk stream 0 -> 1 plus one short request/response transaction every
    /// `msg_interval_us` (0 -> 1 and back on the same queues, 1 -> 2 and back with three
    /// ports, or 2 <-> 3 with four ports).
    Mix {
        /// Bulk frame length.
        bulk_len: u32,
        /// Bulk rate, or `None` for as fast as possible.
        bulk_rate_pps: Option<u64>,
        /// Message (request and response) length.
        msg_len: u32,
        /// Time between a response and the next request.
        msg_interval_us: u32,
    },
}

/// Why workload parameters are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// A frame length outside 60..=9216.
    #[error("frame length {0} outside {FRAME_LEN_MIN}..={FRAME_LEN_MAX}")]
    FrameLen(u32),
    /// A frame length too short for the encapsulation's headers and trailer.
    #[error(
        "frame length {len} is too short for {} frames: the shortest is {min} bytes \
         (headers and trailer)",
        encap.as_str()
    )]
    TooShortFor {
        /// The shortest frame of the workload.
        len: u32,
        /// The encapsulation.
        encap: Encap,
        /// Its shortest frame.
        min: u32,
    },
    /// A zero rate, depth or interval.
    #[error("{0} must be positive")]
    Zero(&'static str),
    /// Unknown workload name.
    #[error("unknown workload {0:?} (stream, rr, mix)")]
    Name(String),
    /// A malformed workload string.
    #[error(
        "cannot parse {0:?} (stream[:LEN][@PPS], rr[:LEN][xDEPTH], mix[:LEN][@PPS][+MSGLEN][/US])"
    )]
    Syntax(String),
    /// The number of ports does not suit the workload.
    #[error("{workload} needs {needs} ports, got {got}")]
    Ports {
        /// Workload name.
        workload: &'static str,
        /// What it accepts.
        needs: &'static str,
        /// Ports given.
        got: usize,
    },
    /// The mix on three ports without the wire sender.
    #[error(
        "mix on 3 ports needs the wire sender (--sender wire): port 0 sends the bulk from a \
         thread of its own, port 2 answers from another, the client on port 1 receives both"
    )]
    ThreePortsNeedWire,
}

impl Workload {
    /// Check lengths and rates.
    ///
    /// # Errors
    /// [`WorkloadError`].
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let len_ok = |l: u32| {
            (FRAME_LEN_MIN..=FRAME_LEN_MAX)
                .contains(&l)
                .then_some(())
                .ok_or(WorkloadError::FrameLen(l))
        };
        match *self {
            Self::Stream {
                frame_len,
                rate_pps,
            } => {
                len_ok(frame_len)?;
                if rate_pps == Some(0) {
                    return Err(WorkloadError::Zero("rate"));
                }
            }
            Self::Rr { frame_len, depth } => {
                len_ok(frame_len)?;
                if depth == 0 {
                    return Err(WorkloadError::Zero("depth"));
                }
            }
            Self::Mix {
                bulk_len,
                bulk_rate_pps,
                msg_len,
                msg_interval_us,
            } => {
                len_ok(bulk_len)?;
                len_ok(msg_len)?;
                if bulk_rate_pps == Some(0) {
                    return Err(WorkloadError::Zero("rate"));
                }
                if msg_interval_us == 0 {
                    return Err(WorkloadError::Zero("message interval"));
                }
            }
        }
        Ok(())
    }

    /// Check that `ports` ports suit this workload, the bulk sent by a thread of its own
    /// (`wire`) or by the client: the mix on three ports needs the wire (port 0 is another
    /// host's, port 2 a responder's, and the client thread only has port 1).
    ///
    /// # Errors
    /// [`WorkloadError::Ports`], [`WorkloadError::ThreePortsNeedWire`].
    pub fn check_ports(&self, ports: usize, wire: bool) -> Result<(), WorkloadError> {
        let (workload, needs, ok) = match self {
            Self::Stream { .. } => ("stream", "2", ports == 2),
            Self::Rr { .. } => ("rr", "2", ports == 2),
            Self::Mix { .. } => ("mix", "2, 3 or 4", (2..=4).contains(&ports)),
        };
        if !ok {
            return Err(WorkloadError::Ports {
                workload,
                needs,
                got: ports,
            });
        }
        if ports == 3 && !wire {
            return Err(WorkloadError::ThreePortsNeedWire);
        }
        Ok(())
    }

    /// Check that every frame of this workload can carry `encap`'s headers and trailer
    /// (`raw`: [`Self::validate`]'s 60 bytes; `udp`: 82).
    ///
    /// # Errors
    /// [`WorkloadError::TooShortFor`].
    pub fn check_encap(&self, encap: Encap) -> Result<(), WorkloadError> {
        let len = self.min_frame_len();
        let min = encap.frame_len_min();
        if len < min {
            return Err(WorkloadError::TooShortFor { len, encap, min });
        }
        Ok(())
    }

    /// The shortest frame any port sends.
    #[must_use]
    pub fn min_frame_len(&self) -> u32 {
        match *self {
            Self::Stream { frame_len, .. } | Self::Rr { frame_len, .. } => frame_len,
            Self::Mix {
                bulk_len, msg_len, ..
            } => bulk_len.min(msg_len),
        }
    }

    /// The largest frame any port sends.
    #[must_use]
    pub fn max_frame_len(&self) -> u32 {
        match *self {
            Self::Stream { frame_len, .. } | Self::Rr { frame_len, .. } => frame_len,
            Self::Mix {
                bulk_len, msg_len, ..
            } => bulk_len.max(msg_len),
        }
    }

    /// Short name.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Stream { .. } => "stream",
            Self::Rr { .. } => "rr",
            Self::Mix { .. } => "mix",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate = |r: Option<u64>| r.map_or_else(|| "max".to_string(), |r| format!("{r}pps"));
        match *self {
            Self::Stream {
                frame_len,
                rate_pps,
            } => {
                write!(f, "stream {frame_len}B @{}", rate(rate_pps))
            }
            Self::Rr { frame_len, depth } => write!(f, "rr {frame_len}B depth {depth}"),
            Self::Mix {
                bulk_len,
                bulk_rate_pps,
                msg_len,
                msg_interval_us,
            } => write!(
                f,
                "mix {bulk_len}B @{} + {msg_len}B every {msg_interval_us}us",
                rate(bulk_rate_pps)
            ),
        }
    }
}

/// Parse a count with an optional `k` or `M` suffix.
fn count(s: &str) -> Result<u64, WorkloadError> {
    let bad = || WorkloadError::Syntax(s.to_string());
    let (digits, mult) = match s.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1_000),
        None => match s.strip_suffix('M') {
            Some(d) => (d, 1_000_000),
            None => (s, 1),
        },
    };
    digits.parse::<u64>().map(|v| v * mult).map_err(|_| bad())
}

fn len(s: Option<&str>, default: u32) -> Result<u32, WorkloadError> {
    match s {
        None | Some("") => Ok(default),
        Some(v) => v.parse().map_err(|_| WorkloadError::Syntax(v.to_string())),
    }
}

/// Split `s` at the first of `sep`: (before, after).
fn split(s: &str, sep: char) -> (&str, Option<&str>) {
    match s.split_once(sep) {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    }
}

impl std::str::FromStr for Workload {
    type Err = WorkloadError;

    /// `stream[:LEN][@PPS]`, `rr[:LEN][xDEPTH]`, `mix[:LEN][@PPS][+MSGLEN][/INTERVAL_US]`;
    /// rates take `k`/`M` suffixes. Defaults: 64-byte stream as fast as possible, 64-byte
    /// RR at depth 1, 1514-byte bulk plus a 64-byte message every 100 us.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (name, rest) = split(spec, ':');
        let rest = rest.unwrap_or("");
        let w = match name {
            "stream" => {
                let (l, rate) = split(rest, '@');
                Self::Stream {
                    frame_len: len(Some(l), 64)?,
                    rate_pps: rate.map(count).transpose()?,
                }
            }
            "rr" => {
                let (l, depth) = split(rest, 'x');
                let depth = depth.map(count).transpose()?.unwrap_or(1);
                Self::Rr {
                    frame_len: len(Some(l), 64)?,
                    depth: u32::try_from(depth).map_err(|_| WorkloadError::Syntax(spec.into()))?,
                }
            }
            "mix" => {
                let (head, interval) = split(rest, '/');
                let (head, msg) = split(head, '+');
                let (l, rate) = split(head, '@');
                let interval = interval.map(count).transpose()?.unwrap_or(100);
                Self::Mix {
                    bulk_len: len(Some(l), 1514)?,
                    bulk_rate_pps: rate.map(count).transpose()?,
                    msg_len: len(msg, 64)?,
                    msg_interval_us: u32::try_from(interval)
                        .map_err(|_| WorkloadError::Syntax(spec.into()))?,
                }
            }
            other => return Err(WorkloadError::Name(other.to_string())),
        };
        w.validate()?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_compact_specs() {
        let w: Workload = "stream".parse().expect("ok");
        assert_eq!(
            w,
            Workload::Stream {
                frame_len: 64,
                rate_pps: None
            }
        );
        let w: Workload = "stream:1514@200k".parse().expect("ok");
        assert_eq!(
            w,
            Workload::Stream {
                frame_len: 1514,
                rate_pps: Some(200_000)
            }
        );
        let w: Workload = "rr:256x4".parse().expect("ok");
        assert_eq!(
            w,
            Workload::Rr {
                frame_len: 256,
                depth: 4
            }
        );
        let w: Workload = "mix:9014@50k+128/250".parse().expect("ok");
        assert_eq!(
            w,
            Workload::Mix {
                bulk_len: 9014,
                bulk_rate_pps: Some(50_000),
                msg_len: 128,
                msg_interval_us: 250
            }
        );
        let w: Workload = "mix".parse().expect("ok");
        assert_eq!(w.max_frame_len(), 1514);
        assert!("stream:10".parse::<Workload>().is_err());
        assert!("stream@x".parse::<Workload>().is_err());
        assert!("tcp".parse::<Workload>().is_err());
        assert!("rr:64x0".parse::<Workload>().is_err());
    }

    #[test]
    fn refuses_bad_parameters() {
        let s = Workload::Stream {
            frame_len: 59,
            rate_pps: None,
        };
        assert_eq!(s.validate(), Err(WorkloadError::FrameLen(59)));
        let r = Workload::Rr {
            frame_len: 64,
            depth: 0,
        };
        assert_eq!(r.validate(), Err(WorkloadError::Zero("depth")));
        let m = Workload::Mix {
            bulk_len: 9014,
            bulk_rate_pps: None,
            msg_len: 64,
            msg_interval_us: 100,
        };
        assert!(m.validate().is_ok());
        assert_eq!(m.max_frame_len(), 9014);
        assert!(m.check_ports(4, false).is_ok());
        assert!(m.check_ports(5, true).is_err());
        assert!(r.check_ports(4, false).is_err());
        assert_eq!(m.to_string(), "mix 9014B @max + 64B every 100us");
    }

    #[test]
    fn the_mix_on_three_ports_needs_the_wire_sender() {
        let m: Workload = "mix:1514@812744+96/200".parse().expect("valid");
        assert_eq!(m.check_ports(3, true), Ok(()));
        let e = m.check_ports(3, false).expect_err("no wire sender");
        assert_eq!(e, WorkloadError::ThreePortsNeedWire);
        assert!(e.to_string().contains("--sender wire"), "{e}");
        for w in ["stream:1514", "rr:64"] {
            let w: Workload = w.parse().expect("valid");
            let e = w.check_ports(3, true).expect_err("mix only");
            assert!(matches!(e, WorkloadError::Ports { got: 3, .. }), "{e:?}");
        }
        for n in [2, 4] {
            assert_eq!(m.check_ports(n, false), Ok(()), "{n} ports");
            assert_eq!(m.check_ports(n, true), Ok(()), "{n} ports");
        }
    }

    #[test]
    fn udp_frames_need_82_bytes() {
        let refused: Workload = "mix:1514@812744+64/200".parse().expect("valid raw");
        assert!(refused.check_encap(Encap::Raw).is_ok());
        let e = refused
            .check_encap(Encap::Udp)
            .expect_err("64-byte messages");
        assert_eq!(
            e,
            WorkloadError::TooShortFor {
                len: 64,
                encap: Encap::Udp,
                min: 82
            }
        );
        let text = e.to_string();
        assert!(text.contains("82") && text.contains("udp"), "{text}");
        let ok: Workload = "mix:1514@812744+96/200".parse().expect("valid");
        assert!(ok.check_encap(Encap::Udp).is_ok());
        for (spec, udp_ok) in [
            ("stream:81", false),
            ("stream:82", true),
            ("rr:64", false),
            ("rr:82x4", true),
            ("mix:64+1514", false),
            ("mix:82+82", true),
        ] {
            let w: Workload = spec.parse().expect("valid raw");
            assert!(w.check_encap(Encap::Raw).is_ok(), "{spec}");
            assert_eq!(w.check_encap(Encap::Udp).is_ok(), udp_ok, "{spec}");
        }
    }
}
