//! DIM samples and per-millisecond rates (`struct dim_sample`, `dim_calc_stats`).

use crate::Nanos;

/// Events (interrupts) between two DIM iterations (`DIM_NEVENTS`).
pub const DIM_NEVENTS: u16 = 64;

/// Raw free-running counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DimSample {
    /// When the sample was taken.
    pub time: Nanos,
    /// Packets (completions of data requests).
    pub pkts: u32,
    /// Bytes.
    pub bytes: u32,
    /// Events: interrupts / notifications.
    pub events: u16,
    /// Completions.
    pub comps: u32,
}

/// Rates over a measurement window, per millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DimStats {
    /// Packets per ms.
    pub ppms: u32,
    /// Bytes per ms.
    pub bpms: u32,
    /// Events per ms.
    pub epms: u32,
    /// Completions per ms.
    pub cpms: u32,
    /// Completions per event, in percent.
    pub cpe_ratio: u32,
}

/// Verdict of comparing the current window with the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Worse than before.
    Worse,
    /// Within 10 %.
    Same,
    /// Better than before.
    Better,
}

/// `IS_SIGNIFICANT_DIFF`: more than 10 % away from a non-zero reference.
#[must_use]
pub fn significant(val: u32, reference: u32) -> bool {
    reference != 0 && 100 * u64::from(val.abs_diff(reference)) / u64::from(reference) > 10
}

fn per_ms(count: u64, delta_us: u64) -> u32 {
    u32::try_from((count * 1000).div_ceil(delta_us)).unwrap_or(u32::MAX)
}

/// How the event rate of a window is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventCount {
    /// As `dim_calc_stats`: a window is [`DIM_NEVENTS`] events by construction (DIM runs
    /// on every event and decides as soon as 64 have passed).
    #[default]
    Assumed,
    /// From the counters: a periodic control loop sees however many events a period held,
    /// so assuming 64 would make every window of the same length look alike.
    Measured,
}

/// Rates between `start` and `end`; `None` if less than a microsecond passed.
#[must_use]
pub fn calc_stats(start: &DimSample, end: &DimSample) -> Option<DimStats> {
    calc_stats_with(start, end, EventCount::Assumed)
}

/// [`calc_stats`] with the event rate computed as `events` says.
#[must_use]
pub fn calc_stats_with(start: &DimSample, end: &DimSample, events: EventCount) -> Option<DimStats> {
    let delta_us = end.time.saturating_sub(start.time) / 1000;
    if delta_us == 0 {
        return None;
    }
    let npkts = u64::from(end.pkts.wrapping_sub(start.pkts));
    let nbytes = u64::from(end.bytes.wrapping_sub(start.bytes));
    let ncomps = u64::from(end.comps.wrapping_sub(start.comps));
    let nevents = match events {
        EventCount::Assumed => DIM_NEVENTS,
        EventCount::Measured => end.events.wrapping_sub(start.events),
    };
    let epms = per_ms(u64::from(nevents), delta_us);
    let cpms = per_ms(ncomps, delta_us);
    let cpe_ratio = if epms == 0 {
        0
    } else {
        u32::try_from(u64::from(cpms) * 100 / u64::from(epms)).unwrap_or(u32::MAX)
    };
    Some(DimStats {
        ppms: per_ms(npkts, delta_us),
        bpms: per_ms(nbytes, delta_us),
        epms,
        cpms,
        cpe_ratio,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_percent_rule_is_strict_and_integer() {
        assert!(!significant(110, 100));
        assert!(significant(111, 100));
        assert!(significant(89, 100));
        assert!(!significant(90, 100));
        assert!(!significant(5, 0));
    }

    #[test]
    fn rates_are_rounded_up_per_ms() {
        let a = DimSample::default();
        let b = DimSample {
            time: 2_000_000,
            pkts: 1001,
            bytes: 4_000_000,
            events: 64,
            comps: 1001,
        };
        let s = calc_stats(&a, &b).unwrap_or_default();
        assert_eq!(s.ppms, 501);
        assert_eq!(s.bpms, 2_000_000);
        assert_eq!(s.epms, 32);
        assert_eq!(s.cpe_ratio, 501 * 100 / 32);
        assert_eq!(calc_stats(&a, &DimSample { time: 999, ..b }), None);
        let measured = DimSample { events: 640, ..b };
        let m = calc_stats_with(&a, &measured, EventCount::Measured).unwrap_or_default();
        assert_eq!(m.epms, 320);
        assert_eq!(calc_stats(&a, &measured).unwrap_or_default().epms, 32);
    }
}
