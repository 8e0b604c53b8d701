//! `vic`: VMware's virtual interrupt coalescing for storage (Ahmad, Gulati, Mashtizadeh,
//! USENIX ATC 2011; US patent 8,478,924).
//!
//! Instead of a timer per completion, vIC uses the completions themselves as the clock: when
//! commands are in flight (CIF > 0) another completion is certain to come, so some
//! completions can ride along with a later notification. The policy delivers a *fraction*
//! of completions, `deliver` of every `of`, chosen from CIF through a monotone table (the
//! more in flight, the fewer notifications needed to keep the guest's pipeline full). The
//! fraction is kept by two small counters (the paper's countUp / skipUp) with no division.
//!
//! Safety valves, as in the paper and patent:
//! - CIF at or below `cif_low`, and CIF reaching 0: deliver immediately;
//! - trickle I/O: completions are counted per fixed epoch (10 ms); an epoch with fewer
//!   completions than `iops_min` allows disables coalescing until an epoch reaches it again;
//! - a bound on the delay of any held completion (`max_delay_us`), the patent's
//!   timing-triggered delivery. (vIC proper has no timer; a software backend needs one so that a
//!   guest which stops submitting can never be left waiting.)
//!
//! The per-completion path uses comparisons, additions and one table scan of at most
//! [`VIC_TABLE_MAX`] entries: no division, no clock read.
//!
//! The paper's own table and thresholds are not public (see `moderation.md` §1.2); the
//! defaults here are vmirq's, chosen so that at CIF ≥ 30 at most one completion in ten
//! notifies: `cif_low = 4`, `iops_min = 2000`, `max_delay_us = 200`, table
//! `5:4/5;8:1/2;12:1/3;16:1/5;24:1/8;30:1/10;64:1/16`.

use super::{Decision, Event, Knob, Moderator, Pending};
use crate::{Nanos, NS_PER_MS, NS_PER_US};

/// Most entries in a vIC table.
pub const VIC_TABLE_MAX: usize = 8;

/// Length of the rate-measurement epoch for the trickle gate.
const EPOCH_NS: Nanos = 10 * NS_PER_MS;

/// One row of the CIF→ratio table: from `cif_min` commands in flight on, deliver `deliver` of
/// every `of` completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VicRatio {
    /// Smallest CIF this row applies to.
    pub cif_min: u16,
    /// Completions delivered per cycle (countUp limit).
    pub deliver: u8,
    /// Cycle length; `of - deliver` completions are skipped per cycle (skipUp limit).
    pub of: u8,
}

/// Why a vIC configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VicConfigError {
    /// The table has no rows or more than [`VIC_TABLE_MAX`].
    #[error("the vIC table needs 1 to 8 rows")]
    TableSize,
    /// A row has `deliver` = 0 or `deliver` > `of`.
    #[error("each vIC ratio needs 1 <= deliver <= of")]
    BadRatio,
    /// Rows are not in increasing CIF order or the ratio rises with CIF.
    #[error("vIC table rows must have increasing CIF and non-increasing ratios")]
    NotMonotone,
}

/// Parameters of [`Vic`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VicConfig {
    table: [VicRatio; VIC_TABLE_MAX],
    rows: u8,
    /// At or below this CIF every completion is delivered.
    pub cif_low: u16,
    /// Below this completion rate (per second) coalescing is disabled.
    pub iops_min: u32,
    /// Longest any completion may be held, in microseconds.
    pub max_delay_us: u32,
}

impl Default for VicConfig {
    fn default() -> Self {
        let rows = [
            (5, 4, 5),
            (8, 1, 2),
            (12, 1, 3),
            (16, 1, 5),
            (24, 1, 8),
            (30, 1, 10),
            (64, 1, 16),
        ];
        let mut table = [VicRatio::default(); VIC_TABLE_MAX];
        for (slot, (cif_min, deliver, of)) in table.iter_mut().zip(rows) {
            *slot = VicRatio {
                cif_min,
                deliver,
                of,
            };
        }
        Self {
            table,
            rows: 7,
            cif_low: 4,
            iops_min: 2000,
            max_delay_us: 200,
        }
    }
}

impl VicConfig {
    /// Replace the CIF→ratio table after checking it is non-empty, at most
    /// [`VIC_TABLE_MAX`] rows, with valid ratios, increasing CIF and non-increasing ratios.
    pub fn with_table(mut self, rows: &[VicRatio]) -> Result<Self, VicConfigError> {
        if rows.is_empty() || rows.len() > VIC_TABLE_MAX {
            return Err(VicConfigError::TableSize);
        }
        for r in rows {
            if r.deliver == 0 || r.deliver > r.of {
                return Err(VicConfigError::BadRatio);
            }
        }
        for w in rows.windows(2) {
            // deliver_b/of_b <= deliver_a/of_a  <=>  deliver_b*of_a <= deliver_a*of_b
            let lower = u16::from(w[1].deliver) * u16::from(w[0].of)
                <= u16::from(w[0].deliver) * u16::from(w[1].of);
            if w[1].cif_min <= w[0].cif_min || !lower {
                return Err(VicConfigError::NotMonotone);
            }
        }
        self.table = [VicRatio::default(); VIC_TABLE_MAX];
        self.table[..rows.len()].copy_from_slice(rows);
        self.rows = u8::try_from(rows.len()).map_err(|_| VicConfigError::TableSize)?;
        Ok(self)
    }

    /// The table rows in force.
    #[must_use]
    pub fn table(&self) -> &[VicRatio] {
        &self.table[..usize::from(self.rows)]
    }

    /// The row that applies at `cif`, if any (a linear scan: the table is tiny).
    fn row_for(&self, cif: u32) -> Option<VicRatio> {
        self.table()
            .iter()
            .rev()
            .find(|r| cif >= u32::from(r.cif_min))
            .copied()
    }
}

/// The mutable per-queue state of vIC (kept small: at most 64 bytes, checked by a test).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VicState {
    pending: Pending,
    epoch_start: Nanos,
    epoch_count: u32,
    /// Completions delivered in the current ratio cycle (countUp).
    count_up: u8,
    /// Completions skipped in the current ratio cycle (skipUp).
    skip_up: u8,
    /// Ratio in force for the current cycle.
    deliver: u8,
    of: u8,
    /// Whether the rate gate currently allows coalescing.
    rate_ok: bool,
}

/// VMware vIC completion coalescing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vic {
    cfg: VicConfig,
    max_delay_ns: Nanos,
    /// Completions per epoch at `iops_min` (computed once here, not per completion).
    epoch_min: u32,
    state: VicState,
}

impl Vic {
    /// A vIC policy with these parameters.
    #[must_use]
    pub fn new(cfg: VicConfig) -> Self {
        let per_epoch = u64::from(cfg.iops_min) * EPOCH_NS / 1_000_000_000;
        Self {
            cfg,
            max_delay_ns: u64::from(cfg.max_delay_us) * NS_PER_US,
            epoch_min: u32::try_from(per_epoch).unwrap_or(u32::MAX).max(1),
            state: VicState {
                deliver: 1,
                of: 1,
                ..VicState::default()
            },
        }
    }

    /// The mutable state, for size checks and reports.
    #[must_use]
    pub fn state(&self) -> &VicState {
        &self.state
    }

    fn deadline(&self) -> Nanos {
        self.state.pending.oldest.saturating_add(self.max_delay_ns)
    }

    fn account_rate(&mut self, now: Nanos) {
        let s = &mut self.state;
        s.epoch_count = s.epoch_count.saturating_add(1);
        if now.saturating_sub(s.epoch_start) >= EPOCH_NS {
            s.rate_ok = s.epoch_count >= self.epoch_min;
            s.epoch_start = now;
            s.epoch_count = 0;
        }
    }

    /// Deliver or skip this completion according to the ratio for the current CIF.
    fn step_ratio(&mut self, row: VicRatio) -> bool {
        let s = &mut self.state;
        if (row.deliver, row.of) != (s.deliver, s.of) {
            s.deliver = row.deliver;
            s.of = row.of;
            s.count_up = 0;
            s.skip_up = 0;
        }
        // Skip first, then deliver: a delivery right after the skips covers them.
        if s.skip_up < s.of - s.deliver {
            s.skip_up += 1;
            return false;
        }
        s.count_up += 1;
        if s.count_up >= s.deliver {
            s.count_up = 0;
            s.skip_up = 0;
        }
        true
    }

    fn on_complete(&mut self, now: Nanos) -> Decision {
        self.state.pending.complete(now);
        self.account_rate(now);
        let cif = self.state.pending.cif;
        if !self.state.rate_ok || cif <= u32::from(self.cfg.cif_low) {
            return self.state.pending.flush();
        }
        if now >= self.deadline() {
            return self.state.pending.flush();
        }
        match self.cfg.row_for(cif) {
            Some(row) if !self.step_ratio(row) => Decision::Hold {
                deadline: self.deadline(),
            },
            _ => self.state.pending.flush(),
        }
    }
}

impl Moderator for Vic {
    fn on_event(&mut self, now: Nanos, event: Event) -> Decision {
        match event {
            Event::Submit => {
                self.state.pending.submit();
                self.state.pending.hold_until(self.deadline())
            }
            Event::Complete(_) => self.on_complete(now),
            Event::Timer => {
                if self.state.pending.held > 0 && now >= self.deadline() {
                    self.state.pending.flush()
                } else {
                    self.state.pending.hold_until(self.deadline())
                }
            }
        }
    }
    fn pending(&self) -> &Pending {
        &self.state.pending
    }
    fn max_hold_ns(&self) -> Nanos {
        self.max_delay_ns
    }
    fn knob(&self) -> Knob {
        let cif = self.state.pending.cif;
        let active = self.state.rate_ok && cif > u32::from(self.cfg.cif_low);
        match self.cfg.row_for(cif) {
            Some(r) if active => Knob::Ratio {
                deliver: r.deliver,
                of: r.of,
                active,
            },
            _ => Knob::Ratio {
                deliver: 1,
                of: 1,
                active: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moderation::CompletionMeta;

    const C: Event = Event::Complete(CompletionMeta {
        kind: crate::moderation::RequestKind::Read,
        bytes: 4096,
        flags: 0,
    });

    /// Drive `vic` to steady state at a given CIF with a high completion rate.
    fn warm(v: &mut Vic, cif: u32, t: &mut Nanos) {
        for _ in 0..cif {
            v.on_event(*t, Event::Submit);
        }
        // Run one full epoch at 1 completion per µs so the rate gate opens.
        for _ in 0..20_000 {
            *t += 1_000;
            v.on_event(*t, C);
            v.on_event(*t, Event::Submit);
        }
        assert!(v.state().rate_ok);
    }

    #[test]
    fn state_fits_in_64_bytes() {
        assert!(
            core::mem::size_of::<VicState>() <= 64,
            "{}",
            core::mem::size_of::<VicState>()
        );
    }

    #[test]
    fn delivers_one_in_ten_at_cif_32() {
        let mut v = Vic::new(VicConfig::default());
        let mut t = 0;
        warm(&mut v, 32, &mut t);
        let mut notified = 0;
        for _ in 0..1000 {
            t += 1_000;
            if v.on_event(t, C) == Decision::Notify {
                notified += 1;
            }
            v.on_event(t, Event::Submit);
        }
        assert_eq!(notified, 100);
    }

    #[test]
    fn low_cif_and_cif_zero_deliver_immediately() {
        let mut v = Vic::new(VicConfig::default());
        let mut t = 0;
        warm(&mut v, 4, &mut t);
        for _ in 0..4 {
            t += 1_000;
            assert_eq!(v.on_event(t, C), Decision::Notify);
        }
        assert_eq!(v.in_flight(), 0);
    }

    #[test]
    fn trickle_disables_and_rate_reenables() {
        let mut v = Vic::new(VicConfig::default());
        let mut t = 0;
        warm(&mut v, 32, &mut t);
        // One completion every 2 ms: 5 per epoch < 20 needed at 2000 IOPS.
        for _ in 0..20 {
            t += 2 * NS_PER_MS;
            v.on_event(t, C);
            v.on_event(t, Event::Submit);
        }
        assert!(!v.state().rate_ok);
        t += 2 * NS_PER_MS;
        assert_eq!(v.on_event(t, C), Decision::Notify);
        v.on_event(t, Event::Submit);
        warm(&mut v, 0, &mut t);
        assert_eq!(
            v.knob(),
            Knob::Ratio {
                deliver: 1,
                of: 10,
                active: true
            }
        );
    }

    #[test]
    fn held_completion_is_bounded_by_max_delay() {
        let mut v = Vic::new(VicConfig::default());
        let mut t = 0;
        warm(&mut v, 32, &mut t);
        // Drain the cycle so the next completion is skipped.
        while v.held() != 0 {
            t += 1_000;
            v.on_event(t, C);
            v.on_event(t, Event::Submit);
        }
        t += 1_000;
        let d = v.on_event(t, C);
        assert_eq!(
            d,
            Decision::Hold {
                deadline: t + 200_000
            }
        );
        assert_eq!(
            v.on_event(t + 199_999, Event::Timer),
            Decision::Hold {
                deadline: t + 200_000
            }
        );
        assert_eq!(v.on_event(t + 200_000, Event::Timer), Decision::Notify);
    }

    #[test]
    fn table_validation() {
        let ok = VicConfig::default().with_table(&[VicRatio {
            cif_min: 4,
            deliver: 1,
            of: 2,
        }]);
        assert!(ok.is_ok());
        let rising = [
            VicRatio {
                cif_min: 4,
                deliver: 1,
                of: 4,
            },
            VicRatio {
                cif_min: 8,
                deliver: 1,
                of: 2,
            },
        ];
        assert_eq!(
            VicConfig::default().with_table(&rising),
            Err(VicConfigError::NotMonotone)
        );
        let bad = [VicRatio {
            cif_min: 4,
            deliver: 3,
            of: 2,
        }];
        assert_eq!(
            VicConfig::default().with_table(&bad),
            Err(VicConfigError::BadRatio)
        );
        assert_eq!(
            VicConfig::default().with_table(&[]),
            Err(VicConfigError::TableSize)
        );
    }
}
