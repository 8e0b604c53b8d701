//! [`ModerationSpec`]: a validated completion-moderation policy and its parameters.

use core::fmt;
use core::str::FromStr;

use super::params::{split_spec, Params, SpecError, Value};
use super::Text;
use crate::moderation::dim::control_loop::DIM_LOOP_PERIOD_MS_MAX;
use crate::moderation::{
    Budget, BudgetConfig, BurstFilter, Count, CountConfig, Dim, DimConfig, DimDirection,
    DimLoopConfig, DimLoopQueue, DimMode, DimVariant, IpiGap, IpiGapConfig, Moderation,
    NoModeration, Spdk, SpdkConfig, Vic, VicConfig, VicRatio, VIC_TABLE_MAX,
};

const NAMES: &str = "none, count, vic, ipi-gap, dim, dim-loop, dim-lat, spdk, budget";
const USECS_MAX: u32 = 1_000_000;

/// A completion moderation policy with validated parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModerationSpec {
    /// `none`.
    None,
    /// `count:usecs=U,frames=F`.
    Count(CountConfig),
    /// `vic:cif_low=C,iops_min=R,max_delay_us=D,table=CIF:D/N;...`.
    Vic(VicConfig),
    /// `ipi-gap:gap_us=G`.
    IpiGap(IpiGapConfig),
    /// `dim:variant=net|rdma,mode=eqe|cqe,dir=rx|tx,latency=on|off,share_pct=P,small_bytes=B`.
    Dim(DimConfig),
    /// `dim-loop:period_ms=P,mode=eqe|cqe,dir=rx|tx`: net_dim as a hypervisor-side control
    /// loop reading the queue's counters every `period_ms` and programming `count`.
    DimLoop(DimLoopConfig),
    /// `dim-lat:mode=eqe|cqe,dir=rx|tx,ack_pct=A,small_bytes=B,short_pkts=N,gap_us=G,wait=on|off,overtake=on|off,reserve=N`:
    /// net_dim with the latency-adaptive packet-burst heuristics (its `burst` is set).
    DimLat(DimConfig),
    /// `spdk:delay_base_us=D,iops_threshold=T`.
    Spdk(SpdkConfig),
    /// `budget:us=B`.
    Budget(BudgetConfig),
}

impl ModerationSpec {
    /// The policy name as written in a spec.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Count(_) => "count",
            Self::Vic(_) => "vic",
            Self::IpiGap(_) => "ipi-gap",
            Self::Dim(_) => "dim",
            Self::DimLoop(_) => "dim-loop",
            Self::DimLat(_) => "dim-lat",
            Self::Spdk(_) => "spdk",
            Self::Budget(_) => "budget",
        }
    }

    /// The same spec for a network device's transmit queue: a DIM spec (`dim`, `dim-loop`,
    /// `dim-lat`) moves to net_dim's TX profile table (EQE 1-128 us at 128 packets, CQE
    /// 5-64 us), as Linux drivers with TX DIM do, instead of holding transmit completions as
    /// long as received packets (256 us at 256); every other spec is unchanged. `dim-loop`'s
    /// transmit queue runs DIM in the data path: the hypervisor's control loop is one per
    /// device and reads the receive queue (the talk's ~100 wakeups/s per device at 10 ms;
    /// Linux's virtio-net runs net_dim for RX only), so a port does not pay a second loop.
    #[must_use]
    pub fn for_tx_queue(self) -> Self {
        match self {
            Self::Dim(c) => Self::Dim(DimConfig {
                dir: DimDirection::Tx,
                ..c
            }),
            Self::DimLat(c) => Self::DimLat(DimConfig {
                dir: DimDirection::Tx,
                ..c
            }),
            Self::DimLoop(c) => Self::Dim(DimConfig {
                mode: c.mode,
                dir: DimDirection::Tx,
                ..DimConfig::default()
            }),
            other => other,
        }
    }

    /// A fresh policy instance (one per queue).
    #[must_use]
    pub fn build(&self) -> Moderation {
        match *self {
            Self::None => Moderation::None(NoModeration::default()),
            Self::Count(c) => Moderation::Count(Count::new(c)),
            Self::Vic(c) => Moderation::Vic(Vic::new(c)),
            Self::IpiGap(c) => Moderation::IpiGap(IpiGap::new(c)),
            Self::Dim(c) | Self::DimLat(c) => Moderation::Dim(Dim::new(c)),
            Self::DimLoop(c) => Moderation::DimLoop(DimLoopQueue::new(c)),
            Self::Spdk(c) => Moderation::Spdk(Spdk::new(c)),
            Self::Budget(c) => Moderation::Budget(Budget::new(c)),
        }
    }
}

fn parse_count(mut p: Params<'_>) -> Result<CountConfig, SpecError> {
    let mut c = CountConfig::default();
    while let Some((key, v)) = p.next_param()? {
        match key {
            "usecs" => c.usecs = v.u32(0, USECS_MAX, "microseconds, 0 to 1000000")?,
            _ => c.frames = v.u32(0, 65_535, "a count, 0 to 65535")?,
        }
    }
    Ok(c)
}

fn parse_table(v: &Value<'_>, cfg: VicConfig) -> Result<VicConfig, SpecError> {
    const EXPECTED: &str = "rows CIF:D/N separated by ';' (1 <= D <= N <= 255), CIF increasing, ratio not increasing, at most 8";
    let mut rows = [VicRatio::default(); VIC_TABLE_MAX];
    let mut n = 0;
    for row in v.text.split(';') {
        let slot = rows.get_mut(n).ok_or_else(|| v.bad(EXPECTED))?;
        let (cif, ratio) = row.split_once(':').ok_or_else(|| v.bad(EXPECTED))?;
        let (d, of) = ratio.split_once('/').ok_or_else(|| v.bad(EXPECTED))?;
        let num = |s: &str, max: u16| {
            s.trim()
                .parse::<u16>()
                .ok()
                .filter(|x| *x <= max)
                .ok_or_else(|| v.bad(EXPECTED))
        };
        *slot = VicRatio {
            cif_min: num(cif, u16::MAX)?,
            deliver: u8::try_from(num(d, 255)?).map_err(|_| v.bad(EXPECTED))?,
            of: u8::try_from(num(of, 255)?).map_err(|_| v.bad(EXPECTED))?,
        };
        n += 1;
    }
    cfg.with_table(&rows[..n]).map_err(|_| v.bad(EXPECTED))
}

fn parse_vic(mut p: Params<'_>) -> Result<VicConfig, SpecError> {
    let mut c = VicConfig::default();
    while let Some((key, v)) = p.next_param()? {
        match key {
            "cif_low" => {
                c.cif_low =
                    u16::try_from(v.int(0, 65_535, "a CIF, 0 to 65535")?).unwrap_or(u16::MAX)
            }
            "iops_min" => c.iops_min = v.u32(0, 100_000_000, "completions per second")?,
            "max_delay_us" => c.max_delay_us = v.u32(1, USECS_MAX, "microseconds, 1 to 1000000")?,
            _ => c = parse_table(&v, c)?,
        }
    }
    Ok(c)
}

fn parse_dim(mut p: Params<'_>) -> Result<DimConfig, SpecError> {
    let mut c = DimConfig::default();
    while let Some((key, v)) = p.next_param()? {
        match key {
            "variant" => {
                c.variant = [DimVariant::Net, DimVariant::Rdma]
                    [v.choice(&["net", "rdma"], "net or rdma")?]
            }
            "mode" => {
                c.mode = [DimMode::Eqe, DimMode::Cqe][v.choice(&["eqe", "cqe"], "eqe or cqe")?]
            }
            "dir" => {
                c.dir = [DimDirection::Rx, DimDirection::Tx][v.choice(&["rx", "tx"], "rx or tx")?]
            }
            "latency" => c.latency.enabled = v.flag()?,
            "share_pct" => {
                c.latency.share_pct =
                    u8::try_from(v.int(1, 100, "a percentage, 1 to 100")?).unwrap_or(100);
            }
            _ => c.latency.small_bytes = v.u32(0, u32::MAX, "bytes")?,
        }
    }
    Ok(c)
}

fn parse_mode_dir(
    key: &str,
    v: &Value<'_>,
    mode: &mut DimMode,
    dir: &mut DimDirection,
) -> Result<bool, SpecError> {
    match key {
        "mode" => *mode = [DimMode::Eqe, DimMode::Cqe][v.choice(&["eqe", "cqe"], "eqe or cqe")?],
        "dir" => {
            *dir = [DimDirection::Rx, DimDirection::Tx][v.choice(&["rx", "tx"], "rx or tx")?]
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn parse_dim_loop(mut p: Params<'_>) -> Result<DimLoopConfig, SpecError> {
    let mut c = DimLoopConfig::default();
    while let Some((key, v)) = p.next_param()? {
        if !parse_mode_dir(key, &v, &mut c.mode, &mut c.dir)? {
            c.period_ms = v.u32(1, DIM_LOOP_PERIOD_MS_MAX, "milliseconds, 1 to 10000")?;
        }
    }
    Ok(c)
}

fn parse_dim_lat(mut p: Params<'_>) -> Result<DimConfig, SpecError> {
    let mut c = DimConfig::default();
    let mut f = BurstFilter::default();
    while let Some((key, v)) = p.next_param()? {
        if parse_mode_dir(key, &v, &mut c.mode, &mut c.dir)? {
            continue;
        }
        match key {
            "ack_pct" => {
                f.ack_pct = u8::try_from(v.int(0, 100, "a percentage, 0 to 100")?).unwrap_or(100);
            }
            "small_bytes" => f.small_bytes = v.u32(0, 65_535, "bytes, 0 to 65535")?,
            "short_pkts" => f.short_pkts = v.u32(0, 65_535, "a count, 0 to 65535")?,
            "wait" => f.response_wait = v.choice(&["off", "on"], "on or off")? == 1,
            "overtake" => f.overtake = v.choice(&["off", "on"], "on or off")? == 1,
            "reserve" => {
                f.reserve =
                    u16::try_from(v.u32(0, 32_768, "buffers, 0 to 32768")?).unwrap_or(u16::MAX);
            }
            _ => f.gap_us = v.u32(0, USECS_MAX, "microseconds, 0 to 1000000")?,
        }
    }
    c.burst = Some(f);
    Ok(c)
}

impl FromStr for ModerationSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let (name, params) = split_spec(s);
        let spec = match name {
            "" => {
                return Err(SpecError::Empty {
                    kind: "moderation",
                    allowed: NAMES,
                })
            }
            "none" => {
                Params::new("none", &[], params).next_param()?;
                Self::None
            }
            "count" => Self::Count(parse_count(Params::new(
                "count",
                &["usecs", "frames"],
                params,
            ))?),
            "vic" => Self::Vic(parse_vic(Params::new(
                "vic",
                &["cif_low", "iops_min", "max_delay_us", "table"],
                params,
            ))?),
            "ipi-gap" => {
                let mut p = Params::new("ipi-gap", &["gap_us"], params);
                let mut c = IpiGapConfig::default();
                while let Some((_, v)) = p.next_param()? {
                    c.gap_us = v.u32(1, USECS_MAX, "microseconds, 1 to 1000000")?;
                }
                Self::IpiGap(c)
            }
            "dim" => Self::Dim(parse_dim(Params::new(
                "dim",
                &[
                    "variant",
                    "mode",
                    "dir",
                    "latency",
                    "share_pct",
                    "small_bytes",
                ],
                params,
            ))?),
            "dim-loop" => Self::DimLoop(parse_dim_loop(Params::new(
                "dim-loop",
                &["period_ms", "mode", "dir"],
                params,
            ))?),
            "dim-lat" => Self::DimLat(parse_dim_lat(Params::new(
                "dim-lat",
                &[
                    "mode",
                    "dir",
                    "ack_pct",
                    "small_bytes",
                    "short_pkts",
                    "gap_us",
                    "wait",
                    "overtake",
                    "reserve",
                ],
                params,
            ))?),
            "spdk" => {
                let mut p = Params::new("spdk", &["delay_base_us", "iops_threshold"], params);
                let mut c = SpdkConfig::default();
                while let Some((key, v)) = p.next_param()? {
                    if key == "delay_base_us" {
                        c.delay_base_us = v.u32(0, 1_000_000, "microseconds, 0 to 1000000")?;
                    } else {
                        c.iops_threshold =
                            v.u32(100, u32::MAX, "completions per second, at least 100")?;
                    }
                }
                Self::Spdk(c)
            }
            "budget" => {
                let mut p = Params::new("budget", &["us"], params);
                let mut c = BudgetConfig::default();
                while let Some((_, v)) = p.next_param()? {
                    c.us = v.u32(1, USECS_MAX, "microseconds, 1 to 1000000")?;
                }
                Self::Budget(c)
            }
            other => {
                return Err(SpecError::UnknownPolicy {
                    kind: "moderation",
                    name: Text::new(other),
                    allowed: NAMES,
                })
            }
        };
        Ok(spec)
    }
}

/// Writes `:` before the first parameter and `,` before the others.
struct Sep(bool);

impl Sep {
    fn put(&mut self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = if self.0 { "," } else { ":" };
        self.0 = true;
        f.write_str(c)
    }
}

macro_rules! param {
    ($f:expr, $sep:expr, $cur:expr, $def:expr, $key:literal) => {
        if $cur != $def {
            $sep.put($f)?;
            write!($f, concat!($key, "={}"), $cur)?;
        }
    };
}

/// `key=on` or `key=off` when `on` is not the default `default`.
fn write_switch(
    f: &mut fmt::Formatter<'_>,
    s: &mut Sep,
    key: &str,
    on: bool,
    default: bool,
) -> fmt::Result {
    if on == default {
        return Ok(());
    }
    s.put(f)?;
    write!(f, "{key}={}", if on { "on" } else { "off" })
}

fn write_mode_dir(
    f: &mut fmt::Formatter<'_>,
    s: &mut Sep,
    mode: DimMode,
    dir: DimDirection,
) -> fmt::Result {
    if mode != DimMode::default() {
        s.put(f)?;
        f.write_str("mode=cqe")?;
    }
    if dir != DimDirection::default() {
        s.put(f)?;
        f.write_str("dir=tx")?;
    }
    Ok(())
}

impl fmt::Display for ModerationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let mut s = Sep(false);
        match self {
            Self::None => {}
            Self::Count(c) => {
                let d = CountConfig::default();
                param!(f, s, c.usecs, d.usecs, "usecs");
                param!(f, s, c.frames, d.frames, "frames");
            }
            Self::Vic(c) => {
                let d = VicConfig::default();
                param!(f, s, c.cif_low, d.cif_low, "cif_low");
                param!(f, s, c.iops_min, d.iops_min, "iops_min");
                param!(f, s, c.max_delay_us, d.max_delay_us, "max_delay_us");
                if c.table() != d.table() {
                    s.put(f)?;
                    f.write_str("table=")?;
                    for (i, r) in c.table().iter().enumerate() {
                        let sep = if i == 0 { "" } else { ";" };
                        write!(f, "{sep}{}:{}/{}", r.cif_min, r.deliver, r.of)?;
                    }
                }
            }
            Self::IpiGap(c) => param!(f, s, c.gap_us, IpiGapConfig::default().gap_us, "gap_us"),
            Self::Dim(c) => {
                let d = DimConfig::default();
                if c.variant != d.variant {
                    s.put(f)?;
                    f.write_str("variant=rdma")?;
                }
                if c.mode != d.mode {
                    s.put(f)?;
                    f.write_str("mode=cqe")?;
                }
                if c.dir != d.dir {
                    s.put(f)?;
                    f.write_str("dir=tx")?;
                }
                if c.latency.enabled {
                    s.put(f)?;
                    f.write_str("latency=on")?;
                }
                param!(f, s, c.latency.share_pct, d.latency.share_pct, "share_pct");
                param!(
                    f,
                    s,
                    c.latency.small_bytes,
                    d.latency.small_bytes,
                    "small_bytes"
                );
            }
            Self::DimLoop(c) => {
                let d = DimLoopConfig::default();
                param!(f, s, c.period_ms, d.period_ms, "period_ms");
                write_mode_dir(f, &mut s, c.mode, c.dir)?;
            }
            Self::DimLat(c) => {
                write_mode_dir(f, &mut s, c.mode, c.dir)?;
                let d = BurstFilter::default();
                let b = c.burst.unwrap_or_default();
                param!(f, s, b.ack_pct, d.ack_pct, "ack_pct");
                param!(f, s, b.small_bytes, d.small_bytes, "small_bytes");
                param!(f, s, b.short_pkts, d.short_pkts, "short_pkts");
                param!(f, s, b.gap_us, d.gap_us, "gap_us");
                write_switch(f, &mut s, "wait", b.response_wait, d.response_wait)?;
                write_switch(f, &mut s, "overtake", b.overtake, d.overtake)?;
                param!(f, s, b.reserve, d.reserve, "reserve");
            }
            Self::Spdk(c) => {
                let d = SpdkConfig::default();
                param!(f, s, c.delay_base_us, d.delay_base_us, "delay_base_us");
                param!(f, s, c.iops_threshold, d.iops_threshold, "iops_threshold");
            }
            Self::Budget(c) => param!(f, s, c.us, BudgetConfig::default().us, "us"),
        }
        Ok(())
    }
}
