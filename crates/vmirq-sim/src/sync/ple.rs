//! Pause-Loop Exiting window arithmetic (KVM `arch/x86/kvm/x86.h`, wakeup.md §2.2): the
//! window grows on each PAUSE exit and shrinks when the vCPU is loaded again after it was
//! scheduled out. Pure functions over cycle counts.

use serde::{Deserialize, Serialize};

/// PLE parameters, in TSC cycles (module parameters of kvm-intel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PleParams {
    /// `ple_window` (base): 4096.
    pub window: u64,
    /// `ple_window_grow`: 2.
    pub grow: u64,
    /// `ple_window_shrink`: 0 (reset to base).
    pub shrink: u64,
    /// `ple_window_max`: `UINT_MAX`.
    pub max: u64,
}

impl Default for PleParams {
    fn default() -> Self {
        Self {
            window: 4096,
            grow: 2,
            shrink: 0,
            max: u64::from(u32::MAX),
        }
    }
}

impl PleParams {
    /// `grow(val) = modifier < 1 ? base : (modifier < base ? val * modifier : val +
    /// modifier)`, capped at `max`.
    #[must_use]
    pub fn grow(&self, val: u64) -> u64 {
        let v = if self.grow < 1 {
            self.window
        } else if self.grow < self.window {
            val.saturating_mul(self.grow)
        } else {
            val.saturating_add(self.grow)
        };
        v.min(self.max)
    }

    /// Symmetric shrink with `/` or `-`, floored at the base window.
    #[must_use]
    pub fn shrink(&self, val: u64) -> u64 {
        let v = if self.shrink < 1 {
            self.window
        } else if self.shrink < self.window {
            val / self.shrink
        } else {
            val.saturating_sub(self.shrink)
        };
        v.max(self.window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kvm_defaults_double_and_reset() {
        let p = PleParams::default();
        assert_eq!(p.grow(4096), 8192);
        assert_eq!(p.grow(p.max), p.max);
        assert_eq!(p.shrink(1 << 20), 4096);
        let add = PleParams {
            grow: 10_000,
            shrink: 10_000,
            ..p
        };
        assert_eq!(add.grow(4096), 14_096);
        assert_eq!(add.shrink(14_096), 4096);
        let div = PleParams { shrink: 2, ..p };
        assert_eq!(div.shrink(16_384), 8192);
        assert_eq!(div.shrink(5000), 4096);
    }
}
